"""The guide's quantizers by their names (transformers.exporters.quantizers), as configs of
ferry's own: weight-only int4/int8 blocks, scaled by round-to-nearest, written by libferry
during the export (ONNX MatMulNBits, OpenVINO compressed weights, XNNPACK's int4).

    OnnxConfig(quantizer=NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int4_sym")))

Only what means the same thing in ferry is taken: NNCF's weight compression in its int4/int8
modes with a group size ferry writes (16 to 256). What ferry cannot honour is refused by name,
never ignored: activation quantization (nncf.quantize, ONNX Runtime's quantize_static and
quantize_dynamic, PT2E), calibration data and the data-aware methods (AWQ, GPTQ, scale
estimation), mixed precision (ratio < 1), per-channel int8 (NNCF's int8 default). NNCF keeps
the embeddings and the last layer at int8 unless all_layers=True; ferry keeps them float (it
writes one precision per export), and says so in a warning. transformers' own quantizer objects
of these classes are read the same way.
"""

import dataclasses
import warnings

from ._lib import FerryError, FerryWarning, _escape, caller_stacklevel

_BLOCK_SIZES = (16, 32, 64, 128, 256)
_MODES = {"int4_sym": (4, True), "int4_asym": (4, False), "int8_sym": (8, True),
          "int8_asym": (8, False)}
# quantizer class -> the export formats it quantizes (ferry's recipe names)
_FORMATS = {"NNCFOpenVINOQuantizer": ("openvino",), "NNCFOnnxQuantizer": ("onnx",),
            "NNCFTorchFXQuantizer": ("dynamo", "pt2", "executorch"),
            "OnnxRuntimeQuantizer": ("onnx",), "PT2EQuantizer": ("dynamo", "pt2", "executorch")}


@dataclasses.dataclass
class NNCFWeightCompressionConfig:
    """nncf.compress_weights' arguments, as transformers' exporters name them."""
    mode: object = None
    ratio: object = None
    group_size: object = None
    ignored_scope: object = None
    all_layers: object = None
    sensitivity_metric: object = None
    subset_size: object = None
    awq: object = None
    scale_estimation: object = None
    gptq: object = None
    lora_correction: object = None
    backup_mode: object = None
    compression_format: object = None
    advanced_parameters: object = None


@dataclasses.dataclass
class NNCFQuantizationConfig:
    """nncf.quantize's arguments (int8 activations and weights): refused by ferry."""
    mode: object = None
    preset: object = None
    target_device: object = None
    subset_size: object = None
    fast_bias_correction: object = None
    model_type: object = None
    ignored_scope: object = None
    advanced_parameters: object = None


@dataclasses.dataclass
class OnnxRuntimeStaticConfig:
    """onnxruntime.quantization.quantize_static's arguments: refused by ferry."""
    quant_format: object = None
    op_types_to_quantize: object = None
    per_channel: object = None
    reduce_range: object = None
    activation_type: object = None
    weight_type: object = None
    nodes_to_quantize: object = None
    nodes_to_exclude: object = None
    calibrate_method: object = None
    calibration_providers: object = None
    extra_options: object = None


@dataclasses.dataclass
class OnnxRuntimeDynamicConfig:
    """onnxruntime.quantization.quantize_dynamic's arguments: refused by ferry."""
    op_types_to_quantize: object = None
    per_channel: object = None
    reduce_range: object = None
    weight_type: object = None
    nodes_to_quantize: object = None
    nodes_to_exclude: object = None
    extra_options: object = None


class _Quantizer:
    def __init__(self, config=None, calibration_dataset=None):
        self.config, self.calibration_dataset = config, calibration_dataset

    def __repr__(self):
        return f"{type(self).__name__}({self.config!r})"


class NNCFOpenVINOQuantizer(_Quantizer):
    """OpenVINO exports: NNCFWeightCompressionConfig in an int4/int8 mode."""


class NNCFOnnxQuantizer(_Quantizer):
    """ONNX exports: NNCFWeightCompressionConfig in an int4/int8 mode (MatMulNBits)."""


class NNCFTorchFXQuantizer(_Quantizer):
    """ExecuTorch exports (the torch FX graph): NNCFWeightCompressionConfig in an int4/int8
    mode; the .pt2 format holds no quantized weights and refuses it."""


class OnnxRuntimeQuantizer(_Quantizer):
    """ONNX Runtime's quantize_static / quantize_dynamic quantize activations: refused."""


class PT2EQuantizer(_Quantizer):
    """torch's PT2E quantization of the FX graph: refused."""


def is_quantizer(value):
    """Whether `value` is one of the guide's quantizer objects (ferry's or transformers')."""
    return type(value).__name__ in _FORMATS and hasattr(value, "config")


def _mode_name(mode):
    """"int4_sym" from "int4_sym", "INT4_SYM" or nncf.CompressWeightsMode.INT4_SYM."""
    value = getattr(mode, "value", mode)
    return str(value).lower() if value is not None else None


def recipe_of(quantizer, export_format):
    """ferry's recipe quantizer dict for the guide's `quantizer` on an `export_format` export,
    or a FerryError naming what ferry cannot honour."""
    kind = type(quantizer).__name__
    formats = _FORMATS[kind]
    if export_format not in formats:
        raise FerryError(f"{kind} quantizes {' and '.join(dict.fromkeys(formats))} exports, "
                         f"not {_escape(export_format)}", status=1)
    config = quantizer.config
    if kind in ("OnnxRuntimeQuantizer", "PT2EQuantizer") or \
            type(config).__name__ in ("NNCFQuantizationConfig", "OnnxRuntimeStaticConfig",
                                      "OnnxRuntimeDynamicConfig") or config is None:
        what = {"OnnxRuntimeQuantizer": "ONNX Runtime's quantize_static/quantize_dynamic",
                "PT2EQuantizer": "PT2E"}.get(kind, "nncf.quantize")
        weight_only = {"onnx": "NNCFOnnxQuantizer", "openvino": "NNCFOpenVINOQuantizer"}.get(
            export_format, "NNCFTorchFXQuantizer")
        raise FerryError(f"{kind}: {what} quantizes activations, which ferry does not: it "
                         "writes weight-only int4/int8 blocks; use quantizer=\"int4\" or "
                         f"{weight_only}(NNCFWeightCompressionConfig(mode=\"int4_sym\"))",
                         status=4)
    if getattr(quantizer, "calibration_dataset", None) is not None:
        raise FerryError(f"{kind}: calibration_dataset: ferry's weight compression is "
                         "data-free (round-to-nearest per block); drop it", status=4)
    mode = _mode_name(getattr(config, "mode", None))
    if mode is None:
        mode = "int8_asym"  # NNCF's default mode
    if mode not in _MODES:
        raise FerryError(f"{kind}: mode {_escape(repr(mode))} is not one ferry writes "
                         f"({', '.join(_MODES)})", status=4)
    bits, symmetric = _MODES[mode]
    group = getattr(config, "group_size", None)
    if group is None:
        group = 128 if bits == 4 else -1  # NNCF's defaults
    if group not in _BLOCK_SIZES:
        per_channel = " (per channel, NNCF's default for int8 modes)" if group == -1 else ""
        raise FerryError(f"{kind}: group_size {_escape(repr(group))}{per_channel} is not one "
                         f"ferry writes: give group_size {', '.join(map(str, _BLOCK_SIZES))}",
                         status=4)
    unsupported = {"ratio": lambda v: v not in (None, 1, 1.0),
                   "ignored_scope": lambda v: v is not None,
                   "sensitivity_metric": lambda v: v is not None,
                   "subset_size": lambda v: v is not None,
                   "awq": lambda v: bool(v), "scale_estimation": lambda v: bool(v),
                   "gptq": lambda v: bool(v), "lora_correction": lambda v: bool(v),
                   "backup_mode": lambda v: v is not None and _mode_name(v) != "none",
                   "compression_format": lambda v: v is not None,
                   "advanced_parameters": lambda v: v is not None}
    for field, refused in unsupported.items():
        value = getattr(config, field, None)
        if refused(value):
            raise FerryError(f"{kind}: {field}={_escape(repr(value))} is not one ferry honours: "
                             "it writes every quantized weight at one precision, "
                             "round-to-nearest per block, data-free", status=4)
    recipe = {"bits": bits, "block_size": group, "symmetric": symmetric}
    if getattr(config, "all_layers", None):
        recipe.update(quantize_embeddings=True, quantize_lm_head=True)
    else:
        recipe["quantize_lm_head"] = False
        warnings.warn(f"{kind}: the embeddings and lm_head stay float (NNCF keeps them int8 "
                      "unless all_layers=True; ferry writes one precision per export): pass "
                      "all_layers=True to quantize them too", FerryWarning,
                      stacklevel=caller_stacklevel())
    return recipe
