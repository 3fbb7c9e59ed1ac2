#!/usr/bin/env python3
"""Paired image-encoder A/B of vision-language exports in one process: each export's image
encoder called in turn, round after round, so that the machine's drift hits every export alike.

    python bench/vlm_encoder_ab.py --export ferry-openvino-stateful=OUT \
        --export tf-openvino=TF_OUT --encoder-dir tf-openvino=TF_TOWER_OUT \
        --inputs INPUTS.npz --ckpt CKPT [--rounds 7] [--threads 2] [--json ab.json]

Why: one process per export and round (bench/vlm_latency.py) moved the same export's encoder
by up to a third between runs on the bench VM, more than the exports differ. Here every
export's encoder is set up once as vlm_latency.py sets it up (ferry's image_encoder, or its
VLMPipeline layout's patch embedding + numpy rotary angles + merger; transformers' tower fed
its cu_seqlens / position_ids from INPUTS.npz), warmed up once, and then each round calls each
export's encoder once on the same image (the order rotated each round). Reported: each
export's median ms, and the median of the per-round ratios to the first export's (above 1: the
first export faster), with their range; and the features' largest difference from the first's.
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

import paired
from vlm_latency import KINDS, graph_encoder, stateful_encoder


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--export", action="append", required=True, metavar="KIND=DIR",
                   help="an export and its kind (vlm_latency.py's); the first is the reference")
    p.add_argument("--encoder-dir", action="append", default=[], metavar="KIND=DIR",
                   help="transformers' tower export for a tf-* kind")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", type=Path)
    a = p.parse_args()
    exports = paired.exports(a.export, KINDS)
    towers = dict(paired.exports(a.encoder_dir, KINDS, "--encoder-dir"))
    cfg = json.loads((a.ckpt / "config.json").read_text())
    x = dict(np.load(a.inputs))
    encoders, features = {}, {}
    for kind, directory in exports:
        setup = {}
        if kind == "ferry-openvino-stateful":
            encode = stateful_encoder(Path(directory), a.threads, x, cfg, setup)
        else:
            encode = graph_encoder(kind, Path(directory), towers.get(kind), x, a.threads, setup)
        if encode is None:
            raise SystemExit(f"{kind}: no image encoder (give --encoder-dir {kind}=TOWER)")
        features[kind] = np.asarray(encode(), np.float32)  # the warm-up
        encoders[kind] = encode
        print(f"{kind}: loaded in {setup['encoder_load_s']:.0f} s", flush=True)
    order = [kind for kind, _ in exports]
    ref = order[0]
    differ = {k: float(np.abs(v - features[ref]).max()) for k, v in features.items()}

    def timed_call(encode):
        def call():
            t = time.perf_counter()
            encode()
            return 1e3 * (time.perf_counter() - t)
        return call

    times = paired.rounds({kind: timed_call(encoders[kind]) for kind in order}, a.rounds)
    result = {"rounds": a.rounds, "threads": a.threads, "ms": times,
              "patches": int(len(x["pixel_values"])),
              "features_max_abs_diff_to_" + ref: differ,
              **paired.summary(times, ref, "ms", differ)}
    if a.json:
        a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
