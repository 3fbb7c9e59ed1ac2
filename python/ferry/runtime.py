"""The runtimes an export runs in, behind one small interface (get_inputs, get_outputs, run):
an onnxruntime InferenceSession, an OpenVINO compiled model, a torch.export program's
module, or an ExecuTorch program's method. Also where `device` is read: an onnxruntime provider ("cpu", "cuda", "cuda:1"), an
OpenVINO device ("cpu", "gpu", "xpu", "npu", "auto"; AUTO when none is given, as the guide
says) or a torch device ("cpu", "cuda", "cuda:1"). Nothing here exports anything.
"""

import importlib
import importlib.util
import io
import re
from contextlib import contextmanager

from ._lib import FerryError, _escape
from .pt2_safety import UnsafeArchive, read_checked_archive, treespec_problem


# export.json's format names of a torch program: ferry's, and transformers' DynamoExporter's
TORCH_FORMATS = ("pt2", "dynamo")
EXECUTORCH_FORMAT = "executorch"



def is_encoder_output(output_class):
    """Whether export.json's output_class (absent for a causal LM returning
    CausalLMOutputWithPast) is an encoder's: any class but a causal LM's (GPT-2's
    CausalLMOutputWithCrossAttentions and a mixture of experts' MoeCausalLMOutputWithPast are
    causal LMs')."""
    return bool(output_class) and "CausalLMOutput" not in str(output_class).rsplit(".", 1)[-1]

def is_transformers_manifest(manifest):
    """export.json in transformers' schema: its export_format, no ferry format."""
    return "export_format" in manifest and "format" not in manifest


def open_session(path, export_format, precision, device=None, metadata=None):
    """A session for the graph file at `path`, on `device` (`metadata`: its component's, from
    export.json)."""
    if export_format == "openvino":
        return OpenVINOSession(path, precision, device, metadata)
    if export_format in TORCH_FORMATS:
        return TorchSession(path, device, metadata)
    if export_format == EXECUTORCH_FORMAT:
        return ExecutorchSession(path, device, metadata)
    return onnxruntime_session(path, device, precision=precision, metadata=metadata)


def check_device(export_format, device):
    """Refuses, by name, a device the export's runtime does not have on this machine."""
    if export_format == "openvino":
        openvino_device(device)
    elif export_format in TORCH_FORMATS:
        torch_device(device)
    elif export_format == EXECUTORCH_FORMAT:
        executorch_device(device)
    else:
        _onnxruntime_provider(device)


def onnxruntime_session(path, device=None, options=None, precision=None, metadata=None):
    """An onnxruntime session for the graph at `path` (`precision`: its export's, which says
    why the CPU provider cannot run a bf16 one: onnxruntime's own words named
    a kernel, not the export's precision), its inputs and outputs checked against `metadata`
    (its component's, from export.json: check_program_io)."""
    import onnxruntime

    provider = _onnxruntime_provider(device)
    try:
        session = onnxruntime.InferenceSession(str(path), sess_options=options,
                                               providers=[provider])
    except (FerryError, ImportError, MemoryError):
        raise
    except Exception as e:
        if precision != "bf16" or "NOT_IMPLEMENTED" not in str(e) or \
                device not in (None, "cpu"):
            raise program_error(path, "onnxruntime", e) from None
        raise FerryError(f"onnxruntime's CPU provider has no bfloat16 kernels for this bf16 "
                         f"export ({_escape(str(e).strip().splitlines()[0][:200])}): run it "
                         "on cuda, or export in fp32 or fp16 for the CPU", status=4) from None
    check_program_io(_escape(str(path)), metadata, *onnxruntime_ports(session))
    return session


# --- the program against export.json ----------------------------------------------------------

# OpenVINO's messages open with where they were raised, which names no cause.
_WHERE = re.compile(r"(Exception from \S+:\d+:|Check '.*' failed at \S+:\d+:)")


def runtime_reason(error, limit=400):
    """A runtime's message on one line, without OpenVINO's source locations (its first line is
    "Exception from src/...:84:", which names no cause)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    kept = [line for line in lines if not _WHERE.fullmatch(line)] or lines
    text = "; ".join(kept) or type(error).__name__
    return text if len(text) <= limit else text[:limit] + "..."


# onnxruntime's exceptions that say the runtime lacks something (a kernel, a provider), not
# that the file is broken: "cannot run here" (status 4) rather than a malformed file (3)
_ORT_LACKS = ("NotImplemented", "EPFail")


def program_error(path, runtime, error, status=3):
    """The FerryError for `runtime` ("onnxruntime", "openvino", "torch") failing to read or
    compile the program at `path` with `error`: the file named, the runtime's words cut to one
    short line (onnxruntime's InvalidProtobuf named neither the file nor the component);
    status 4 (cannot run here) where the runtime says it lacks something, else `status`."""
    while error.__cause__ is not None:  # torch's "check the warnings above" wraps the reason
        error = error.__cause__
    kind = type(error).__name__
    lacks = kind in _ORT_LACKS or (runtime == "openvino" and "unsupported opset" in str(error))
    return FerryError(f"{runtime} cannot load {_escape(str(path))}: {_escape(kind)}: "
                      f"{_escape(runtime_reason(error, 300))}", status=4 if lacks else status)


@contextmanager
def program_errors(path, runtime, status=3):
    """What `runtime` raises inside the block as program_error's one FerryError. ferry's own
    refusals (FerryError, UnsafeArchive among them) pass unchanged; so do a missing package and
    memory running out, which are not the file's doing."""
    try:
        yield
    except (FerryError, ImportError, MemoryError):
        raise
    except Exception as e:
        raise program_error(path, runtime, e, status) from None


# element types as export.json names them (torch's names)
OPENVINO_TYPES = {"i64": "int64", "i32": "int32", "f32": "float32", "f16": "float16",
                  "bf16": "bfloat16", "f64": "float64", "boolean": "bool", "u8": "uint8",
                  "i8": "int8"}
_ONNXRUNTIME_TYPES = {"float": "float32", "double": "float64"}


def onnxruntime_ports(session):
    """(inputs, outputs) of an onnxruntime session as check_program_io takes them: (name,
    dtype, [size or None per axis])."""
    def port(p):
        kind = str(p.type)
        kind = kind[7:-1] if kind.startswith("tensor(") and kind.endswith(")") else None
        shape = p.shape if isinstance(p.shape, list) else None
        dims = None if shape is None else [d if isinstance(d, int) else None for d in shape]
        return p.name, _ONNXRUNTIME_TYPES.get(kind, kind), dims
    return [port(p) for p in session.get_inputs()], [port(p) for p in session.get_outputs()]


def openvino_ports(model):
    """(inputs, outputs, state variable ids) of an openvino.Model, as check_program_io takes
    them."""
    def port(p):
        kind = p.get_element_type().get_type_name()
        shape = p.get_partial_shape()
        dims = None if shape.rank.is_dynamic else [d.get_length() if d.is_static else None
                                                   for d in shape]
        return p.get_any_name(), None if kind == "dynamic" else OPENVINO_TYPES.get(kind, kind), \
            dims
    return ([port(p) for p in model.inputs], [port(p) for p in model.outputs],
            [v.get_info().variable_id for v in model.get_variables()])


def torch_ports(program):
    """(inputs, outputs) of a torch.export.ExportedProgram as check_program_io takes them: its
    user inputs by name, and the leaves its out_spec names (a dict or ModelOutput); outputs
    None where the out_spec names none."""
    import torch

    def described(name, value):
        if not isinstance(value, torch.Tensor):
            return name, None, None
        return (name, str(value.dtype).removeprefix("torch."),
                [d if isinstance(d, int) else None for d in value.shape])

    kinds = torch.export.graph_signature
    placeholders = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    inputs = [described(s.arg.name, placeholders[s.arg.name].meta.get("val")
                        if s.arg.name in placeholders else None)
              for s in program.graph_signature.input_specs
              if s.kind == kinds.InputKind.USER_INPUT]
    spec = program.call_spec.out_spec
    if spec is None or not spec.context or not isinstance(spec.context, list):
        return inputs, None
    leaves = [key for key, child in zip(spec.context, spec.children()) if child.is_leaf()]
    out_node = next((n for n in program.graph.nodes if n.op == "output"), None)
    values = [a for a, s in zip(out_node.args[0] if out_node is not None else (),
                                program.graph_signature.output_specs)
              if s.kind == kinds.OutputKind.USER_OUTPUT]
    if len(values) != len(spec.context):
        return inputs, [(str(key), None, None) for key in leaves]
    by_key = dict(zip(spec.context, values))
    return inputs, [described(str(key), getattr(by_key[key], "meta", {}).get("val"))
                    for key in leaves]


def _ports_text(ports):
    return ", ".join(f"{_escape(n)} {_escape(d)}" if d else _escape(n) for n, d in ports) \
        or "none"


def _dims_text(dims):
    return "[" + ", ".join("?" if d is None else _escape(d) for d in dims) + "]"


def check_program_io(where, metadata, inputs, outputs, state=None):
    """The one comparison of a program's inputs and outputs with those export.json lists for
    its component (`metadata`), made wherever a program is loaded to run (the sessions here,
    the runners, validation): names, and element types and sizes where the program states them
    (inputs/outputs: [(name, dtype or None, [size or None per axis] or None)]; outputs None
    where the program does not name them); `state`, an OpenVINO model's variable ids, against
    the cache export.json lists for a stateful component. A program edited since the export
    (an IR with its Parameter or Result layers removed, an input renamed) would otherwise load
    and run: a call returned an empty output without an error, or the runtime refused a feed
    in its own words. Compared with what export.json says, never a fixed list (exports take
    different inputs); what it does not list (transformers' own exports list no inputs and
    outputs) is not compared. Raises one FerryError naming `where` (the file) and the first
    difference."""
    metadata = metadata if isinstance(metadata, dict) else {}
    for kind, program in (("inputs", inputs), ("outputs", outputs)):
        values = metadata.get(kind)
        if program is None or not isinstance(values, list):
            continue
        values = [v for v in values if isinstance(v, dict)]
        listed = [(str(v.get("name")), str(v.get("dtype"))) for v in values]
        have = {p[0]: p for p in program}
        first = next((f"the program has no {kind[:-1]} {_escape(name)}" for name, _ in listed
                      if name not in have), None) or next(
            (f"export.json lists no {kind[:-1]} {_escape(p[0])}" for p in program
             if p[0] not in dict(listed)), None) or next(
            (f"{kind[:-1]} {_escape(name)} is {_escape(have[name][1])} in the program"
             for name, dtype in listed if have[name][1] and have[name][1] != dtype), None)
        if first:
            raise FerryError(f"{where}: the program's {kind} are "
                             f"{_ports_text([p[:2] for p in program])}, where export.json "
                             f"lists {_ports_text(listed)}: one of them was edited since the "
                             f"export ({first})", status=3)
        # a size export.json fixes must be the program's: else a static axis edited in the
        # program fails in the runtime's words (onnxruntime's ShapeInferenceError)
        for v in values:
            shape, got = v.get("shape"), have[str(v.get("name"))][2]
            if isinstance(shape, list) and got is not None and (len(shape) != len(got) or any(
                    isinstance(d, int) and isinstance(g, int) and d != g
                    for d, g in zip(shape, got))):
                raise FerryError(f"{where}: the program's {kind[:-1]} "
                                 f"{_escape(v.get('name'))} is {_dims_text(got)}, where "
                                 f"export.json says {_dims_text(shape)}: one of them was "
                                 "edited since the export", status=3)
    cache = metadata.get("cache")
    if state is not None and metadata.get("stateful") is True and isinstance(cache, dict) and \
            isinstance(cache.get("pairs"), list):
        # a stateful model's cache is its variables, one per pair's input
        listed = sorted(str(p.get("input")) for p in cache["pairs"]
                        if isinstance(p, dict) and p.get("input"))
        if sorted(state) != listed:
            missing = sorted(set(listed) - set(state)) or sorted(set(state) - set(listed))
            raise FerryError(f"{where}: the program's state variables are "
                             f"{', '.join(map(_escape, sorted(state))) or 'none'}, where "
                             f"export.json's cache lists "
                             f"{', '.join(map(_escape, listed)) or 'none'}: one of them was "
                             f"edited since the export (first difference: "
                             f"{_escape(missing[0]) if missing else 'the count'})", status=3)


def openvino_model(path, metadata=None, core=None):
    """read_model of the IR at `path` (by `core`, a new openvino.Core by default), its inputs,
    outputs and variables checked against `metadata` (check_program_io); runtime errors as one
    FerryError."""
    import openvino

    with program_errors(path, "openvino"):
        model = (core or openvino.Core()).read_model(str(path))
    check_program_io(_escape(str(path)), metadata, *openvino_ports(model))
    return model


def openvino_compiled(path, precision, device=None, metadata=None):
    """The IR at `path` read (openvino_model), and compiled for `device` at the precision
    openvino_compile_config gives."""
    import openvino

    core = openvino.Core()
    model = openvino_model(path, metadata, core)
    name = openvino_device(device)
    config = openvino_compile_config(precision)
    if isinstance(metadata, dict) and "precision" in metadata:  # ferry's: its rt_info says too
        key = ["runtime_options", "INFERENCE_PRECISION_HINT"]
        hint = model.get_rt_info(key).astype(str) if model.has_rt_info(key) else None
        if hint != config.get("INFERENCE_PRECISION_HINT"):
            raise FerryError(f"{_escape(str(path))}: export.json's precision "
                             f"{_escape(str(precision))} is not the program's (its rt_info "
                             f"asks {_escape(hint) if hint else 'no inference precision'}): "
                             "export.json was edited", status=3)
    # a model that reads but does not compile here: a device or op this OpenVINO lacks
    with program_errors(path, "openvino", status=4):
        return core.compile_model(model, name, config)


def checked_program(path, device, metadata=None):
    """load_program of the .pt2 at `path` on `device` (a torch.device), torch's errors as one
    FerryError naming the file, and its inputs and outputs checked against `metadata`
    (check_program_io)."""
    with program_errors(path, "torch"):
        program = load_program(path, device, metadata)
    with program_errors(path, "torch"):
        ports = torch_ports(program)
    check_program_io(_escape(str(path)), metadata, *ports)
    return program


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


def _port_name(port, declared):
    """The name of an OpenVINO port: the one among its tensor's names that export.json
    declares, else any."""
    hit = sorted(set(port.get_names()) & declared)
    return hit[0] if hit else port.get_any_name()


class OpenVINOSession:
    """An OpenVINO compiled model behind onnxruntime's session calls, at the precision
    openvino_compile_config gives."""

    def __init__(self, path, precision, device=None, metadata=None):
        import openvino

        self._compiled = openvino_compiled(path, precision, device, metadata)
        # A port's tensor may carry several names once the plugin fuses the nodes around it
        # (an encoder's last LayerNorm: its Div's name too), and get_any_name may pick any of
        # them: the one export.json declares is the port's name.
        declared = {io.get("name") for key in ("inputs", "outputs")
                    for io in (metadata or {}).get(key, []) if isinstance(io, dict)}
        self._inputs = [_port_name(i, declared) for i in self._compiled.inputs]
        self._outputs = [_port_name(o, declared) for o in self._compiled.outputs]
        self._bf16 = {name for name, o in zip(self._outputs, self._compiled.outputs)
                      if o.get_element_type() == openvino.Type.bf16}

    def get_inputs(self):
        return [_Port(name) for name in self._inputs]

    def get_outputs(self):
        return [_Port(name) for name in self._outputs]

    def infer_request(self):
        """A request of its own (a stateful model's variables live in one)."""
        return self._compiled.create_infer_request()

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
    # class paths in its contexts: only its model outputs and caches
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
        program = checked_program(path, self._device, metadata)
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


def executorch_device(device):
    """ExecuTorch's Python runtime runs its programs on the CPU."""
    if device not in (None, "cpu"):
        raise FerryError(f"device {_escape(str(device))}: an ExecuTorch program runs on the "
                         "CPU here (executorch.runtime); pass device=None or \"cpu\"", status=4)
    return "cpu"


# ExecuTorch's element types (TensorInfo.dtype(), scalar_type.fbs's numbers), as export.json
# names them
_EXECUTORCH_TYPES = {0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16",
                     6: "float32", 7: "float64", 11: "bool", 15: "bfloat16"}


def executorch_ports(method, metadata):
    """(inputs, outputs) of an ExecuTorch method as check_program_io takes them. A .pte names
    neither: they are export.json's names in order, with the program's own count and element
    types (its sizes are bounds, not the export's axes)."""
    meta = method.metadata

    def ports(kind, count, info):
        listed = [v for v in (metadata or {}).get(kind) or [] if isinstance(v, dict)]
        names = [str(v.get("name")) for v in listed]
        out = []
        for k in range(count):
            dtype = int(info(k).dtype())
            out.append((names[k] if k < len(names) else f"{kind[:-1]} {k}",
                        _EXECUTORCH_TYPES.get(dtype, f"scalar type {dtype}"), None))
        return out

    return (ports("inputs", meta.num_inputs(), meta.input_tensor_meta),
            ports("outputs", meta.num_outputs(), meta.output_tensor_meta))


def executorch_method(path, metadata):
    """(method, input names, output names) of the .pte at `path` (export.json's component
    `metadata`), its inputs and outputs checked against what export.json lists: its inputs,
    and method_outputs (a generation component's cache tensors, logits, the cache tensors
    again; a plain one's outputs), typed as its inputs and outputs are."""
    try:
        from executorch.runtime import Runtime
    except ImportError as e:
        raise FerryError("running an ExecuTorch export needs the executorch package "
                         f"(pip install executorch==1.5.1): {_escape(str(e))}", status=4)
    metadata = metadata if isinstance(metadata, dict) else {}
    operators = metadata.get("operators")
    if isinstance(operators, list) and any(
            str(op).startswith("quantized_decomposed::") for op in operators):
        # the quantized kernels (embedding_4bit) register with the runtime on import
        import executorch.kernels.quantized  # noqa: F401
    with program_errors(path, "executorch"):
        program = Runtime.get().load_program(str(path))
        method = program.load_method(str(metadata.get("method") or "forward"))
    inputs = [v for v in metadata.get("inputs") or [] if isinstance(v, dict)]
    declared = {str(v.get("name")): v for v in
                inputs + [v for v in metadata.get("outputs") or [] if isinstance(v, dict)]}
    names = metadata.get("method_outputs")
    names = [str(n) for n in names] if isinstance(names, list) else list(
        str(v.get("name")) for v in metadata.get("outputs") or [] if isinstance(v, dict))
    outputs = [declared.get(n, {"name": n}) for n in names]
    listed = {"inputs": inputs, "outputs": outputs}
    ins, outs = executorch_ports(method, listed)
    for kind, ports in (("inputs", ins), ("outputs", outs)):
        if len(ports) != len(listed[kind]):
            raise FerryError(f"{_escape(str(path))}: the program has {len(ports)} {kind}, "
                             f"where export.json lists {len(listed[kind])}: one of them was "
                             "edited since the export", status=3)
    check_program_io(_escape(str(path)), listed, ins, outs)
    return method, [p[0] for p in ins], [p[0] for p in outs]


class ExecutorchSession:
    """A .pte program run by the ExecuTorch runtime (executorch.runtime): its method "forward"
    called with the inputs in export.json's order, numpy in and out (bf16 outputs as float32,
    which numpy can hold). Each call copies the inputs into the program's planned memory (or
    hands them over, with alloc_graph_input false) and returns its outputs."""

    def __init__(self, path, device=None, metadata=None):
        executorch_device(device)
        self._method, self._inputs, self._outputs = executorch_method(path, metadata)

    def get_inputs(self):
        return [_Port(name) for name in self._inputs]

    def get_outputs(self):
        return [_Port(name) for name in self._outputs]

    def run(self, names, feeds):
        import numpy as np
        import torch

        args = [torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in self._inputs]
        result = self._method.execute(args)
        by_name = dict(zip(self._outputs, result))
        out = []
        for name in names:
            value = by_name[name]
            out.append((value.float() if value.dtype == torch.bfloat16 else value).numpy())
        return out
