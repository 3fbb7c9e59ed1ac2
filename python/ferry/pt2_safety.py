"""Whether a .pt2 archive is data only, checked before torch.export.load reads it.

torch.export.load, .module() and the module's calls run code an archive carries through many
doors, each found by a review that ran a payload through it:
- pickles: example inputs its weights_only reader refuses, weights and constants saved with
  use_pickle, custom and opaque objects, the layout before torch 2.8, and a second program in a
  subfolder of models/ (whose legacy files it reads at paths built from the program's name);
- an AOTInductor package, whose compiled library it loads;
- each symbolic expression (expr_str), evaluated with sympy.sympify, which runs Python;
- names FX writes into the forward it executes: graph inputs, the keys of the inputs' spec;
- guard code .module() executes: guards_code, a string graph input, each example input's path;
- pytree spec contexts, read with a JSON hook that imports what an "__enum__" names, and
  rebuilt by transformers from class paths it calls;
- higher-order ops: inline_asm_elementwise compiles the code it is handed;
- its zip reader (miniz), which looks names up ignoring case, reads them as C strings and does
  not shift offsets past data put before the archive, as Python's zipfile does.

So ferry takes an archive only in the exact layout ferry, transformers' DynamoExporter and
torch.export.save write (one root folder, one program "model", weight_N and tensor_N
payloads), whose pickles the weights_only reader takes, whose names are identifiers, whose
expressions are arithmetic, whose guards compare input sizes, whose specs name containers,
transformers' model outputs and caches only with names for keys, whose graph inputs are tensors
and symbols, whose nodes call aten operators on data arguments only, whose example inputs are
tensors under identifier names, and whose strings hold no line break outside a stack trace.
Anything else is refused with UnsafeArchive before torch opens the file; torch.export.load
called directly stays unsafe."""

import ast
import io
import json
import keyword
import re
import zipfile

from ._lib import FerryError, _escape


class UnsafeArchive(FerryError):
    """A pt2 archive that torch.export.load could run code from: refused (status 3, a file
    ferry will not read), never a runtime that cannot run here."""


# The entries below the root folder (names folded to lower case, as torch looks them up).
_FIXED_ENTRIES = frozenset((
    "archive_format", "archive_version", ".data/version", ".data/serialization_id", "byteorder",
    "models/model.json", "data/sample_inputs/model.pt",
    "data/weights/model_weights_config.json", "data/constants/model_constants_config.json"))
_PAYLOAD_ENTRY = re.compile(r"data/(weights/weight|constants/tensor)_[0-9]+")
_PAYLOAD_NAME = re.compile(r"(weight|tensor)_[0-9]+")
_CONFIGS = {"data/weights/model_weights_config.json": "data/weights/",
            "data/constants/model_constants_config.json": "data/constants/"}

# What an expr_str may name: torch writes sympy's srepr ("Mul(Integer(64), Symbol('s1'))"),
# ferry arithmetic ("64*s1"). sympy's classes and printed names, torch's own functions
# (torch/_export/serde/serialize.py), and the assumptions a Symbol takes as keywords.
SYMPY_NAMES = frozenset((
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
# names torch gives graph values and arguments, which FX writes into the forward it executes
_NAME_KEYS = frozenset(("name", "as_name", "forward_arg_names"))
# module paths (parameters, buffers, constants, submodules): identifiers and indices
_PATH_KEYS = frozenset(("parameter_name", "buffer_name", "tensor_constant_name",
                        "custom_obj_name", "fqn"))
_MODULE_PATH = re.compile(r"([A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*)?")
# a node's operator: an aten op, as every program ferry, transformers and torch.export.save
# write calls (a higher-order op, inline_asm_elementwise, compiles and launches
# the GPU code an archive hands it), none that reads or writes files
_TARGET = re.compile(r"torch\.ops\.aten\.([A-Za-z0-9_]+)\.[A-Za-z0-9_]+")
_FILE_OPS = frozenset(("from_file", "save", "_print"))
# arithmetic on SymInts, as torch.export writes it (the deserializer takes these targets from
# its own table of Python's operators)
_SYMINT_OPS = frozenset(("_operator.add", "_operator.sub", "_operator.mul",
                         "_operator.floordiv"))
# a node's arguments: data only, no graph, operator or script object for an op to call
_ARGUMENT_KINDS = frozenset((
    "as_none", "as_tensor", "as_tensors", "as_optional_tensor", "as_optional_tensors", "as_int",
    "as_ints", "as_float", "as_floats", "as_bool", "as_bools", "as_string", "as_strings",
    "as_sym_int", "as_sym_ints", "as_sym_bool", "as_sym_bools", "as_sym_float",
    "as_sym_floats", "as_scalar_type", "as_memory_format", "as_layout", "as_device"))
# what a guard may ask of an input (torch writes "L['x'].size()[1] <= L['y'].size()[1]")
_GUARD_METHODS = frozenset(("size", "stride", "storage_offset", "dim", "numel"))
_GUARD_NODES = (ast.Expression, ast.BoolOp, ast.And, ast.Or, ast.Compare, ast.Eq, ast.NotEq,
                ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.BinOp, ast.Add, ast.Sub, ast.Mult,
                ast.FloorDiv, ast.Mod, ast.Pow, ast.UnaryOp, ast.USub, ast.UAdd, ast.Not,
                ast.Load, ast.Subscript)


def is_plain_expression(text):
    """Whether `text` builds nothing but a sympy expression: symbols (s0, u1, ...), numbers,
    operators and SYMPY_NAMES; a string only as a symbol's name or a number (sympy sympifies
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
            elif name not in SYMPY_NAMES and not _SYMBOL_NAME.fullmatch(name):
                return False
        elif quoted is not None:
            inner = m.group("text")
            if not (_SYMBOL_NAME.fullmatch(inner) or _NUMBER_TEXT.fullmatch(inner)):
                return False
        pos = m.end()
    return True


def is_plain_guard(text):
    """Whether `text` only compares sizes of inputs: L['name'] subscripts, .size() and its
    kin, integers, arithmetic, comparisons, and/or/not and SYMPY_NAMES calls. torch executes
    it (as the body of a function, inside a string literal of its error message too, so no
    quote or backslash may be in it)."""
    if not isinstance(text, str) or len(text) > 4096 or '"' in text or "\\" in text:
        return False
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, _GUARD_NODES):
            continue
        if isinstance(node, ast.Constant) and (type(node.value) in (int, bool) or (
                isinstance(node.value, str) and node.value.isidentifier())):
            continue
        if isinstance(node, ast.Name) and (node.id == "L" or node.id in SYMPY_NAMES):
            continue
        if isinstance(node, ast.Attribute) and node.attr in _GUARD_METHODS:
            continue
        if isinstance(node, ast.Call) and not node.keywords and (
                isinstance(node.func, ast.Attribute) and node.func.attr in _GUARD_METHODS or
                isinstance(node.func, ast.Name) and node.func.id in SYMPY_NAMES):
            continue
        return False
    return True


# A pytree spec (in_spec, out_spec) names the classes torch and transformers rebuild values
# with, and its contexts are JSON that torch reads with an object hook importing any module an
# "__enum__" names, and transformers resolves and calls the class paths of its "_t" records
# with (ctypes.CDLL and builtins.exec ran that way). Only the containers,
# transformers' model outputs and its cache classes pass, and their contexts as written.
_SPEC_TYPES = re.compile(r"builtins\.(tuple|list|dict)|transformers\.modeling_outputs\.[A-Za-z][A-Za-z0-9]*|"
                         r"transformers\.cache_utils:[A-Za-z]+(Cache|Layer)")
_CACHE_CLASS = re.compile(r"transformers\.cache_utils:[A-Za-z]+(Cache|Layer)")
_CONTEXT_TAGS = frozenset(("tensor", "sym", "device", "dtype", "size", "items", "obj"))
_CONTEXT_TEXT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*([.:][A-Za-z0-9_]+)*")
# the values a graph takes and the roles its inputs and outputs play, as ferry, transformers
# and torch.export.save write them: a string input is pasted into a guard torch executes
#, and no other kind is needed
_GRAPH_INPUTS = frozenset(("as_tensor", "as_sym_int"))
_INPUT_SPECS = frozenset(("user_input", "parameter", "buffer", "tensor_constant"))
_OUTPUT_SPECS = frozenset(("user_output", "user_input_mutation", "buffer_mutation"))


def _context_problem(node):
    """Why a spec's context (parsed JSON) is more than data, or None. Its strings are names
    (FX writes a dict's keys into the forward it executes: a key closed the
    call and ran code), class paths, devices and dtypes only."""
    stack = [node]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            if not _CONTEXT_TEXT.fullmatch(node) or keyword.iskeyword(node):
                return f"the text {_escape(node[:80])!s}, not a name"
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, dict):
            if any(not _is_identifier(k) for k in node):
                return "a key that is not an identifier"
            if "__enum__" in node:
                return "an __enum__ record (torch imports the module it names)"
            tag = node.get("_t")
            if tag is not None and tag not in _CONTEXT_TAGS:
                return f"a {_escape(str(tag))!s} record (transformers calls the class it names)"
            path = node.get("p")
            if path is not None and (tag != "obj" or not isinstance(path, str) or
                                     not _CACHE_CLASS.fullmatch(path)):
                return f"the class path {_escape(str(path)[:80])!s}"
            stack.extend(node.values())
        elif not (node is None or isinstance(node, (str, int, float, bool))):
            return "a value JSON does not hold"
    return None


def treespec_problem(text):
    """Why the serialized pytree spec `text` could make torch or transformers import or call
    something, or None."""
    try:
        version, root = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return "a spec that is not [version, tree] JSON"
    stack = [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or not isinstance(node.get("children_spec", []), list):
            return "a spec node that is not an object"
        kind, context = node.get("type"), node.get("context")
        if kind is not None and (not isinstance(kind, str) or not _SPEC_TYPES.fullmatch(kind)):
            return f"the type {_escape(str(kind)[:80])!s} (only containers, transformers' model " \
                   "outputs and caches)"
        if context is not None:
            try:
                parsed = json.loads(context) if isinstance(context, str) else context
            except (ValueError, RecursionError):
                return "a context that is not JSON"
            # a dict's or model output's keys become argument names and code
            if kind in ("builtins.dict",) or str(kind).startswith("transformers.modeling_outputs."):
                if not isinstance(parsed, list) or not all(_is_identifier(k) for k in parsed):
                    return "keys that are not identifiers"
            problem = _context_problem(parsed)
            if problem:
                return f"a context with {problem}"
        stack.extend(node.get("children_spec", []))
    return None


def _is_identifier(text):
    return isinstance(text, str) and text.isidentifier() and not keyword.iskeyword(text)


def _kind_problem(values, kinds, what):
    """Why one of `values` (records of one kind each, {kind: ...}) is of a kind not in `kinds`,
    or None."""
    for value in values if isinstance(values, list) else [values]:
        if not isinstance(value, dict) or set(value) - kinds:
            return f"{what} of kind {_escape(str(value)[:60])!s}"
    return None


def _arguments(graph):
    """The arguments a graph's nodes are called with (None for a malformed one)."""
    for graph_node in graph["nodes"]:
        inputs = graph_node.get("inputs") if isinstance(graph_node, dict) else None
        for given in inputs if isinstance(inputs, list) else [None]:
            yield given.get("arg") if isinstance(given, dict) else None


def _signature_problem(program):
    """Why the graphs' inputs and arguments or the signature's roles are of a kind ferry does
    not take, or None."""
    stack = [program]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        problem = None
        if isinstance(node.get("nodes"), list):  # a graph, or a subgraph
            problem = (_kind_problem(node.get("inputs"), _GRAPH_INPUTS, "a graph input") or
                       _kind_problem(list(_arguments(node)), _ARGUMENT_KINDS, "an argument"))
        for key, kinds in (("input_specs", _INPUT_SPECS), ("output_specs", _OUTPUT_SPECS)):
            if not problem and key in node:
                problem = _kind_problem(node[key], kinds, f"an {key[:-1]}")
        if problem:
            return problem
        stack.extend(node.values())
    return None


def _program_problem(program):
    """Why the program's JSON could make torch run code, or None."""
    problem = _signature_problem(program)
    if problem:
        return problem
    stack = [(None, program)]
    while stack:
        key, node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.items())
            continue
        if isinstance(node, list):
            stack.extend((key, item) for item in node)
            continue
        if not isinstance(node, str):
            continue
        shown = _escape(node[:80])
        # a line break moves code out of the comment or string it is pasted in; only a stack
        # trace, which torch prints and never compiles, has lines
        if re.search(r"[\x00-\x08\x0b-\x1f\x7f]" if key == "stack_trace" else
                     r"[\x00-\x1f\x7f]", node):
            return f"a {key} with a control character ({shown})"
        if key == "expr_str" and not is_plain_expression(node):
            return (f"the symbolic expression {shown}, which is not plain arithmetic (torch "
                    "evaluates it as Python)")
        if key == "guards_code" and not is_plain_guard(node):
            return (f"the guard {shown}, which does more than compare input sizes (torch "
                    "executes it)")
        if key in _NAME_KEYS and not _is_identifier(node):
            return f"the {key} {shown}, not an identifier (torch writes names into code)"
        if key in _PATH_KEYS and not _MODULE_PATH.fullmatch(node):
            return f"the {key} {shown}, not a module path"
        if key == "target":
            op = _TARGET.fullmatch(node)
            if node not in _SYMINT_OPS and (not op or op.group(1) in _FILE_OPS):
                return f"the target {shown}, not an aten operator"
        if key in ("in_spec", "out_spec"):
            problem = treespec_problem(node)
            if problem:
                return f"an {key} with {problem}"
    return None


def _plain_example(value, torch):
    """Whether example inputs are ((leaves...), {identifier: leaf}), leaves tensors or plain
    numbers: .module() writes each input's path into a guard it executes (a
    key holding a quote closed the guard's message and ran code at every call)."""
    def leaf(v):
        return v is None or isinstance(v, (torch.Tensor, bool, int, float))

    if not (isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], tuple) and
            isinstance(value[1], dict)):
        return False
    args, kwargs = value
    return all(leaf(v) for v in args) and all(
        isinstance(k, str) and _is_identifier(k) and leaf(v) for k, v in kwargs.items())


def _stated_directory_offset(data):
    """Where the archive's end record says its central directory starts (the offset torch's
    reader, miniz, reads it at; Python's zipfile instead takes it to end at the end record,
    which data put before the archive moves), or None where there is no readable end record."""
    size = len(data)
    base = size - min(size, 65536 + 22)
    tail = data[base:]
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < 22:
        return None
    offset = int.from_bytes(tail[at + 16:at + 20], "little")
    if offset != 0xFFFFFFFF:
        return offset
    locator = tail[at - 20:at] if at >= 20 else b""  # zip64: its own end record
    if locator[:4] != b"PK\x06\x07":
        return None
    where = int.from_bytes(locator[8:16], "little")
    record = data[where:where + 56]
    return int.from_bytes(record[48:56], "little") if record[:4] == b"PK\x06\x06" else None


def read_checked_archive(path):
    """The bytes of the .pt2 at `path`, read once and checked with check_archive_is_data:
    what torch.export.load is then given (io.BytesIO of them), so that a file replaced or
    rewritten after the check is never what torch reads. Raises UnsafeArchive, or FerryError
    (status 4) where the file cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FerryError(f"{_escape(str(path))}: cannot be read ({e.strerror or e})",
                         status=2) from None
    check_archive_is_data(data, path)
    return data


def check_archive_is_data(data, path):
    """Raises UnsafeArchive unless `data`, the bytes of the .pt2 at `path` (named in messages
    only: nothing is read from it), is an archive torch.export.load can read without running
    anything it carries (the module docstring says what that takes)."""
    import torch

    def refuse(entry, why, consequence="torch.export.load could run code from it"):
        return UnsafeArchive(f"{_escape(str(path))}: {_escape(entry)} {why}: {consequence}; "
                             "ferry loads only archives in the layout ferry, transformers and "
                             "torch.export.save write, holding data only", status=3)

    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        stated = _stated_directory_offset(data)
    except (OSError, zipfile.BadZipFile) as e:
        raise UnsafeArchive(f"{_escape(str(path))}: not a pt2 archive ({e})", status=3) from None
    with archive:
        if stated != archive.start_dir:
            raise refuse(str(path), "has its central directory elsewhere than its end record "
                         "states (data before the archive?)", "torch's reader and Python's "
                         "would read different entries")
        names, by_inside, root = archive.namelist(), {}, None
        for name in names:
            if name.lower() == "version":  # where the program fails to load, torch reads this
                raise refuse(name, "marks the layout before torch 2.8, whose program is "
                             "unpickled in full")
            if re.search(r"[\x00-\x1f\x7f\\]", name):
                raise refuse(name, "has a control character or backslash in its name",
                             "torch's reader may take it for another entry")
            top, _, inside = name.lower().partition("/")
            root = top if root is None else root
            if top != root or not inside:
                raise refuse(name, "is outside the archive's one root folder",
                             "torch.export.load cannot read it as a pt2")
            if by_inside.setdefault(inside, name) is not name:
                raise refuse(name, "is in the archive twice (names compared ignoring case, as "
                             "torch's zip reader does)", "which copy torch.export.load would "
                             "read is unknown")
            if inside not in _FIXED_ENTRIES and not _PAYLOAD_ENTRY.fullmatch(inside):
                raise refuse(name, "is not an entry of a pt2 in the layout ferry, transformers "
                             "and torch.export.save write (the program models/model.json, its "
                             "configs, sample inputs and weight_N / tensor_N payloads)")
        if "models/model.json" not in by_inside:
            raise refuse(str(path), "has no models/model.json (an archive from before torch "
                         "2.8 holds pickles)")

        def read(inside):
            try:
                return archive.read(by_inside[inside])
            except (OSError, EOFError, NotImplementedError, zipfile.BadZipFile) as e:
                # a local header naming another entry, a bad size or compression
                raise UnsafeArchive(f"{_escape(str(path))}: {_escape(by_inside[inside])} cannot "
                                    f"be read as the archive lists it ({e})", status=3) from None

        def json_of(inside):
            try:
                return json.loads(read(inside))
            except (ValueError, UnicodeDecodeError, RecursionError) as e:
                raise UnsafeArchive(f"{_escape(by_inside[inside])}: malformed ({e})",
                                    status=3) from None

        problem = _program_problem(json_of("models/model.json"))
        if problem:
            raise refuse(by_inside["models/model.json"], f"has {problem}")
        pickled = ["data/sample_inputs/model.pt"] if "data/sample_inputs/model.pt" in \
            by_inside else []
        for config_entry, folder in _CONFIGS.items():
            if config_entry not in by_inside:
                continue
            try:
                entries = [(e["path_name"], e.get("use_pickle"))
                           for e in json_of(config_entry)["config"].values()]
            except (KeyError, TypeError, AttributeError) as e:
                raise UnsafeArchive(f"{_escape(by_inside[config_entry])}: malformed ({e})",
                                    status=3) from None
            for file, use_pickle in entries:
                # torch reads data/<kind>/<path_name>, as a C string: only the names torch
                # writes, each an entry of the archive
                if not isinstance(file, str) or not _PAYLOAD_NAME.fullmatch(file):
                    raise refuse(f"{by_inside[config_entry]}: {file!r}", "is not a weight_N or "
                                 "tensor_N entry (a custom object, unpickled in full, or a name "
                                 "torch may read as another)")
                if folder + file not in by_inside:
                    raise refuse(f"{folder}{file}", f"is named by {by_inside[config_entry]} but "
                                 "not in the archive", "torch.export.load cannot load it")
                if use_pickle:
                    pickled.append(folder + file)
        for inside in pickled:
            data = read(inside)
            if not data:
                continue
            try:
                value = torch.load(io.BytesIO(data), weights_only=True)
            except Exception:
                raise refuse(by_inside[inside], "is a pickle the weights_only loader refuses",
                             "torch.export.load would unpickle it in full, running the code "
                             "it names") from None
            if inside == "data/sample_inputs/model.pt" and not _plain_example(value, torch):
                raise refuse(by_inside[inside], "holds example inputs other than "
                             "((tensors...), {name: tensor}) with identifier names (.module() "
                             "writes their names into a guard it executes)")
