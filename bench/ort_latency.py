#!/usr/bin/env python3
"""onnxruntime CPU latency of one export: a 128-token prefill, then 64 decode steps.

    python bench/ort_latency.py --kind ferry-gen --dir OUT --config CKPT/config.json \
        --json result.json [--threads N] [--prompt 128] [--steps 64]

One process per export (bench/peers_bench.py measures its peak RSS). Every export runs under
the same SessionOptions: intra_op_num_threads = --threads (default: all cores),
inter_op_num_threads = 1, sequential execution, onnxruntime's default graph optimizations
(ORT_ENABLE_ALL), CPUExecutionProvider. The same token ids (seeded) feed every export, batch 1,
no padding.

The loop is the same for all, through IOBinding so that no cache is copied between calls:
  - prefill: the whole prompt in one call; one warm-up call, then --reps timed calls (median; default 5).
  - decode (when the export can): a fresh prefill, 4 untimed warm-up steps, a fresh prefill
    again, then --steps timed one-token steps (mean). Dynamic caches: each call's present/output
    cache OrtValues are bound as the next call's past inputs. A static cache (ferry
    --static-cache): every input.<name>/output.<name> pair is bound to one OrtValue, updated
    in place. The decoded tokens are fixed (seeded), not sampled, so every export does the same
    work whatever its logits.
A step's time covers binding its inputs and running it (not copying logits out afterwards).

The prompt's last-position logits and the last step's logits go to --logits (npz) so the
harness can check that all exports compute the same function.
"""

import json
import re
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from latency_args import latency_parser

# What each exporter writes, and which of its files serve the prompt and the steps.
KINDS = {
    "ferry-plain": dict(prefill="model.onnx"),
    "ferry-gen": dict(prefill="prefill.onnx", decode="decode.onnx"),
    "ferry-static": dict(prefill="decode.onnx", decode="decode.onnx", static=True),
    "transformers-plain": dict(prefill="model.onnx"),
    "transformers-gen": dict(prefill="prefill.onnx", decode="decode.onnx"),
    "genai": dict(prefill="model.onnx", decode="model.onnx"),
    "optimum": dict(prefill="model.onnx", decode="model.onnx"),
}

# Cache tensor names of the four exporters -> (layer, "key" | "value" | "cumulative_length").
CACHE_IN = [re.compile(r"^(?:input\.)?past_key_values\.(\d+)\.(key|value|cumulative_length)$"),
            re.compile(r"^input\.cache\.layers\.(\d+)\.(keys|values)$")]
CACHE_OUT = [re.compile(r"^present\.(\d+)\.(key|value)$"),
             re.compile(r"^output\.past_key_values\.(\d+)\.(key|value|cumulative_length)$"),
             re.compile(r"^(?:output\.)?cache\.layers\.(\d+)\.(keys|values)$")]


def cache_slot(name, patterns):
    for pattern in patterns:
        m = pattern.match(name)
        if m:
            kind = {"keys": "key", "values": "value"}.get(m.group(2), m.group(2))
            return int(m.group(1)), kind
    return None


def session_options(threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return so


class Component:
    def __init__(self, path, so):
        self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        self.inputs = {i.name: i for i in self.session.get_inputs()}
        self.outputs = [o.name for o in self.session.get_outputs()]


class DynamicLoop:
    """Prompt then steps with a growing cache: past_key_values/input.cache in, present/output
    cache out (genai, optimum, transformers' export_for_generation, ferry --for-generation)."""

    def __init__(self, prefill, decode, cfg):
        self.prefill, self.decode = prefill, decode
        self.kv_shape = (1, cfg["num_key_value_heads"], 0, cfg.get("head_dim") or
                         cfg["hidden_size"] // cfg["num_attention_heads"])

    def reset(self):
        self.cache, self.length = None, 0

    def call(self, comp, ids):
        """-> (seconds, logits OrtValue)."""
        start = time.perf_counter()
        s = ids.shape[1]
        binding = comp.session.io_binding()
        for name, info in comp.inputs.items():
            if name == "input_ids":
                binding.bind_cpu_input(name, ids)
            elif name == "attention_mask":
                binding.bind_cpu_input(name, np.ones((1, self.length + s), np.int64))
            elif name == "position_ids":
                binding.bind_cpu_input(name, np.arange(self.length, self.length + s,
                                                       dtype=np.int64)[None])
            else:
                slot = cache_slot(name, CACHE_IN)
                if slot is None:
                    raise SystemExit(f"{name}: an input this loop does not know how to feed")
                if self.cache is None:
                    binding.bind_cpu_input(name, np.zeros(self.kv_shape, np.float32))
                else:
                    binding.bind_ortvalue_input(name, self.cache[slot])
        for name in comp.outputs:
            binding.bind_output(name, "cpu")
        comp.session.run_with_iobinding(binding)
        values = dict(zip(comp.outputs, binding.get_outputs()))
        elapsed = time.perf_counter() - start
        self.cache = {cache_slot(n, CACHE_OUT): v for n, v in values.items() if n != "logits"}
        self.length += s
        return elapsed, values["logits"]


class StaticLoop:
    """ferry --static-cache: fixed-size buffers, each input.<name>/output.<name> pair bound to
    ONE OrtValue (updated in place); bool mask [1, 1, s, max_cache_len], slot <= position."""

    def __init__(self, comp, cfg, max_cache_len):
        self.max_cache_len = max_cache_len
        self.arrays, self.values = {}, {}
        dtypes = {"tensor(float)": np.float32, "tensor(int64)": np.int64}
        for name, info in comp.inputs.items():
            if not name.startswith("input."):
                continue
            dims = [1 if d == "batch" else max_cache_len if isinstance(d, str) else int(d)
                    for d in info.shape]
            self.arrays[name[len("input."):]] = np.zeros(dims, dtype=dtypes[info.type])
        self.values = {n: ort.OrtValue.ortvalue_from_numpy(a) for n, a in self.arrays.items()}
        self.bindings = {}

    def _binding(self, comp):
        if id(comp) not in self.bindings:
            binding = comp.session.io_binding()
            for n, v in self.values.items():
                binding.bind_ortvalue_input(f"input.{n}", v)
                binding.bind_ortvalue_output(f"output.{n}", v)
            self.bindings[id(comp)] = binding
        return self.bindings[id(comp)]

    def reset(self):
        for a in self.arrays.values():
            a[...] = 0
        self.length = 0

    def call(self, comp, ids):
        start = time.perf_counter()
        s = ids.shape[1]
        positions = np.arange(self.length, self.length + s, dtype=np.int64)
        mask = (np.arange(self.max_cache_len)[None, :] <= positions[:, None])[None, None]
        binding = self._binding(comp)
        binding.bind_cpu_input("input_ids", ids)
        binding.bind_cpu_input("attention_mask", mask)
        binding.bind_cpu_input("position_ids", positions[None])
        binding.bind_output("logits", "cpu")
        comp.session.run_with_iobinding(binding)
        logits = next(v for v in binding.get_outputs() if len(v.shape()) == 3)
        elapsed = time.perf_counter() - start
        self.length += s
        return elapsed, logits


def last_row(logits_value):
    a = logits_value.numpy()
    return np.asarray(a[0, -1], dtype=np.float32)


def main():
    p = latency_parser(__doc__)
    p.add_argument("--kind", required=True, choices=sorted(KINDS))
    p.add_argument("--config", required=True, type=Path, help="the checkpoint's config.json")
    p.add_argument("--logits", type=Path)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-cache-len", type=int, default=None)
    args = p.parse_args()

    spec = KINDS[args.kind]
    cfg = json.loads(args.config.read_text())
    rng = np.random.default_rng(args.seed)
    vocab = min(cfg["vocab_size"], 151643)
    prompt = rng.integers(0, vocab, size=(1, args.prompt), dtype=np.int64)
    steps = rng.integers(0, vocab, size=(args.steps, 1, 1), dtype=np.int64)
    so = session_options(args.threads)

    t = time.perf_counter()
    prefill = Component(args.dir / spec["prefill"], so)
    decode = None
    if "decode" in spec:
        decode = prefill if spec["decode"] == spec["prefill"] else \
            Component(args.dir / spec["decode"], so)
    load_s = time.perf_counter() - t

    if spec.get("static"):
        max_len = args.max_cache_len
        if max_len is None:
            gen = json.loads((args.dir / "generation_config.json").read_text())
            max_len = int(gen["max_cache_len"])
        if args.prompt + args.steps + 4 > max_len:
            raise SystemExit(f"max_cache_len {max_len} < prompt + steps")
        loop = StaticLoop(decode, cfg, max_len)
    else:
        loop = DynamicLoop(prefill, decode, cfg)

    result = dict(kind=args.kind, threads=args.threads, prompt=args.prompt,
                  onnxruntime=ort.__version__, load_s=load_s)
    prefill_times = []
    for rep in range(args.reps + 1):  # the first is the warm-up
        loop.reset()
        elapsed, logits = loop.call(prefill, prompt)
        if rep:
            prefill_times.append(elapsed)
    result["prefill_ms"] = 1e3 * statistics.median(prefill_times)
    result["prefill_ms_all"] = [1e3 * x for x in prefill_times]
    saved = {"prefill_last": last_row(logits)}

    if decode is not None and args.steps:
        loop.reset()
        loop.call(prefill, prompt)
        for k in range(4):
            loop.call(decode, steps[k])
        loop.reset()
        loop.call(prefill, prompt)
        step_times = []
        for k in range(args.steps):
            elapsed, logits = loop.call(decode, steps[k])
            step_times.append(elapsed)
        result["decode_steps"] = args.steps
        result["decode_ms_mean"] = 1e3 * statistics.fmean(step_times)
        result["decode_ms_median"] = 1e3 * statistics.median(step_times)
        saved["decode_last"] = last_row(logits)

    if args.logits:
        np.savez(args.logits, **saved)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "prefill_ms_all"}))


if __name__ == "__main__":
    main()
