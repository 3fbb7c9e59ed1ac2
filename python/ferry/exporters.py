"""The exporters: OnnxExporter, OpenVINOExporter, DynamoExporter and ExecutorchExporter (the
guide's names), and
decompose_for_generation. They marshal a recipe and a checkpoint to libferry, which does all the
work, and wrap what it made in an ExportedModel."""

import ctypes
import numbers
import tempfile
import warnings

from ._arrays import to_numpy
from ._lib import (FerryError, FerryWarning, _GenerationConfig, _P, _c, _c_bytes, _escape, _fail,
                   _str, caller_stacklevel)
from .configs import (AutoExportConfig, DynamoConfig, ExecutorchConfig, OnnxConfig, OpenVINOConfig,
                      _plain_recipe)
from .exported import ExportedModel
from .utils import ComponentInputs
from ._tokenizers import ConvertedTokenizer, carry_source_files, names_loaded_model

# --- exporting, saving, loading, running ----------------------------------------------------


class OnnxExporter:
    export_format = "onnx"

    def _config(self, config):
        """`config`, which must be one for this exporter's format: an OpenVINOConfig handed to
        OnnxExporter would otherwise write OpenVINO IR under the ONNX exporter's name."""
        fmt = (config.to_dict() if config is not None else {}).get("export_format", "onnx")
        if fmt != self.export_format:
            raise FerryError(f"{type(self).__name__} writes {self.export_format}, but its config "
                             f"is for {_escape(fmt)}: use AutoHfExporter.from_config(config) to "
                             "get the exporter for a config", status=1)
        return config

    @names_loaded_model
    def export(self, model, inputs=None, config=None, revision=None, *, sample_inputs=None,
               subfolder=None, token=None, cache_dir=None, local_files_only=False,
               force_download=False):
        """Exports `model`: a checkpoint directory, a hub id (downloaded as from_pretrained
        downloads it, with the same kwargs: revision, subfolder, token, cache_dir,
        local_files_only, force_download; only the files an export reads, see ferry.hub), or a
        loaded transformers model (see _checkpoint). `inputs` (optional; `sample_inputs=` as
        transformers names it) give the traced shape of a static export via their input_ids,
        and the graph's inputs, as transformers' exports take the inputs they were traced
        with: those of the model's inputs it holds (input_ids, attention_mask, position_ids,
        and token_type_ids for BERT; positions not given are computed inside from 0; no
        attention_mask: every token real; other keys, such as a causal LM's token_type_ids,
        are not the model's). Without `inputs`, the config's input_names, else what the
        model's tokenizer returns (input_ids and attention_mask; BERT's token_type_ids)."""
        if isinstance(inputs, ComponentInputs):  # an entry of ferry.utils' decomposition
            return self._export_component(model, inputs, config)
        inputs = _sample_inputs(inputs, sample_inputs)
        held = [k for k in ("cache", "past_key_values")
                if hasattr(inputs, "keys") and inputs.get(k) is not None]
        if held:
            raise FerryError(f"inputs hold a KV cache ({held[0]}): a plain export takes none; "
                             "for a generation component pass the entry of "
                             "ferry.utils.decompose_for_generation as it is (a copy loses which "
                             "component it is), or call export_for_generation", status=1)
        recipe = self._config(_from_recipe(config, self.export_format))
        _example_config(inputs, recipe)  # a malformed example is refused before the model is read
        source, keep = _checkpoint(model)
        source, revision = _download(source, revision, subfolder=subfolder, token=token,
                                     cache_dir=cache_dir, local_files_only=local_files_only,
                                     force_download=force_download)
        lib, handle = _c(), _open_model(source, revision)
        try:
            cfg = _example_config(inputs, recipe, name_inputs=lib.ferry_model_inputs(handle))
        except BaseException:
            lib.ferry_model_free(handle)
            raise
        exported, cancel = _P(), ctypes.c_int(0)
        # the export keeps the pointer: see save_pretrained
        lib.ferry_export_config_set_cancel(cfg.handle, ctypes.byref(cancel))
        with ConvertedTokenizer(self.export_format, handle, cfg.handle):
            status = lib.ferry_export(handle, cfg.handle, ctypes.byref(exported))
        if status:
            message = _str(lib.ferry_model_errmsg(handle))
            lib.ferry_model_free(handle)
            _fail(status, message)
        _warn(exported)
        return ExportedModel(exported, model_handle=handle, source=keep, cancel=cancel)

    def _export_component(self, submodel, inputs, config):
        """The guide's `exporter.export(submodel, subinputs, config)` over an entry of
        ferry.utils.decompose_for_generation: the component it stands for, written from the
        model's checkpoint with the capture's generation settings (ferry does not trace the
        captured kwargs)."""
        changed = inputs.changed()
        if changed:
            raise FerryError(f"component {_escape(inputs.component)}: "
                             f"{', '.join(map(_escape, changed))} changed shape since the "
                             "capture; ferry writes the component from the checkpoint with the "
                             "capture's settings and does not trace these inputs: to export "
                             "another shape, give decompose_for_generation those inputs (or "
                             "call export_for_generation)", status=1)
        if submodel is not inputs.submodel:
            raise FerryError(f"the inputs of component {_escape(inputs.component)} were captured "
                             f"with a {_escape(type(inputs.submodel).__name__)}, not this "
                             f"{_escape(type(submodel).__name__)}: pass the submodel "
                             "decompose_for_generation returned with them", status=1)
        return self.export_for_generation(inputs.model, inputs.generate_inputs, config,
                                          generation_config=inputs.generation_config,
                                          multi_token_decode=inputs.multi_token_decode,
                                          _only=inputs.component)

    @names_loaded_model
    def export_for_generation(self, model, inputs=None, config=None, *, generation_config=None,
                              multi_token_decode=None, revision=None, sample_inputs=None,
                              subfolder=None, token=None, cache_dir=None, local_files_only=False,
                              force_download=False, _only=None):
        """The generation components of `model` (prefill and decode with a KV cache; one decode
        with a static cache and `multi_token_decode`), as ferry_export_for_generation makes
        them. `generation_config` is a transformers GenerationConfig or a dict; only its
        cache_implementation ("dynamic" or "static") and max_cache_len are read.
        `multi_token_decode`: True, False (decode takes one token, the guide's default) or None
        (ferry's default: True with dynamic shapes and a dynamic cache, where it costs no
        decode time and onnxruntime-genai can run the export; False otherwise)."""
        inputs = _sample_inputs(inputs, sample_inputs)
        cfg = _example_config(inputs, self._config(_from_recipe(config, self.export_format)))
        gen = _c_generation(generation_config, multi_token_decode)
        source, keep = _checkpoint(model)
        source, revision = _download(source, revision, subfolder=subfolder, token=token,
                                     cache_dir=cache_dir, local_files_only=local_files_only,
                                     force_download=force_download)
        handle = _open_model(source, revision)
        exported, cancel = _P(), ctypes.c_int(0)
        # the export keeps the pointer: see save_pretrained
        _c().ferry_export_config_set_cancel(cfg.handle, ctypes.byref(cancel))
        with ConvertedTokenizer(self.export_format, handle, cfg.handle):
            if _only is None:
                status = _c().ferry_export_for_generation(handle, cfg.handle, ctypes.byref(gen),
                                                          ctypes.byref(exported))
            else:
                try:
                    status = _export_one_component(handle, cfg, gen, _only, exported)
                except BaseException:
                    _c().ferry_model_free(handle)
                    raise
        if status:
            message = _str(_c().ferry_model_errmsg(handle))
            _c().ferry_model_free(handle)
            _fail(status, message)
        _warn(exported)
        return ExportedModel(exported, model_handle=handle, source=keep, cancel=cancel)


class OpenVINOExporter(OnnxExporter):
    """Exports to OpenVINO IR (the recipe's export_format "openvino"). export_for_generation
    makes one stateful graph ("decode", in openvino_model.xml) that openvino-genai's
    LLMPipeline runs (a static cache is refused there); with OpenVINOConfig(stateful=False) it
    makes the components an ONNX generation export has (openvino_prefill.xml and
    openvino_decode.xml, or one decode; dynamic or static cache), run by the caller's loop."""

    export_format = "openvino"

    def export(self, model, inputs=None, config=None, revision=None, *, sample_inputs=None,
               **download):
        config = _from_recipe(config, self.export_format)
        return super().export(model, inputs, _as_openvino(config or OpenVINOConfig()), revision,
                              sample_inputs=sample_inputs, **download)

    def export_for_generation(self, model, inputs=None, config=None, **kwargs):
        config = _from_recipe(config, self.export_format)
        config = _as_openvino(config or OpenVINOConfig(dynamic=True))
        return super().export_for_generation(model, inputs, config, **kwargs)


class DynamoExporter(OnnxExporter):
    """Exports to torch.export's .pt2 (the recipe's export_format "dynamo"): model.pt2, which
    torch.export.load reads, written by libferry from the checkpoint (no tracing, no torch).
    export_for_generation's default (a dynamic cache) writes prefill.pt2 and decode.pt2, which
    return the whole cache (present_<l>_key) for the next call to take back
    (past_key_values_<l>_key); with a static cache (generation_config={"cache_implementation":
    "static", "max_cache_len": N}) the programs write the new rows into the cache tensors they
    are handed."""

    export_format = "dynamo"

    def _config(self, config):
        recipe = (config.to_dict() if config is not None else {})
        if recipe.get("export_format", "dynamo") not in ("dynamo", "pt2"):
            return super()._config(config)
        return config

    def export(self, model, inputs=None, config=None, revision=None, *, sample_inputs=None,
               **download):
        config = self._config(_from_recipe(config, self.export_format))
        return super().export(model, inputs, config or DynamoConfig(), revision,
                              sample_inputs=sample_inputs, **download)

    def export_for_generation(self, model, inputs=None, config=None, **kwargs):
        config = _from_recipe(config, self.export_format)
        return super().export_for_generation(model, inputs, config or DynamoConfig(dynamic=True),
                                             **kwargs)


class ExecutorchExporter(OnnxExporter):
    """Exports to ExecuTorch's .pte (the recipe's export_format "executorch"): model.pte, which
    executorch.runtime loads and runs, written by libferry from the checkpoint (no tracing, no
    torch). export_for_generation needs a static cache (generation_config={
    "cache_implementation": "static", "max_cache_len": N}): the programs write the new rows into
    their cache inputs and return [cache x N, logits, cache x N]; a dynamic cache is refused by
    libferry."""

    export_format = "executorch"

    def export(self, model, inputs=None, config=None, revision=None, *, sample_inputs=None,
               **download):
        config = self._config(_from_recipe(config, self.export_format))
        return super().export(model, inputs, config or ExecutorchConfig(), revision,
                              sample_inputs=sample_inputs, **download)

    def export_for_generation(self, model, inputs=None, config=None, **kwargs):
        config = _from_recipe(config, self.export_format)
        return super().export_for_generation(model, inputs,
                                             config or ExecutorchConfig(dynamic=True), **kwargs)


class AutoHfExporter:
    """The exporter for a config, as the guide's AutoHfExporter.from_config."""

    @staticmethod
    def from_config(config):
        recipe = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        # transformers' configs hold an ExportFormat enum: its value names it
        export_format = _plain_recipe(recipe).get("export_format", "onnx")
        exporters = {"onnx": OnnxExporter, "openvino": OpenVINOExporter,
                     "dynamo": DynamoExporter, "pt2": DynamoExporter,
                     "executorch": ExecutorchExporter}
        if export_format not in exporters:
            raise FerryError(f"export_format {_escape(repr(export_format))} has no exporter in "
                             f"ferry (it writes {', '.join(exporters)})", status=4)
        return exporters[export_format]()


def _from_recipe(config, export_format):
    """`config` as a config object: transformers' exporters take a dict of recipe keys too
    (a dict raised AttributeError), whose export_format defaults to the
    format of the exporter it is handed to."""
    if config is None or hasattr(config, "to_dict"):
        return config
    if isinstance(config, dict):
        return AutoExportConfig.from_dict({"export_format": export_format, **config})
    raise FerryError("config must be an OnnxConfig, OpenVINOConfig, DynamoConfig or "
                     "ExecutorchConfig, or a dict of "
                     f"recipe keys, not {_escape(type(config).__name__)}", status=1)


def _as_openvino(config):
    """An OpenVINOExporter writes OpenVINO from an OpenVINO or ONNX config (an OnnxConfig's
    ONNX-only keys, opset or ort_fusions, are then refused by libferry by name); one for
    another format is refused, as the other exporters refuse it (a
    DynamoConfig wrote OpenVINO)."""
    recipe = config.to_dict()
    fmt = str(recipe.get("export_format") or "openvino")
    if fmt not in ("openvino", "onnx"):
        raise FerryError(f"OpenVINOExporter writes openvino, but its config is for "
                         f"{_escape(fmt)}: use AutoHfExporter.from_config(config) to get the "
                         "exporter for a config", status=1)
    recipe["export_format"] = "openvino"
    return OpenVINOConfig._from_dict(recipe)


@names_loaded_model
def decompose_for_generation(model, inputs=None, config=None, *, generation_config=None,
                             multi_token_decode=None, revision=None, **download):
    """{component name: {"role": ..., "description": ...}} of a generation export, without
    lowering or saving anything (ferry_decompose_for_generation)."""
    cfg = _example_config(inputs, _from_recipe(config, "onnx") or OnnxConfig(dynamic=True))
    gen = _c_generation(generation_config, multi_token_decode)
    source, keep = _checkpoint(model)
    source, revision = _download(source, revision, **download)
    lib, handle = _c(), _open_model(source, revision)
    components = _P()
    try:
        status = lib.ferry_decompose_for_generation(handle, cfg.handle, ctypes.byref(gen),
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


def _export_one_component(handle, cfg, gen, name, exported):
    """ferry_decompose_for_generation, then ferry_components_export of component `name`
    alone; one that ferry's decomposition lacks is refused naming those it has (transformers'
    capture names a prefill where OpenVINO's stateful export is one decode graph)."""
    lib, components = _c(), _P()
    status = lib.ferry_decompose_for_generation(handle, cfg.handle, ctypes.byref(gen),
                                                ctypes.byref(components))
    if status:
        return status
    try:
        have = [_str(lib.ferry_components_name(components, k))
                for k in range(lib.ferry_components_count(components))]
        if name not in have:
            raise FerryError(f"component {_escape(name)}: ferry's generation export with these "
                             f"settings has {', '.join(map(_escape, have))}", status=1)
        names = (ctypes.c_char_p * 1)(name.encode())
        return lib.ferry_components_export(components, names, 1, ctypes.byref(exported))
    finally:
        lib.ferry_components_free(components)


def _sample_inputs(inputs, sample_inputs):
    if inputs is not None and sample_inputs is not None:
        raise FerryError("give the example inputs once: inputs or sample_inputs", status=1)
    return sample_inputs if inputs is None else inputs


def _warn(exported):
    """libferry's warnings about the export just built, as the CLI prints them, as Python
    warnings (FerryWarning), at the caller's line (OpenVINOExporter's and
    DynamoExporter's pointed into this file)."""
    for line in (_str(_c().ferry_exported_warnings(exported)) or "").splitlines():
        warnings.warn(line, FerryWarning, stacklevel=caller_stacklevel())


# the inputs ferry's graphs can take, in the order of their FERRY_INPUT_* bits
_GRAPH_INPUTS = ("input_ids", "attention_mask", "position_ids", "token_type_ids")


def _example_config(inputs, config, name_inputs=False):
    """The C config of `config`, traced at `inputs["input_ids"]`'s shape when given: a dict of
    the model's inputs (a tokenizer's output), whose input_ids are [batch, sequence] tensors,
    arrays or lists (a list, a bare tensor, or inputs without input_ids gave
    Python's errors or were ignored). `name_inputs` (a plain export: the FERRY_INPUT_* bits of
    the model's inputs, ferry_model_inputs): the graph takes those of them `inputs` holds."""
    recipe = (config or OnnxConfig()).to_dict()
    names = []
    if inputs is not None and name_inputs and hasattr(inputs, "keys"):
        # a tokenizer's other outputs (a causal LM's token_type_ids) are not the model's
        # inputs: the graph does not take them, and a call drops them
        given = [str(k) for k in inputs.keys()]
        names = [n for bit, n in enumerate(_GRAPH_INPUTS)
                 if n in given and name_inputs & (1 << bit)]
        chosen = recipe.get("input_names")
        if isinstance(chosen, (list, tuple)) and "input_ids" in names and \
                sorted(map(str, chosen)) != sorted(names):
            raise FerryError(f"the config's input_names ({', '.join(map(_escape, chosen))}) "
                             f"and the example inputs ({', '.join(names)}) differ: give the "
                             "graph's inputs once", status=1)
        # without input_ids the example is refused below, by name; a malformed input_names
        # is left for libferry to name
        if "input_ids" in names and (chosen is None or isinstance(chosen, (list, tuple))):
            recipe["input_names"] = names
    if inputs is not None:
        if not hasattr(inputs, "keys") or not hasattr(inputs, "__getitem__"):
            raise FerryError(f"inputs must be a dict of the model's inputs (a tokenizer's "
                             f"output: input_ids, attention_mask), not "
                             f"{_escape(type(inputs).__name__)}", status=1)
        if "input_ids" not in inputs:
            raise FerryError(f"inputs has no input_ids (it holds "
                             f"{', '.join(map(_escape, map(str, inputs.keys()))) or 'nothing'}): "
                             "the traced shape is input_ids'", status=1)
        ids = inputs["input_ids"]
        # a tensor's or array's own shape: exporting needs no numpy; a list
        # goes through numpy
        shape = list(ids.shape) if hasattr(ids, "shape") else \
            list(to_numpy(ids, "input_ids").shape)
        if len(shape) != 2:
            raise FerryError(f"input_ids must be [batch, sequence], not of shape {shape}",
                             status=1)
        if "example_shapes" not in recipe:
            # every input the graph takes gives its shape, which libferry holds to agree on
            # the axes they share (a mask of another length than the ids is refused)
            traced = {"input_ids": [int(n) for n in shape]}
            for name in names:
                if name != "input_ids":
                    value = inputs[name]
                    dims = value.shape if hasattr(value, "shape") else \
                        to_numpy(value, name).shape
                    traced[name] = [int(n) for n in dims]
            recipe["example_shapes"] = traced
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
        raise FerryError(f"cache_implementation {_escape(repr(impl))} is not supported (static "
                         "or dynamic)", status=4)
    if multi_token_decode not in (None, True, False):
        raise FerryError(f"multi_token_decode must be True, False or None (ferry's default), "
                         f"not {_escape(repr(multi_token_decode))}", status=1)
    gen.multi_token_decode = -1 if multi_token_decode is None else int(multi_token_decode)
    # an integer, as the C field is (64.7 was cut to 64, "64" taken, and
    # -5 or 2**64 reported as missing)
    if length is not None and (isinstance(length, bool) or
                               not isinstance(length, numbers.Integral) or
                               not 0 < length < 2**63):
        raise FerryError(f"max_cache_len must be a positive integer, not "
                         f"{_escape(repr(length))}", status=1)
    gen.static_cache = int(impl == "static")
    gen.max_cache_len = int(length or 0)
    return gen


def _checkpoint(model):
    """(what libferry opens, what must live as long as the export) for `model`. A path or hub
    id is opened as it is. A loaded transformers model (the guide's
    `AutoModelForCausalLM.from_pretrained(...)`) is saved to a temporary directory first with
    save_pretrained (safetensors): its weights may have changed since they were read from disk,
    so only what it holds now is exported. libferry streams the weights from that directory
    when the export is saved, so the directory lives as long as the ExportedModel."""
    if not (hasattr(model, "save_pretrained") and hasattr(model, "config")):
        return model, None  # a path (anything else is refused by name when opened)
    keep = tempfile.TemporaryDirectory(prefix="ferry-model-")
    model.save_pretrained(keep.name, safe_serialization=True)
    carry_source_files(model, keep.name)  # its tokenizer, which save_pretrained does not write
    return keep.name, keep


def _download(model, revision, subfolder=None, token=None, cache_dir=None,
              local_files_only=False, force_download=False):
    """(checkpoint, revision) for libferry: a hub id downloaded first (ferry.hub), so that
    libferry opens the local snapshot; a directory or anything else as it is."""
    if revision is not None:
        _c_bytes(revision, "revision")  # a NUL or a wrong type, refused by name first
        if not isinstance(revision, str):
            return model, revision
    from .hub import resolve_checkpoint

    return resolve_checkpoint(model, revision, subfolder=subfolder, token=token,
                              cache_dir=cache_dir, local_files_only=local_files_only,
                              force_download=force_download)


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
