#!/usr/bin/env python3
"""onnxruntime-genai latency of one export directory (its genai_config.json beside the graphs):
a 128-token prompt, then 64 greedy decode steps, batch 1, through og.Model / og.Generator as an
application runs it.

    python bench/genai_latency.py --dir OUT --json result.json [--threads N] [--prompt 128] \
        [--steps 64] [--reps 5]

Every export runs under the same session options, overlaid on its own genai_config.json:
intra_op_num_threads = --threads (default: all cores), inter_op_num_threads = 1, CPU. The same
seeded token ids feed every export; min_length keeps an eos from ending the loop early, so every
export does the same number of steps whatever its weights.

  - prefill: a fresh Generator and append_tokens(prompt) (one forward over the prompt, as genai
    does it); one warm-up, then the median of --reps.
  - decode: a fresh prompt, 4 untimed generate_next_token() calls, then the mean of --steps
    timed ones (each picks the next token and runs the model on it).
"""

import json
import statistics
import time

import numpy as np
import onnxruntime_genai as og

from latency_args import latency_parser


WARMUP_STEPS = 4


def main():
    p = latency_parser(__doc__)
    p.add_argument("--max-length", type=int, default=0,
                   help="max_length when larger than prompt + steps (a sliding-window "
                        "GroupQueryAttention wants a cache of at least its window)")
    args = p.parse_args()

    config = og.Config(str(args.dir))
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": args.threads, "inter_op_num_threads": 1}}}}))
    config.clear_providers()
    model = og.Model(config)
    vocab = json.loads((args.dir / "genai_config.json").read_text())["model"]["vocab_size"]
    ids = np.random.default_rng(0).integers(3, min(vocab, 30000), args.prompt).astype(np.int32)
    total = args.prompt + WARMUP_STEPS + args.steps + 1

    def generator():
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=max(total, args.max_length), min_length=total,
                                  do_sample=False)
        return og.Generator(model, params)

    prefill = []
    for rep in range(args.reps + 1):
        gen = generator()
        start = time.perf_counter()
        gen.append_tokens(ids)
        if rep:
            prefill.append(1e3 * (time.perf_counter() - start))
        del gen

    gen = generator()
    gen.append_tokens(ids)
    for _ in range(WARMUP_STEPS):
        gen.generate_next_token()
    steps = []
    for _ in range(args.steps):
        start = time.perf_counter()
        gen.generate_next_token()
        steps.append(1e3 * (time.perf_counter() - start))
    assert len(gen.get_sequence(0)) == args.prompt + WARMUP_STEPS + args.steps
    args.json.write_text(json.dumps(dict(
        prefill_ms=statistics.median(prefill), prefill_ms_all=prefill,
        decode_ms_mean=statistics.mean(steps), decode_ms_median=statistics.median(steps),
        threads=args.threads, prompt=args.prompt, steps=args.steps), indent=2))


if __name__ == "__main__":
    main()
