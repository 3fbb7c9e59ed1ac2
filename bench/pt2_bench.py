#!/usr/bin/env python3
"""ferry's torch.export (.pt2) exports against transformers' own DynamoExporter, in one run.

    .venv/bin/python bench/pt2_bench.py           # the Qwen3-0.6B-shaped checkpoint
    .venv/bin/python bench/pt2_bench.py --tiny    # a 2-layer smoke run
    .venv/bin/python bench/pt2_bench.py --dtype bf16   # the checkpoint's own dtype, exports only

The checkpoint is peers_bench.py's (random bf16 weights, tied embeddings). Each export runs in
its own process (wall time, peak RSS of the process tree, bytes written), after os.sync():
    ferry plain          ferry export CKPT OUT --format pt2 --dynamic
    transformers plain   bench/peer_transformers.py CKPT OUT --mode plain --format dynamo
    ferry generation     ... --for-generation --static-cache --max-cache-len 256
                         --multi-token-decode (one decode.pt2)
    transformers gen.    ... --mode generation --static-cache 256 (prefill.pt2 + decode.pt2,
                         a StaticCache, multi_token_decode=True)
all fp32. Then bench/pt2_latency.py on each (torch eager, the loaded program's .module(), the
same threads): plain, a 128-token prompt at batch 1; generation, a 128-token prompt through
decode and 32 single-token steps at batch 2 (the batch transformers' export is traced at, which
its StaticCache spec fixes). Every export runs REPEATS times (output removed and synced
between) and the row is the median wall time: ferry's swings with the disk's writeback, the
peer's by tens of percent between runs. Writes docs/benchmarks-pt2.md.

--dtype bf16 exports in the checkpoint's own dtype (ferry's --dtype bf16, the model loaded in
bfloat16: the setting the pt2 issue measured transformers' exporter in) and measures the
exports only (the runtime rows stay the fp32 run's); writes docs/benchmarks-pt2-bf16.md.
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

from openvino_bench import (comparison_text, export_times_text, floor_text,  # noqa: E402
                            measure_floor, timed_export)
from peers_bench import MAIN, SIZES, TINY, make_checkpoint, measure  # noqa: E402

MiB = 1024 * 1024
FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
THREADS = os.cpu_count()
CACHE = 256   # static cache slots: a 128-token prompt and the decode steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32",
                   help="the exports' dtype; bf16 measures the exports only")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    bf16 = args.dtype == "bf16"
    suffix = "-bf16" if bf16 else ""
    args.out = args.out or ROOT / "docs" / f"benchmarks-pt2{suffix}.md"
    work = HERE / "work"
    sizes = TINY if args.tiny else SIZES
    ckpt, how = make_checkpoint(work, MAIN, sizes[MAIN])
    sdir, logs = work / f"pt2{suffix}", work / f"logs-pt2{suffix}"
    ferry_dtype = ["--dtype", "bf16"] if bf16 else []
    peer_dtype = ["--dtype", "bfloat16"] if bf16 else []
    shutil.rmtree(sdir, ignore_errors=True)
    sdir.mkdir(parents=True)
    logs.mkdir(parents=True, exist_ok=True)
    runs = [
        ("ferry plain", "ferry-plain", [FERRY, "export", ckpt, sdir / "ferry-plain", "--format",
                                        "pt2", "--dynamic", "--quiet", *ferry_dtype]),
        ("transformers plain (DynamoExporter)", "tf-plain",
         [PY, HERE / "peer_transformers.py", ckpt, sdir / "tf-plain", "--mode", "plain",
          "--format", "dynamo", *peer_dtype]),
        ("ferry generation (static cache, multi-token decode)", "ferry-gen",
         [FERRY, "export", ckpt, sdir / "ferry-gen", "--format", "pt2", "--dynamic",
          "--for-generation", "--static-cache", "--max-cache-len", str(CACHE),
          "--multi-token-decode", "--quiet", *ferry_dtype]),
        ("transformers generation (DynamoExporter, the same)", "tf-gen",
         [PY, HERE / "peer_transformers.py", ckpt, sdir / "tf-gen", "--mode", "generation",
          "--format", "dynamo", "--static-cache", str(CACHE), *peer_dtype]),
    ]
    rows = []
    for label, kind, cmd in runs:
        row = timed_export(label, kind, cmd, logs)
        out = Path(cmd[3])
        if not row["error"] and not bf16:
            res = sdir / f"{kind}.json"
            lat = measure([PY, HERE / "pt2_latency.py", "--dir", out, "--json", res,
                           "--threads", str(THREADS)], logs / f"l-{kind}.log", timeout=3600)
            if lat["error"]:
                row["latency_error"] = lat["error"]
            else:
                row.update(json.loads(res.read_text()), session_rss=lat["peak_rss"])
        rows.append(row)
        print("pt2", {k: v for k, v in row.items() if k != "command"}, flush=True)
    plain, floor = measure_floor(rows, sdir, "pt2")
    (work / f"pt2{suffix}-results.json").write_text(json.dumps(dict(rows=rows, disk_floor=floor),
                                                      indent=2, default=str))

    lines = ["# torch.export (.pt2) exports: ferry against transformers' DynamoExporter", "",
             f"Written by `bench/pt2_bench.py` on {datetime.date.today().isoformat()}: "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; checkpoint "
             f"{sizes[MAIN]['title']}-shaped ({ckpt}, {how}); {args.dtype} exports; "
             + ("export rows only (the runtime rows are docs/benchmarks-pt2.md's fp32 run). "
                if bf16 else f"torch eager (`torch.export.load(...).module()`), {THREADS} "
                "threads, batch 1. ")
             + f"Reproduce: `.venv/bin/python bench/pt2_bench.py{' --dtype bf16' if bf16 else ''}`.",
             "",
             "| export | time (s) | peak RSS (MiB) | bytes written (MiB) | prefill-128 (ms) | "
             "decode (ms/step) | runtime peak RSS (MiB) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | failed: {r['error'][:80]} | | | | | |")
            continue
        pre, dec = r.get("prefill_ms"), r.get("decode_ms_median")
        srss = r.get("session_rss")
        lines.append(f"| {r['label']} | {r['export_s']:.1f} | {r['peak_rss'] / MiB:.0f} | "
                     f"{r['bytes'] / MiB:.0f} | {'—' if pre is None else f'{pre:.1f}'} | "
                     f"{'—' if dec is None else f'{dec:.1f}'} | "
                     f"{'—' if srss is None else f'{srss / MiB:.0f}'} |")
    by = {r["kind"]: r for r in rows if not r.get("error")}
    for ours, theirs, what in (("ferry-plain", "tf-plain", "plain"),
                               ("ferry-gen", "tf-gen", "generation")):
        f, t = by.get(ours), by.get(theirs)
        if f and t:
            lines += ["", comparison_text(what, f, t, "decode_ms_median")]
    if floor:
        lines += ["", floor_text(floor, plain)]
    lines += ["", export_times_text(rows)]
    lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
