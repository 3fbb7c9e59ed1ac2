"""Validation of a saved export: it runs in its runtime (onnxruntime, OpenVINO, torch or
ExecuTorch) and transformers' eager model runs on the same example inputs; the logits of every
real (non-padding) position are compared, against an absolute bound per precision or, for quantized
weights, by top-1 agreement. A validation that passes is recorded in export.json
("validated_with": the runtime and reference versions), so that a later load can warn when the
runtime installed differs (ExportedModel.from_pretrained).

    ferry validate EXPORT [--model CKPT]          (the C CLI runs main() below)
    python -m ferry.validation EXPORT [--model CKPT]
    ferry.validate("qwen3-onnx").passed

The module is named validation, not validate, because ferry.validate is the function: a module
of the same name would shadow it (`import ferry.validate` would bind the module, and
`python -m ferry.validate` would warn that it was already imported as an attribute)."""

import argparse
import json
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import _versions
from ._lib import CannotValidate, FerryError, _c, _escape, _fail, _str

# Bounds on |export - eager| of fp32-eager logits, by the export's precision: fp32 as the
# design's oracle tests; fp16 and bf16 as tests/python/test_oracle_onnx.py measured them on
# tiny models (5e-3 .. 7e-3 for fp16, 0.05 .. 0.08 for bf16), with ~3x margin. Those models'
# logits stay within ±LOGIT_SCALE; a real model's reach ~30, and a runtime summing 30 layers in
# another order than torch moves them in proportion (SmolLM2-135M, fp32, onnxruntime: 1.6e-4
# here, a relative 5e-6), so beyond LOGIT_SCALE a bound grows with the largest eager logit.
ATOL = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 0.25}
LOGIT_SCALE = 10.0
# A model whose logits move far under half precision (random weights with
# logits ~12 moved 0.09 in transformers' own fp16 model, 1.2 in bf16) is held to what its own
# eager model shows in that precision, with this margin, where that is more than ATOL's bound.
HALF_MARGIN = 2.0
HALF_TYPES = {"fp16": "float16", "bf16": "bfloat16"}  # torch's names
# Quantized weights move logits far more than any useful absolute bound: the check is the
# share of real positions whose top-1 token is the eager model's. Measured on SmolLM2-135M
# over 512 tokens (tests/python/test_quantize_quality.py): int8 0.95 .. 0.98, int4 0.51 .. 0.67;
# a broken export agrees by chance (~1 / vocab). On the random tokens of the example the model
# is less sure of itself: SmolLM2 int4 agreed at 0.36 over the prompt's 27 positions, int8 at
# 1.0. A row has 16 to 27 positions, so the floors sit far below those (an int4 export agreeing
# at 0.36 falls under 0.1 by chance in < 1% of models): they catch broken exports, they do not
# grade quality.
MIN_TOP1 = {8: 0.5, 4: 0.1}

EXIT_PASS, EXIT_FAIL, EXIT_USAGE, EXIT_CANNOT = 0, 1, 2, 3


class OptionMismatch(FerryError):
    """An option the export does not take (--atol for a quantized one, --min-top1 for another)
    or that contradicts another (--revision with a --model directory): the command line's
    fault, exit 2."""


@dataclass
class OutputCheck:
    """One compared output, over every real position of the calls it groups. `tolerance` is
    the absolute bound (None for a quantized export, checked by `min_top1` instead)."""

    output: str
    max_abs_diff: float
    positions: int
    top1_agreement: float
    tolerance: float = None
    min_top1: float = None
    note: str = ""

    @property
    def passed(self):
        if self.note:
            return False
        if self.tolerance is not None:
            return self.max_abs_diff <= self.tolerance
        return self.top1_agreement >= self.min_top1


@dataclass
class ValidationReport:
    """What validate() found: `passed` is True only when every check passed."""

    export_dir: str
    reference: str
    runtime: str
    precision: str
    checks: list = field(default_factory=list)
    versions: dict = field(default_factory=dict)
    recorded: bool = False
    record_error: str = None

    @property
    def passed(self):
        return bool(self.checks) and all(c.passed for c in self.checks)

    def table(self):
        """The checks as a small table, one row per output."""
        quantized = any(c.tolerance is None for c in self.checks)
        bound = "top-1 agreement" if quantized else "tolerance"
        rows = [("output", "max |Δ|", bound, "result")]
        for c in self.checks:
            if c.tolerance is not None:
                limit = f"{c.tolerance:.3g}"
            else:
                limit = f"{c.top1_agreement:.3f} >= {c.min_top1:.2f}"
            rows.append((c.output, f"{c.max_abs_diff:.2e}", limit,
                         ("PASS" if c.passed else "FAIL") + (f" ({c.note})" if c.note else "")))
        widths = [max(len(r[k]) for r in rows) for k in range(3)]
        return "\n".join(f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]}"
                         for r in rows)

    def __str__(self):
        head = (f"{self.export_dir}: {self.runtime} vs transformers eager ({self.reference}), "
                f"{self.precision}")
        return f"{head}\n{self.table()}\n{'PASS' if self.passed else 'FAIL'}"


def _require():
    """Imports what validation needs, or one CannotValidate naming what to install."""
    missing = []
    for module in ("numpy", "torch", "transformers"):
        try:
            __import__(module)
        except ImportError:
            missing.append(module)
    if missing:
        raise CannotValidate(
            f"validation compares with transformers' eager model and needs "
            f"{' and '.join(missing)}, which this Python ({sys.executable}) cannot import: "
            f"pip install {' '.join(missing)}", status=4)


def _require_runtime(fmt):
    package = _versions.RUNTIME_PACKAGE.get(fmt)
    try:
        if package:
            __import__(package)
    except ImportError:
        raise CannotValidate(f"a {fmt} export runs in {package}, which this Python "
                             f"({sys.executable}) cannot import: pip install {package}",
                             status=4) from None


def _quantizer(manifest):
    """The quantizer of any component's export config, or None."""
    for component in manifest["components"].values():
        q = component.get("metadata", {}).get("export_config", {}).get("quantizer")
        if q:
            return q
    return None


def _precision(manifest):
    """fp32, fp16 or bf16; fp16 weights computed in fp32 (compress_to_fp16) count as fp16."""
    meta = next(iter(manifest["components"].values())).get("metadata", {})
    if meta.get("export_config", {}).get("compress_to_fp16"):
        return "fp16"
    return meta.get("precision", "fp32")


_ONNX_FLOATS = {1: "fp32", 10: "fp16", 16: "bf16"}
_ONNX_BITS = {2: 8, 3: 8, 21: 4, 22: 4}  # uint8, int8, uint4, int4
_OV_FLOATS = {"f32": "fp32", "f16": "fp16", "bf16": "bf16"}
_OV_BITS = {"u8": 8, "i8": 8, "u4": 4, "i4": 4}


def _onnx_holds(path):
    """(float weights' dtype by element count, quantized weight bits or 0) of an ONNX program,
    from its graph alone (external data is not read)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    floats, bits = {}, 0
    quantized_inputs = {n.input[0] for n in model.graph.node
                        if n.op_type in ("MatMulNBits", "DequantizeLinear", "GatherBlockQuantized")}
    for node in model.graph.node:
        if node.op_type in ("MatMulNBits", "GatherBlockQuantized"):
            bits = max(bits, next((a.i for a in node.attribute if a.name == "bits"), 4))
    for t in model.graph.initializer:
        count = 1
        for d in t.dims:
            count *= d
        if t.name in quantized_inputs and t.data_type in _ONNX_BITS:
            bits = max(bits, _ONNX_BITS[t.data_type])
        elif t.data_type in _ONNX_FLOATS and len(t.dims) >= 2:
            floats[_ONNX_FLOATS[t.data_type]] = floats.get(_ONNX_FLOATS[t.data_type], 0) + count
    return (max(floats, key=floats.get) if floats else None), bits


def _openvino_holds(path):
    """The same of an OpenVINO IR, from its Constant layers."""
    import openvino

    model = openvino.Core().read_model(str(path))
    floats, bits = {}, 0
    for op in model.get_ops():
        if op.get_type_name() != "Constant":
            continue
        kind, shape = op.get_element_type().get_type_name(), op.get_output_shape(0)
        count = 1
        for d in shape:
            count *= d
        # codes are [.., blocks, block]; a zero point stored a byte each ([.., blocks, 1], an
        # int4 row of an odd number of blocks) is u8 but holds int4 codes
        if kind in _OV_BITS and len(shape) >= 2 and shape[-1] > 1:
            bits = max(bits, _OV_BITS[kind])
        elif kind in _OV_FLOATS and len(shape) >= 2:
            floats[_OV_FLOATS[kind]] = floats.get(_OV_FLOATS[kind], 0) + count
    return (max(floats, key=floats.get) if floats else None), bits


def _check_claims(fmt, directory, manifest):
    """Validation's bound follows the precision and quantization export.json claims: refuses a
    claim its programs' weights do not hold (ONNX and OpenVINO; a claim of a looser precision
    or of quantization would loosen the bound over other weights)."""
    holds = {"onnx": _onnx_holds, "openvino": _openvino_holds}.get(fmt)
    if holds is None:
        return
    for name, component in manifest["components"].items():
        meta = component.get("metadata") or {}
        if "precision" not in meta:  # transformers' export: it records its own
            continue
        config = meta.get("export_config") or {}
        bits = int((config.get("quantizer") or {}).get("bits") or 0)
        if meta.get("float_weights") is True:  # the family kept it float (a speech encoder)
            bits = 0
        dtype = "fp16" if config.get("compress_to_fp16") else meta.get("precision")
        path = Path(directory) / component["file"]
        held_dtype, held_bits = holds(path)
        # a quantized export's float weights are its scales, norms and unquantized tables
        if held_bits != bits or (held_dtype is not None and held_dtype != dtype and not bits):
            said = f"{dtype}{f', int{bits} weights' if bits else ''}"
            held = f"{held_dtype}{f', int{held_bits} weights' if held_bits else ''}"
            raise FerryError(f"component {_escape(name)} ({_escape(component['file'])}): "
                             f"export.json says {said}, the program holds {held}: "
                             "export.json was edited", status=1)


def _reference_checkpoint(manifest, model, revision):
    """(checkpoint, revision, shown): --model, else export.json's recorded source: the
    directory it was read from when it still exists, else the hub id as given."""
    if model is not None:
        if revision is not None and Path(model).is_dir():
            # as the library refuses it for an export: the directory is read as it is
            raise OptionMismatch(f"{_escape(str(model))} is a local directory, and a revision "
                                 f"({_escape(repr(revision))}) applies only to a hub id",
                                 status=1)
        return str(model), revision, str(model)
    source = manifest.get("source") or {}
    path, given = source.get("path"), source.get("model")
    if path and (Path(path) / "config.json").is_file():
        return path, None, path
    if given and not Path(given).exists() and given.count("/") == 1:
        return given, source.get("revision"), given
    where = f"{path or given} no longer holds it" if (path or given) else "records none"
    raise FerryError(f"the checkpoint for the eager reference: export.json's source "
                     f"{_escape(where)}: pass --model CHECKPOINT", status=1)


def _own_half_error(runs, reference, precision, want, run):
    """max |Δ| of transformers' own eager model in the export's half precision from its fp32
    logits `want`, over the same real positions; 0 where it is not finite (an fp16 model that
    overflows says nothing of the export). `reference` is cast in place: used last."""
    import numpy as np
    import torch

    reference = reference.to(getattr(torch, HALF_TYPES[precision]))
    if run.encoder_inputs is not None:  # an encoder-decoder's, its float inputs in the half type
        dtype = next(reference.parameters()).dtype
        inputs = {k: (torch.from_numpy(v).to(dtype).float().numpy() if v.dtype.kind == "f"
                      else v) for k, v in run.encoder_inputs.items()}
        with torch.no_grad():
            out = reference(**{k: torch.from_numpy(v).to(dtype) if v.dtype.kind == "f"
                               else torch.from_numpy(v) for k, v in inputs.items()},
                            decoder_input_ids=torch.from_numpy(run.input_ids), use_cache=False)
        half = out.logits.float().numpy()
    else:
        half = runs.reference_logits(reference, run.input_ids, run.attention_mask,
                                     run.positions)
    real = run.attention_mask == 1
    error = float(np.abs(half[real] - want[real]).max())
    return error if np.isfinite(error) else 0.0


def _largest_logit(want, attention_mask):
    """max |eager logit| over the real positions."""
    import numpy as np

    return float(np.abs(want[attention_mask == 1]).max())


def _compare(run, want, tolerance, min_top1):
    """OutputChecks, one per call label, over the real positions of each call."""
    import numpy as np

    groups = {}
    for call in run.calls:
        stop = call.start + call.logits.shape[1]
        real = run.attention_mask[:, call.start:stop] == 1
        groups.setdefault(call.label, []).append((call.logits, want[:, call.start:stop], real))
    checks = []
    for label, parts in groups.items():
        shapes = {(g.shape, w.shape) for g, w, _ in parts if g.shape != w.shape}
        if shapes:
            got, expected = shapes.pop()
            checks.append(OutputCheck(label, float("inf"), 0, 0.0, tolerance, min_top1,
                                      note=f"shape {list(got)}, eager {list(expected)}"))
            continue
        got = np.concatenate([g[r] for g, _, r in parts]).astype(np.float64)
        ref = np.concatenate([w[r] for _, w, r in parts]).astype(np.float64)
        finite = np.isfinite(got).all()
        diff = float(np.abs(got - ref).max()) if finite else float("inf")
        top1 = float((got.argmax(-1) == ref.argmax(-1)).mean())
        checks.append(OutputCheck(label, diff, int(got.shape[0]), top1, tolerance, min_top1,
                                  note="" if finite else "non-finite values"))
    return checks


def _validate_encoder(loaded, manifest, model, atol, min_top1, revision, record):
    """An encoder's outputs (last_hidden_state at the real positions, pooler_output, a head's
    logits) against transformers' eager model on the same example, each within the
    precision's bound grown with its largest eager value, as the logits' is."""
    import numpy as np

    from . import _validation_runs as runs

    fmt = runs.check_format(manifest)
    if _quantizer(manifest):
        raise CannotValidate("a quantized encoder is not validated yet: its outputs have no "
                             "top-1 token to agree on", status=4)
    if min_top1 is not None:
        raise OptionMismatch("--min-top1 applies to quantized exports only; this one is "
                             "checked against an absolute bound: use --atol", status=1)
    precision = _precision(manifest)
    _require_runtime(fmt)
    checkpoint, ref_revision, shown = _reference_checkpoint(manifest, model, revision)
    feeds, mask, got, runtime = runs.run_encoder(loaded, manifest)
    _check_claims(fmt, loaded.directory, manifest)
    want = runs.reference_encoder(checkpoint, manifest.get("architecture"), feeds, ref_revision)
    checks = []
    for name, value in got.items():
        ref = want.get(name)
        if ref is None or ref.shape != value.shape:
            checks.append(OutputCheck(name, float("inf"), 0, 0.0, 0.0, note="eager has no "
                                      f"such output" if ref is None else
                                      f"shape {list(value.shape)}, eager {list(ref.shape)}"))
            continue
        if name == "last_hidden_state":
            value, ref = value[mask == 1], ref[mask == 1]
        bound = ATOL.get(precision, ATOL["bf16"]) if atol is None else float(atol)
        if atol is None:
            bound *= max(1.0, float(np.abs(ref).max()) / LOGIT_SCALE)
        finite = bool(np.isfinite(value).all())
        diff = float(np.abs(value.astype(np.float64) - ref).max()) if finite else float("inf")
        top1 = float((value.reshape(-1, value.shape[-1]).argmax(-1) ==
                      ref.reshape(-1, ref.shape[-1]).argmax(-1)).mean())
        checks.append(OutputCheck(name, diff, int(np.prod(value.shape[:-1])), top1, bound,
                                  note="" if finite else "non-finite values"))
    return _report(loaded, shown, runtime, precision, checks, record)


def _versions_of(runtime):
    """The runtime's and the reference's package versions, as export.json records them."""
    return {"runtime": {runtime: _versions.installed_version(runtime)},
            "reference": {p: _versions.installed_version(p)
                          for p in _versions.REFERENCE_PACKAGES}}


def _report(loaded, shown, runtime, precision, checks, record):
    """The ValidationReport of `checks`; when it passed and `record`, the versions written into
    export.json (report.recorded, or report.record_error saying why not)."""
    versions = _versions_of(runtime)
    report = ValidationReport(_escape(loaded.directory), _escape(shown),
                              f"{runtime} {versions['runtime'][runtime]}", precision, checks,
                              versions)
    if report.passed and record:
        try:
            _record(loaded, versions)
            report.recorded = True
        except FerryError as e:
            report.record_error = str(e)
    return report


def _record(loaded, versions):
    """Writes `versions` into the loaded export's export.json (ferry_exported_record_validation)."""
    handle = loaded._live("record its validation")
    status = _c().ferry_exported_record_validation(handle, json.dumps(versions).encode())
    if status:
        _fail(status, _str(_c().ferry_exported_errmsg(handle)))


def validate(export_dir, model=None, atol=None, *, min_top1=None, revision=None, subfolder=None,
             record=True):
    """Runs the export at `export_dir` and transformers' eager model (from `model`, else the
    checkpoint export.json records) on example inputs and compares their logits. Returns a
    ValidationReport (check .passed; print it for the table). The bound is the precision's
    (ATOL), grown in proportion to the largest eager logit beyond LOGIT_SCALE; `atol` replaces
    it as given, `min_top1` replaces a quantized export's floor. When it passes and `record`,
    the versions are written into export.json (report.recorded; report.record_error says why
    not). Raises CannotValidate when it cannot run here (a package missing, a runtime that
    cannot run the export), FerryError when the export or checkpoint cannot be read."""
    from .exported import ExportedModel

    _require()
    loaded = ExportedModel.from_pretrained(export_dir, subfolder=subfolder)
    try:
        manifest = loaded.manifest
        directory = loaded.directory
        from . import _validation_runs as runs

        fmt = runs.check_format(manifest)
        if runs.is_encoder(manifest):
            return _validate_encoder(loaded, manifest, model, atol, min_top1, revision, record)
        quantizer = _quantizer(manifest)
        if quantizer and atol is not None:
            raise OptionMismatch("--atol does not apply to a quantized export, which is checked "
                                 "by top-1 agreement: use --min-top1", status=1)
        if not quantizer and min_top1 is not None:
            raise OptionMismatch("--min-top1 applies to quantized exports only; this one is "
                                 "checked against an absolute bound: use --atol", status=1)
        precision = _precision(manifest)
        tolerance = min_floor = None
        if quantizer:
            bits = int(quantizer.get("bits", 4))
            min_floor = MIN_TOP1.get(bits, MIN_TOP1[4]) if min_top1 is None else float(min_top1)
            precision = f"{precision}, int{bits} weights"
        else:
            tolerance = ATOL.get(precision, ATOL["bf16"]) if atol is None else float(atol)
        _require_runtime(fmt)
        checkpoint, ref_revision, shown = _reference_checkpoint(manifest, model, revision)
        run, runtime = runs.run_export(loaded, manifest)
        _check_claims(fmt, directory, manifest)  # the programs ran: each can be read
        seq2seq = run.encoder_inputs is not None
        reference = runs.load_reference(checkpoint, ref_revision,
                                        manifest.get("architecture") if seq2seq else None)
        want = (runs.reference_seq2seq_logits(reference, run.encoder_inputs, run.input_ids)
                if seq2seq else runs.reference_logits(reference, run.input_ids,
                                                      run.attention_mask, run.positions))
        if run.rerun_at:   # before the re-run, eager over the prefix the calls had seen
            before = run.rerun_at - 1
            want[:, :before] = runs.reference_logits(
                reference, run.input_ids[:, :before], run.attention_mask[:, :before],
                run.positions)
        if tolerance is not None and atol is None:
            tolerance *= max(1.0, _largest_logit(want, run.attention_mask) / LOGIT_SCALE)
            if precision in HALF_TYPES:
                tolerance = max(tolerance, HALF_MARGIN * _own_half_error(
                    runs, reference, precision, want, run))
        return _report(loaded, shown, runtime, precision,
                       _compare(run, want, tolerance, min_floor), record)
    finally:
        loaded.close()


# --- the command line -------------------------------------------------------------------------


def _edits(a, b):
    """Edits from a to b (insert, delete, substitute, swap two neighbours), as the C command's
    suggestions count them (cli/suggest.c)."""
    d = [list(range(len(b) + 1))] + [[i] + [0] * len(b) for i in range(1, len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            d[i][j] = min(d[i - 1][j - 1] + (a[i - 1] != b[j - 1]), d[i - 1][j] + 1,
                          d[i][j - 1] + 1)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                d[i][j] = min(d[i][j], d[i - 2][j - 2] + 1)
    return d[-1][-1]


def _nearest(word, names):
    """The name nearest `word` if it is close for the word's length (cli/suggest.c's rule)."""
    allowed = 3 if len(word) >= 8 else 2 if len(word) >= 5 else 1 if len(word) >= 3 else 0
    best = min(names, key=lambda n: _edits(word, n), default=None)
    return best if best is not None and _edits(word, best) <= allowed else None


class _Parser(argparse.ArgumentParser):
    """Errors as the ferry command prints them: one line, exit status 2."""

    def error(self, message):
        words = message.split(": ", 1)[1].split() if message.startswith("unrecognized") else []
        unknown = next((w for w in words if w.startswith("--")), None)
        if unknown:  # the other ferry commands' "did you mean", for a mistyped option
            name = unknown[2:].split("=", 1)[0]
            near = _nearest(name, [o[2:] for o in self._option_string_actions
                                   if o.startswith("--")])
            if near:
                message = f"unknown option '--{name}'; did you mean --{near}?"
        print(f"ferry: error: validate: {message} (see ferry validate --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _number(low, high):
    """argparse type: a float in [low, high] (high may be inf; NaN never)."""
    def parse(text):
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not low <= value <= high or value == math.inf:
            upper = "inf)" if high == math.inf else f"{high:g}]"
            raise argparse.ArgumentTypeError(f"{text!r} is not a number in [{low:g}, {upper}")
        return value
    return parse


def _parser():
    p = _Parser(prog="ferry validate", description="Run an export in its runtime and "
                "transformers' eager model on the same inputs and compare their logits.")
    p.add_argument("export", metavar="EXPORT", help="the export directory")
    p.add_argument("--model", metavar="CKPT", help="the checkpoint of the eager reference "
                   "(default: the one export.json records)")
    p.add_argument("--revision", metavar="REV", help="with a hub id as --model")
    p.add_argument("--subfolder", metavar="DIR", help="the export inside EXPORT (onnx/, ...)")
    # one or the other, each in its range (--atol -1 or nan ran and failed,
    # exit 1, and the two together were taken)
    bound = p.add_mutually_exclusive_group()
    bound.add_argument("--atol", type=_number(0.0, math.inf), metavar="X",
                       help="the absolute bound on logits")
    bound.add_argument("--min-top1", type=_number(0.0, 1.0), metavar="X",
                       help="a quantized export's least top-1 agreement")
    p.add_argument("--no-record", action="store_true",
                   help="leave export.json as it is when validation passes")
    p.add_argument("-q", "--quiet", action="store_true", help="print the table only on failure")
    return p


def main(argv=None):
    """`ferry validate` -> exit status: 0 passed, 1 failed (or the export or checkpoint could
    not be read or run), 2 bad command line, 3 validation cannot run here (CannotValidate)."""
    args = _parser().parse_args(argv)
    if not logging.getLogger("ferry").handlers:  # the drift warning, as the CLI's warnings look
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("ferry: warning: %(message)s"))
        logging.getLogger("ferry").addHandler(handler)
    if args.revision is not None and args.model is None:
        _parser().error("--revision goes with --model")
    try:
        report = validate(args.export, args.model, args.atol, min_top1=args.min_top1,
                          revision=args.revision, subfolder=args.subfolder,
                          record=not args.no_record)
    except CannotValidate as e:
        print(f"ferry: error: validate: {e}", file=sys.stderr)
        return EXIT_CANNOT
    except OptionMismatch as e:
        print(f"ferry: error: validate: {e}", file=sys.stderr)
        return EXIT_USAGE
    except FerryError as e:
        print(f"ferry: error: validate: {e}", file=sys.stderr)
        return EXIT_FAIL
    except KeyboardInterrupt:  # Ctrl-C reaches the whole group: `ferry` says it, once
        return 128 + 2
    if not args.quiet or not report.passed:
        print(report)
    if report.record_error:
        print(f"ferry: warning: validate: passed, but not recorded in export.json: "
              f"{report.record_error}", file=sys.stderr)
    return EXIT_PASS if report.passed else EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
