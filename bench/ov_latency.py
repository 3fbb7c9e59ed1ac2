#!/usr/bin/env python3
"""OpenVINO CPU latency of one OpenVINO export: a 128-token prefill, then 64 decode steps.

    python bench/ov_latency.py --kind ferry-plain|ferry-gen|tf-plain|tf-gen --dir OUT \
        --json result.json [--threads N] [--prompt 128] [--steps 64] [--reps 5]

Every export is compiled the same way: CPU, INFERENCE_PRECISION_HINT f32, INFERENCE_NUM_THREADS
= --threads, batch 1, the same seeded token ids.
  - prefill: one call over the prompt (the plain model, ferry's stateful graph after a state
    reset, transformers' openvino_prefill.xml); one warm-up, then the median of --reps.
  - decode: ferry's stateful graph after a fresh prompt; transformers' stateful
    openvino_decode.xml after the prompt fed one token a call (its prefill graph returns the
    cache as outputs that its decode graph has no inputs for); then 4 untimed and --steps timed
    one-token calls (mean). Tokens are fixed (seeded), not sampled.
"""

import json
import statistics
import time

import numpy as np
import openvino as ov

from latency_args import latency_parser


def main():
    p = latency_parser(__doc__)
    p.add_argument("--kind", required=True, choices=["ferry-plain", "ferry-gen", "tf-plain", "tf-gen"])
    a = p.parse_args()
    core = ov.Core()
    cfg = {"INFERENCE_PRECISION_HINT": "f32", "INFERENCE_NUM_THREADS": a.threads}
    rng = np.random.default_rng(0)
    ids = rng.integers(3, 30000, (1, a.prompt)).astype(np.int64)
    steps_ids = rng.integers(3, 30000, (a.steps + 4,)).astype(np.int64)

    def feed(names, tokens, past):
        n = tokens.shape[1]
        f = {"input_ids": tokens, "attention_mask": np.ones((1, past + n), np.int64),
             "position_ids": np.arange(past, past + n, dtype=np.int64)[None]}
        if "beam_idx" in names:
            f["beam_idx"] = np.zeros(1, np.int32)
        return {k: v for k, v in f.items() if k in names}

    prefill_file = {"ferry-plain": "openvino_model.xml", "tf-plain": "openvino_model.xml",
                    "ferry-gen": "openvino_model.xml", "tf-gen": "openvino_prefill.xml"}[a.kind]
    compiled = core.compile_model(str(a.dir / prefill_file), "CPU", cfg)
    names = {i.get_any_name() for i in compiled.inputs}
    req = compiled.create_infer_request()
    times = []
    for rep in range(a.reps + 1):
        req.reset_state()
        t = time.perf_counter()
        req.infer(feed(names, ids, 0))
        if rep:
            times.append(1e3 * (time.perf_counter() - t))
    result = dict(prefill_ms=statistics.median(times), prefill_ms_all=times, threads=a.threads)

    if a.kind.endswith("gen"):
        if a.kind == "tf-gen":
            compiled = core.compile_model(str(a.dir / "openvino_decode.xml"), "CPU", cfg)
            names = {i.get_any_name() for i in compiled.inputs}
            req = compiled.create_infer_request()
            req.reset_state()
            for k in range(a.prompt):
                req.infer(feed(names, ids[:, k:k + 1], k))
        else:
            req.reset_state()
            req.infer(feed(names, ids, 0))
        past, steps = a.prompt, []
        for k, tok in enumerate(steps_ids):
            t = time.perf_counter()
            req.infer(feed(names, np.array([[tok]]), past))
            if k >= 4:
                steps.append(1e3 * (time.perf_counter() - t))
            past += 1
        result.update(decode_ms_mean=statistics.mean(steps), decode_ms_median=statistics.median(steps))
    a.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
