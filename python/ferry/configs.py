"""The export recipes: OnnxConfig, OpenVINOConfig and AutoExportConfig. A recipe is the JSON
that the CLI's --config takes; libferry validates it (ferry_export_config_from_json) when a
config is made, so a bad key fails here and not at export time."""

import ctypes
import json
import numbers

from ._lib import FerryError, _c, _Config, _fail, _str
from .quantizers import is_quantizer, recipe_of

# --- configs --------------------------------------------------------------------------------


# the symbols a torch.export.Dim.AUTO / Dim.DYNAMIC axis gets: ferry's names for the axes
_HINTED_AXES = {0: "batch", 1: "sequence"}


def _json_dim(dim, axis):
    """A symbol as the recipe spells it: "batch", or {"name", "min", "max"} (also accepts
    objects with those attributes, such as torch.export.Dim). torch's Dim.AUTO and Dim.DYNAMIC
    name no symbol: axis 0 becomes "batch" and axis 1 "sequence", as --dynamic names them;
    Dim.STATIC keeps the axis static (None)."""
    if isinstance(dim, (str, dict)):
        return dim
    hint = getattr(getattr(dim, "type", None), "name", None)
    if type(dim).__name__ == "_DimHint" and hint in ("AUTO", "DYNAMIC", "STATIC"):
        if hint == "STATIC":
            return None
        if int(axis) not in _HINTED_AXES:
            raise FerryError(f"Dim.{hint} on axis {axis}: name the symbol of an axis other "
                             "than batch (0) and sequence (1) with torch.export.Dim(name, "
                             "min=..., max=...)", status=1)
        out = {"name": _HINTED_AXES[int(axis)]}
    else:
        out = {"name": getattr(dim, "__name__", None) or getattr(dim, "name")}
    out.update({k: v for k in ("min", "max")
                if isinstance(v := getattr(dim, k, None), int) and 0 < v < 2**62})
    return out


def _json_shapes(shapes):
    """dynamic_shapes as a recipe holds them, from what torch.export takes: per input a dict of
    axis -> dim, a tuple or list of dims by position, or None (the input stays static)."""
    if not isinstance(shapes, dict):
        raise FerryError("dynamic_shapes must be a dict from input name to its dims (the "
                         "exporters take keyword inputs), not a " + type(shapes).__name__,
                         status=1)
    out = {}
    for name, axes in shapes.items():
        if axes is None:
            continue
        if isinstance(axes, (tuple, list)):
            axes = dict(enumerate(axes))
        if not isinstance(axes, dict):
            out[name] = axes  # libferry names what it refuses
            continue
        out[name] = {str(axis): spec for axis, dim in axes.items()
                     if dim is not None and (spec := _json_dim(dim, axis)) is not None}
    return out


def _dtype_name(dtype):
    """The recipe's dtype: a name ("fp32", "bf16", "float16", ...), or a torch dtype as the
    guide's configs take (torch.float16, or its text "torch.float16" -> "float16", a name
    libferry also reads)."""
    name = str(dtype)  # torch.float16, or its text as a recipe written by hand may hold
    if isinstance(dtype, str) and not name.startswith("torch."):
        return dtype
    if name.startswith("torch."):
        return name[len("torch."):]
    raise FerryError(f"dtype must be a name such as \"fp32\" or a torch dtype, not {dtype!r}",
                     status=1)


def _tracing_options(recipe, strict, prefer_deferred):
    """transformers' torch.export options, in the recipe where they differ from the default, so
    that libferry judges them: ferry does not trace, so strict=True is refused and
    prefer_deferred_runtime_asserts_over_guards (no guard to defer) is taken either way."""
    if strict is not False:
        recipe["strict"] = strict
    if prefer_deferred is not False:
        recipe["prefer_deferred_runtime_asserts_over_guards"] = prefer_deferred


def _plain_recipe(recipe):
    """`recipe` as JSON holds it: a transformers config's to_dict() carries torch.export.Dim
    objects in dynamic_shapes (written as ferry's Python config writes them) and its
    ExportFormat enum; a transformers quantizer object is not a recipe's and is refused."""
    plain = dict(recipe)
    fmt = plain.get("export_format")
    if fmt is not None and (not isinstance(fmt, str) or hasattr(fmt, "value")):
        plain["export_format"] = str(getattr(fmt, "value", fmt))  # a (str) enum: its value
    elif isinstance(fmt, str) and fmt.startswith("ExportFormat."):
        plain["export_format"] = fmt[len("ExportFormat."):].lower()
    if "dtype" in plain and plain["dtype"] is not None:  # a torch dtype, as the configs take
        plain["dtype"] = _dtype_name(plain["dtype"])      # (a TypeError)
    shapes = plain.get("dynamic_shapes")
    if shapes is not None:
        plain["dynamic_shapes"] = _json_shapes(shapes)
    quantizer = plain.get("quantizer")
    if is_quantizer(quantizer):
        plain["quantizer"] = recipe_of(quantizer, plain.get("export_format") or "onnx")
    elif quantizer is not None and not isinstance(quantizer, (str, dict)):
        raise FerryError(f"quantizer: ferry takes \"int4\", \"int8\" or a dict of its keys, "
                         f"not a {type(quantizer).__name__}", status=1)
    return plain


def _example_shapes(shapes):
    """{input name: [extent, ...]}, each extent an int as given (1.9, True or "18" would have
    been made 1, 1 and [1, 8] silently); libferry checks the names and values."""
    if not hasattr(shapes, "items"):
        raise FerryError(f"example_shapes must be a dict of input name to shape, not "
                         f"{type(shapes).__name__}", status=1)
    out = {}
    for name, shape in shapes.items():
        if isinstance(shape, (str, bytes)) or not hasattr(shape, "__iter__"):
            raise FerryError(f"example_shapes[{name!r}] must be a list of ints, not "
                             f"{type(shape).__name__}", status=1)
        dims = list(shape)
        if not all(isinstance(d, numbers.Integral) and not isinstance(d, bool) for d in dims):
            raise FerryError(f"example_shapes[{name!r}] must be a list of ints, not "
                             f"{dims!r}", status=1)
        out[str(name)] = [int(d) for d in dims]
    return out


class OnnxConfig:
    """The recipe of an ONNX export; its keys are AutoExportConfig.from_dict's (and the CLI's
    --config recipe's). Validated by libferry when made, as its format takes it."""

    _format = "onnx"  # the recipe's export_format; each subclass names its own

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", opset=None,
                 example_shapes=None, ort_fusions=None, quantizer=None, *, opset_version=None,
                 optimize=True, strict=False, prefer_deferred_runtime_asserts_over_guards=False,
                 text_only=False, _format_keys=None):
        """ort_fusions: None (standard ONNX) or "cpu" | "cuda" | "webgpu" | "dml".
        quantizer: None, "int4", "int8" or a dict of the recipe's quantizer keys (bits,
        block_size, symmetric, accuracy_level, quantize_embeddings, quantize_lm_head, method:
        "rtn" | "mse"), or one of the guide's quantizers where it means the same
        (ferry.quantizers: NNCF weight compression; the others are refused by name). transformers' names are taken too: opset_version (= opset), optimize
        (True: ferry's graphs are built optimized; False is refused), strict and
        prefer_deferred_runtime_asserts_over_guards (torch.export's tracing options: ferry does
        not trace, so strict=True is refused, and the other needs nothing done). text_only
        (every format's): a vision-language checkpoint's language model alone, as a text-only
        causal LM (Gemma3ForConditionalGeneration)."""
        if not isinstance(dynamic, bool):  # bool("no") would be True
            raise FerryError(f"dynamic must be True or False, not {dynamic!r}", status=1)
        recipe = {"export_format": self._format, "dynamic": dynamic, "dtype": _dtype_name(dtype)}
        _tracing_options(recipe, strict, prefer_deferred_runtime_asserts_over_guards)
        if optimize is not True:
            recipe["optimize"] = optimize
        if opset_version is not None:
            recipe["opset_version"] = opset_version
        if ort_fusions is not None:
            recipe["ort_fusions"] = ort_fusions
        if is_quantizer(quantizer):
            recipe["quantizer"] = recipe_of(quantizer, self._format)
        elif quantizer is not None:
            recipe["quantizer"] = dict(quantizer) if isinstance(quantizer, dict) else quantizer
        if dynamic_shapes:
            recipe["dynamic_shapes"] = _json_shapes(dynamic_shapes)
        if opset is not None:
            if isinstance(opset, bool) or not isinstance(opset, numbers.Integral):
                raise FerryError(f"opset must be an integer, not {opset!r}", status=1)
            recipe["opset"] = int(opset)
        if example_shapes:
            recipe["example_shapes"] = _example_shapes(example_shapes)
        if text_only is not False:
            recipe["text_only"] = text_only   # libferry refuses what is not a bool
        # a subclass's own keys, so that the one check sees the whole recipe in its format
        # (OpenVINOConfig was checked as ONNX first, with ONNX's advice)
        recipe.update(_format_keys or {})
        self._recipe = recipe
        self._c_config()

    @classmethod
    def _from_dict(cls, recipe):
        config = cls.__new__(cls)
        config._recipe = _plain_recipe(recipe)
        config._c_config()
        return config

    def to_dict(self):
        return dict(self._recipe)

    def _c_config(self):
        """The ferry_export_config that libferry makes of this recipe (or its error)."""
        cfg = _Config()
        err = ctypes.create_string_buffer(1024)
        status = _c().ferry_export_config_from_json(cfg.handle,
                                                    json.dumps(self._recipe).encode(), err, 1024)
        if not status:
            # the options taken together, as the export would
            # (OpenVINOConfig(dtype="fp16", compress_to_fp16=True) was made, and refused later)
            status = _c().ferry_export_config_check(cfg.handle, err, 1024)
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

    _format = "openvino"

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", example_shapes=None,
                 compress_to_fp16=False, stateful=True, quantizer=None, *, strict=False,
                 prefer_deferred_runtime_asserts_over_guards=False, text_only=False):
        keys = {}
        if stateful is not True:
            keys["stateful"] = stateful
        if compress_to_fp16 is not False:
            keys["compress_to_fp16"] = compress_to_fp16
        super().__init__(dynamic=dynamic, dynamic_shapes=dynamic_shapes, dtype=dtype,
                         example_shapes=example_shapes, quantizer=quantizer, strict=strict,
                         prefer_deferred_runtime_asserts_over_guards=(
                             prefer_deferred_runtime_asserts_over_guards), text_only=text_only,
                         _format_keys=keys)


class DynamoConfig(OnnxConfig):
    """The recipe of a torch.export export (the guide's DynamoExporter: one <component>.pt2 per
    component, which torch.export.load reads and .module() runs), written by ferry from the
    checkpoint without tracing. `dynamic` / `dynamic_shapes` make the program's symbols, as
    torch.export.Dim does. `model_output` (ferry's): the program returns transformers'
    CausalLMOutputWithPast, as transformers' own DynamoExporter's do, so
    transformers.exporters.ExportedModel runs the saved export; torch.export.load then needs
    transformers.modeling_outputs imported first (the default, a dict {"logits": ...}, loads in
    torch alone)."""

    _format = "dynamo"

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", example_shapes=None,
                 *, model_output=False, strict=False,
                 prefer_deferred_runtime_asserts_over_guards=False, text_only=False,
                 quantizer=None):
        """quantizer: taken as every config takes it (the guide's), and refused by libferry
        (or by name, for the guide's quantizer classes): the format holds no quantized
        weights yet."""
        if not isinstance(model_output, bool):
            raise FerryError("DynamoConfig: model_output must be True or False, not "
                             f"{type(model_output).__name__}", status=1)
        super().__init__(dynamic=dynamic, dynamic_shapes=dynamic_shapes, dtype=dtype,
                         example_shapes=example_shapes, strict=strict, quantizer=quantizer,
                         prefer_deferred_runtime_asserts_over_guards=(
                             prefer_deferred_runtime_asserts_over_guards), text_only=text_only,
                         _format_keys={"model_output": True} if model_output else None)


class ExecutorchConfig(OnnxConfig):
    """The recipe of an ExecuTorch export (the guide's ExecutorchExporter: one <component>.pte
    per component, which executorch.runtime loads), written by ferry from the checkpoint
    without tracing. `backend`: "xnnpack" (the default, as the guide's: fp32 linears, norms,
    elementwise arithmetic, rotary and attention in the runtime's XNNPACK delegate, the rest
    on its portable kernels) or "portable" (every op on the runtime's own kernels).
    ExecuTorch plans every tensor at its largest size, so a dynamic
    axis without a max of its own is bounded by `max_batch_size` (batch, default 4) or
    `max_seq_len` (the others, default 128). `alloc_graph_input=False` /
    `alloc_graph_output=False` leave the inputs / outputs out of the memory plan (the runtime
    reads the caller's tensors; the caller binds the outputs); `alloc_mutable_buffers=False`
    leaves a generation export's cache to the caller (only the C++ runtime can bind it)."""

    _format = "executorch"

    def __init__(self, dynamic=False, dynamic_shapes=None, dtype="fp32", example_shapes=None, *,
                 backend="xnnpack", quantizer=None, alloc_graph_input=True,
                 alloc_graph_output=True, alloc_mutable_buffers=True, max_seq_len=None,
                 max_batch_size=None, strict=False,
                 prefer_deferred_runtime_asserts_over_guards=False, text_only=False):
        keys = {}
        if backend != "xnnpack":
            keys["backend"] = backend
        for name, value in (("alloc_graph_input", alloc_graph_input),
                            ("alloc_graph_output", alloc_graph_output),
                            ("alloc_mutable_buffers", alloc_mutable_buffers)):
            if value is not True:
                keys[name] = value
        for name, value in (("max_seq_len", max_seq_len), ("max_batch_size", max_batch_size)):
            if value is not None:
                keys[name] = value
        super().__init__(dynamic=dynamic, dynamic_shapes=dynamic_shapes, dtype=dtype,
                         example_shapes=example_shapes, quantizer=quantizer, strict=strict,
                         prefer_deferred_runtime_asserts_over_guards=(
                             prefer_deferred_runtime_asserts_over_guards), text_only=text_only,
                         _format_keys=keys)


class AutoExportConfig:
    @staticmethod
    def from_dict(d):
        """A config from a recipe dict ({"export_format": "onnx", "dynamic": True, ...});
        libferry checks every key and names the one it refuses."""
        if not isinstance(d, dict):
            raise FerryError(f"from_dict takes a dict of recipe keys, not {type(d).__name__}",
                             status=1)
        config_class = {"openvino": OpenVINOConfig, "dynamo": DynamoConfig,
                        "pt2": DynamoConfig, "executorch": ExecutorchConfig}.get(
                            d.get("export_format"), OnnxConfig)
        return config_class._from_dict(d)
