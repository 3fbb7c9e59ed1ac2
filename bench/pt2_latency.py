#!/usr/bin/env python3
"""Latency of a .pt2 export in torch (the loaded program's .module(), eager, --threads threads),
for bench/pt2_bench.py; prints and writes (--json) what it measured.

    python bench/pt2_latency.py --dir EXPORT --json OUT.json [--threads N] [--prompt 128]

A plain export ("model"): one warm-up, then the median of --reps calls of a batch-1 prompt of
--prompt tokens -> {"prefill_ms"}. A generation export with a static cache ("decode", ferry's or
transformers' DynamoExporter's): a batch of 2 (the batch transformers' export was traced at: its
StaticCache spec fixes it), the prompt through the decode program (both take several tokens a
call) into an emptied cache, one warm-up then --reps times (the median: one cold call swung by
a third between runs), then --steps single-token steps -> {"prefill_ms", "decode_ms_median",
"decode_ms_all"}.
ferry's program is handed its cache tensors (past_key_values_<l>_*), which it writes in place;
transformers' a StaticCache, through its ExportedModel's runner.
"""

import argparse
import json
import statistics
import time
from pathlib import Path

BATCH = 2


def vocab(args):
    return min(1000, json.loads((args.dir / "config.json").read_text())["vocab_size"])


def transformers_manifest(manifest):
    return "export_format" in manifest and "format" not in manifest


def plain(args, manifest, torch):
    if transformers_manifest(manifest):
        # DynamoExporter saves a program whose out_spec is its CausalLMOutputWithPast, which
        # torch rebuilds only once transformers registers it (as its from_pretrained does)
        from transformers.exporters.metadata import register_treespec_types

        register_treespec_types(manifest["components"]["model"]["metadata"]["out_spec"])
        takes = set(manifest["components"]["model"]["metadata"]["kwargs"])
    else:
        takes = {i["name"] for i in manifest["components"]["model"]["metadata"]["inputs"]}
    module = torch.export.load(str(args.dir / "model.pt2")).module()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab(args), (1, args.prompt), generator=gen)
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(args.prompt).unsqueeze(0)}
    times = []
    with torch.no_grad():
        for i in range(args.reps + 1):
            start = time.perf_counter()
            out = module(**{k: v for k, v in feeds.items() if k in takes})
            logits = out["logits"] if isinstance(out, dict) else out.logits
            assert torch.isfinite(logits[0, -1]).all()
            if i:
                times.append((time.perf_counter() - start) * 1000)
    return {"prefill_ms": statistics.median(times), "prefill_ms_all": times}


def generation(args, manifest, torch):
    decode_meta = manifest["components"]["decode"]["metadata"]
    if transformers_manifest(manifest):
        from transformers import AutoConfig, StaticCache
        from transformers.exporters import ExportedModel

        exported = ExportedModel.from_pretrained(args.dir, trust_remote_code=True)
        config = AutoConfig.from_pretrained(args.dir)
        # a 4-D mask, or (models with several layer types, Qwen3) a dict of them by type
        spec = decode_meta["kwargs"]["attention_mask"]
        leaves = spec.get("leaves") or {None: spec}
        slots = next(iter(leaves.values()))["shape"][-1]
        cache = StaticCache(config=config, max_cache_len=slots)
        head_dim = getattr(config, "head_dim", None) or \
            config.hidden_size // config.num_attention_heads
        cache.early_initialization(batch_size=BATCH, num_heads=config.num_key_value_heads,
                                   head_dim=head_dim, dtype=torch.float32, device="cpu")
        runner = exported.runners["decode"]
        reset = cache.reset

        def one_mask(q, first, dtype):
            visible = (torch.arange(slots)[None, :] <= (first + torch.arange(q))[:, None])
            visible = visible[None, None].repeat(BATCH, 1, 1, 1)
            if dtype == "bool":
                return visible
            return torch.where(visible, 0.0, torch.finfo(torch.float32).min)

        def call(ids, first):
            q = ids.shape[1]
            masks = {k: one_mask(q, first, leaf["dtype"]) for k, leaf in leaves.items()}
            mask = masks[None] if None in masks else masks
            pos = (first + torch.arange(q)).unsqueeze(0).repeat(BATCH, 1)
            return runner(input_ids=ids, attention_mask=mask, position_ids=pos,
                          cache=cache).logits
    else:
        slots = decode_meta["cache"]["max_cache_len"]
        module = torch.export.load(str(args.dir / manifest["components"]["decode"]["file"]))
        module = module.module()
        dtypes = {"float32": torch.float32, "int64": torch.int64, "bfloat16": torch.bfloat16,
                  "float16": torch.float16}
        tensors = {i["name"]: torch.zeros([BATCH if d == "batch" else slots
                                           if d == "max_cache_len" else d for d in i["shape"]],
                                          dtype=dtypes[i["dtype"]])
                   for i in decode_meta["inputs"] if i["name"].startswith("past_key_values")}

        def reset():  # the cache and each layer's write position, as a fresh cache has them
            for t in tensors.values():
                t.zero_()

        def call(ids, first):
            q = ids.shape[1]
            mask = (torch.arange(slots)[None, :] <= (first + torch.arange(q))[:, None])
            pos = (first + torch.arange(q)).unsqueeze(0).repeat(BATCH, 1)
            return module(input_ids=ids, attention_mask=mask[None, None].repeat(BATCH, 1, 1, 1),
                          position_ids=pos, **tensors)["logits"]
    if args.prompt + args.steps > slots:
        raise SystemExit(f"the cache has {slots} slots; {args.prompt} + {args.steps} needed")
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab(args), (BATCH, args.prompt), generator=gen)
    prefills = []
    with torch.no_grad():
        for i in range(args.reps + 1):
            reset()
            start = time.perf_counter()
            logits = call(ids, 0)
            if i:
                prefills.append((time.perf_counter() - start) * 1000)
        steps = []  # after the last prompt, which the cache now holds
        for k in range(args.steps):
            token = logits[:, -1:].argmax(-1)
            start = time.perf_counter()
            logits = call(token, args.prompt + k)
            steps.append((time.perf_counter() - start) * 1000)
            assert torch.isfinite(logits).all()
    return {"prefill_ms": statistics.median(prefills), "prefill_ms_all": prefills,
            "decode_ms_median": statistics.median(steps), "decode_ms_all": steps}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--steps", type=int, default=32)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    manifest = json.loads((args.dir / "export.json").read_text())
    measure = generation if "decode" in manifest["components"] else plain
    result = measure(args, manifest, torch)
    args.json.write_text(json.dumps(result))
    print(result)


if __name__ == "__main__":
    main()
