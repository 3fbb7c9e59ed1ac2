"""The runtimes an export runs in, behind one small interface (get_inputs, get_outputs, run):
an onnxruntime InferenceSession, an OpenVINO compiled model, or a torch.export program's
module. Also where `device` is read: an onnxruntime provider ("cpu", "cuda", "cuda:1"), an
OpenVINO device ("cpu", "gpu", "xpu", "npu", "auto"; AUTO when none is given, as the guide
says) or a torch device ("cpu", "cuda", "cuda:1"). Nothing here exports anything.
"""

import importlib
import importlib.util
import io
import re

from ._lib import FerryError, _escape
from .pt2_safety import UnsafeArchive, read_checked_archive, treespec_problem


# export.json's format names of a torch program: ferry's, and transformers' DynamoExporter's
TORCH_FORMATS = ("pt2", "dynamo")


def is_transformers_manifest(manifest):
    """export.json in transformers' schema: its export_format, no ferry format."""
    return "export_format" in manifest and "format" not in manifest


def open_session(path, export_format, precision, device=None, metadata=None):
    """A session for the graph file at `path`, on `device` (`metadata`: its component's, from
    export.json)."""
    if export_format == "openvino":
        return OpenVINOSession(path, precision, device)
    if export_format in TORCH_FORMATS:
        return TorchSession(path, device, metadata)
    return onnxruntime_session(path, device, precision=precision)


def check_device(export_format, device):
    """Refuses, by name, a device the export's runtime does not have on this machine."""
    if export_format == "openvino":
        openvino_device(device)
    elif export_format in TORCH_FORMATS:
        torch_device(device)
    else:
        _onnxruntime_provider(device)


def onnxruntime_session(path, device=None, options=None, precision=None):
    """An onnxruntime session for the graph at `path` (`precision`: its export's, which says
    why the CPU provider cannot run a bf16 one: found by review, onnxruntime's own words named
    a kernel, not the export's precision)."""
    import onnxruntime

    try:
        return onnxruntime.InferenceSession(str(path), sess_options=options,
                                            providers=[_onnxruntime_provider(device)])
    except Exception as e:
        if precision != "bf16" or "NOT_IMPLEMENTED" not in str(e) or \
                device not in (None, "cpu"):
            raise
        raise FerryError(f"onnxruntime's CPU provider has no bfloat16 kernels for this bf16 "
                         f"export ({_escape(str(e).strip().splitlines()[0][:200])}): run it "
                         "on cuda, or export in fp32 or fp16 for the CPU", status=4) from None


def _onnxruntime_provider(device):
    """The provider entry InferenceSession takes for `device`."""
    import onnxruntime

    kind, index = _split_device("cpu" if device is None else device)
    providers = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}
    if kind not in providers:
        raise FerryError(f"device {_escape(device)!r} is not one onnxruntime runs on here: "
                         "\"cpu\" or \"cuda\" (\"cuda:N\" for the N-th GPU)", status=1)
    provider = providers[kind]
    available = onnxruntime.get_available_providers()
    if provider not in available:
        raise FerryError(f"device {_escape(device)!r}: this onnxruntime has no {provider} "
                         f"(it has {', '.join(available)}); install onnxruntime-gpu for cuda",
                         status=1)
    return (provider, {"device_id": index}) if kind == "cuda" else provider


def _split_device(device):
    text = str(device).strip().lower()
    kind, _, index = text.partition(":")
    if not kind:
        raise FerryError("device is empty: name one (\"cpu\", \"cuda\", ...)", status=1)
    if index and not index.isdigit():
        raise FerryError(f"device {_escape(device)!r}: the part after ':' must be a GPU number",
                         status=1)
    return kind, int(index or 0)


_OPENVINO_DEVICES = {"cpu": "CPU", "gpu": "GPU", "xpu": "GPU", "npu": "NPU", "auto": "AUTO"}


def openvino_device(device):
    """OpenVINO's name for `device` ("xpu" is an Intel GPU, OpenVINO's GPU), checked against
    the devices this machine has (AUTO picks among them)."""
    import openvino

    kind, index = _split_device("auto" if device is None else device)
    if kind not in _OPENVINO_DEVICES:
        raise FerryError(f"device {_escape(device)!r} is not an OpenVINO device: one of "
                         f"{', '.join(sorted(_OPENVINO_DEVICES))}", status=1)
    name = _OPENVINO_DEVICES[kind] + (f".{index}" if ":" in str(device) else "")
    available = openvino.Core().available_devices
    if name != "AUTO" and name not in available and f"{name}.0" not in available:
        raise FerryError(f"device {_escape(device)!r}: OpenVINO has no {name} here (it has "
                         f"{', '.join(available)})", status=1)
    return name


class _Port:
    """An input or output as onnxruntime's sessions list them: its .name."""

    def __init__(self, name):
        self.name = name


def openvino_compile_config(precision):
    """The compile_model settings an export of `precision` runs at: an fp32 or fp16 export at
    f32 inference precision, the hint its rt_info records and OpenVINO does not apply from
    there (the CPU plugin would otherwise compute in bf16 where the processor has it, coarser
    than either; f16 on a processor without native fp16 ran as coarsely)."""
    return {"INFERENCE_PRECISION_HINT": "f32"} if precision in ("fp32", "fp16") else {}


class OpenVINOSession:
    """An OpenVINO compiled model behind onnxruntime's session calls, at the precision
    openvino_compile_config gives."""

    def __init__(self, path, precision, device=None):
        import openvino

        core = openvino.Core()
        model = core.read_model(str(path))
        self._compiled = core.compile_model(model, openvino_device(device),
                                            openvino_compile_config(precision))
        self._bf16 = {o.get_any_name() for o in self._compiled.outputs
                      if o.get_element_type() == openvino.Type.bf16}

    def get_inputs(self):
        return [_Port(i.get_any_name()) for i in self._compiled.inputs]

    def get_outputs(self):
        return [_Port(o.get_any_name()) for o in self._compiled.outputs]

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


def torch_device(device):
    """torch's device for `device` ("cpu", "cuda", "cuda:N"), checked against this machine."""
    import torch

    kind, index = _split_device("cpu" if device is None else device)
    if kind not in ("cpu", "cuda"):
        raise FerryError(f"device {_escape(device)!r} is not one ferry runs a torch program on: "
                         "\"cpu\" or \"cuda\" (\"cuda:N\" for the N-th GPU)", status=1)
    if kind == "cuda" and index >= torch.cuda.device_count():
        raise FerryError(f"device {_escape(device)!r}: this torch sees "
                         f"{torch.cuda.device_count()} CUDA device(s)", status=1)
    return torch.device(kind, index) if kind == "cuda" else torch.device("cpu")


MODEL_OUTPUTS = "transformers.modeling_outputs"


def _needs(module, why):
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise FerryError(f"this pt2 program returns a class of {module} ({why}): loading it "
                         f"needs transformers ({e})", status=4) from None


def register_output_types(metadata):
    """A program that returns a transformers class (CausalLMOutputWithPast: ferry's with
    --model-output, transformers' DynamoExporter's) can be read back only once that class is a
    pytree node. A ModelOutput becomes one when its module is imported; a cache (in
    transformers' own programs) when transformers' exporter registers it. `metadata` is the
    component's, from export.json: its out_spec names the classes, and ferry's export_config
    says model_output (a generation component records no out_spec)."""
    metadata = metadata if isinstance(metadata, dict) else {}
    config = metadata.get("export_config")
    if isinstance(config, dict) and config.get("model_output") is True:
        _needs(MODEL_OUTPUTS, "exported with --model-output")
    spec = metadata.get("out_spec")
    if not isinstance(spec, str) or '"type": "transformers' not in spec:
        return
    # transformers imports and registers what the spec names, and rebuilds outputs by the
    # class paths in its contexts: only its model outputs and caches (found by review)
    problem = treespec_problem(spec)
    if problem:
        raise UnsafeArchive(f"export.json: the out_spec of this pt2 program has {problem}: "
                            "transformers would import or call what it names", status=3)
    try:
        from transformers.exporters.metadata import register_treespec_types
    except ImportError:  # a transformers without exporters: its ModelOutputs still register
        for module in sorted(set(re.findall(r'"type": "(transformers(?:\.\w+)*)\.\w+"', spec))):
            _needs(module, "named by export.json's out_spec")
        return
    try:
        register_treespec_types(spec)
    except Exception as e:  # a class transformers does not have: an edited or newer export
        raise FerryError(f"export.json: the out_spec of this pt2 program names a class this "
                         f"transformers cannot provide ({type(e).__name__}: {e})",
                         status=4) from None


def load_program(path, device, metadata=None):
    """torch.export.load of the .pt2 at `path` on `device` (a torch.device): the program's
    parameters, buffers and the devices its ops name (an arange on "cpu") moved by torch's own
    pass; .to() on the module would leave those ops on the CPU. `metadata` (its component's,
    from export.json) names the transformers classes the program returns, if any.

    The file is read once: torch is given the very bytes that were checked, never the path,
    which another process could point at other bytes between the check and the load."""
    import sys

    import torch

    data = read_checked_archive(path)
    register_output_types(metadata)
    try:
        program = torch.export.load(io.BytesIO(data))
    except Exception:
        # export.json did not say that the program returns CausalLMOutputWithPast (edited, or
        # another tool's): torch reads such a program once that class is imported
        if MODEL_OUTPUTS in sys.modules or importlib.util.find_spec("transformers") is None:
            raise
        importlib.import_module(MODEL_OUTPUTS)
        program = torch.export.load(io.BytesIO(data))
    del data
    if device.type != "cpu":
        from torch.export.passes import move_to_device_pass

        program = move_to_device_pass(program, device)
    return program


class TorchSession:
    """A .pt2 program run as torch.export.load(path).module(), called with keywords as the
    model was; numpy in and out (bf16 outputs as float32, which numpy can hold)."""

    def __init__(self, path, device=None, metadata=None):
        import torch

        self._device = torch_device(device)
        program = load_program(path, self._device, metadata)
        self._inputs = [s.arg.name for s in program.graph_signature.input_specs
                        if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
        # a dict of its outputs, or a ModelOutput of them; its tensors are what a call returns
        # (transformers' own programs also return their cache, an object)
        spec = program.call_spec.out_spec
        self._outputs = ([key for key, child in zip(spec.context, spec.children())
                          if child.is_leaf()] if spec is not None and spec.context
                         else ["logits"])
        self._module = program.module()

    def get_inputs(self):
        return [_Port(name) for name in self._inputs]

    def get_outputs(self):
        return [_Port(name) for name in self._outputs]

    def run(self, names, feeds):
        import torch

        with torch.no_grad():
            result = self._module(**{k: torch.as_tensor(v).to(self._device)
                                     for k, v in feeds.items()})
        out = []
        for name in names:
            value = result[name].detach().to("cpu")
            out.append((value.float() if value.dtype == torch.bfloat16 else value).numpy())
        return out
