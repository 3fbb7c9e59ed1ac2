#!/usr/bin/env python3
"""Paired decode A/B of encoder-decoder exports in one process: each export's decode graph
run in alternating blocks of steps, so that the machine's drift hits every export alike.

    python bench/decode_ab.py --export ferry-onnx=OUT --export optimum-onnx=OPT_OUT \
        --inputs INPUTS.npz [--rounds 15] [--block 10] [--threads 2] [--json ab.json]

Why: a decode step is bound by memory bandwidth (it reads every decoder weight and the cross
cache), and on a shared VM the bandwidth drifts over seconds; one process per export and round
(bench/whisper_latency.py) then swings by a quarter between runs of the same export, more than
the exports differ. Here every export is loaded once, set up as whisper_latency.py sets it up
(its encoder on INPUTS.npz's arrays, its prompt over the prompt ids: the real cross cache and
self cache, every output kept as an OrtValue), and then each round runs --block decode steps of
each export in turn (the order rotated each round), every step from the prompt's cache with the
first step token, so each export's steps are alike. Reported: each export's median over rounds
of its block's mean ms/step, and the median of the per-round ratios to the first export's
(above 1: the first export faster), with their range. Kinds and files as whisper_latency.py's
(KINDS); transformers' (tf-onnx) needs its encoder export: --encoder-dir KIND=DIR.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

import paired
from whisper_latency import HIDDEN, KINDS, Graph, feeds_for, slot


def prepare(kind, directory, encoder_dir, inputs, threads):
    """The export's decode graph and the feeds of one step from its prompt's cache."""
    files = KINDS[kind]
    enc_inputs = {k: np.ascontiguousarray(inputs[k]) for k in inputs.files
                  if k not in ("prompt_ids", "step_ids")}
    mask = enc_inputs.get("attention_mask")
    prompt = np.ascontiguousarray(inputs["prompt_ids"], np.int64)
    step = np.ascontiguousarray(inputs["step_ids"][0], np.int64)
    enc_path = directory / files["encoder"] if files["encoder"] else encoder_dir / "model.onnx"
    enc = Graph(enc_path, threads)
    out = enc.run({n: enc_inputs[n] for n in enc.inputs})
    hidden = out["last_hidden_state"]
    cache = {slot(n): v for n, v in out.items() if n != "last_hidden_state"}
    pre = Graph(directory / files["prompt"], threads)
    for n, v in pre.run(feeds_for(pre, prompt, hidden, cache, mask)).items():
        if n not in ("logits", *HIDDEN, "encoder_last_hidden_state"):
            cache[slot(n)] = v
    dec = Graph(directory / files["decode"], threads)
    return dec, feeds_for(dec, step, hidden, cache, mask)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--export", action="append", required=True, metavar="KIND=DIR",
                   help="an export and its kind (whisper_latency.py's); the first is the "
                        "reference")
    p.add_argument("--encoder-dir", action="append", default=[], metavar="KIND=DIR")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--block", type=int, default=10)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    exports = [e.split("=", 1) for e in a.export]
    encoders = dict(e.split("=", 1) for e in a.encoder_dir)
    inputs = np.load(a.inputs)
    runs = {}
    for kind, directory in exports:
        if kind not in KINDS:
            raise SystemExit(f"{kind}: not one of {', '.join(sorted(KINDS))}")
        enc_dir = Path(encoders[kind]) if kind in encoders else None
        runs[kind] = prepare(kind, Path(directory), enc_dir, inputs, a.threads)
    for dec, feeds in runs.values():  # warm-up
        for _ in range(3):
            dec.run(feeds)
    order = list(runs)
    ref = order[0]

    def block(dec, feeds):
        def run():
            t = time.perf_counter()
            for _ in range(a.block):
                dec.run(feeds)
            return 1e3 * (time.perf_counter() - t) / a.block
        return run

    blocks = paired.rounds({kind: block(*runs[kind]) for kind in order}, a.rounds)
    result = {"rounds": a.rounds, "block": a.block, "threads": a.threads, "ms_per_step": blocks,
              **paired.summary(blocks, ref, "ms/step", {})}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
