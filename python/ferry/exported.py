"""ExportedModel: an export in memory or on disk (components, manifest), saved and loaded by
libferry, and run in its runtime (onnxruntime or OpenVINO)."""

import ctypes
import json
import tempfile
from pathlib import Path

from . import _lib, _versions
from ._lib import FerryError, _P, _c, _c_bytes, _escape, _fail, _str

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
        loaded = cls(handle)
        _versions.warn_on_drift(loaded.manifest, _escape(loaded.directory))
        return loaded

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
        if _lib._lib is not None:
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
