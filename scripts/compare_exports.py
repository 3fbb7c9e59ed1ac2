#!/usr/bin/env python3
"""Two ferry builds, the same exports, the same inputs: max |difference| of every output in
onnxruntime. For refactors that must not change what an export computes.

    .venv/bin/python scripts/compare_exports.py OLD_FERRY NEW_FERRY [--work DIR]

For each family (tiny random checkpoints built by transformers, as the tests build them) and each
export mode (plain dynamic and static, fp16, generation: dynamic cache, multi-token, static
cache, static + multi-token), exports with both binaries, feeds both graphs the same random
inputs (padded batches, caches filled with random values) and prints the largest difference per
mode (nan: the old build refuses that family). Exits 1 if any exceeds --bound (default 1e-6).
"""

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from conftest import ARCHS, make_checkpoint, make_inputs  # noqa: E402

MODES = {
    "plain-dynamic": ["--dynamic"],
    "plain-static": ["--example-shape", "input_ids=2x7"],
    "plain-fp16": ["--dynamic", "--dtype", "fp16"],
    "gen-dynamic": ["--dynamic", "--for-generation"],
    "gen-multi-token": ["--dynamic", "--for-generation", "--multi-token-decode"],
    "gen-static": ["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "24"],
    "gen-static-mtd": ["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "24",
                       "--multi-token-decode"],
}


def feeds(session, vocab, rng):
    """Random inputs for every graph input, by name and shape (symbols -> small sizes)."""
    sizes = {"batch": 2, "sequence": 7, "past_sequence": 5, "max_cache_len": 24}
    names = [i.name for i in session.get_inputs()]
    shape_of = {i.name: i.shape for i in session.get_inputs()}
    batch = 2 if not isinstance(shape_of["input_ids"][0], int) else shape_of["input_ids"][0]
    seq = shape_of["input_ids"][1] if isinstance(shape_of["input_ids"][1], int) else 7
    ids, mask, pos = make_inputs(vocab, batch, seq, seed=1)
    out = {"input_ids": ids}
    if "position_ids" in names:  # a plain export computes its own unless --inputs names them
        out["position_ids"] = pos
    for i in session.get_inputs():
        if i.name in out:
            continue
        dims = []
        for d in i.shape:
            if isinstance(d, int):
                dims.append(d)
            elif d in sizes:
                dims.append(sizes[d])
            else:  # past_sequence + sequence, past_sequence + 1
                dims.append(sum(int(t) if t.strip().isdigit() else sizes[t.strip()]
                                for t in d.split("+")))
        if i.name == "attention_mask":
            if i.type == "tensor(bool)":
                slots = np.arange(dims[-1])[None, :] <= (np.arange(dims[2])[:, None] + 5)
                out[i.name] = np.broadcast_to(slots, dims).copy()
            else:
                m = np.ones(dims, np.int64)
                m[1, :2] = 0
                out[i.name] = m
        elif i.name.endswith("cumulative_length"):
            out[i.name] = np.array([5], np.int64)
        else:
            dt = np.float16 if "float16" in i.type else np.float32
            out[i.name] = rng.standard_normal(dims).astype(dt)
    if "past_key_values.0.key" in names and "position_ids" in out:  # positions follow the past
        out["position_ids"] = out["position_ids"] + 5
    return out


def run(export_dir, name, inputs):
    s = ort.InferenceSession(str(export_dir / f"{name}.onnx"), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, inputs)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--work")
    ap.add_argument("--bound", type=float, default=1e-6)
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="ferry-compare-"))
    worst_all = 0.0
    print(f"{'family':8} " + " ".join(f"{m:>16}" for m in MODES))
    for family in ARCHS:
        ckpt = make_checkpoint(work / family / "ckpt", family, seed=11)
        row = []
        for mode, flags in MODES.items():
            dirs = {}
            for label, binary in (("old", args.old), ("new", args.new)):
                d = work / family / f"{mode}-{label}"
                shutil.rmtree(d, ignore_errors=True)
                proc = subprocess.run([binary, "export", str(ckpt), str(d), "-q", *flags],
                                      capture_output=True, text=True)
                if proc.returncode != 0 and label == "old":
                    break   # a family the old build does not know: nothing to compare
                if proc.returncode != 0:
                    sys.exit(f"{family} {mode}: the new build failed: {proc.stderr}")
                dirs[label] = d
            if "new" not in dirs:
                row.append(float("nan"))
                continue
            worst = 0.0
            for comp in sorted(p.stem for p in dirs["new"].glob("*.onnx")):
                sess = ort.InferenceSession(str(dirs["new"] / f"{comp}.onnx"),
                                            providers=["CPUExecutionProvider"])
                inputs = feeds(sess, 160, np.random.default_rng(3))
                old = run(dirs["old"], comp, inputs)
                new = run(dirs["new"], comp, inputs)
                assert old.keys() == new.keys(), (family, mode, comp)
                for k in new:
                    diff = np.abs(old[k].astype(np.float64) - new[k].astype(np.float64)).max()
                    worst = max(worst, float(diff))
            row.append(worst)
            worst_all = max(worst_all, worst)
        print(f"{family:8} " + " ".join(f"{w:16.3g}" for w in row))
    print(f"largest difference {worst_all:.3g} (bound {args.bound:g})")
    return 0 if worst_all <= args.bound else 1


if __name__ == "__main__":
    sys.exit(main())
