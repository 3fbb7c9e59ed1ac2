#!/usr/bin/env python3
"""transformers' own ONNX (or OpenVINO) export of a checkpoint directory, as a user would run it
(one process).

    python bench/peer_transformers.py CKPT OUT --mode plain|generation \
        [--format onnx|openvino|dynamo|executorch]

The documented API (transformers.exporters, shipped since transformers 5.13) at its defaults
for a CPU fp32 export:

    model = AutoModelForCausalLM.from_pretrained(CKPT, dtype=torch.float32)   # CPU
    OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True))                # plain
    OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(dynamic=True)) # generation
    exported.save_pretrained(OUT)

OnnxConfig fields other than dynamic keep their defaults (opset: the newest onnxscript supports,
optimize=True, no ort_fusions, no quantizer). `dynamic=True` is what makes batch and sequence
symbolic, as ferry's --dynamic does. The sample inputs are a batch of 2 x 16 tokens with the first
row left-padded by 3 (a real batch of prompts): with batch 1 or an all-ones mask torch.export
specializes the batch axis to 1 or drops the attention_mask input, and the graph would not take
the batched, padded inputs that ferry's graph takes.

`--format openvino` runs OpenVINOExporter / OpenVINOConfig(dynamic=True) the same way (its
defaults: stateful, no fp16 compression), `--format dynamo` DynamoExporter /
DynamoConfig(dynamic=True) (model.pt2, torch.export), `--format executorch` ExecutorchExporter /
ExecutorchConfig(backend="xnnpack", dynamic=True) (the guide's; needs torchao). `--static-cache N` (generation) exports
against a StaticCache of N slots with a multi-token decode, the guide's single-graph generation.
`--dtype bfloat16` loads the model in bfloat16 (the checkpoint's own dtype), so the export is bf16.

Prints `bench-phase NAME SECONDS` lines (load, export, save) for the harness.
"""

import argparse
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--mode", choices=["plain", "generation"], default="plain")
    p.add_argument("--format", choices=["onnx", "openvino", "dynamo", "executorch"],
                   default="onnx")
    p.add_argument("--static-cache", type=int, metavar="MAX_CACHE_LEN",
                   help="generation: a static cache of this length and a multi-token decode")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the dtype the model is loaded in, so the export's (default float32)")
    args = p.parse_args()

    t0 = time.perf_counter()
    import torch
    from transformers import AutoModelForCausalLM
    if args.format == "openvino":
        from transformers.exporters import OpenVINOConfig as OnnxConfig
        from transformers.exporters import OpenVINOExporter as OnnxExporter
    elif args.format == "dynamo":
        from transformers.exporters import DynamoConfig as OnnxConfig
        from transformers.exporters import DynamoExporter as OnnxExporter
    elif args.format == "executorch":
        import functools

        from transformers.exporters import ExecutorchConfig
        from transformers.exporters import ExecutorchExporter as OnnxExporter
        # the guide's: XNNPACK, dynamic
        OnnxConfig = functools.partial(ExecutorchConfig, backend="xnnpack")
    else:
        from transformers.exporters import OnnxConfig, OnnxExporter

    model = AutoModelForCausalLM.from_pretrained(args.ckpt, dtype=getattr(torch, args.dtype))
    model.eval()
    t1 = time.perf_counter()
    print(f"bench-phase load {t1 - t0:.2f}", flush=True)

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, min(model.config.vocab_size, 151643), (2, 16), generator=gen)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    inputs = {"input_ids": ids, "attention_mask": mask}
    exporter = OnnxExporter()
    if args.mode == "plain":
        exported = exporter.export(model, inputs, config=OnnxConfig(dynamic=True))
    elif args.static_cache:
        from transformers import GenerationConfig

        exported = exporter.export_for_generation(
            model, inputs, config=OnnxConfig(dynamic=True),
            generation_config=GenerationConfig(cache_implementation="static",
                                               max_cache_len=args.static_cache),
            multi_token_decode=True)
    else:
        exported = exporter.export_for_generation(model, inputs, config=OnnxConfig(dynamic=True))
    t2 = time.perf_counter()
    print(f"bench-phase export {t2 - t1:.2f}", flush=True)

    exported.save_pretrained(args.out)
    print(f"bench-phase save {time.perf_counter() - t2:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
