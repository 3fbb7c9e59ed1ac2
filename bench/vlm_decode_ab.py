#!/usr/bin/env python3
"""Paired decode A/B of vision-language exports in one process: each export's decode run in
alternating blocks of steps, so that the machine's drift hits every export alike.

    python bench/vlm_decode_ab.py --export ferry-onnx=OUT --export tf-onnx=TF_OUT \
        --inputs INPUTS.npz --features FEATURES.npz --ckpt CKPT \
        [--rounds 15] [--block 8] [--threads 2] [--json ab.json]

Why: a decode step of a 2B model is bound by memory bandwidth (it reads every language-model
weight), and on a shared VM the bandwidth drifts over seconds; one process per export and round
(bench/vlm_ab.py) then moved by up to a third between runs of the same export, more than the
exports differ. Here every export is set up once as bench/vlm_latency.py sets it up: its prompt
over INPUTS.npz's ids with FEATURES.npz's image features in the image tokens' rows gives the
real cache (every export's prompt first, its graphs released, so that only the decode graphs
are held together), its decode graph is loaded and kept, and then each round runs --block one-token steps of each
export in turn (the order rotated each round), every block from the prompt's cache with the
same tokens, so each export's steps are alike. Reported: each export's median over rounds of
its block's mean ms/step, and the median of the per-round ratios to the first export's (above
1: the first export faster), with their range.

Kinds as vlm_latency.py's (ferry-onnx, tf-onnx, ferry-openvino, ferry-openvino-stateful,
tf-openvino). FEATURES.npz: the `features` a vlm_latency.py run saved with --logits (ferry's
image encoder on the same image). ferry's stateful OpenVINO runs its prompt again before each
block (untimed), as its cache lives in the graph's variables.
"""

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import numpy as np

import paired
from vlm_latency import KINDS, Graph, decode_steps, prompt_stage, stateful_steps


def graph_path(kind, directory):
    """path(component) of an export's graph files."""
    if kind.endswith("onnx"):
        return lambda component: directory / f"{component}.onnx"
    return lambda component: directory / f"openvino_{component}.xml"


def prompt_cache(kind, directory, x, cfg, ckpt, features, threads):
    """The export's cache after the prompt ({slot: array}), its graphs released; None for
    ferry's stateful OpenVINO, whose cache lives in the graph's variables."""
    if kind == "ferry-openvino-stateful":
        return None
    ids = x["input_ids"]
    _, cache = prompt_stage(graph_path(kind, directory), "ort" if kind.endswith("onnx") else "ov",
                            kind.startswith("ferry"), threads, ckpt, ids, x["position_ids"],
                            ids == cfg["image_token_id"], features, 1, {})
    gc.collect()
    return cache


def decoder(kind, directory, x, cfg, features, cache, steps_ids, threads):
    """run_steps(count) of one export, every call from the prompt's cache."""
    ids, positions = x["input_ids"], x["position_ids"]
    if kind == "ferry-openvino-stateful":
        _, run_steps = stateful_steps(directory, threads, ids, positions, features,
                                      cfg["image_token_id"], steps_ids, {})
        return run_steps
    engine = "ort" if kind.endswith("onnx") else "ov"
    dec = Graph(graph_path(kind, directory)("decode"), engine, threads)
    return decode_steps(dec, engine, cache, ids.shape[1], positions, steps_ids)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--export", action="append", required=True, metavar="KIND=DIR",
                   help="an export and its kind (vlm_latency.py's); the first is the reference")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--features", type=Path, required=True)
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--block", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    exports = paired.exports(a.export, KINDS)
    cfg = json.loads((a.ckpt / "config.json").read_text())
    x = dict(np.load(a.inputs))
    features = np.load(a.features)["features"]
    vocab = cfg["text_config"]["vocab_size"]
    steps_ids = np.random.default_rng(a.seed).integers(
        0, min(vocab, 151643), size=(a.block, 1, 1)).astype(np.int64)
    # every prompt first, each language model released before the next loads: then only the
    # decode graphs are held together
    caches = {kind: prompt_cache(kind, Path(directory), x, cfg, a.ckpt, features, a.threads)
              for kind, directory in exports}
    runs = {}
    for kind, directory in exports:
        t = time.perf_counter()
        runs[kind] = decoder(kind, Path(directory), x, cfg, features, caches[kind], steps_ids,
                             a.threads)
        print(f"{kind}: decode loaded in {time.perf_counter() - t:.0f} s", flush=True)
    last = {}
    for kind, run_steps in runs.items():  # warm-up, and each export's last logits
        _, last[kind] = run_steps(a.block)
    order = list(runs)
    ref = order[0]
    differ = {k: float(np.abs(v - last[ref]).max()) for k, v in last.items()}

    def block(run_steps):
        return lambda: statistics.fmean(run_steps(a.block)[0])

    blocks = paired.rounds({kind: block(runs[kind]) for kind in order}, a.rounds)
    result = {"rounds": a.rounds, "block": a.block, "threads": a.threads,
              "past": int(x["input_ids"].shape[1]), "ms_per_step": blocks,
              "last_logits_max_abs_diff_to_" + ref: differ,
              **paired.summary(blocks, ref, "ms/step", differ)}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
