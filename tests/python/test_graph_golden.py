"""Golden text dumps of the IR (`ferry graph`) per family x target: the semantic graph each
architecture builds and the graph lowered for standard ONNX, a decoder and an encoder lowered
for every other target (ort-cpu, ort-cuda, openvino, torch, executorch), plus the generation layouts of one
family in each format. A change to a builder, a lowering or a printer's naming shows up here as
a readable diff of the graph, before any runtime test says what broke.

The dumps hold names, shapes, attributes and constants, never weights' values, so the random
checkpoints the tests build (fixed seeds, fixed configs) give the same text every time.
After an intended change, regenerate and review the diff:
    FERRY_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/python/test_graph_golden.py
"""

import os
import subprocess
from pathlib import Path

import pytest

from conftest import ARCHS, FERRY_BIN, make_checkpoint

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
UPDATE = os.environ.get("FERRY_UPDATE_GOLDEN") == "1"

# (family, case name, ferry graph flags)
CASES = [(family, stage, ["--dynamic", "--stage", stage])
         for family in ARCHS for stage in ("semantic", "lowered")]
# every target, not only onnx-standard: a decoder and an encoder lowered for each, and the
# generation layout each other format writes
TARGETS = {"ort-cpu": ["--ort-fusions", "cpu"], "ort-cuda": ["--ort-fusions", "cuda"],
           "openvino": ["--format", "openvino"], "torch": ["--format", "pt2"],
           "executorch": ["--format", "executorch"]}
CASES += [(family, f"lowered-{target}", ["--dynamic", *flags, "--stage", "lowered"])
          for family in ("llama", "bert") for target, flags in TARGETS.items()]
CASES += [("bert", stage, ["--dynamic", "--stage", stage]) for stage in ("semantic", "lowered")]
CASES += [
    ("llama", "generation-stateful-lowered-openvino",
     ["--dynamic", "--for-generation", "--format", "openvino", "--stage", "lowered"]),
    ("llama", "generation-static-lowered-torch",
     ["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "16",
      "--multi-token-decode", "--format", "pt2", "--stage", "lowered"]),
    ("llama", "generation-static-lowered-executorch",
     ["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "16",
      "--multi-token-decode", "--format", "executorch", "--stage", "lowered"]),
    ("llama", "generation-dynamic-lowered-ort-cpu",
     ["--dynamic", "--for-generation", "--ort-fusions", "cpu", "--stage", "lowered"]),
]
CASES += [
    ("llama", "generation-dynamic-lowered",
     ["--dynamic", "--for-generation", "--stage", "lowered"]),
    ("llama", "generation-static-mtd-lowered",
     ["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "16",
      "--multi-token-decode", "--stage", "lowered"]),
    ("llama", "static-fp16-lowered", ["--dtype", "fp16", "--stage", "lowered"]),
]


def bert_checkpoint(path):
    """A tiny BertModel (pooler included), seed 3: an encoder's graph in every target."""
    import torch
    import transformers

    torch.manual_seed(3)
    config = transformers.BertConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                     num_attention_heads=4, vocab_size=96,
                                     max_position_embeddings=48)
    transformers.BertModel(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("golden")
    made = {family: make_checkpoint(root / family, family, seed=3) for family in ARCHS}
    made["bert"] = bert_checkpoint(root / "bert")
    return made


@pytest.mark.parametrize("family,case,flags", CASES, ids=[f"{f}-{c}" for f, c, _ in CASES])
def test_graph_matches_golden(checkpoints, family, case, flags):
    proc = subprocess.run([str(FERRY_BIN), "graph", str(checkpoints[family]), *flags],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    golden = GOLDEN / f"{family}-{case}.txt"
    if UPDATE:
        golden.write_text(proc.stdout)
    assert golden.exists(), f"{golden} is missing: run with FERRY_UPDATE_GOLDEN=1 and review it"
    want = golden.read_text()
    if proc.stdout != want:
        got, exp = proc.stdout.splitlines(), want.splitlines()
        first = next((i for i, (a, b) in enumerate(zip(got, exp)) if a != b),
                     min(len(got), len(exp)))
        pytest.fail(f"{golden.name} differs at line {first + 1}:\n"
                    f"  golden: {exp[first] if first < len(exp) else '(end)'}\n"
                    f"  now:    {got[first] if first < len(got) else '(end)'}\n"
                    "(regenerate with FERRY_UPDATE_GOLDEN=1 after an intended change)")


def test_every_golden_file_is_checked():
    """A golden file no case writes would pass unseen: every file belongs to a case."""
    names = {f"{f}-{c}.txt" for f, c, _ in CASES}
    assert {p.name for p in GOLDEN.glob("*.txt")} == names


def test_opset_is_checked_and_leaves_the_graph(checkpoints):
    """--opset belongs to the ONNX writer: `ferry graph` refuses one out of range and prints the
    same lowered graph for any valid one (its --help says so), naming the target it lowered for."""
    def graph(*flags):
        return subprocess.run([str(FERRY_BIN), "graph", str(checkpoints["llama"]), "--stage",
                               "lowered", *flags], capture_output=True, text=True, timeout=120)
    low, high, bad = graph("--opset", "17"), graph("--opset", "23"), graph("--opset", "5")
    assert low.returncode == 0 and high.returncode == 0, low.stderr + high.stderr
    assert low.stdout == high.stdout
    assert low.stdout.splitlines()[1] == "target onnx-standard"
    assert bad.returncode == 2 and "--opset 5" in bad.stderr and not bad.stdout
