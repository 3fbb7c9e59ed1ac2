#!/usr/bin/env python3
"""Runtime A/B of vision-language exports: ferry's and transformers' exports of the same
Qwen2-VL-2B-shaped checkpoint, their image encoder and decode timed in interleaved rounds
(ferry, transformers, ferry, ...) in one window, so that the machine's drift between passes
(up to 13 % on the bench VM, docs/benchmarks-vlm.md) hits both alike.

    .venv/bin/python bench/vlm_ab.py [--rounds 3] [--formats onnx,openvino]

Needs what bench/vlm_bench.py leaves in bench/work: the checkpoint (qwen2vl-2b) and the latency
inputs (vlm-logs/inputs-448.npz). Exports, one process each: ferry's default form of each format
(ONNX; OpenVINO's stateful VLMPipeline layout), transformers' export_for_generation plus its
tower (bench/peer_transformers_vlm.py --mode generation / encoder). Each round runs
bench/vlm_latency.py once per export and runtime (its encoder: median of --encoder-reps; its
decode: the mean of --steps steps). Reports the median over rounds of each figure and
transformers' over ferry's (above 1: ferry faster), and writes bench/work/vlm-ab.json.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
WORK = HERE / "work"
PY = sys.executable
# (format, ferry's vlm_latency kind and export flags, transformers' kind)
FORMS = {"onnx": ("ferry-onnx", ["--format", "onnx"], "tf-onnx"),
         "openvino": ("ferry-openvino-stateful", ["--format", "openvino"], "tf-openvino")}


def run(cmd, log):
    with open(log, "w") as f:
        r = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}; see {log}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--formats", default="onnx,openvino")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--encoder-reps", type=int, default=2)
    p.add_argument("--ferry", type=Path, default=ROOT / "build" / "ferry")
    a = p.parse_args()
    os.environ["HF_HUB_OFFLINE"] = "1"  # the checkpoint is local; nothing is fetched
    ckpt, inputs = WORK / "qwen2vl-2b", WORK / "vlm-logs" / "inputs-448.npz"
    if not (ckpt / "config.json").exists() or not inputs.exists():
        raise SystemExit("run bench/vlm_bench.py first (its checkpoint and latency inputs)")
    out, logs = WORK / "vlm-ab-out", WORK / "vlm-ab-logs"
    logs.mkdir(parents=True, exist_ok=True)
    results = {}
    for fmt in [f for f in a.formats.split(",") if f]:
        ferry_kind, flags, tf_kind = FORMS[fmt]
        dirs = {ferry_kind: out / f"ferry-{fmt}", tf_kind: out / f"tf-{fmt}"}
        tower = out / f"tf-{fmt}-tower"
        for d in (*dirs.values(), tower):
            shutil.rmtree(d, ignore_errors=True)
        run([a.ferry, "export", ckpt, dirs[ferry_kind], "--for-generation", "--dynamic",
             "--quiet", *flags], logs / f"export-ferry-{fmt}.log")
        for mode, d in (("generation", dirs[tf_kind]), ("encoder", tower)):
            run([PY, HERE / "peer_transformers_vlm.py", ckpt, d, "--mode", mode, "--format",
                 fmt], logs / f"export-tf-{fmt}-{mode}.log")
        figures = {k: {"encoder_ms": [], "decode_ms": []} for k in dirs}
        for r in range(a.rounds):
            for kind, d in dirs.items():
                res = logs / f"{kind}-{r}.json"
                cmd = [PY, HERE / "vlm_latency.py", "--kind", kind, "--dir", d, "--inputs",
                       inputs, "--ckpt", ckpt, "--json", res, "--steps", str(a.steps),
                       "--reps", "1", "--encoder-reps", str(a.encoder_reps), "--threads",
                       str(os.cpu_count())]
                if kind.startswith("tf"):
                    cmd += ["--encoder-dir", tower]
                run(cmd, logs / f"{kind}-{r}.log")
                got = json.loads(res.read_text())
                figures[kind]["encoder_ms"].append(got["encoder_ms"])
                figures[kind]["decode_ms"].append(got["decode_ms_mean"])
                print(f"{fmt} round {r + 1} {kind}: encoder {got['encoder_ms']:,.0f} ms, "
                      f"decode {got['decode_ms_mean']:.1f} ms/step", flush=True)
        med = {k: {m: statistics.median(v) for m, v in f.items()} for k, f in figures.items()}
        results[fmt] = {"rounds": figures, "median": med,
                        "tf_over_ferry": {m: med[tf_kind][m] / med[ferry_kind][m]
                                          for m in ("encoder_ms", "decode_ms")}}
        print(f"{fmt}: median over {a.rounds} rounds, transformers over ferry: encoder "
              f"{results[fmt]['tf_over_ferry']['encoder_ms']:.3f}x, decode "
              f"{results[fmt]['tf_over_ferry']['decode_ms']:.3f}x", flush=True)
        shutil.rmtree(out, ignore_errors=True)
    (WORK / "vlm-ab.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
