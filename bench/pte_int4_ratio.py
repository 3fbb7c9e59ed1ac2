#!/usr/bin/env python3
"""The int4 target of docs/benchmarks-pte.md, measured in interleaved rounds: ferry's XNNPACK
int4 .pte in the guide's C++ loop against ferry's int4 fused ONNX export in onnxruntime.

    .venv/bin/python bench/pte_int4_ratio.py CKPT [--rounds 5] [--quantize-embeddings]

A 2-core machine's decode times drift by 10-20 % between minutes (other tenants, frequency),
more than the gap under test. So the two runtimes alternate, round after round, each a fresh
process timing a 128-token prompt and 32 one-token steps (median); the figure is the median
of the per-round ratios. Both exports are the ones pte_bench.py times: the .pte for the guide's
loop (batch 1, a static cache of 256 slots, alloc flags off), the ONNX one with a dynamic cache
through IOBinding (bench/ort_latency.py). Prints a markdown table.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from pte_bench import CACHE, FERRY, PY, STEPS, THREADS, guide_loop  # noqa: E402


def export(ckpt, out, flags):
    if (out / "export.json").exists():
        return
    subprocess.run([str(FERRY), "export", str(ckpt), str(out), "--quiet", *flags], check=True)


def cpp_decode(binary, pte):
    prompt = ",".join(str((7 * i + 3) % 1000) for i in range(128))
    proc = subprocess.run([str(binary), str(pte), prompt, str(STEPS + 1)], capture_output=True,
                          text=True, check=True)
    line = next(x for x in proc.stderr.splitlines() if x.startswith("timing"))
    return float(line.split()[4])


def ort_decode(out, ckpt, result):
    subprocess.run([PY, str(HERE / "ort_latency.py"), "--kind", "ferry-gen", "--dir", str(out),
                    "--config", str(Path(ckpt) / "config.json"), "--json", str(result),
                    "--threads", str(THREADS), "--steps", str(STEPS)],
                   capture_output=True, check=True)
    return float(json.loads(result.read_text())["decode_ms_median"])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("ckpt", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--quantize-embeddings", action="store_true",
                   help="the .pte's table too (embedding_4bit), as the ONNX export's is")
    args = p.parse_args()
    work = HERE / "work" / f"int4-ratio-{args.ckpt.name}"
    work.mkdir(parents=True, exist_ok=True)
    binary, error = guide_loop(HERE / "work", work)
    if error:
        sys.exit(f"the guide's C++ loop did not build: {error}")
    emb = ["--quantize-embeddings"] if args.quantize_embeddings else []
    pte = work / ("pte-int4-emb" if emb else "pte-int4")
    onnx = work / "onnx-int4"
    export(args.ckpt, pte, ["--format", "executorch", "--dim", "input_ids:1=sequence:1:128",
                            "--for-generation", "--static-cache", "--max-cache-len", str(CACHE),
                            "--multi-token-decode", "--no-alloc-graph-input",
                            "--no-alloc-graph-output", "--no-alloc-mutable-buffers",
                            "--quantize", "int4", *emb])
    export(args.ckpt, onnx, ["--dynamic", "--for-generation", "--ort-fusions", "cpu",
                             "--quantize", "int4", "--block-size", "32", "--quantize-embeddings"])
    rows = []
    for r in range(args.rounds):
        ms_pte = cpp_decode(binary, pte / "decode.pte")
        ms_ort = ort_decode(onnx, args.ckpt, work / "ort.json")
        rows.append((ms_pte, ms_ort, ms_pte / ms_ort))
        print(f"round {r + 1}: .pte {ms_pte:.1f} ms, onnxruntime {ms_ort:.1f} ms, "
              f"{ms_pte / ms_ort:.2f}x", file=sys.stderr, flush=True)
    print(f"| round | .pte int4, C++ loop (ms/step) | ONNX int4 fused, onnxruntime (ms/step) "
          f"| ratio |\n|---|---|---|---|")
    for i, (a, b, q) in enumerate(rows, 1):
        print(f"| {i} | {a:.1f} | {b:.1f} | {q:.2f}x |")
    print(f"\nmedian ratio {statistics.median(r[2] for r in rows):.2f}x over {args.rounds} "
          f"rounds ({os.cpu_count()} cores; .pte {'with' if emb else 'without'} "
          f"--quantize-embeddings)")


if __name__ == "__main__":
    main()
