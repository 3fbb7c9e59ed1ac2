"""The command line as a newcomer meets it: torch's dtype names, a "did you mean" for a mistyped
option or command, a hint for weights ferry does not read (GGUF, pytorch_model.bin), a missing
path named as a directory rather than looked up on the hub, and `ferry inspect` folding what
repeats per layer into one line (--verbose lists each)."""

import json
import os
import re
import shutil
import sys

import pytest
import torch

from safetensors.torch import load_file

from conftest import FIXTURE, ROOT, ferry_export, make_checkpoint, run_ferry

LAYERS = 4


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    """A tiny Llama with enough layers that folding them shows."""
    return make_checkpoint(tmp_path_factory.mktemp("newcomer") / "ckpt", "llama",
                           num_hidden_layers=LAYERS)


def one_error_line(rc, stdout, stderr, code):
    """The single stderr line of a failure that exited `code` and printed nothing else."""
    assert rc == code and stdout == "", (rc, stdout, stderr)
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


# ---------------------------------------------------------------------------------------------
# --dtype by torch's names


@pytest.mark.parametrize("torch_name,short", [("float16", "fp16"), ("bfloat16", "bf16"),
                                              ("float32", "fp32")])
def test_dtype_takes_torchs_names(tmp_path, torch_name, short):
    """--dtype float16 is --dtype fp16: the same precision, the same weight bytes."""
    by_torch = ferry_export(FIXTURE, tmp_path / "torch", "--dtype", torch_name, "-q")
    by_short = ferry_export(FIXTURE, tmp_path / "short", "--dtype", short, "-q")
    precision = [json.loads((out / "export.json").read_text())["components"]["model"]
                 ["metadata"]["precision"] for out in (by_torch, by_short)]
    assert precision == [short, short]
    assert (by_torch / "model.onnx.data").read_bytes() == \
        (by_short / "model.onnx.data").read_bytes()


def test_dtype_refusal_and_help_name_both(tmp_path, build):
    rc, stdout, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "--dtype", "float64",
                                   binary=build)
    assert one_error_line(rc, stdout, stderr, 2) == \
        "ferry: error: --dtype float64: expected fp32, fp16 or bf16 (or float32, float16, bfloat16)"
    assert not (tmp_path / "out").exists()
    rc, help_text, _ = run_ferry("export", "--help")
    assert rc == 0 and "torch's names float32, float16, bfloat16 too" in help_text


@pytest.mark.parametrize("dtype", ["float16", "torch.float16", torch.float16, "fp16"],
                         ids=["name", "torch-text", "torch-dtype", "short"])
def test_python_config_takes_the_same_names(dtype):
    from ferry import OnnxConfig

    assert OnnxConfig(dtype=dtype).to_dict()["dtype"] in ("float16", "fp16")


def test_python_config_refuses_other_dtypes():
    from ferry import FerryError, OnnxConfig

    with pytest.raises(FerryError, match="'dtype' must be .*float16"):
        OnnxConfig(dtype="torch.float64")


# ---------------------------------------------------------------------------------------------
# "did you mean"


@pytest.mark.parametrize("args,line", [
    (["export", "{ckpt}", "{out}", "--dynamc"],
     "ferry: error: export: unknown option '--dynamc'; did you mean --dynamic? (see ferry export "
     "--help)"),
    (["export", "{ckpt}", "{out}", "--dtpye=fp16"],
     "ferry: error: export: unknown option '--dtpye'; did you mean --dtype? (see ferry export "
     "--help)"),
    (["export", "{ckpt}", "{out}", "--for-generaton"],
     "ferry: error: export: unknown option '--for-generaton'; did you mean --for-generation? "
     "(see ferry export --help)"),
    (["export", "{ckpt}", "{out}", "--quant", "int4"],
     "ferry: error: export: ambiguous option '--quant' (--quantize, --quantize-embeddings, "
     "--quant-method; see ferry export --help)"),
    # nothing near: no guess
    (["export", "{ckpt}", "{out}", "--bogus"],
     "ferry: error: export: unknown or incomplete option '--bogus' (see ferry export --help)"),
    (["graph", "{ckpt}", "--stagee", "lowered"],
     "ferry: error: graph: unknown option '--stagee'; did you mean --stage? (see ferry graph "
     "--help)"),
    (["inspect", "{out}", "--verbos"],
     "ferry: error: inspect: unknown option '--verbos'; did you mean --verbose? (see ferry "
     "inspect --help)"),
    (["inspect", "{out}", "--jsn"],
     "ferry: error: inspect: unknown option '--jsn'; did you mean --json? (see ferry inspect "
     "--help)"),
    (["exprot", "{ckpt}", "{out}"],
     "ferry: error: unknown command 'exprot'; did you mean export? (commands: export, inspect, "
     "graph, validate; see ferry --help)"),
    (["inspct", "{out}"],
     "ferry: error: unknown command 'inspct'; did you mean inspect? (commands: export, inspect, "
     "graph, validate; see ferry --help)"),
    (["frobnicate"],
     "ferry: error: unknown command 'frobnicate' (commands: export, inspect, graph, validate; "
     "see ferry --help)"),
], ids=["export", "export-with-value", "export-long", "ambiguous", "far", "graph", "inspect",
        "inspect-short", "command", "command-inspect", "command-far"])
def test_mistyped_option_or_command(ckpt, tmp_path, build, args, line):
    out = tmp_path / "out"
    rc, stdout, stderr = run_ferry(*[a.format(ckpt=ckpt, out=out) for a in args], binary=build)
    assert one_error_line(rc, stdout, stderr, 2) == line
    assert list(tmp_path.iterdir()) == []


def test_mistyped_validate_option(tmp_path):
    """validate's options are read by ferry's Python package: the same suggestion."""
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, stdout, stderr = run_ferry("validate", tmp_path / "out", "--modle", "x", env=env)
    assert one_error_line(rc, stdout, stderr, 2) == (
        "ferry: error: validate: unknown option '--modle'; did you mean --model? (see ferry "
        "validate --help)")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# Weights ferry does not read


def test_pytorch_bin_hint_converts(ckpt, tmp_path, build):
    """A checkpoint of pytorch_model.bin (and a Trainer's training_args.bin): one line with a
    line of Python that makes safetensors of it, which ferry then exports. The Python API says
    the same."""
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(ckpt / "config.json", pickled)
    torch.save(load_file(ckpt / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "training_args.bin").write_bytes(b"not weights")
    rc, stdout, stderr = run_ferry("export", pickled, tmp_path / "out", binary=build)
    snippet = (f"transformers.LlamaForCausalLM.from_pretrained('{pickled}')"
               ".save_pretrained('NEW_DIR', safe_serialization=True)")
    assert one_error_line(rc, stdout, stderr, 1) == (
        f"ferry: error: {pickled}: holds PyTorch weights (pytorch_model.bin) and no safetensors, "
        "the format ferry reads (model.safetensors or model.safetensors.index.json); make them in "
        f"Python: {snippet}")
    assert not (tmp_path / "out").exists()

    from ferry import FerryError, OnnxExporter

    with pytest.raises(FerryError) as raised:
        OnnxExporter().export(pickled)
    assert str(raised.value) == stderr.strip()[len("ferry: error: "):]

    import transformers  # the hint, run as printed

    converted = tmp_path / "converted"
    eval(snippet.replace("NEW_DIR", str(converted)), {"transformers": transformers})
    ferry_export(converted, tmp_path / "out", "-q")


def test_gguf_hint(tmp_path, build):
    model = tmp_path / "gguf"
    model.mkdir()
    (model / "tiny-Q4_K_M.gguf").write_bytes(b"GGUF")
    rc, stdout, stderr = run_ferry("export", model, tmp_path / "out", binary=build)
    assert one_error_line(rc, stdout, stderr, 1) == (
        f"ferry: error: {model}: holds GGUF weights (tiny-Q4_K_M.gguf) and no safetensors, the "
        "format ferry reads (model.safetensors or model.safetensors.index.json); make them in "
        "Python (with the gguf package): transformers.AutoModelForCausalLM.from_pretrained("
        f"'{model}', gguf_file='tiny-Q4_K_M.gguf').save_pretrained('NEW_DIR')")
    assert not (tmp_path / "out").exists()


def test_hint_names_are_python_literals(tmp_path, build):
    """The line of Python a hint gives holds each name as one string literal: a file or a
    directory named with quotes does not end the literal (pasted, the rest of the name ran as
    code). The call the line makes receives the names as they are on disk."""
    import ast

    model = tmp_path / "it's"
    model.mkdir()
    name = "'*0)if 0 else __import__('os').system('echo PWNED')#.gguf"
    (model / name).write_bytes(b"GGUF")
    rc, stdout, stderr = run_ferry("export", model, tmp_path / "out", binary=build)
    line = one_error_line(rc, stdout, stderr, 1)
    call = ast.parse(line.split("gguf package): ", 1)[1], mode="eval").body  # .save_pretrained
    load = call.func.value
    assert [a.value for a in load.args] == [str(model)]
    assert [(k.arg, k.value.value) for k in load.keywords] == [("gguf_file", name)]
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# A missing path, a hub id not in the cache


@pytest.mark.parametrize("path", ["./my-lama", "../my-lama", "ABS", "my/nested/lama", "my-lama/"],
                         ids=["dot", "dotdot", "absolute", "two-slashes", "trailing-slash"])
def test_missing_path_is_a_missing_directory(tmp_path, build, path):
    work = tmp_path / "work"
    work.mkdir()
    path = str(tmp_path / "absent") if path == "ABS" else path
    rc, stdout, stderr = run_ferry("export", path, "out", binary=build, cwd=work,
                                   env={"HF_HUB_CACHE": str(tmp_path / "hub")})
    assert one_error_line(rc, stdout, stderr, 1) == f"ferry: error: {path}: no such directory"
    assert list(tmp_path.iterdir()) == [work] and list(work.iterdir()) == []


def test_hub_id_not_cached_says_offline(tmp_path, build):
    cache = tmp_path / "hub"
    rc, stdout, stderr = run_ferry("export", "org/name", tmp_path / "out", binary=build,
                                   env={"HF_HUB_CACHE": str(cache)})
    assert one_error_line(rc, stdout, stderr, 1) == (
        f"ferry: error: org/name is not a directory and not in the Hugging Face cache (looked for "
        f"{cache}/models--org--name); this ferry works offline: download it first (hf download "
        "org/name) or use the ferry command `pip install` gives, which downloads")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------------------------
# ferry inspect: one line per pattern


def io_names(text):
    """The first word of each line indented by four (files, inputs, outputs, cache entries,
    symbols)."""
    return [line.split()[0] for line in text.splitlines()
            if line.startswith("    ") and not line.startswith("     ") and
            not line.startswith("    (none: starts empty)")]


def expand(name):
    """past_key_values.{0..2,5}.key -> its names, one per layer."""
    m = re.fullmatch(r"(.*)\{([0-9.,]+)\}(.*)", name)
    if not m:
        return [name]
    layers = []
    for part in m.group(2).split(","):
        first, _, last = part.partition("..")
        layers += range(int(first), int(last or first) + 1)
    return [f"{m.group(1)}{layer}{m.group(3)}" for layer in layers]


@pytest.mark.parametrize("flags", [
    ["--dynamic", "--for-generation"],
    ["--for-generation", "--static-cache", "--max-cache-len", "32"],
    ["--format", "openvino", "--dynamic", "--for-generation"],
], ids=["onnx-dynamic-cache", "onnx-static-cache", "openvino-stateful"])
def test_inspect_folds_layers(ckpt, tmp_path, build, flags):
    out = ferry_export(ckpt, tmp_path / "out", *flags, "-q")
    rc, brief, err = run_ferry("inspect", out, binary=build)
    assert rc == 0 and err == "", err
    rc, verbose, err = run_ferry("inspect", out, "--verbose", binary=build)
    assert rc == 0 and err == "", err
    assert run_ferry("inspect", out, "-v", binary=build)[1] == verbose

    # --verbose names every input, output and cache entry of export.json
    manifest = json.loads((out / "export.json").read_text())
    named = set(io_names(verbose))
    for component in manifest["components"].values():
        meta = component["metadata"]
        for entry in meta["inputs"] + meta["outputs"]:
            assert entry["name"] in named, (entry["name"], verbose)
        for pair in meta["cache"]["pairs"]:  # a stateful graph's: its variables, by input
            shown = {pair["input"]} if meta.get("stateful") else {pair["input"], pair["output"]}
            assert shown - {None} <= named, (pair, verbose)

    # the brief listing: the same names, each layer's folded into one line with its count
    folded = [line for line in brief.splitlines() if "{" in line]
    assert folded and all(line.endswith(f"  x{LAYERS}") for line in folded), brief
    assert all(f"{{0..{LAYERS - 1}}}" in line for line in folded), brief
    assert not [n for n in io_names(brief) if re.search(r"[._][0-9]+[._]", n)], brief
    assert sorted(n for name in io_names(brief) for n in expand(name)) == \
        sorted(io_names(verbose))
    assert len(brief.splitlines()) < len(verbose.splitlines())
    # each folded line is the verbose line of its layer 0, but for the name and count
    squeeze = {re.sub(r"\s+", " ", line).strip() for line in verbose.splitlines()}
    for line in folded:
        first = re.sub(r"\{[0-9.,]+\}", "0", re.sub(r"\s+", " ", line).strip())
        assert first[:-len(f" x{LAYERS}")] in squeeze, (line, verbose)
    # the summary lines stay
    summary = [line for line in brief.splitlines() if not line.startswith("    ")]
    assert summary == [line for line in verbose.splitlines() if not line.startswith("    ")]


def test_inspect_help_says_verbose():
    rc, text, _ = run_ferry("inspect", "--help")
    assert rc == 0 and "-v, --verbose" in text and "x30" in text
