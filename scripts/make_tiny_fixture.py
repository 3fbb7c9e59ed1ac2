#!/usr/bin/env python3
"""Builds fixtures/tiny-llama/: a random LlamaForCausalLM (seed 0) small enough to commit, used
by `make demo` and as a ready-made checkpoint for quick manual runs.

    .venv/bin/python scripts/make_tiny_fixture.py [--out fixtures/tiny-llama]

Geometry: hidden 64, 2 layers, 4 query heads / 2 kv heads (GQA), head_dim 16, intermediate 128,
vocab 512, untied lm_head, float32 (~0.6 MB). Weights are drawn with non-trivial values (unit-gain
linears, norm weights in [0.5, 1.5]) so the logits are not flat. Requires torch + transformers;
runs offline.
"""

import argparse
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build(out):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 1.2 / p.shape[1] ** 0.5)
    if out.exists():
        shutil.rmtree(out)
    model.save_pretrained(out)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "fixtures" / "tiny-llama")
    args = parser.parse_args()
    out = build(args.out)
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"wrote {out} ({total} bytes): {', '.join(sorted(p.name for p in out.iterdir()))}")
    assert total < 5 * 1024 * 1024


if __name__ == "__main__":
    main()
