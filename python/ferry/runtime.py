"""The runtimes an export runs in, behind one small interface (get_inputs, get_outputs, run):
an onnxruntime InferenceSession, an OpenVINO compiled model, or a torch.export program's
module. Also where `device` is read: an onnxruntime provider ("cpu", "cuda", "cuda:1"), an
OpenVINO device ("cpu", "gpu", "xpu", "npu", "auto"; AUTO when none is given, as the guide
says) or a torch device ("cpu", "cuda", "cuda:1"). Nothing here exports anything.
"""

import importlib
import importlib.util
import re

from ._lib import FerryError, _escape


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
    return onnxruntime_session(path, device)


def check_device(export_format, device):
    """Refuses, by name, a device the export's runtime does not have on this machine."""
    if export_format == "openvino":
        openvino_device(device)
    elif export_format in TORCH_FORMATS:
        torch_device(device)
    else:
        _onnxruntime_provider(device)


def onnxruntime_session(path, device=None, options=None):
    import onnxruntime

    return onnxruntime.InferenceSession(str(path), sess_options=options,
                                        providers=[_onnxruntime_provider(device)])


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


# The names a program's symbolic expressions may use: torch's serializer parses each expr_str
# with sympy.sympify, which evaluates it as Python (found by review: an expr_str calling
# __import__ ran code in torch.export.load). torch writes them as sympy's srepr
# ("Mul(Integer(64), Symbol('s1'))"), ferry as arithmetic ("64*s1"): sympy's classes and
# printed names, torch's own functions (torch/_export/serde/serialize.py) and the assumptions
# a Symbol takes as keywords.
_SYMPY_NAMES = frozenset((
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt",
    "FloorToInt", "CeilDiv", "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv",
    "IntTrueDiv", "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt",
    "RoundToInt", "RoundDecimal", "ToFloat", "Identity", "Max", "Min", "Abs", "floor",
    "ceiling", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "And", "Or", "Not", "Piecewise",
    "ExprCondPair", "Tuple", "True", "False", "true", "false", "BooleanTrue", "BooleanFalse",
    "oo", "zoo", "nan", "NaN", "Infinity", "NegativeInfinity", "ComplexInfinity", "Integer",
    "Rational", "Float", "One", "Zero", "NegativeOne", "Half", "Symbol", "Add", "Mul", "Pow",
    "Equality", "Unequality", "StrictLessThan", "LessThan", "StrictGreaterThan",
    "GreaterThan"))
_SYMPY_KEYWORDS = frozenset((
    "integer", "positive", "nonnegative", "negative", "nonpositive", "nonzero", "real",
    "finite", "commutative", "even", "odd", "precision"))
_SYMPY_TOKEN = re.compile(
    r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<keyword>\s*=(?!=))?|"
    r"(?P<quote>['\"])(?P<text>[^'\"]*)(?P=quote)|"
    r"\d+(?:\.\d+)?(?:e[-+]?\d+)?|//|\*\*|<=|>=|==|!=|[-+*/%(),<>&|~])")
_SYMBOL_NAME = re.compile(r"[a-z]+[0-9]+")
_NUMBER_TEXT = re.compile(r"[-+]?[0-9]+(?:\.[0-9]*)?(?:e[-+]?[0-9]+)?")
_PAYLOAD_NAME = re.compile(r"(weight|tensor)_[0-9]+")


def _is_plain_expression(text):
    """Whether `text` builds nothing but a sympy expression: symbols (s0, u1, ...), numbers,
    operators and _SYMPY_NAMES; a string only as a symbol's name or a number (sympy sympifies
    the string arguments of its functions too); a keyword only for an assumption. No
    attribute, subscript or other name."""
    if not isinstance(text, str) or len(text) > 4096:
        return False
    text, pos = text.rstrip(), 0
    while pos < len(text):
        m = _SYMPY_TOKEN.match(text, pos)
        if not m:
            return False
        name, quoted = m.group("name"), m.group("quote")
        if name is not None:
            if m.group("keyword"):
                if name not in _SYMPY_KEYWORDS:
                    return False
            elif name not in _SYMPY_NAMES and not _SYMBOL_NAME.fullmatch(name):
                return False
        elif quoted is not None:
            inner = m.group("text")
            if not (_SYMBOL_NAME.fullmatch(inner) or _NUMBER_TEXT.fullmatch(inner)):
                return False
        pos = m.end()
    return True


def _expressions(node):
    """Every expr_str in a program's JSON."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "expr_str":
                    yield value
                else:
                    stack.append(value)
        elif isinstance(node, list):
            stack.extend(node)


def _stated_directory_offset(path):
    """Where the archive's end record says its central directory starts (the offset torch's
    reader, miniz, reads it at; Python's zipfile instead takes it to end at the end record,
    which data put before the archive moves), or None where there is no readable end record."""
    with open(path, "rb") as f:
        size = f.seek(0, 2)
        f.seek(size - min(size, 65536 + 22))
        tail = f.read()
        at = tail.rfind(b"PK\x05\x06")
        if at < 0 or len(tail) - at < 22:
            return None
        offset = int.from_bytes(tail[at + 16:at + 20], "little")
        if offset != 0xFFFFFFFF:
            return offset
        locator = tail[at - 20:at] if at >= 20 else b""  # zip64: its own end record
        if locator[:4] != b"PK\x06\x07":
            return None
        f.seek(int.from_bytes(locator[8:16], "little"))
        record = f.read(56)
        return int.from_bytes(record[48:56], "little") if record[:4] == b"PK\x06\x06" else None


class UnsafeArchive(FerryError):
    """A pt2 archive that torch.export.load would run code from: refused (status 3, a file
    ferry will not read), never a runtime that cannot run here."""


def check_archive_is_data(path):
    """torch.export.load runs code an archive carries in several ways: it unpickles in full
    the example inputs where its weights_only reader refuses them, weights and constants saved
    with use_pickle, custom or opaque objects, and archives in the format before 2.8; it loads
    the compiled libraries of an AOTInductor package (data/aotinductor/); and it evaluates each
    symbolic expression of a program as Python. ferry loads an archive only where nothing of
    that kind is there: its pickles are ones the weights_only reader takes (ferry's own example
    inputs, transformers' DynamoExporter's), and its expressions plain arithmetic, as loading
    an export must never run code it carries."""
    import io
    import json
    import zipfile

    import torch

    def refuse(entry, why, consequence="torch.export.load would run code from it"):
        return UnsafeArchive(f"{_escape(str(path))}: {_escape(entry)} {why}: {consequence}; "
                             "ferry loads only programs whose pickles torch's weights_only "
                             "loader reads and whose expressions are arithmetic", status=3)

    try:
        archive = zipfile.ZipFile(path)
        stated = _stated_directory_offset(path)
    except (OSError, zipfile.BadZipFile) as e:
        raise UnsafeArchive(f"{_escape(str(path))}: not a pt2 archive ({e})", status=3) from None
    with archive:
        # data before the archive: zipfile shifts every offset past it, miniz does not, so the
        # two could read two central directories (found by review's questions)
        if stated != archive.start_dir:
            raise refuse(str(path), "has its central directory elsewhere than its end record "
                         "states (data before the archive?)", "torch's reader and Python's "
                         "would read different entries")
        # torch's zip reader finds an entry by its name ignoring case and, where two match,
        # not necessarily the copy Python's zipfile reads; it also stops a name at a NUL: every
        # name is checked folded, read through the one copy it may have, and an archive
        # naming an entry twice, or with a control character, is refused
        names, by_folded = archive.namelist(), {}
        for name in names:
            if re.search(r"[\x00-\x1f\x7f\\]", name):
                raise refuse(name, "has a control character or backslash in its name",
                             "torch's reader may take it for another entry")
            if by_folded.setdefault(name.lower(), name) is not name:
                raise refuse(name, "is in the archive twice (names compared ignoring case, as "
                             "torch's zip reader does)", "which copy torch.export.load would "
                             "read is unknown")

        def read(name):
            try:
                return archive.read(by_folded[name.lower()])
            except (OSError, EOFError, NotImplementedError, zipfile.BadZipFile) as e:
                # a local header naming another entry, a bad size or compression
                raise UnsafeArchive(f"{_escape(str(path))}: {_escape(by_folded[name.lower()])} "
                                    f"cannot be read as the archive lists it ({e})",
                                    status=3) from None

        def inside(name):  # the path below the archive's root folder, as torch names it
            return name.partition("/")[2]

        folded = list(by_folded)
        if "version" in folded:  # where the program fails to load, torch reads this layout
            raise refuse("version", "marks the layout before torch 2.8, whose program is "
                         "unpickled in full")
        programs = [n for n in folded if inside(n).startswith("models/")]
        if not any(n.endswith(".json") for n in programs):
            raise refuse(str(path), "has no models/<name>.json (an archive from before torch "
                         "2.8 holds pickles)")
        for name in folded:
            if inside(name).startswith("data/aotinductor/"):
                raise refuse(by_folded[name], "is part of an AOTInductor package, whose "
                             "compiled library torch.export.load loads")
        for name in programs:
            try:
                program = json.loads(read(name))
            except (ValueError, UnicodeDecodeError) as e:
                raise UnsafeArchive(f"{_escape(by_folded[name])}: malformed ({e})",
                                    status=3) from None
            for expr in _expressions(program):
                if not _is_plain_expression(expr):
                    raise refuse(by_folded[name], f"has the symbolic expression "
                                 f"{_escape(str(expr)[:80])!s}, which is not plain arithmetic "
                                 "(torch evaluates it as Python)")
        pickled = [n for n in folded if inside(n).startswith("data/sample_inputs/")]
        for name in folded:
            folder, _, base = name.rpartition("/")
            if base.endswith(".pt") and folder.endswith(("/data/weights", "/data/constants")):
                raise refuse(by_folded[name], "is a pickled state dict (the legacy layout)")
            if not base.endswith(("_weights_config.json", "_constants_config.json")):
                continue
            try:
                config = json.loads(read(name))["config"]
                entries = [(e["path_name"], e.get("use_pickle")) for e in config.values()]
            except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError) as e:
                raise UnsafeArchive(f"{_escape(by_folded[name])}: malformed ({e})",
                                    status=3) from None
            for file, use_pickle in entries:
                # torch reads path_name through a C string: a NUL ends it there, so only the
                # names torch writes are taken, and each must be an entry of the archive
                if not isinstance(file, str) or not _PAYLOAD_NAME.fullmatch(file):
                    raise refuse(f"{folder}/{file!r}", "is not a weight_N or tensor_N entry "
                                 "(a custom object, unpickled in full, or a name torch may "
                                 "read as another)")
                if f"{folder}/{file}" not in by_folded:
                    raise refuse(f"{folder}/{file}", "is named by "
                                 f"{_escape(by_folded[name])} but not in the archive",
                                 "torch.export.load cannot load it")
                if use_pickle:
                    pickled.append(f"{folder}/{file}")
        for name in pickled:
            data = read(name)
            if not data:
                continue
            try:
                torch.load(io.BytesIO(data), weights_only=True)
            except Exception:
                raise refuse(by_folded.get(name.lower(), name),
                             "is a pickle the weights_only loader refuses") from None


def load_program(path, device, metadata=None):
    """torch.export.load(path) on `device` (a torch.device): the program's parameters, buffers
    and the devices its ops name (an arange on "cpu") moved by torch's own pass; .to() on the
    module would leave those ops on the CPU. `metadata` (its component's, from export.json)
    names the transformers classes the program returns, if any."""
    import sys

    import torch

    check_archive_is_data(path)
    register_output_types(metadata)
    try:
        program = torch.export.load(str(path))
    except Exception:
        # export.json did not say that the program returns CausalLMOutputWithPast (edited, or
        # another tool's): torch reads such a program once that class is imported
        if MODEL_OUTPUTS in sys.modules or importlib.util.find_spec("transformers") is None:
            raise
        importlib.import_module(MODEL_OUTPUTS)
        program = torch.export.load(str(path))
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
