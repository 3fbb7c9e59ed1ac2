"""`ferry validate`, `ferry export --validate` and ferry.validate(): an export run in its runtime
against transformers' eager model on a padded batch, the table they print, the exit statuses,
the versions a passing validation records in export.json, and the one warning a load gives when
the installed runtime differs from the recorded one.

The command runs ferry's Python package in the interpreter FERRY_PYTHON names: here this
test's own, with ./python on PYTHONPATH (not pip-installed in it; `make venv`'s .pth puts the
same ./python on its path)."""

import json
import logging
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ROOT, ferry_export, make_checkpoint, record_sizes, run_ferry

PYTHON_ENV = {"FERRY_PYTHON": sys.executable,
              "PYTHONPATH": os.pathsep.join([str(ROOT / "python"),
                                             os.environ.get("PYTHONPATH", "")])}


def validate(*args, env=None):
    """`ferry validate ARGS` in this Python -> (exit status, stdout, stderr)."""
    return run_ferry("validate", *args, env=dict(PYTHON_ENV, **(env or {})))


def table_rows(stdout):
    """{output: (max |Δ|, bound text, PASS/FAIL)} from the printed table, whose columns are
    two or more spaces apart."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("output "))
    rows = {}
    for line in lines[start + 1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) != 4:
            break
        output, diff, bound, result = cells
        rows[output] = (float(diff), bound, result.split(" (")[0])
    return rows


def recorded(out):
    return json.loads((Path(out) / "export.json").read_text()).get("validated_with")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("validate") / "ckpt", "qwen3", seed=11)


@pytest.fixture(scope="module")
def onnx_export(ckpt, tmp_path_factory):
    """A dynamic ONNX export, never validated in place (tests copy it)."""
    return ferry_export(ckpt, tmp_path_factory.mktemp("onnx") / "out", "--dynamic", "--quiet")


def copy_export(src, tmp_path, name="out"):
    return Path(shutil.copytree(src, tmp_path / name))


def test_good_export_passes_and_records_versions(onnx_export, ckpt, tmp_path):
    import onnxruntime
    import torch
    import transformers

    out = copy_export(onnx_export, tmp_path)
    assert recorded(out) is None
    rc, stdout, stderr = validate(out)
    assert rc == 0, (stdout, stderr)
    assert stderr == ""
    assert f"vs transformers eager ({ckpt.resolve()})" in stdout   # the recorded source
    rows = table_rows(stdout)
    assert list(rows) == ["logits"]
    diff, bound, result = rows["logits"]
    assert 0 < diff <= 1e-4 and bound == "0.0001" and result == "PASS"
    assert stdout.rstrip().endswith("PASS")
    assert recorded(out) == {
        "runtime": {"onnxruntime": onnxruntime.__version__.split("+")[0]},
        "reference": {"transformers": transformers.__version__.split("+")[0],
                      "torch": torch.__version__.split("+")[0]}}


@pytest.mark.parametrize("inputs", ["input_ids,attention_mask,position_ids", "input_ids"])
def test_plain_export_inputs_validate(ckpt, tmp_path, inputs):
    """The eager model is called as the export is: with generate()'s position_ids where the
    graph takes them, with no padding where it takes no mask (it attends to every token)."""
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--inputs", inputs, "--quiet")
    rc, stdout, stderr = validate(out)
    assert rc == 0, (stdout, stderr)
    diff, _, result = table_rows(stdout)["logits"]
    assert 0 < diff <= 1e-4 and result == "PASS"


@pytest.mark.parametrize("flags,outputs", [
    (["--dynamic", "--for-generation"], ["prefill: logits, prompt", "decode: logits, 8 steps"]),
    (["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "24",
      "--multi-token-decode"], ["decode: logits, prompt", "decode: logits, 8 steps"]),
    (["--format", "openvino", "--dynamic", "--for-generation"],
     ["decode: logits, prompt", "decode: logits, 8 steps"]),
], ids=["onnx-dynamic-cache", "onnx-static-cache", "openvino-stateful"])
def test_generation_exports_validate(ckpt, tmp_path, flags, outputs):
    out = ferry_export(ckpt, tmp_path / "gen", *flags, "--quiet")
    rc, stdout, stderr = validate(out)
    assert rc == 0, (stdout, stderr)
    rows = table_rows(stdout)
    assert list(rows) == outputs
    assert all(0 < diff <= 1e-4 and result == "PASS" for diff, _, result in rows.values()), rows
    runtime = "openvino" if "openvino" in flags else "onnxruntime"
    assert list(recorded(out)["runtime"]) == [runtime]


def _flip_weight(out, name):
    """Negates the checkpoint tensor `name` in the export's model.onnx.data, export.json's
    sizes and CRCs set to match (loading refuses the file otherwise): other weights that only
    running the export against the checkpoint can find."""
    import onnx

    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    (tensor,) = [t for t in model.graph.initializer if t.name == name]
    place = {e.key: int(e.value) for e in tensor.external_data if e.key in ("offset", "length")}
    data = np.fromfile(out / "model.onnx.data", dtype=np.uint8)
    values = data[place["offset"]:place["offset"] + place["length"]].view(np.float32)
    values *= -1
    data.tofile(out / "model.onnx.data")
    record_sizes(out)


def test_tampered_weights_fail(onnx_export, tmp_path):
    out = copy_export(onnx_export, tmp_path)
    _flip_weight(out, "model.layers.1.self_attn.o_proj.weight")
    before = (out / "export.json").read_bytes()
    rc, stdout, stderr = validate(out)
    assert rc == 1, (stdout, stderr)
    diff, _, result = table_rows(stdout)["logits"]
    assert diff > 1e-2 and result == "FAIL"
    assert stdout.rstrip().endswith("FAIL")
    assert (out / "export.json").read_bytes() == before     # nothing recorded


def _negate_zip_entry(archive, prefix):
    """Negates the fp32 values of the first entry under `prefix` in the zip `archive`, in
    place, its CRC-32 set to match: an archive every reader takes, holding other weights."""
    import struct
    import zipfile
    import zlib

    with zipfile.ZipFile(archive) as z:
        info = next(i for i in z.infolist() if i.filename.startswith(prefix) and i.file_size)
    data = bytearray(Path(archive).read_bytes())
    local = info.header_offset
    name_len, extra_len = struct.unpack("<HH", data[local + 26:local + 30])
    start = local + 30 + name_len + extra_len
    values = np.frombuffer(bytes(data[start:start + info.file_size]), dtype=np.float32)
    data[start:start + info.file_size] = (-values).tobytes()
    crc = struct.pack("<I", zlib.crc32(data[start:start + info.file_size]))
    data[local + 14:local + 18] = crc
    central = data.find(b"PK\x01\x02")
    while central >= 0:
        length = struct.unpack("<H", data[central + 28:central + 30])[0]
        if data[central + 46:central + 46 + length].decode() == info.filename:
            data[central + 16:central + 20] = crc
        central = data.find(b"PK\x01\x02", central + 4)
    Path(archive).write_bytes(data)


def test_tampered_decode_program_fails(ckpt, tmp_path):
    """Each generation program runs with the weights it holds (the runner gave
    decode prefill's weights, and a decode.pt2 edited since the export passed)."""
    out = ferry_export(ckpt, tmp_path / "gen", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "24", "--quiet")
    _negate_zip_entry(out / "decode.pt2", "decode/data/weights/weight_")
    record_sizes(out)
    rc, stdout, stderr = validate(out)
    assert rc == 1, (stdout, stderr)
    rows = table_rows(stdout)
    assert rows["prefill: logits, prompt"][2] == "PASS"
    assert rows["decode: logits, 8 steps"][2] == "FAIL", rows


@pytest.mark.parametrize("old,new,needle", [
    ('<layer id="1"', '<lay3r id="1"', "openvino refuses component model "
     "(openvino_model.xml): Start-end tags mismatch at offset"),
    ('names="attention_mask"', 'names="attention_masz"', "component model "
     "(openvino_model.xml): the program's inputs are input_ids int64, attention_masz int64, "
     "where export.json lists input_ids int64, attention_mask int64: one of them was edited"),
    ('names="logits"', 'names="logitz"', "the program's outputs are logitz float32, where "
     "export.json lists logits float32"),
    # OpenVINO names every node "opsetN::Type" in its messages: still a broken IR (found by
    # review: exit 3, as if this OpenVINO lacked an op)
    ('type="Multiply"', 'type="Multiplx"', "openvino refuses component model "
     "(openvino_model.xml): "),
], ids=["xml-syntax", "input-renamed", "output-renamed", "op-typo"])
def test_edited_openvino_ir_fails(ckpt, tmp_path, old, new, needle):
    """An IR edited in place (its size kept) is a broken export: exit 1, the cause in one line
    (exit 3, "cannot run here", which scripts take for "skip", and a message
    that kept only OpenVINO's "Exception from src/...:84:")."""
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic", "--quiet")
    xml = out / "openvino_model.xml"
    text = xml.read_text()
    assert len(old) == len(new) and text.count(old) >= 1
    xml.write_text(text.replace(old, new, 1))
    record_sizes(out)
    rc, stdout, stderr = validate(out, "--no-record")
    assert (rc, stdout) == (1, ""), (rc, stderr)
    (line,) = stderr.splitlines()
    assert line.startswith("ferry: error: validate: ") and needle in line, line
    assert "Exception from" not in line


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_program_and_manifest_that_disagree_fail(ckpt, onnx_export, tmp_path, fmt):
    """An input renamed in export.json alone (the runner still fed the program,
    and the export passed and was recorded as validated), and for ONNX a program its reader
    cannot parse (was exit 3, "cannot run here"): exit 1, one line, nothing recorded."""
    out = copy_export(onnx_export, tmp_path) if fmt == "onnx" else ferry_export(
        ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    inputs = manifest["components"]["model"]["metadata"]["inputs"]
    assert inputs[1]["name"] == "attention_mask"
    inputs[1]["name"] = "mask"
    (out / "export.json").write_text(json.dumps(manifest))
    rc, stdout, stderr = validate(out)
    assert (rc, stdout) == (1, ""), (rc, stderr)
    file = "model.onnx" if fmt == "onnx" else "openvino_model.xml"
    assert stderr.splitlines() == [
        f"ferry: error: validate: component model ({file}): the program's inputs are input_ids "
        "int64, attention_mask int64, where export.json lists input_ids int64, mask int64: one "
        "of them was edited since the export (the program has no input mask)"], stderr
    assert "validated_with" not in json.loads((out / "export.json").read_text())
    if fmt == "onnx":
        program = out / "model.onnx"
        # a ModelProto's first byte (libferry refuses any other), then no valid protobuf
        program.write_bytes(b"\x08" + b"\xff" * (program.stat().st_size - 1))
        inputs[1]["name"] = "attention_mask"
        (out / "export.json").write_text(json.dumps(manifest))
        record_sizes(out)
        rc, stdout, stderr = validate(out, "--no-record")
        assert (rc, stdout) == (1, "") and len(stderr.splitlines()) == 1, (rc, stderr)
        assert "onnx refuses component model (model.onnx): " in stderr, stderr


def test_program_size_other_than_manifest_fails(onnx_export, tmp_path):
    """A size export.json fixes must be the program's (a static axis edited in
    the ONNX program exited 3, onnxruntime's ShapeInferenceError)."""
    import onnx

    out = copy_export(onnx_export, tmp_path)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    vocab = model.graph.output[0].type.tensor_type.shape.dim[2]
    vocab.dim_value += 1
    onnx.save(model, str(out / "model.onnx"))
    record_sizes(out)
    rc, stdout, stderr = validate(out, "--no-record")
    assert (rc, stdout) == (1, ""), (rc, stderr)
    assert stderr.splitlines() == [
        f"ferry: error: validate: component model (model.onnx): the program's output logits is "
        f"[?, ?, {vocab.dim_value}], where export.json says [batch, sequence, "
        f"{vocab.dim_value - 1}]: one of them was edited since the export"], stderr


def test_another_checkpoint_fails(onnx_export, tmp_path):
    other = make_checkpoint(tmp_path / "other", "qwen3", seed=12)
    rc, stdout, stderr = validate(onnx_export, "--model", other, "--no-record")
    assert rc == 1, (stdout, stderr)
    assert f"vs transformers eager ({other})" in stdout
    assert table_rows(stdout)["logits"][2] == "FAIL"
    # a vocabulary of another size: the shapes themselves disagree
    wide = make_checkpoint(tmp_path / "wide", "qwen3", seed=11, vocab_size=200)
    rc, stdout, _ = validate(onnx_export, "--model", wide, "--no-record")
    assert rc == 1
    assert "FAIL (shape [2, 16, 160], eager [2, 16, 200])" in stdout
    # a narrower one cannot read the prompt (a traceback, the embedding's
    # IndexError)
    narrow = make_checkpoint(tmp_path / "narrow", "qwen3", seed=11, vocab_size=100)
    rc, stdout, stderr = validate(onnx_export, "--model", narrow, "--no-record")
    assert (rc, stdout) == (1, ""), (rc, stderr)
    (line,) = stderr.splitlines()
    assert line.startswith("ferry: error: validate: the eager reference's vocabulary has 100 "
                           "tokens, fewer than the export's"), line


def test_quantized_export_checks_top1(ckpt, tmp_path):
    out = ferry_export(ckpt, tmp_path / "q8", "--dynamic", "--quantize", "int8", "--quiet")
    rc, stdout, stderr = validate(out, "--no-record")
    assert rc == 0, (stdout, stderr)
    assert "top-1 agreement" in stdout.splitlines()[1]
    diff, bound, result = table_rows(stdout)["logits"]
    agreement, floor = map(float, bound.split(" >= "))
    assert agreement >= floor == 0.5 and result == "PASS"
    assert diff > 1e-4     # int8 weights do move the logits: no abs bound is claimed
    # the floor is a real check: one above the agreement fails (int4's, below int8's 1.0)
    q4 = ferry_export(ckpt, tmp_path / "q4", "--dynamic", "--quantize", "int4", "--quiet")
    rc, stdout, _ = validate(q4, "--no-record", "--min-top1", "1")
    agreement = float(table_rows(stdout)["logits"][1].split(" >= ")[0])
    assert rc == 1 and agreement < 1 and table_rows(stdout)["logits"][2] == "FAIL"
    # the other check's option: the command line's fault (exit 2)
    rc, _, stderr = validate(out, "--atol", "0.1")
    assert rc == 2 and "--min-top1" in stderr and len(stderr.splitlines()) == 1


@pytest.mark.parametrize("args,needle", [
    (["--atol", "-1"], "argument --atol: '-1' is not a number in [0, inf)"),
    (["--atol", "nan"], "argument --atol: 'nan' is not a number in [0, inf)"),
    (["--atol", "inf"], "argument --atol: 'inf' is not a number in [0, inf)"),
    (["--min-top1", "1.5"], "argument --min-top1: '1.5' is not a number in [0, 1]"),
    (["--atol", "1", "--min-top1", "0.5"], "not allowed with argument --atol"),
    (["--min-top1", "0.5"], "--min-top1 applies to quantized exports only"),
], ids=["negative", "nan", "inf", "top1-over-1", "both", "top1-unquantized"])
def test_bounds_out_of_range_are_usage_errors(onnx_export, args, needle):
    """These ran the check and failed it (exit 1), or took both options."""
    before = (onnx_export / "export.json").read_bytes()
    rc, stdout, stderr = validate(onnx_export, *args)
    assert rc == 2 and stdout == "" and len(stderr.splitlines()) == 1, (stdout, stderr)
    assert needle in stderr, stderr
    assert (onnx_export / "export.json").read_bytes() == before


def test_atol_replaces_the_bound(onnx_export):
    rc, stdout, _ = validate(onnx_export, "--no-record", "--atol", "1e-9")
    assert rc == 1
    assert table_rows(stdout)["logits"][1:] == ("1e-09", "FAIL")


def test_no_record_leaves_export_json(onnx_export):
    before = (onnx_export / "export.json").read_bytes()
    rc, stdout, _ = validate(onnx_export, "--no-record", "--quiet")
    assert rc == 0 and stdout == ""
    assert (onnx_export / "export.json").read_bytes() == before


def test_working_directory_is_not_imported_from(onnx_export, tmp_path):
    """A ferry/ in the directory validate runs from (an untrusted download) is not imported in
    place of the package: `python -c` would put the working directory first on sys.path."""
    import subprocess

    from conftest import FERRY_BIN

    (tmp_path / "ferry").mkdir()
    (tmp_path / "ferry" / "__init__.py").write_text('raise SystemExit("imported from cwd")\n')
    proc = subprocess.run([str(FERRY_BIN), "validate", str(onnx_export), "--no-record"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=600,
                          env=dict(os.environ, **PYTHON_ENV))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imported from cwd" not in proc.stdout + proc.stderr


def test_export_validate_flag(ckpt, tmp_path):
    rc, stdout, stderr = run_ferry("export", ckpt, tmp_path / "out", "--dynamic", "--validate",
                                   env=PYTHON_ENV)
    assert rc == 0, (stdout, stderr)
    assert table_rows(stdout)["logits"][2] == "PASS"
    assert recorded(tmp_path / "out")["runtime"]


def test_export_validate_that_cannot_run_keeps_the_export(ckpt, tmp_path):
    """Validation fails (here: cannot run): the status says so, the export stays."""
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--dynamic", "--validate", "-q",
                              env={"FERRY_PYTHON": str(tmp_path / "no-python")})
    assert rc == 3, stderr
    lines = stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("ferry: error: ") for line in lines), stderr
    assert "needs a Python that can import the ferry package" in lines[0]
    assert "was written, but it could not be validated; it is left there" in lines[1]
    assert (tmp_path / "out" / "model.onnx").is_file()


def _no_transformers(tmp_path):
    """A PYTHONPATH entry under which `import transformers` fails as if it were absent."""
    fake = tmp_path / "hide" / "transformers"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'transformers'\", name='transformers')\n")
    return str(fake.parent)


def test_without_transformers_one_clear_line(onnx_export, tmp_path):
    path = os.pathsep.join([_no_transformers(tmp_path), PYTHON_ENV["PYTHONPATH"]])
    rc, stdout, stderr = validate(onnx_export, env={"PYTHONPATH": path})
    assert rc == 3, (stdout, stderr)
    assert stdout == ""
    (line,) = stderr.splitlines()
    assert line.startswith("ferry: error: validate: ")
    assert "transformers" in line and "pip install transformers" in line


def test_without_a_python_that_has_ferry(onnx_export, tmp_path):
    # this interpreter without site-packages (-S) or ./python: `make venv` puts this tree's
    # ferry on the venv's path (a .pth file), which -S leaves out
    python = tmp_path / "python-without-ferry"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    rc, stdout, stderr = run_ferry("validate", onnx_export,
                                   env={"FERRY_PYTHON": str(python), "PYTHONPATH": ""})
    assert rc == 3 and stdout == ""
    (line,) = stderr.splitlines()
    assert "needs a Python that can import the ferry package" in line
    assert f"tried {python} ($FERRY_PYTHON)" in line


def test_source_gone_asks_for_model(ckpt, tmp_path):
    moved = shutil.copytree(ckpt, tmp_path / "ckpt")
    out = ferry_export(moved, tmp_path / "out", "--dynamic", "--quiet")
    source = json.loads((out / "export.json").read_text())["source"]
    assert source == {"model": str(moved), "revision": None, "path": str(moved.resolve())}
    shutil.rmtree(moved)
    rc, _, stderr = validate(out)
    assert rc == 1
    (line,) = stderr.splitlines()
    assert "no longer holds it" in line and "--model" in line
    rc, stdout, _ = validate(out, "--model", ckpt)
    assert rc == 0, stdout


def test_python_beside_the_executable_is_found(onnx_export, tmp_path):
    """Without FERRY_PYTHON, python3 next to the ferry executable (a venv's bin/) comes before
    the one on PATH (here one that only fails)."""
    from conftest import FERRY_BIN

    bin_dir, other = tmp_path / "bin", tmp_path / "other"
    bin_dir.mkdir()
    other.mkdir()
    shutil.copy2(FERRY_BIN, bin_dir / "ferry")
    for where, script in ((bin_dir, f'exec {sys.executable} "$@"'),
                          (other, "echo 'the python3 on PATH ran' >&2; exit 1")):
        (where / "python3").write_text(f"#!/bin/sh\n{script}\n")
        (where / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "FERRY_PYTHON"}
    env.update(PYTHONPATH=PYTHON_ENV["PYTHONPATH"], PATH=f"{other}:/usr/bin:/bin")
    import subprocess

    proc = subprocess.run([str(bin_dir / "ferry"), "validate", str(onnx_export), "--no-record"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert table_rows(proc.stdout)["logits"][2] == "PASS"


def test_bound_grows_with_large_logits(tmp_path):
    """Logits beyond ±10 (a real model's reach ~30) scale the bound in proportion."""
    import torch
    from transformers import AutoModelForCausalLM

    import ferry
    from ferry import _validation_runs as runs

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", seed=3)
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    model.save_pretrained(ckpt)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--quiet")
    report = ferry.validate(out, record=False)
    ids, mask, _ = runs.example_prompt(json.loads((out / "export.json").read_text()), "model",
                                       160)
    largest = np.abs(runs.reference_logits(runs.load_reference(str(ckpt)), ids, mask)[mask == 1]
                     ).max()
    assert largest > 20
    (check,) = report.checks
    assert check.tolerance == pytest.approx(1e-4 * largest / 10)
    assert report.passed and check.max_abs_diff > 1e-6
    # an explicit --atol is taken as given
    assert ferry.validate(out, atol=1e-4, record=False).checks[0].tolerance == 1e-4


def test_half_precision_bound_follows_transformers_own(tmp_path):
    """An fp16 export of a model that fp16 moves far (weights of std 0.3: logits ~12) is held
    to twice what transformers' own fp16 model moves them (the fixed bound
    failed an export as accurate as transformers' own), and still fails a broken one."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import ferry

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=256, initializer_range=0.3)).save_pretrained(
        tmp_path / "ckpt")
    out = ferry_export(tmp_path / "ckpt", tmp_path / "out", "--dynamic", "--dtype", "fp16",
                       "--quiet")
    report = ferry.validate(out, record=False)
    (check,) = report.checks
    assert report.passed and 0.02 < check.max_abs_diff <= check.tolerance < 0.5, check
    _flip_weight(out, "model.layers.1.self_attn.o_proj.weight")
    assert not ferry.validate(out, record=False).passed


def test_help():
    rc, stdout, _ = run_ferry("validate", "--help")
    assert rc == 0
    for needle in ("usage: ferry validate EXPORT", "--model CKPT", "FERRY_PYTHON",
                   "1e-4 for fp32", "top-1", "exit status: 0", "3 validation cannot run"):
        assert needle in stdout, needle
    rc, stdout, _ = run_ferry("--help")
    assert rc == 0 and "validate EXPORT" in stdout and "3 validation cannot run" in stdout
    rc, stdout, _ = run_ferry("export", "--help")
    assert rc == 0 and "--validate" in stdout
    rc, _, stderr = run_ferry("validate")
    assert rc == 2 and "expected EXPORT" in stderr
    rc, _, stderr = validate("somewhere", "--bogus")
    assert rc == 2 and len(stderr.splitlines()) == 1 and "--bogus" in stderr


def test_python_api(onnx_export):
    import ferry

    report = ferry.validate(onnx_export, record=False)
    assert report.passed
    (check,) = report.checks
    assert check.output == "logits" and check.tolerance == 1e-4
    assert 0 < check.max_abs_diff <= 1e-4 and check.positions == 2 * 16 - 16 // 3
    assert "logits" in str(report) and report.recorded is False


# --- version drift ----------------------------------------------------------------------------


def _drift_records(caplog, path):
    from ferry import ExportedModel

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ferry"):
        ExportedModel.from_pretrained(path).close()
    return [r for r in caplog.records if r.name == "ferry"]


def test_version_drift_warns_once(onnx_export, tmp_path, caplog):
    import onnxruntime

    out = copy_export(onnx_export, tmp_path)
    rc, _, _ = validate(out, "--quiet")
    assert rc == 0
    installed = onnxruntime.__version__.split("+")[0]
    assert recorded(out)["runtime"] == {"onnxruntime": installed}
    assert _drift_records(caplog, out) == []          # the versions match: silence

    manifest = json.loads((out / "export.json").read_text())
    manifest["validated_with"]["runtime"]["onnxruntime"] = "0.0.1"
    manifest["validated_with"]["reference"]["torch"] = "0.0.1"   # not what runs the export
    (out / "export.json").write_text(json.dumps(manifest))
    (record,) = _drift_records(caplog, out)
    message = record.getMessage()
    assert f"onnxruntime {installed} is installed, it was validated with 0.0.1" in message
    assert "torch" not in message
    # validating again records what is installed, and the warning goes
    rc, _, stderr = validate(out, "--quiet")
    assert rc == 0 and "ferry: warning: " in stderr and "0.0.1" in stderr
    assert _drift_records(caplog, out) == []
