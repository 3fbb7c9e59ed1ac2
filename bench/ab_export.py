#!/usr/bin/env python3
"""A/B export benchmark: two ferry builds exporting the same Qwen3-0.6B-shaped checkpoint, runs
interleaved (old, new, old, new, ...) so that drift in the machine hits both alike; median wall
time and peak RSS per build and their ratio. For changes that must not slow exports down.

    .venv/bin/python bench/ab_export.py OLD_FERRY NEW_FERRY [--runs 5] [--flags "--dynamic ..."]

The checkpoint (random bf16, 28 layers, written once under bench/work/) and the measuring are
bench/export_bench.py's; the default export is its own (`--dynamic`, bf16 -> fp32).
"""

import argparse
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_bench import QWEN3_06B, WORK, run_measured, write_checkpoint  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--layers", type=int, default=QWEN3_06B["num_hidden_layers"])
    ap.add_argument("--flags", default="--dynamic",
                    help="the export's flags, one string (default: --dynamic)")
    args = ap.parse_args()
    args.flags = args.flags.split()
    ckpt = WORK / f"qwen3-shaped-L{args.layers}-V{QWEN3_06B['vocab_size']}"
    if not (ckpt / "model.safetensors").exists():
        write_checkpoint(ckpt, args.layers, QWEN3_06B["vocab_size"])
    results = {"old": [], "new": []}
    for run in range(args.runs):
        for label in ("old", "new"):
            out = WORK / f"ab-{label}"
            shutil.rmtree(out, ignore_errors=True)
            binary = args.old if label == "old" else args.new
            wall, rss, rc = run_measured([binary, "export", str(ckpt), str(out), "-q",
                                          *args.flags])
            if rc != 0:
                sys.exit(f"{label} export failed (exit {rc})")
            results[label].append((wall, rss))
            print(f"run {run + 1} {label}: {wall:.2f} s, {rss / 2**20:.0f} MiB", flush=True)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(r for _, r in v))
           for k, v in results.items()}
    print("\n| build | median wall (s) | median peak RSS (MiB) |")
    print("|---|---|---|")
    for k in ("old", "new"):
        print(f"| {k} | {med[k][0]:.2f} | {med[k][1] / 2**20:.0f} |")
    print(f"\nnew / old: time {med['new'][0] / med['old'][0]:.3f}, "
          f"peak RSS {med['new'][1] / med['old'][1]:.3f}  (flags: {' '.join(args.flags)})")
    for label in ("old", "new"):
        shutil.rmtree(WORK / f"ab-{label}", ignore_errors=True)


if __name__ == "__main__":
    main()
