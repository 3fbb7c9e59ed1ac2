"""ferry — a thin ctypes binding over include/ferry.h, shaped like transformers.exporters.

    from ferry import OnnxExporter, OnnxConfig, ExportedModel
    exported = OnnxExporter().export("path/to/checkpoint", config=OnnxConfig(dynamic=True))
    exported.save_pretrained("model-onnx")
    logits = ExportedModel.from_pretrained("model-onnx")(**inputs).logits

All export work happens in libferry; this module only marshals arguments and runs the saved
graph in onnxruntime. libferry.so is found via $FERRY_LIB (a file or a directory), then
../../build/ next to this package, then the system's library path.
"""

import ctypes
import ctypes.util
import json
import os
import tempfile
from pathlib import Path

__all__ = ["FerryError", "OnnxConfig", "OpenVINOConfig", "AutoExportConfig", "OnnxExporter",
           "OpenVINOExporter", "ExportedModel",
           "version", "decompose_for_generation"]


class FerryError(RuntimeError):
    """A failure reported by libferry; str() is the library's message."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# --- the C library --------------------------------------------------------------------------

_NAME_MAX, _MAX_DIMS = 64, 16


class _DimSpec(ctypes.Structure):
    _fields_ = [("input", ctypes.c_char * _NAME_MAX), ("axis", ctypes.c_int),
                ("symbol", ctypes.c_char * _NAME_MAX), ("min", ctypes.c_int64),
                ("max", ctypes.c_int64)]


class _GenerationConfig(ctypes.Structure):
    _fields_ = [("multi_token_decode", ctypes.c_int), ("static_cache", ctypes.c_int),
                ("max_cache_len", ctypes.c_int64)]


class _Quantizer(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int) for name in
                ("bits", "block_size", "asymmetric", "accuracy_level", "embeddings", "lm_head",
                 "method")]


class _ExportConfig(ctypes.Structure):
    _fields_ = [("format", ctypes.c_int), ("dynamic", ctypes.c_int),
                ("dims", _DimSpec * _MAX_DIMS), ("n_dims", ctypes.c_int),
                ("example_batch", ctypes.c_int64), ("example_sequence", ctypes.c_int64),
                ("dtype", ctypes.c_int), ("opset", ctypes.c_int),
                ("progress", ctypes.c_void_p), ("progress_user", ctypes.c_void_p),
                ("for_generation", ctypes.c_int), ("generation", _GenerationConfig),
                ("ort_fusions", ctypes.c_int), ("quantizer", _Quantizer),
                ("skip_tokenizer", ctypes.c_int), ("stateless", ctypes.c_int),
                ("compress_to_fp16", ctypes.c_int)]


def _find_library():
    env = Path(os.environ.get("FERRY_LIB", "/nonexistent"))
    for path in (env / "libferry.so" if env.is_dir() else env,
                 Path(__file__).resolve().parents[2] / "build" / "libferry.so"):
        if path.is_file():
            return str(path)
    found = ctypes.util.find_library("ferry")
    if not found:
        raise FerryError("libferry.so not found (set FERRY_LIB, or build into ./build)")
    return found


_lib, _P, _S = None, ctypes.c_void_p, ctypes.c_char_p


def _c():
    """Loads libferry once and declares the prototypes of ferry.h."""
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_library())
    i, cfg, out = ctypes.c_int, ctypes.POINTER(_ExportConfig), ctypes.POINTER(_P)
    protos = {
        "ferry_version": (_S, []), "ferry_status_str": (_S, [i]),
        "ferry_model_open": (i, [_S, _S, out]), "ferry_model_free": (None, [_P]),
        "ferry_model_errmsg": (_S, [_P]), "ferry_export_config_init": (None, [cfg]),
        "ferry_export_config_from_json": (i, [cfg, _S, ctypes.c_char_p, ctypes.c_size_t]),
        "ferry_export": (i, [_P, cfg, out]), "ferry_exported_save": (i, [_P, _S, i]),
        "ferry_exported_load": (i, [_S, _S, out]), "ferry_exported_free": (None, [_P]),
        "ferry_exported_errmsg": (_S, [_P]), "ferry_exported_manifest": (_S, [_P]),
        "ferry_exported_dir": (_S, [_P]), "ferry_exported_component_count": (i, [_P]),
        "ferry_exported_component_name": (_S, [_P, i]),
        "ferry_exported_component_file": (_S, [_P, i]),
        "ferry_generation_config_init": (None, [_P]),
        "ferry_export_for_generation": (i, [_P, cfg, _P, out]),
        "ferry_decompose_for_generation": (i, [_P, cfg, _P, out]),
        "ferry_components_free": (None, [_P]), "ferry_components_count": (i, [_P]),
        "ferry_components_name": (_S, [_P, i]), "ferry_components_role": (_S, [_P, i]),
        "ferry_components_describe": (_S, [_P, i]),
        "ferry_export_config_size": (ctypes.c_size_t, []),
        "ferry_escape": (_S, [_S, ctypes.c_char_p, ctypes.c_size_t]),
    }
    for name, (res, args) in protos.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    if lib.ferry_export_config_size() != ctypes.sizeof(_ExportConfig):
        raise FerryError("python/ferry is out of step with libferry: ferry_export_config is "
                         f"{lib.ferry_export_config_size()} bytes in C, "
                         f"{ctypes.sizeof(_ExportConfig)} here")
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


# --- configs --------------------------------------------------------------------------------


def _json_dim(dim):
    """A symbol as the recipe spells it: "batch", or {"name", "min", "max"} (also accepts
    objects with those attributes, such as torch.export.Dim)."""
    if isinstance(dim, (str, dict)):
        return dim
    out = {"name": getattr(dim, "__name__", None) or getattr(dim, "name")}
    out.update({k: v for k in ("min", "max")
                if isinstance(v := getattr(dim, k, None), int) and 0 < v < 2**62})
    return out


class OnnxConfig:
    """The recipe of an ONNX export; its keys are AutoExportConfig.from_dict's (and the CLI's
    --config recipe's). Validated by libferry when made."""

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", opset=None,
                 example_shapes=None, ort_fusions=None, quantizer=None):
        """ort_fusions: None (standard ONNX) or "cpu" | "cuda" | "webgpu" | "dml".
        quantizer: None, "int4", "int8" or a dict of the recipe's quantizer keys (bits,
        block_size, symmetric, accuracy_level, quantize_embeddings, quantize_lm_head, method:
        "rtn" | "mse")."""
        recipe = {"export_format": "onnx", "dynamic": bool(dynamic), "dtype": dtype}
        if ort_fusions is not None:
            recipe["ort_fusions"] = ort_fusions
        if quantizer is not None:
            recipe["quantizer"] = dict(quantizer) if isinstance(quantizer, dict) else quantizer
        if dynamic_shapes:
            recipe["dynamic_shapes"] = {
                name: {str(axis): _json_dim(dim) for axis, dim in axes.items()}
                for name, axes in dynamic_shapes.items()}
        if opset is not None:
            recipe["opset"] = int(opset)
        if example_shapes:
            recipe["example_shapes"] = {k: [int(x) for x in v] for k, v in example_shapes.items()}
        self._recipe = recipe
        self._c_config()

    @classmethod
    def _from_dict(cls, recipe):
        config = cls.__new__(cls)
        config._recipe = dict(recipe)
        config._c_config()
        return config

    def to_dict(self):
        return dict(self._recipe)

    def _c_config(self):
        """The ferry_export_config that libferry makes of this recipe (or its error)."""
        cfg = _ExportConfig()
        _c().ferry_export_config_init(ctypes.byref(cfg))
        err = ctypes.create_string_buffer(1024)
        status = _c().ferry_export_config_from_json(ctypes.byref(cfg),
                                                    json.dumps(self._recipe).encode(), err, 1024)
        if status:
            _fail(status, _str(err.value))
        return cfg


class OpenVINOConfig(OnnxConfig):
    """The recipe of an OpenVINO IR export (openvino_model.xml + .bin, run by OpenVINO's
    runtime), with the guide's options. `stateful` (generation only): True keeps the cache in
    the model's variables (one graph, openvino-genai's layout); False gives it as explicit
    inputs and outputs, in the components an ONNX generation export has. `compress_to_fp16`:
    weights stored in fp16 and computed in fp32 (dtype stays "fp32"). `quantizer`: as for
    OnnxConfig ("int4", "int8" or a dict); OpenVINO runs the compressed weights as they are."""

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", example_shapes=None,
                 compress_to_fp16=False, stateful=True, quantizer=None):
        super().__init__(dynamic=dynamic, dynamic_shapes=dynamic_shapes, dtype=dtype,
                         example_shapes=example_shapes, quantizer=quantizer)
        self._recipe["export_format"] = "openvino"
        if stateful is not True:
            self._recipe["stateful"] = stateful
        if compress_to_fp16 is not False:
            self._recipe["compress_to_fp16"] = compress_to_fp16
        self._c_config()


class AutoExportConfig:
    @staticmethod
    def from_dict(d):
        """A config from a recipe dict ({"export_format": "onnx", "dynamic": True, ...});
        libferry checks every key and names the one it refuses."""
        config_class = OpenVINOConfig if d.get("export_format") == "openvino" else OnnxConfig
        return config_class._from_dict(d)


# --- exporting, saving, loading, running ----------------------------------------------------


class OnnxExporter:
    def export(self, model, inputs=None, config=None, revision=None):
        """Exports the checkpoint at `model` (a directory or a local hub cache id). `inputs`
        (optional) give the traced shape of a static export via their input_ids."""
        recipe = (config or OnnxConfig()).to_dict()
        if inputs is not None and "input_ids" in inputs and "example_shapes" not in recipe:
            recipe["example_shapes"] = {"input_ids": [int(n) for n in inputs["input_ids"].shape]}
        cfg = OnnxConfig._from_dict(recipe)._c_config()
        lib, handle = _c(), _open_model(model, revision)
        exported = _P()
        status = lib.ferry_export(handle, ctypes.byref(cfg), ctypes.byref(exported))
        if status:
            message = _str(lib.ferry_model_errmsg(handle))
            lib.ferry_model_free(handle)
            _fail(status, message)
        return ExportedModel(exported, model_handle=handle)

    def export_for_generation(self, model, inputs=None, config=None, *, generation_config=None,
                              multi_token_decode=None, revision=None):
        """The generation components of `model` (prefill and decode with a KV cache; one decode
        with a static cache and `multi_token_decode`), as ferry_export_for_generation makes
        them. `generation_config` is a transformers GenerationConfig or a dict; only its
        cache_implementation ("dynamic" or "static") and max_cache_len are read.
        `multi_token_decode`: True, False (decode takes one token, the guide's default) or None
        (ferry's default: True with dynamic shapes and a dynamic cache, where it costs no
        decode time and onnxruntime-genai can run the export; False otherwise)."""
        cfg = _example_config(inputs, config)
        gen = _c_generation(generation_config, multi_token_decode)
        handle = _open_model(model, revision)
        exported = _P()
        status = _c().ferry_export_for_generation(handle, ctypes.byref(cfg), ctypes.byref(gen),
                                                  ctypes.byref(exported))
        if status:
            message = _str(_c().ferry_model_errmsg(handle))
            _c().ferry_model_free(handle)
            _fail(status, message)
        return ExportedModel(exported, model_handle=handle)


class OpenVINOExporter(OnnxExporter):
    """Exports to OpenVINO IR (the recipe's export_format "openvino"). export_for_generation
    makes one stateful graph ("decode", in openvino_model.xml) that openvino-genai's
    LLMPipeline runs (a static cache is refused there); with OpenVINOConfig(stateful=False) it
    makes the components an ONNX generation export has (openvino_prefill.xml and
    openvino_decode.xml, or one decode; dynamic or static cache), run by the caller's loop."""

    def export(self, model, inputs=None, config=None, revision=None):
        return super().export(model, inputs, _as_openvino(config or OpenVINOConfig()), revision)

    def export_for_generation(self, model, inputs=None, config=None, **kwargs):
        config = _as_openvino(config or OpenVINOConfig(dynamic=True))
        return super().export_for_generation(model, inputs, config, **kwargs)


def _as_openvino(config):
    """An OpenVINOExporter writes OpenVINO whatever config class it is handed (an OnnxConfig's
    ONNX-only keys, opset or ort_fusions, are then refused by libferry by name)."""
    recipe = config.to_dict()
    recipe["export_format"] = "openvino"
    return OpenVINOConfig._from_dict(recipe)


def decompose_for_generation(model, inputs=None, config=None, *, generation_config=None,
                             multi_token_decode=None, revision=None):
    """{component name: {"role": ..., "description": ...}} of a generation export, without
    lowering or saving anything (ferry_decompose_for_generation)."""
    cfg = _example_config(inputs, config or OnnxConfig(dynamic=True))
    gen = _c_generation(generation_config, multi_token_decode)
    lib, handle = _c(), _open_model(model, revision)
    components = _P()
    try:
        status = lib.ferry_decompose_for_generation(handle, ctypes.byref(cfg), ctypes.byref(gen),
                                                    ctypes.byref(components))
        if status:
            _fail(status, _str(lib.ferry_model_errmsg(handle)))
        return {_str(lib.ferry_components_name(components, k)):
                {"role": _str(lib.ferry_components_role(components, k)),
                 "description": _str(lib.ferry_components_describe(components, k))}
                for k in range(lib.ferry_components_count(components))}
    finally:
        lib.ferry_components_free(components)
        lib.ferry_model_free(handle)


def _example_config(inputs, config):
    """The C config of `config`, traced at `inputs["input_ids"]`'s shape when given."""
    recipe = (config or OnnxConfig()).to_dict()
    if inputs is not None and "input_ids" in inputs and "example_shapes" not in recipe:
        recipe["example_shapes"] = {"input_ids": [int(n) for n in inputs["input_ids"].shape]}
    return OnnxConfig._from_dict(recipe)._c_config()


def _c_generation(generation_config, multi_token_decode):
    """A ferry_generation_config from a GenerationConfig-like object or dict."""
    gen = _GenerationConfig()
    _c().ferry_generation_config_init(ctypes.byref(gen))
    if isinstance(generation_config, dict):
        impl, length = (generation_config.get(k) for k in ("cache_implementation", "max_cache_len"))
    else:
        impl, length = (getattr(generation_config, k, None)
                        for k in ("cache_implementation", "max_cache_len"))
    if impl not in (None, "dynamic", "static"):
        raise FerryError(f"cache_implementation {impl!r} is not supported (static or dynamic)",
                         status=4)
    if multi_token_decode not in (None, True, False):
        raise FerryError(f"multi_token_decode must be True, False or None (ferry's default), "
                         f"not {multi_token_decode!r}", status=1)
    gen.multi_token_decode = -1 if multi_token_decode is None else int(multi_token_decode)
    gen.static_cache = int(impl == "static")
    gen.max_cache_len = int(length or 0)
    return gen


def _open_model(model, revision=None):
    """A ferry_model handle for the checkpoint at `model` (a directory or local hub id)."""
    # A revision is passed whenever one is given, "" included: libferry refuses an empty one as
    # the CLI's --revision "" is refused (it used to be taken as no revision at all).
    path = _c_bytes(model, "model")
    rev = None if revision is None else _c_bytes(revision, "revision")
    lib, handle = _c(), _P()
    status = lib.ferry_model_open(path, rev, ctypes.byref(handle))
    if status:
        message = _str(lib.ferry_model_errmsg(handle)) if handle else None
        lib.ferry_model_free(handle)
        _fail(status, message)
    return handle


class ExportedModel:
    """An export: components (name -> file), the manifest, and a runner for its graph."""

    def __init__(self, handle, model_handle=None):
        self._h, self._model, self._session, self._tmp = handle, model_handle, None, None

    @classmethod
    def from_pretrained(cls, path, subfolder=None):
        raw = _c_bytes(path, "path")
        sub = _c_bytes(subfolder, "subfolder") if subfolder else None
        handle = _P()
        status = _c().ferry_exported_load(raw, sub, ctypes.byref(handle))
        if status:
            message = _str(_c().ferry_exported_errmsg(handle)) if handle else None
            _c().ferry_exported_free(handle)
            _fail(status, message)
        return cls(handle)

    def save_pretrained(self, save_directory, force=False):
        """Writes the export to save_directory atomically. With force, an earlier export there
        (ferry's or transformers': export.json and only its files) is replaced; anything else
        is refused with a FerryError and left untouched (ferry_exported_save)."""
        raw = _c_bytes(save_directory, "save_directory")
        handle = self._live("save it")
        status = _c().ferry_exported_save(handle, raw, int(force))
        if status:
            _fail(status, _str(_c().ferry_exported_errmsg(handle)))
        self._session = None

    def _live(self, doing):
        """The library handle; after close() there is none, and libferry would take the NULL for
        a failed allocation ("out of memory")."""
        if not self._h:
            raise FerryError(f"this ExportedModel was closed (close() frees it): cannot {doing}",
                             status=1)
        return self._h

    @property
    def directory(self):
        return _str(_c().ferry_exported_dir(self._h))

    @property
    def components(self):
        lib, handle = _c(), self._live("list its components")
        return {_str(lib.ferry_exported_component_name(handle, i)):
                _str(lib.ferry_exported_component_file(handle, i))
                for i in range(lib.ferry_exported_component_count(handle))}

    @property
    def manifest(self):
        return json.loads(_str(_c().ferry_exported_manifest(self._live("read its manifest"))))

    def _runner(self):
        if self._session is None:
            self._check_callable()
            if self.directory is None:  # a fresh export runs on first call: save it aside
                self._tmp = tempfile.TemporaryDirectory(prefix="ferry-")
                self.save_pretrained(Path(self._tmp.name) / "export")
            path = Path(self.directory) / self.components["model"]
            manifest = self.manifest
            if manifest.get("format") == "openvino":
                precision = manifest["components"]["model"]["metadata"].get("precision")
                self._session = _OpenVINOSession(path, precision)
            else:
                import onnxruntime

                self._session = onnxruntime.InferenceSession(
                    str(path), providers=["CPUExecutionProvider"])
        return self._session

    def _check_callable(self):
        """Calling runs the single "model" graph; a generation export has none, only stages that
        pass a KV cache between them, which the caller has to drive."""
        components = self.components
        if "model" in components:
            return
        manifest = self.manifest.get("components", {})
        # Names, roles and the directory come from export.json and the file system: escaped.
        listed = ", ".join(
            f"{_escape(name)} (role {_escape(manifest.get(name, {}).get('role'))}, "
            f"{_escape(file)})" for name, file in components.items())
        raw_dir = _c().ferry_exported_dir(self._h)
        where = _escape(raw_dir) if raw_dir else "the directory save_pretrained() writes"
        openvino = self.manifest.get("format") == "openvino"
        if openvino and any(c.get("metadata", {}).get("stateful") for c in manifest.values()):
            raise FerryError(
                f"this export has no \"model\" component to call: its {listed} is OpenVINO's "
                "stateful generation graph, whose cache stays in the model's variables between "
                f"calls. Run it (from {where}) with openvino-genai's LLMPipeline, or an OpenVINO "
                "infer request fed input_ids, attention_mask, position_ids and beam_idx.",
                status=4)
        runtime = ("OpenVINO (openvino.Core().compile_model)" if openvino
                   else "onnxruntime.InferenceSession")
        raise FerryError(
            f"this export has no \"model\" component to call: its components, {listed}, are "
            "the stages of a generation loop, which pass a KV cache from one call to the next. "
            f"Run each component's file with {runtime} (from {where}), "
            "feeding the cache as export.json's components.<name>.metadata.cache describes "
            "(docs/design.md, \"Generation components\"); or export without for-generation to "
            "get a callable \"model\".", status=4)

    def __call__(self, **inputs):
        """Runs the "model" component. Inputs the graph does not take are dropped; position_ids
        are derived from attention_mask as generate() does when not given."""
        import numpy as np

        session = self._runner()
        ints = {k: np.asarray(v.numpy() if hasattr(v, "numpy") else v, dtype=np.int64)
                for k, v in inputs.items()
                if v is not None and k in ("input_ids", "attention_mask", "position_ids")}
        if "attention_mask" not in ints and "input_ids" in ints:
            ints["attention_mask"] = np.ones_like(ints["input_ids"])
        if "position_ids" not in ints and "attention_mask" in ints:
            mask = ints["attention_mask"]
            ints["position_ids"] = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
        feeds = {i.name: ints[i.name] if i.name in ints else inputs[i.name]
                 for i in session.get_inputs()}
        names = [o.name for o in session.get_outputs()]
        return ExportOutput(zip(names, session.run(names, feeds)))

    def close(self):
        if self._h:
            _c().ferry_exported_free(self._h)
            self._h = None
        if self._model:
            _c().ferry_model_free(self._model)
            self._model = None
        self._session = None

    def __del__(self):
        if _lib is not None:
            self.close()


class _OpenVINOSession:
    """An OpenVINO compiled model behind onnxruntime's session calls (get_inputs, get_outputs,
    run), on CPU; an fp32 export is compiled at f32 inference precision (OpenVINO's CPU plugin
    would otherwise compute in bf16 where the processor has it)."""

    class _Port:
        def __init__(self, name):
            self.name = name

    def __init__(self, path, precision):
        import openvino

        core = openvino.Core()
        model = core.read_model(str(path))
        config = {"INFERENCE_PRECISION_HINT": "f32"} if precision == "fp32" else {}
        self._compiled = core.compile_model(model, "CPU", config)
        self._bf16 = {o.get_any_name() for o in self._compiled.outputs
                      if o.get_element_type() == openvino.Type.bf16}

    def get_inputs(self):
        return [self._Port(i.get_any_name()) for i in self._compiled.inputs]

    def get_outputs(self):
        return [self._Port(o.get_any_name()) for o in self._compiled.outputs]

    def run(self, names, feeds):
        import numpy as np

        result = self._compiled(feeds)
        out = []
        for name in names:
            value = np.asarray(result[name])
            if name in self._bf16:  # numpy has no bfloat16: OpenVINO hands the bits as float16
                value = (value.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            out.append(value)
        return out


class ExportOutput(dict):
    """Outputs by name, also as attributes (`.logits`), like a transformers ModelOutput."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
