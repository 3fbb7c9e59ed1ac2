#!/usr/bin/env python3
"""transformers' own ONNX (or OpenVINO) export of a Qwen2-VL checkpoint directory, as a user would
run it (one process). The vision-language counterpart of bench/peer_transformers.py.

    python bench/peer_transformers_vlm.py CKPT OUT --mode generation|encoder \
        [--format onnx|openvino] [--dtype float32|bfloat16] [--image 224]

The documented API (transformers.exporters, transformers 5.24) at its defaults for a CPU export:

    model = Qwen2VLForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)  # CPU
    inputs = processor's inputs: input_ids (with the image's tokens), attention_mask,
             pixel_values, image_grid_thw, mm_token_type_ids
    OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(OUT)

`--mode generation` is that call. In transformers 5.24 it writes language_model, lm_head and
decode only: generate() encodes the images before its first forward, so the traced prefill
never calls the vision tower and decompose_multimodal leaves it out. `--mode encoder` therefore
exports the tower by itself, as the exporter's own multimodal decomposition would have:

    OnnxExporter().export(model.model.visual,
                          {"hidden_states": pixel_values, "grid_thw": image_grid_thw},
                          config=OnnxConfig(dynamic=True))

whose prepare_for_export adds the inputs the tower's data-dependent code needs, precomputed
from grid_thw (cu_seqlens int32 [frames + 1], position_ids int64 [patches, 2]: each patch's
(h, w) in merge-block order); a caller must compute and pass them at run time.

The inputs: one RGB image of --image x --image pixels (seeded random pixels, the checkpoint's
own Qwen2VLImageProcessorPil: 224 x 224 -> image_grid_thw [1, 16, 16], 256 patches, 64 image
tokens), in a prompt `<seeded text> <|vision_start|> <image_token_id> x N <|vision_end|>
<seeded text>` (batch 1, no padding: the processor's output for one image; the checkpoint has
no tokenizer, and the ids are what matter). mm_token_type_ids marks the image tokens (1).

`--format openvino` runs OpenVINOExporter / OpenVINOConfig(dynamic=True) the same way (its
defaults: stateful, no fp16 compression). `--dtype bfloat16` loads the model in bfloat16 (the
checkpoint's own dtype), so the export is bf16.

Prints `bench-phase NAME SECONDS` lines (load, export, save) for the harness.

`--mode inputs` exports nothing: it writes OUT (.npz) with the inputs bench/vlm_latency.py feeds
every export, all computed by transformers' own code on a model of the checkpoint's config
(its widths shrunk; the token ids, the merge size and the vocabulary kept): the processor's
input_ids, attention_mask, pixel_values, image_grid_thw, mm_token_type_ids for one image of
--image pixels; position_ids [4, 1, S] as generate() passes them to the first forward
(Qwen2VLForConditionalGeneration._prepare_position_ids_for_generation: a text row, then
get_rope_index's t, h, w rows); and the tower's cu_seqlens and vision_position_ids as the
exporter's prepare_for_export computes them (precompute_export_inputs).
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np


def processor_inputs(ckpt, size, seed=0, text_before=6, text_after=4):
    """-> dict of torch tensors: input_ids, attention_mask, pixel_values, image_grid_thw,
    mm_token_type_ids, as Qwen2-VL's processor gives them for one image in a prompt."""
    import torch
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import \
        Qwen2VLImageProcessorPil

    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    proc = Qwen2VLImageProcessorPil.from_pretrained(ckpt)
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
    pix = proc(images=[image], return_tensors="np")
    grid = np.asarray(pix["image_grid_thw"], np.int64)
    merge = cfg["vision_config"]["spatial_merge_size"]
    n_img = int(grid[0, 0] * grid[0, 1] * grid[0, 2]) // merge ** 2
    vocab = cfg["text_config"]["vocab_size"]
    words = rng.integers(0, min(vocab, 151643), size=text_before + text_after)
    ids = np.concatenate([words[:text_before], [cfg["vision_start_token_id"]],
                          np.full(n_img, cfg["image_token_id"]), [cfg["vision_end_token_id"]],
                          words[text_before:]]).astype(np.int64)[None]
    types = (ids == cfg["image_token_id"]).astype(np.int32)
    return {"input_ids": torch.from_numpy(ids),
            "attention_mask": torch.ones(ids.shape, dtype=torch.int64),
            "pixel_values": torch.from_numpy(np.asarray(pix["pixel_values"], np.float32)),
            "image_grid_thw": torch.from_numpy(grid),
            "mm_token_type_ids": torch.from_numpy(types)}


def write_inputs(ckpt, size, out):
    """The latency runs' inputs, as transformers computes them (see the module's docstring)."""
    import torch
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
    from transformers.exporters.utils import precompute_export_inputs

    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    text, vision = dict(cfg["text_config"]), dict(cfg["vision_config"])
    head_dim = text["hidden_size"] // text["num_attention_heads"]
    # the widths that matter to no position: one layer, one head of the same head_dim (the
    # mrope sections must still fit it), a narrow MLP; vocabulary and token ids kept
    text.update(num_hidden_layers=1, hidden_size=head_dim, num_attention_heads=1,
                num_key_value_heads=1, intermediate_size=16)
    vision.update(depth=1, embed_dim=32, num_heads=1, hidden_size=head_dim)
    small = dict(cfg, text_config=text, vision_config=vision)
    small.pop("architectures", None)
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(Qwen2VLConfig(**small)).eval()
    inputs = processor_inputs(ckpt, size)
    kwargs = {k: v for k, v in inputs.items() if k != "pixel_values"}
    with torch.no_grad():
        positions = model._prepare_position_ids_for_generation(inputs["input_ids"], dict(kwargs))
        tower = {"hidden_states": inputs["pixel_values"], "grid_thw": inputs["image_grid_thw"]}
        precompute_export_inputs(model.model.visual, tower)
    arrays = {k: v.numpy() for k, v in inputs.items()}
    arrays.update(position_ids=positions.numpy().astype(np.int64),
                  cu_seqlens=tower["cu_seqlens"].numpy(),
                  vision_position_ids=tower["position_ids"].numpy())
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez(out, **arrays)
    print(json.dumps({k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()}))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--mode", choices=["generation", "encoder", "inputs"], default="generation")
    p.add_argument("--format", choices=["onnx", "openvino"], default="onnx")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the dtype the model is loaded in, so the export's (default float32)")
    p.add_argument("--image", type=int, default=224, help="the sample image's side (pixels)")
    args = p.parse_args()

    if args.mode == "inputs":
        return write_inputs(args.ckpt, args.image, Path(args.out))

    t0 = time.perf_counter()
    import torch
    from transformers import Qwen2VLForConditionalGeneration
    if args.format == "openvino":
        from transformers.exporters import OpenVINOConfig as OnnxConfig
        from transformers.exporters import OpenVINOExporter as OnnxExporter
    else:
        from transformers.exporters import OnnxConfig, OnnxExporter

    model = Qwen2VLForConditionalGeneration.from_pretrained(args.ckpt,
                                                            dtype=getattr(torch, args.dtype))
    model.eval()
    inputs = processor_inputs(args.ckpt, args.image)
    t1 = time.perf_counter()
    print(f"bench-phase load {t1 - t0:.2f}", flush=True)
    print("inputs: " + ", ".join(f"{k} {list(v.shape)} {str(v.dtype).replace('torch.', '')}"
                                 for k, v in inputs.items()), flush=True)

    exporter = OnnxExporter()
    if args.mode == "generation":
        exported = exporter.export_for_generation(model, inputs, config=OnnxConfig(dynamic=True))
    else:
        tower = model.model.visual
        exported = exporter.export(tower, {"hidden_states": inputs["pixel_values"],
                                           "grid_thw": inputs["image_grid_thw"]},
                                   config=OnnxConfig(dynamic=True))
    t2 = time.perf_counter()
    print(f"bench-phase export {t2 - t1:.2f}", flush=True)

    exported.save_pretrained(args.out)
    print(f"bench-phase save {time.perf_counter() - t2:.2f}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
