"""ferry — a thin ctypes binding over include/ferry.h, shaped like transformers.exporters.

    from ferry import OnnxExporter, OnnxConfig, ExportedModel
    exported = OnnxExporter().export("path/to/checkpoint", config=OnnxConfig(dynamic=True))
    exported.save_pretrained("model-onnx")
    logits = ExportedModel.from_pretrained("model-onnx")(**inputs).logits

All export work happens in libferry; this package only marshals arguments (_lib, configs,
exporters) and runs the saved graphs in their runtime (exported).
"""

from ._lib import FerryError, FerryWarning, supported_architectures, version
from .configs import AutoExportConfig, DynamoConfig, ExecutorchConfig, OnnxConfig, OpenVINOConfig
from .exported import ExportedComponent, ExportedModel, ExportOutput
from .exporters import (AutoHfExporter, DynamoExporter, ExecutorchExporter, OnnxExporter,
                        OpenVINOExporter, decompose_for_generation)
from .quantizers import (NNCFOnnxQuantizer, NNCFOpenVINOQuantizer, NNCFQuantizationConfig,
                         NNCFTorchFXQuantizer, NNCFWeightCompressionConfig,
                         OnnxRuntimeDynamicConfig, OnnxRuntimeQuantizer, OnnxRuntimeStaticConfig,
                         PT2EQuantizer)

__all__ = ["FerryError", "FerryWarning", "OnnxConfig", "OpenVINOConfig", "DynamoConfig",
           "ExecutorchConfig", "AutoExportConfig", "AutoHfExporter", "OnnxExporter",
           "OpenVINOExporter", "DynamoExporter", "ExecutorchExporter", "ExportedModel",
           "ExportedComponent",
           "ExportOutput",
           "version", "supported_architectures", "decompose_for_generation", "validate",
           "ValidationReport", "NNCFOnnxQuantizer", "NNCFOpenVINOQuantizer",
           "NNCFQuantizationConfig", "NNCFTorchFXQuantizer", "NNCFWeightCompressionConfig",
           "OnnxRuntimeDynamicConfig", "OnnxRuntimeQuantizer", "OnnxRuntimeStaticConfig",
           "PT2EQuantizer"]


def __getattr__(name):
    """validate and ValidationReport, imported on first use: `python -m ferry.validation` would
    otherwise find its module already imported by this package, and warn."""
    if name in ("validate", "ValidationReport"):
        from . import validation

        return getattr(validation, name)
    raise AttributeError(f"module 'ferry' has no attribute {name!r}")
