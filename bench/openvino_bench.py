#!/usr/bin/env python3
"""ferry's OpenVINO IR exports against transformers' own OpenVINOExporter, in one run.

    .venv/bin/python bench/openvino_bench.py           # the Qwen3-0.6B-shaped checkpoint
    .venv/bin/python bench/openvino_bench.py --tiny    # a 2-layer smoke run

The checkpoint is peers_bench.py's (random bf16 weights, tied embeddings). Each export runs in
its own process (wall time, peak RSS of the process tree, bytes written), after os.sync():
    ferry plain          ferry export CKPT OUT --format openvino --dynamic
    ferry generation     ... --for-generation (one stateful graph)
    ferry gen. int4      ... --for-generation --quantize int4 (compressed weights)
    transformers plain   bench/peer_transformers.py CKPT OUT --mode plain --format openvino
    transformers gen.    ... --mode generation (openvino_prefill + stateful openvino_decode)
then bench/ov_latency.py on each (OpenVINO CPU, f32, the same threads): prefill-128 and, for the
generation exports, the mean of 64 decode steps. Every export runs REPEATS times (output
removed and synced between) and the row is the median wall time (all times listed below the
table): ferry's seconds swing with the disk's writeback, the peer's minute by tens of percent
between runs on a shared machine, and one run of either is no stable denominator. The same ferry checkpoint exported to ONNX (--for-generation) runs through
bench/ort_latency.py (onnxruntime CPU, same threads) for the ONNX-vs-OpenVINO runtime row.
Writes docs/benchmarks-openvino.md.
"""

import argparse
import datetime
import json
import mmap
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from peers_bench import MAIN, SIZES, TINY, make_checkpoint, measure  # noqa: E402

MiB = 1024 * 1024
FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
THREADS = os.cpu_count()
REPEATS = 3


def dir_bytes(d):
    return sum(f.stat().st_size for f in Path(d).iterdir() if f.is_file())


def disk_floor(path, nbytes, direct=False):
    """Seconds to write `nbytes` to a new file in 16 MiB blocks from one writer and fsync it, as
    an export's writer must before its atomic rename: through the page cache, or with `direct`
    past it (O_DIRECT from a page-aligned buffer, the unaligned tail buffered), as ferry writes
    large runs. The faster is the floor under any export of that many bytes on this disk."""
    block = mmap.mmap(-1, 16 * MiB)   # anonymous: page-aligned, zero-filled
    os.sync()
    start = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | (os.O_DIRECT if direct else 0))
    try:
        done, whole = 0, nbytes // mmap.PAGESIZE * mmap.PAGESIZE if direct else nbytes
        while done < whole:
            done += os.write(fd, memoryview(block)[:min(whole - done, len(block))])
        if done < nbytes:   # O_DIRECT's unaligned tail, buffered
            with open(path, "r+b") as tail:
                tail.seek(done)
                tail.write(bytes(nbytes - done))
        os.fsync(fd)
    finally:
        os.close(fd)
    wall = time.perf_counter() - start
    os.unlink(path)
    block.close()
    return wall


def timed_export(label, kind, cmd, logs):
    """One export's row: `cmd` (its output directory cmd[3]) run REPEATS times, each in its
    own process after os.sync(): the median wall time, the largest peak RSS of the process
    tree, the bytes it wrote."""
    out = Path(cmd[3])
    walls, rss, r = [], 0, None
    for _ in range(REPEATS):
        shutil.rmtree(out, ignore_errors=True)
        os.sync()
        r = measure(cmd, logs / f"x-{kind}.log", env={"HF_HUB_OFFLINE": "1"}, timeout=3600)
        if r["error"]:
            break
        walls.append(r["wall"])
        rss = max(rss, r["peak_rss"])
    row = dict(label=label, kind=kind, export_s=statistics.median(walls) if walls else None,
               export_s_all=walls, peak_rss=rss, error=r["error"],
               command=" ".join(map(str, cmd)))
    if not r["error"]:
        row["bytes"] = dir_bytes(out)
    return row


def measure_floor(rows, sdir, tag):
    """(ferry plain's row, the disk's floor for its bytes: the faster of the buffered and the
    direct writer, median of REPEATS runs each) or (None, None) when that export failed."""
    plain = next((r for r in rows if r["kind"] == "ferry-plain" and not r["error"]), None)
    if not plain:
        return None, None
    ways = {}
    for way, direct in (("buffered", False), ("direct", True)):
        runs = [disk_floor(sdir / "disk-floor.tmp", plain["bytes"], direct)
                for _ in range(REPEATS)]
        ways[way] = dict(wall_s=statistics.median(runs), all=runs)
    best = min(ways, key=lambda w: ways[w]["wall_s"])
    floor = dict(bytes=plain["bytes"], wall_s=ways[best]["wall_s"], way=best, ways=ways)
    print(f"{tag} disk floor", floor, flush=True)
    return plain, floor


def floor_text(floor, plain):
    """The report's sentence on the disk's floor under ferry's plain export."""
    ways = "; ".join(f"{way} {w['wall_s']:.1f} s (" + ", ".join(f"{x:.1f}" for x in w["all"]) +
                     ")" for way, w in floor["ways"].items())
    return (f"The disk's floor: writing and syncing {floor['bytes'] / MiB:.0f} MiB (ferry plain's "
            f"bytes) from one writer in 16 MiB blocks takes, median of {REPEATS}: {ways}; "
            f"ferry's plain export takes {plain['export_s'] / floor['wall_s']:.2f}x the faster: "
            "an export is bound by the bytes it must write, so its ratio to transformers' "
            "exporter is bound by the disk too.")


def comparison_text(what, f, t, decode_key):
    """ferry's row `f` against transformers' `t`: export time, peak RSS, bytes, latency."""
    line = (f"{what}: ferry's export {t['export_s'] / f['export_s']:.1f}x faster, "
            f"1/{t['peak_rss'] / f['peak_rss']:.0f} of the peak RSS, "
            f"{f['bytes'] / t['bytes']:.2f}x the bytes")
    if f.get("prefill_ms") and t.get("prefill_ms"):
        line += f"; prefill {f['prefill_ms'] / t['prefill_ms']:.2f}x the time"
    if f.get(decode_key) and t.get(decode_key):
        line += f", decode {f[decode_key] / t[decode_key]:.2f}x"
    return line + " (below 1 = ferry faster)."


def export_times_text(rows):
    return "Export times, every run (s): " + "; ".join(
        f"{r['label']} " + ", ".join(f"{w:.1f}" for w in r["export_s_all"])
        for r in rows if r.get("export_s_all"))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-openvino.md")
    args = p.parse_args()
    work = HERE / "work"
    sizes = TINY if args.tiny else SIZES
    ckpt, how = make_checkpoint(work, MAIN, sizes[MAIN])
    sdir, logs = work / "openvino", work / "logs-openvino"
    shutil.rmtree(sdir, ignore_errors=True)
    sdir.mkdir(parents=True)
    logs.mkdir(parents=True, exist_ok=True)
    runs = [
        ("ferry plain", "ferry-plain", [FERRY, "export", ckpt, sdir / "ferry-plain", "--format",
                                        "openvino", "--dynamic", "--quiet"]),
        ("ferry generation", "ferry-gen", [FERRY, "export", ckpt, sdir / "ferry-gen", "--format",
                                           "openvino", "--dynamic", "--for-generation",
                                           "--quiet"]),
        ("ferry generation int4", "ferry-gen-int4",
         [FERRY, "export", ckpt, sdir / "ferry-gen-int4", "--format", "openvino", "--dynamic",
          "--for-generation", "--quantize", "int4", "--quiet"]),
        ("ferry ONNX generation, in onnxruntime", "ferry-onnx-gen",
         [FERRY, "export", ckpt, sdir / "ferry-onnx-gen", "--dynamic", "--for-generation",
          "--quiet"]),
        ("transformers plain", "tf-plain", [PY, HERE / "peer_transformers.py", ckpt,
                                            sdir / "tf-plain", "--mode", "plain", "--format",
                                            "openvino"]),
        ("transformers generation", "tf-gen", [PY, HERE / "peer_transformers.py", ckpt,
                                               sdir / "tf-gen", "--mode", "generation",
                                               "--format", "openvino"]),
    ]
    rows = []
    for label, kind, cmd in runs:
        row = timed_export(label, kind, cmd, logs)
        out = Path(cmd[3])
        if not row["error"]:
            res = sdir / f"{kind}.json"
            if kind == "ferry-onnx-gen":
                lat_cmd = [PY, HERE / "ort_latency.py", "--kind", "ferry-gen", "--dir", out,
                           "--config", ckpt / "config.json"]
            else:
                lat_cmd = [PY, HERE / "ov_latency.py", "--kind",
                           "ferry-gen" if kind == "ferry-gen-int4" else kind, "--dir", out]
            lat = measure(lat_cmd + ["--json", res, "--threads", str(THREADS)],
                          logs / f"l-{kind}.log", timeout=3600)
            if lat["error"]:
                row["latency_error"] = lat["error"]
            else:
                timing = {k: v for k, v in json.loads(res.read_text()).items()
                          if k not in row}   # ort_latency.py records its own "kind"
                row.update(timing, session_rss=lat["peak_rss"])
        rows.append(row)
        print("openvino", {k: v for k, v in row.items() if k != "command"}, flush=True)
    plain, floor = measure_floor(rows, sdir, "openvino")
    (work / "openvino-results.json").write_text(json.dumps(dict(rows=rows, disk_floor=floor),
                                                           indent=2, default=str))

    lines = ["# OpenVINO IR exports: ferry against transformers' OpenVINOExporter", "",
             f"Written by `bench/openvino_bench.py` on {datetime.date.today().isoformat()}: "
             f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; checkpoint "
             f"{sizes[MAIN]['title']}-shaped ({ckpt}, {how}); OpenVINO CPU, f32 inference "
             f"precision, {THREADS} threads, batch 1. Reproduce: "
             "`.venv/bin/python bench/openvino_bench.py`.", "",
             "| export | time (s) | peak RSS (MiB) | bytes written (MiB) | prefill-128 (ms) | "
             "decode (ms/step) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r.get("error"):
            lines.append(f"| {r['label']} | failed: {r['error'][:80]} | | | | |")
            continue
        dec = r.get("decode_ms_mean")
        pre = r.get("prefill_ms")
        lines.append(f"| {r['label']} | {r['export_s']:.1f} | {r['peak_rss'] / MiB:.0f} | "
                     f"{r['bytes'] / MiB:.0f} | {'—' if pre is None else f'{pre:.1f}'} | "
                     f"{'—' if dec is None else f'{dec:.1f}'} |")
    by = {r["kind"]: r for r in rows if not r.get("error")}
    for ours, theirs, what in (("ferry-plain", "tf-plain", "plain"),
                               ("ferry-gen", "tf-gen", "generation"),
                               ("ferry-gen-int4", "tf-gen", "generation, ferry int4")):
        f, t = by.get(ours), by.get(theirs)
        if f and t:
            lines += ["", comparison_text(what, f, t, "decode_ms_mean")]
    f, o = by.get("ferry-gen"), by.get("ferry-onnx-gen")
    if f and o and f.get("decode_ms_mean") and o.get("decode_ms_mean"):
        lines += ["", f"ferry's export in its two runtimes: OpenVINO's stateful graph prefills in "
                  f"{f['prefill_ms'] / o['prefill_ms']:.2f}x and decodes in "
                  f"{f['decode_ms_mean'] / o['decode_ms_mean']:.2f}x the time of the ONNX "
                  "generation export in onnxruntime (below 1 = OpenVINO faster)."]
    if floor:
        lines += ["", floor_text(floor, plain)]
    lines += ["", export_times_text(rows)]
    lines += ["", "transformers' generation export writes a prefill graph (cache as outputs) and "
              "a stateful decode graph (cache in variables) with no way to hand the one's cache "
              "to the other, so its decode is measured after feeding the prompt to the decode "
              "graph one token a call. ferry's one stateful graph takes the prompt in one call.",
              "", "Commands:", ""] + [f"    {r['command']}" for r in rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
