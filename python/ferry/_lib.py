"""libferry through ctypes: the structs and prototypes of include/ferry.h, errors, and the
marshalling of strings and paths. Nothing here exports or runs anything.

libferry.so is found via $FERRY_LIB (a file or a directory), then inside this package (where
`pip install .` puts it), then ../../build/ next to this package (a source tree), then the
system's library path.
"""

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

class FerryError(RuntimeError):
    """A failure reported by libferry; str() is the library's message."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


def caller_stacklevel():
    """warnings.warn's stacklevel for the first frame outside this package (the user's line),
    seen from the function calling this one."""
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1
    while frame is not None and \
            os.path.dirname(os.path.abspath(frame.f_code.co_filename)) == here:
        frame, level = frame.f_back, level + 1
    return level


class FerryWarning(UserWarning):
    """What libferry warns of while building an export (ferry_exported_warnings): a checkpoint
    tensor the export does not use, a cache that holds only the example prompt, ..."""


class CannotValidate(FerryError):
    """ferry.validate() cannot run here: a package it needs is missing, the runtime cannot run
    the export on this machine, or validation does not handle its kind yet (exit status 3 of
    `ferry validate`)."""


# --- the C library --------------------------------------------------------------------------

class _GenerationConfig(ctypes.Structure):
    _fields_ = [("multi_token_decode", ctypes.c_int), ("static_cache", ctypes.c_int),
                ("max_cache_len", ctypes.c_int64)]


def _find_library():
    env = Path(os.environ.get("FERRY_LIB", "/nonexistent"))
    here = Path(__file__).resolve().parent
    for path in (env / "libferry.so" if env.is_dir() else env,
                 here / "lib" / "libferry.so",                      # pip install .
                 here.parents[1] / "build" / "libferry.so"):        # the source tree
        if path.is_file():
            return str(path)
    found = ctypes.util.find_library("ferry")
    if not found:
        raise FerryError("libferry.so not found (set FERRY_LIB, `pip install .`, or build into "
                         "./build)")
    return found


_lib, _P, _S = None, ctypes.c_void_p, ctypes.c_char_p


class _Config:
    """A ferry_export_config held as an opaque handle (ferry_export_config_new): its layout,
    each format's options among it, stays libferry's own."""

    def __init__(self):
        self.handle = _c().ferry_export_config_new()
        if not self.handle:
            raise MemoryError("ferry_export_config_new")

    def __del__(self):
        if getattr(self, "handle", None) and _lib is not None:
            _lib.ferry_export_config_free(self.handle)
            self.handle = None


def _c():
    """Loads libferry once and declares the prototypes of ferry.h."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_library())
    i, cfg, out = ctypes.c_int, _P, ctypes.POINTER(_P)
    protos = {
        "ferry_version": (_S, []), "ferry_status_str": (_S, [i]),
        "ferry_supported_architectures": (_S, []),
        "ferry_model_open": (i, [_S, _S, out]), "ferry_model_free": (None, [_P]),
        "ferry_model_errmsg": (_S, [_P]), "ferry_model_inputs": (ctypes.c_uint, [_P]),
        "ferry_export_config_new": (_P, []), "ferry_export_config_free": (None, [_P]),
        "ferry_export_config_set_cancel": (None, [_P, ctypes.POINTER(ctypes.c_int)]),
        "ferry_export_config_set_converted_tokenizer_dir": (None, [_P, _S]),
        "ferry_model_dir": (_S, [_P]),
        "ferry_export_config_from_json": (i, [cfg, _S, ctypes.c_char_p, ctypes.c_size_t]),
        "ferry_export_config_check": (i, [cfg, ctypes.c_char_p, ctypes.c_size_t]),
        "ferry_export": (i, [_P, cfg, out]), "ferry_exported_save": (i, [_P, _S, i]),
        "ferry_exported_load": (i, [_S, _S, out]), "ferry_exported_verify": (i, [_P]),
        "ferry_exported_free": (None, [_P]),
        "ferry_exported_errmsg": (_S, [_P]), "ferry_exported_manifest": (_S, [_P]),
        "ferry_exported_warnings": (_S, [_P]),
        "ferry_exported_save_warnings": (_S, [_P]),
        "ferry_exported_dir": (_S, [_P]), "ferry_exported_component_count": (i, [_P]),
        "ferry_exported_component_name": (_S, [_P, i]),
        "ferry_exported_component_file": (_S, [_P, i]),
        "ferry_exported_record_validation": (i, [_P, _S]),
        "ferry_generation_config_init": (None, [_P]),
        "ferry_export_for_generation": (i, [_P, cfg, _P, out]),
        "ferry_decompose_for_generation": (i, [_P, cfg, _P, out]),
        "ferry_components_free": (None, [_P]), "ferry_components_count": (i, [_P]),
        "ferry_components_name": (_S, [_P, i]), "ferry_components_role": (_S, [_P, i]),
        "ferry_components_describe": (_S, [_P, i]),
        "ferry_components_export": (i, [_P, ctypes.POINTER(ctypes.c_char_p), i, out]),
        "ferry_escape": (_S, [_S, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    _lib = lib
    return lib


def _str(raw):
    return raw.decode("utf-8", "replace") if raw else None


def _escape(text):
    """`text` as libferry prints untrusted text (ferry_escape): C0/C1 controls, bidi and invisible
    characters and invalid UTF-8 escaped, so that a name from a file cannot drive or disguise
    the terminal a message is shown on."""
    raw = text if isinstance(text, bytes) else str(text).encode("utf-8", "surrogateescape")
    size = 12 * len(raw) + 16          # each byte at most one 12-character escape
    buf = ctypes.create_string_buffer(size)
    return _str(_c().ferry_escape(raw, buf, size))


def _c_bytes(value, what):
    """A str, bytes or os.PathLike as the bytes libferry takes (os.fsencode(os.fspath(...)): the
    file system's encoding, undecodable bytes kept). A NUL would end the C string there, so that
    "model\\0/etc" named "model": refused."""
    try:
        raw = os.fsencode(os.fspath(value))
    except TypeError:
        raise FerryError(f"{what} must be a str, bytes or os.PathLike, not "
                         f"{type(value).__name__}", status=1) from None
    if b"\0" in raw:
        at = raw.index(b"\0")
        raise FerryError(f"{what} holds a NUL byte at byte {at} ({_escape(raw[:at])}\\x00...), "
                         "which would end it there for the C library", status=1)
    return raw


def _fail(status, message):
    raise FerryError(message or _str(_c().ferry_status_str(status)), status)


def version():
    return _str(_c().ferry_version())


def supported_architectures():
    """The architectures (config.json's "architectures" entry) ferry exports, in its registry's
    order."""
    return _str(_c().ferry_supported_architectures()).split(", ")
