#!/usr/bin/env python3
"""ExecuTorch runtime latency of one generation export (.pte): a 128-token prefill, then decode
steps, in executorch.runtime (the Python runtime of the pinned wheel, XNNPACK registered).

    python bench/pte_latency.py --dir OUT --json result.json --max-cache-len 256 \
        [--threads N] [--prompt 128] [--steps 32]

Both exporters' decode programs take [input_ids, attention_mask (bool [1, 1, T, C]),
position_ids, cache x N] and return [cache x N, logits, cache x N], as the guide's loop expects;
the cache is each layer's keys and values [1, kv_heads, C, head_dim] and its write counter. The
Python runtime copies inputs into the program's plan and cannot bind outputs, so the loop is the
guide's Python one: the cache fed every call and read back from the first N outputs (a step's
time includes those copies, as any Python caller's does). The prompt goes through decode.pte
in one call (a multi-token decode); a program that refuses it (a bound below 128) is reported,
not hidden, and its decode steps follow the longest prompt it takes (16 tokens, or 1).

prefill: one warm-up call, then --reps timed calls (median). decode: after a fresh prompt,
4 warm-up steps, then --steps timed one-token steps (median). Same seeded tokens for every
export. Threads: the XNNPACK threadpool is sized by the runtime (all cores); --threads is
recorded, and torch's own threads set to it.
"""

import json
import statistics
import time

import numpy as np
import torch

from latency_args import latency_parser


def load(path):
    from executorch.runtime import Runtime

    return Runtime.get().load_program(str(path)).load_method("forward")


def main():
    p = latency_parser(__doc__)
    p.add_argument("--max-cache-len", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(steps=32)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401  (llama::* kernels)
    import executorch.kernels.quantized  # noqa: F401  (quantized_decomposed::* kernels)

    t = time.perf_counter()
    decode = load(args.dir / "decode.pte")
    load_s = time.perf_counter() - t
    meta = decode.metadata
    n_in = meta.num_inputs()
    C = args.max_cache_len
    cache = []
    for i in range(3, n_in):
        tm = meta.input_tensor_meta(i)
        sizes = list(tm.sizes())
        dtype = torch.int64 if int(tm.dtype()) == 4 else torch.float32   # ScalarType Long
        if len(sizes) == 4:
            cache.append(torch.zeros([1, sizes[1], C, sizes[3]], dtype=torch.float32))
        else:
            cache.append(torch.zeros(sizes, dtype=dtype))
    n = len(cache)
    rng = np.random.default_rng(args.seed)
    cfg = json.loads((args.dir / "config.json").read_text())
    vocab = min(cfg["vocab_size"], 151643)
    prompt = torch.from_numpy(rng.integers(0, vocab, (1, args.prompt), dtype=np.int64))
    steps = torch.from_numpy(rng.integers(0, vocab, (args.steps + 4, 1, 1), dtype=np.int64))
    slots = torch.arange(C)

    def reset():
        for c in cache:
            c.zero_()

    def call(ids, first):
        q = first + torch.arange(ids.shape[1])
        mask = (slots[None, None, None, :] <= q[None, None, :, None]).contiguous()
        start = time.perf_counter()
        out = decode.execute([ids, mask, q[None].contiguous(), *cache])
        for k in range(n):
            cache[k] = out[k].clone()
        return time.perf_counter() - start

    result = dict(threads=args.threads, prompt=args.prompt, load_s=load_s, cache_tensors=n)
    try:
        prefill = []
        for rep in range(args.reps + 1):
            reset()
            elapsed = call(prompt, 0)
            if rep:
                prefill.append(elapsed)
        result["prefill_ms"] = 1e3 * statistics.median(prefill)
    except Exception as e:  # a program whose bound is below the prompt
        result["prefill_error"] = str(e).splitlines()[0][:200]
    # decode after a prompt the program takes (the prompt, else 16 tokens in one call, else one)
    reset()
    first = 0
    for length in (args.prompt, 16, 1):
        try:
            call(prompt[:, :length], 0)
            first = length
            break
        except Exception:
            reset()
    result["decode_after"] = first
    times = []
    for k in range(args.steps + 4):
        elapsed = call(steps[k], first + k)
        if k >= 4:
            times.append(elapsed)
    result["decode_ms_median"] = 1e3 * statistics.median(times)
    result["decode_ms_all"] = [1e3 * x for x in times]
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_all")}))


if __name__ == "__main__":
    main()
