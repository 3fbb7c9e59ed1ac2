"""The tokenizer files an export carries beyond what libferry copies from the checkpoint:
openvino-tokenizers' conversion of the tokenizer, which openvino-genai's pipelines (LLMPipeline,
VLMPipeline, WhisperPipeline) read beside an OpenVINO model; and, for a loaded model object, the
tokenizer files of the directory it was loaded from, which its save_pretrained does not write.

The conversion is Python (openvino-tokenizers); the export stays libferry's: the files are
converted into a temporary directory that libferry reads, checks and writes into the export
with its other files (ferry_export_config.converted_tokenizer_dir). The `ferry` command pip
installs runs this module the same way (`python -m ferry._tokenizers CHECKPOINT DIR`, from
cli/export_cmd.c)."""

import functools
import inspect
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from ._lib import FerryError, FerryWarning, _c, _escape, caller_stacklevel

# src/model/tokenizer_files.c's NAMES: what libferry carries from a checkpoint
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "chat_template.jinja", "chat_template.json", "vocab.json", "merges.txt", "vocab.txt",
    "tokenizer.model", "spiece.model", "preprocessor_config.json", "processor_config.json")
# ... and its CONVERTED, each model's .xml before its weights' .bin
CONVERTED = ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml",
             "openvino_detokenizer.bin")
_NONE_CARRIED = ("the export carries no openvino_tokenizer.xml or openvino_detokenizer.xml, "
                 "which openvino-genai's pipelines read")


def convert(checkpoint, out):
    """Writes openvino-tokenizers' conversion of the tokenizer in directory `checkpoint` into
    the empty directory `out`. Returns None, or one line saying why some or all of it was not
    written. A checkpoint without tokenizer files converts to nothing, silently: libferry
    already warns that the export carries no tokenizer."""
    checkpoint, out = Path(checkpoint), Path(out)
    if not any((checkpoint / name).is_file() for name in TOKENIZER_FILES):
        return None
    try:
        import openvino
        from openvino_tokenizers import convert_tokenizer
    except Exception as e:  # not installed, or not loadable with this openvino
        why = "is not installed" if isinstance(e, ImportError) else f"cannot load ({_first(e)})"
        return (f"openvino-tokenizers {why} (pip install 'ferry[openvino]' brings it): "
                f"{_NONE_CARRIED}")
    with warnings.catch_warnings(), _quiet_transformers():
        warnings.simplefilter("ignore")  # the libraries' own; ferry says one line
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), local_files_only=True)
        except ImportError:
            return "transformers is not installed (openvino-tokenizers converts the tokenizer " \
                   f"transformers loads): {_NONE_CARRIED}"
        except Exception as e:
            return f"transformers cannot load the tokenizer to convert ({_first(e)}): " \
                   f"{_NONE_CARRIED}"
        try:
            models = convert_tokenizer(tokenizer, with_detokenizer=True)
            why = None
        except Exception as e:  # an encoder's tokenizer may convert without its detokenizer
            why = _first(e)
            try:
                models = (convert_tokenizer(tokenizer, with_detokenizer=False),)
            except Exception:
                return f"openvino-tokenizers cannot convert this tokenizer ({why}): " \
                       f"{_NONE_CARRIED}"
        try:
            for model, name in zip(models, CONVERTED[::2]):
                openvino.save_model(model, str(out / name))
        except Exception as e:
            for name in CONVERTED:
                (out / name).unlink(missing_ok=True)
            return f"openvino-tokenizers' conversion could not be saved ({_first(e)}): " \
                   f"{_NONE_CARRIED}"
    if why:
        return (f"openvino-tokenizers converts this tokenizer but not its detokenizer ({why}): "
                "the export carries openvino_tokenizer.xml without openvino_detokenizer.xml")
    return None


def _first(error):
    """An exception as one short line."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"[:300]


class _quiet_transformers:
    """transformers' logger at errors only while converting (it warns of tokens and templates
    on stderr, around ferry's one line)."""

    def __enter__(self):
        self._level = None
        if "transformers" in sys.modules:
            from transformers.utils import logging

            self._level = logging.get_verbosity()
            logging.set_verbosity_error()
        return self

    def __exit__(self, *exc):
        if self._level is not None:
            from transformers.utils import logging

            logging.set_verbosity(self._level)


class ConvertedTokenizer:
    """`with ConvertedTokenizer(fmt, model_handle, config_handle):` around ferry_export: for an
    OpenVINO export, the checkpoint's tokenizer converted into a temporary directory that the
    config names while libferry reads it (a warning, at the caller's line, when it cannot be
    converted); nothing for another format."""

    def __init__(self, export_format, model_handle, config_handle):
        self._format, self._model, self._config = export_format, model_handle, config_handle
        self._tmp = self._path = None

    def __enter__(self):
        if self._format != "openvino":
            return self
        lib = _c()
        self._tmp = tempfile.TemporaryDirectory(prefix="ferry-ov-tokenizer-")
        why = convert(os.fsdecode(lib.ferry_model_dir(self._model)), self._tmp.name)
        if why:
            warnings.warn(_escape(why), FerryWarning, stacklevel=caller_stacklevel())
        self._path = os.fsencode(self._tmp.name)  # borrowed by the config: kept alive here
        lib.ferry_export_config_set_converted_tokenizer_dir(self._config, self._path)
        return self

    def __exit__(self, *exc):
        if self._tmp is not None:
            _c().ferry_export_config_set_converted_tokenizer_dir(self._config, None)
            self._tmp.cleanup()
            self._tmp = self._path = None


def carry_source_files(model, directory):
    """Copies into `directory` (where `model.save_pretrained` just wrote) the tokenizer files
    of the local directory `model` was loaded from (its name_or_path), which save_pretrained
    does not write, and its generation_config.json when save_pretrained wrote none. A hub id
    or a directory gone since: nothing to copy."""
    source = _source_dir(model)
    if source is None:
        return
    directory = Path(directory)
    names = TOKENIZER_FILES + ("generation_config.json",)
    for name in names:
        src, dst = source / name, directory / name
        if src.is_file() and not dst.exists():
            shutil.copyfile(src, dst)  # a hub cache's link: its blob's bytes


def _source_dir(model):
    name = getattr(model, "name_or_path", None) or \
        getattr(getattr(model, "config", None), "_name_or_path", None)
    if not name or not isinstance(name, (str, os.PathLike)):
        return None
    path = Path(name)
    return path if path.is_dir() else None


def model_label(model):
    """How messages name a loaded model object: where it was loaded from, or its class."""
    name = getattr(model, "name_or_path", None) or \
        getattr(getattr(model, "config", None), "_name_or_path", None)
    return f"{type(model).__name__} loaded from {name}" if name else \
        f"a {type(model).__name__} object"


_SAVED = re.escape(os.path.join(tempfile.gettempdir(), "ferry-model-")) + r"[A-Za-z0-9_]+"


def names_loaded_model(export):
    """`export` (a function taking `model`) whose FerryErrors name a loaded model object as
    model_label does, not the temporary directory it was saved to (_checkpoint), which the
    user never named."""
    signature = inspect.signature(export)

    @functools.wraps(export)
    def wrapper(*args, **kwargs):
        try:
            return export(*args, **kwargs)
        except FerryError as error:
            model = signature.bind_partial(*args, **kwargs).arguments.get("model")
            message = str(error)
            named = re.sub(_SAVED, lambda _: f"<{model_label(model)}>", message)
            if named == message or not hasattr(model, "save_pretrained"):
                raise
            raise type(error)(named, getattr(error, "status", None)) from None
    return wrapper


def main(argv):
    """`python -m ferry._tokenizers CHECKPOINT OUT`: converts as convert() does; prints the
    warning line, if any, on stdout for the C command to show. Exit status 0 either way."""
    if len(argv) != 2:
        sys.stderr.write("usage: python -m ferry._tokenizers CHECKPOINT OUT\n")
        return 2
    why = convert(argv[0], argv[1])
    if why:
        print(why)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
