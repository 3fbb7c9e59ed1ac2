#!/usr/bin/env python3
"""ferry's OpenVINO IR exports against transformers' own OpenVINOExporter, in one run.

    .venv/bin/python bench/openvino_bench.py           # the Qwen3-0.6B-shaped checkpoint
    .venv/bin/python bench/openvino_bench.py --tiny    # a 2-layer smoke run

The checkpoint is peers_bench.py's (random bf16 weights, tied embeddings). Each export runs in
its own process (wall time, peak RSS of the process tree, bytes written), after os.sync():
    ferry plain          ferry export CKPT OUT --format openvino --dynamic
    ferry generation     ... --for-generation (one stateful graph)
    transformers plain   bench/peer_transformers.py CKPT OUT --mode plain --format openvino
    transformers gen.    ... --mode generation (openvino_prefill + stateful openvino_decode)
then bench/ov_latency.py on each (OpenVINO CPU, f32, the same threads): prefill-128 and, for the
generation exports, the mean of 64 decode steps. Writes docs/benchmarks-openvino.md.
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

from peers_bench import MAIN, SIZES, TINY, make_checkpoint, measure  # noqa: E402

MiB = 1024 * 1024
FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
THREADS = os.cpu_count()


def dir_bytes(d):
    return sum(f.stat().st_size for f in Path(d).iterdir() if f.is_file())


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
        ("transformers plain", "tf-plain", [PY, HERE / "peer_transformers.py", ckpt,
                                            sdir / "tf-plain", "--mode", "plain", "--format",
                                            "openvino"]),
        ("transformers generation", "tf-gen", [PY, HERE / "peer_transformers.py", ckpt,
                                               sdir / "tf-gen", "--mode", "generation",
                                               "--format", "openvino"]),
    ]
    rows = []
    for label, kind, cmd in runs:
        out = Path(cmd[3])
        os.sync()
        r = measure(cmd, logs / f"x-{kind}.log", env={"HF_HUB_OFFLINE": "1"}, timeout=3600)
        row = dict(label=label, kind=kind, export_s=r["wall"], peak_rss=r["peak_rss"],
                   error=r["error"], command=" ".join(map(str, cmd)))
        if not r["error"]:
            row["bytes"] = dir_bytes(out)
            res = sdir / f"{kind}.json"
            lat = measure([PY, HERE / "ov_latency.py", "--kind", kind, "--dir", out, "--json", res,
                           "--threads", str(THREADS)], logs / f"l-{kind}.log", timeout=3600)
            if lat["error"]:
                row["latency_error"] = lat["error"]
            else:
                row.update(json.loads(res.read_text()), session_rss=lat["peak_rss"])
        rows.append(row)
        print("openvino", {k: v for k, v in row.items() if k != "command"}, flush=True)
    (work / "openvino-results.json").write_text(json.dumps(rows, indent=2, default=str))

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
                               ("ferry-gen", "tf-gen", "generation")):
        f, t = by.get(ours), by.get(theirs)
        if f and t:
            line = (f"{what}: ferry's export {t['export_s'] / f['export_s']:.1f}x faster, "
                    f"1/{t['peak_rss'] / f['peak_rss']:.0f} of the peak RSS, "
                    f"{f['bytes'] / t['bytes']:.2f}x the bytes; prefill "
                    f"{f['prefill_ms'] / t['prefill_ms']:.2f}x the time")
            if f.get("decode_ms_mean") and t.get("decode_ms_mean"):
                line += f", decode {f['decode_ms_mean'] / t['decode_ms_mean']:.2f}x"
            lines += ["", line + " (below 1 = ferry faster)."]
    lines += ["", "transformers' generation export writes a prefill graph (cache as outputs) and "
              "a stateful decode graph (cache in variables) with no way to hand the one's cache "
              "to the other, so its decode is measured after feeding the prompt to the decode "
              "graph one token a call. ferry's one stateful graph takes the prompt in one call.",
              "", "Commands:", ""] + [f"    {r['command']}" for r in rows]
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())


if __name__ == "__main__":
    main()
