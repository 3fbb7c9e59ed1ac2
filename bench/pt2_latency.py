#!/usr/bin/env python3
"""Prefill latency of a .pt2 export's plain program in torch (torch.export.load(...).module(),
eager, --threads threads): one warm-up, then the median of --reps calls of a batch-1 prompt of
--prompt tokens. For bench/pt2_bench.py; prints and writes (--json) {"prefill_ms": ...}.

    python bench/pt2_latency.py --dir EXPORT --json OUT.json [--threads N] [--prompt 128]
"""

import argparse
import json
import statistics
import time
from pathlib import Path


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    manifest = json.loads((args.dir / "export.json").read_text())
    if "export_format" in manifest and "format" not in manifest:
        # transformers' DynamoExporter saves a program whose out_spec is its
        # CausalLMOutputWithPast, which torch rebuilds only once transformers registers it
        # (as its ExportedModel.from_pretrained does); ferry's program returns a dict
        from transformers.exporters.metadata import register_treespec_types

        register_treespec_types(manifest["components"]["model"]["metadata"]["out_spec"])
        takes = set(manifest["components"]["model"]["metadata"]["kwargs"])
    else:
        takes = {i["name"] for i in manifest["components"]["model"]["metadata"]["inputs"]}
    module = torch.export.load(str(args.dir / "model.pt2")).module()
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (1, args.prompt), generator=gen)
    mask = torch.ones_like(ids)
    pos = torch.arange(args.prompt).unsqueeze(0)
    times = []
    with torch.no_grad():
        for i in range(args.reps + 1):
            start = time.perf_counter()
            feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
            out = module(**{k: v for k, v in feeds.items() if k in takes})
            logits = out["logits"] if isinstance(out, dict) else out.logits
            assert torch.isfinite(logits[0, -1]).all()
            if i:
                times.append((time.perf_counter() - start) * 1000)
    result = {"prefill_ms": statistics.median(times), "prefill_ms_all": times}
    args.json.write_text(json.dumps(result))
    print(result)


if __name__ == "__main__":
    main()
