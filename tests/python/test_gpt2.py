"""GPT-2 beyond the oracle tests every family gets (conftest's ARCHS has a GPT-2 with tied
embeddings, gelu_new and scores scaled by layer): the original checkpoints' tensor names (no
"transformer." prefix, with the attention-mask buffers transformers ignores), the config keys
it honours (scale_attn_weights false, n_inner absent, the erf GELU), bf16 weights, and what
ferry refuses by name (reorder_and_upcast_attn, cross-attention, a cache past the position
table, a Conv1D weight stored as a Linear's)."""

import json

import numpy as np
import pytest
import torch

from conftest import (check_against_reference, check_export_error, ferry_export,
                      make_checkpoint, read_safetensors, reference_model, run_ferry,
                      write_safetensors)

SHAPES = [(1, 1), (3, 7), (2, 33)]


def _write(path, tensors):
    """{name: (dtype, shape, bytes)} as a safetensors file."""
    header, chunks, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    write_safetensors(path, header, b"".join(chunks))


def test_original_tensor_names(tmp_path):
    """The files on the hub name the base model's tensors without "transformer." and carry
    each layer's causal-mask buffers (attn.bias, attn.masked_bias), which transformers ignores
    on load: ferry reads the same weights, uses no buffer, and warns of no unused tensor."""
    ckpt = make_checkpoint(tmp_path / "saved", "gpt2", seed=3)
    header, data = read_safetensors(ckpt / "model.safetensors")
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name.removeprefix("transformer.")] = (info["dtype"], info["shape"],
                                                     data[begin:end])
    for layer in range(2):
        mask = np.tril(np.ones((1, 1, 256, 256), np.float32))
        tensors[f"h.{layer}.attn.bias"] = ("F32", list(mask.shape), mask.tobytes())
        tensors[f"h.{layer}.attn.masked_bias"] = ("F32", [], np.float32(-1e4).tobytes())
    original = tmp_path / "original"
    original.mkdir()
    for f in ("config.json", "generation_config.json"):
        (original / f).write_bytes((ckpt / f).read_bytes())
    _write(original / "model.safetensors", tensors)
    rc, _, stderr = run_ferry("export", original, tmp_path / "onnx", "--dynamic", "--quiet")
    assert rc == 0, stderr
    assert "not used" not in stderr, stderr
    check_against_reference(ckpt, tmp_path / "onnx" / "model.onnx", SHAPES)


@pytest.mark.parametrize("overrides", [
    dict(scale_attn_weights=False, scale_attn_by_inverse_layer_idx=False),
    dict(n_inner=None, activation_function="gelu"),
], ids=["unscaled-scores", "default-inner-erf-gelu"])
def test_config_keys_honoured(tmp_path, overrides):
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=4, **overrides)
    config = json.loads((ckpt / "config.json").read_text())
    assert all(config[k] == v for k, v in overrides.items()), config
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    check_against_reference(ckpt, out / "model.onnx", SHAPES)


def test_bf16_checkpoint(tmp_path):
    """bf16 weights exported to fp32 (the default): the oracle upcasts the same values."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=6, dtype=torch.bfloat16)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    assert reference_model(ckpt).transformer.h[0].attn.c_attn.weight.dtype == torch.float32
    check_against_reference(ckpt, out / "model.onnx", SHAPES)


@pytest.mark.parametrize("key,needle", [
    ("reorder_and_upcast_attn", "reorder_and_upcast_attn true is not supported"),
    ("add_cross_attention", "add_cross_attention true is not supported"),
])
def test_refused_keys(tmp_path, key, needle):
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    config = json.loads((ckpt / "config.json").read_text())
    config[key] = True
    (ckpt / "config.json").write_text(json.dumps(config))
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"], [needle, "config.json"], 1)


def test_cache_past_the_position_table_refused(tmp_path):
    """A static cache longer than n_positions would give its last tokens no position."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    check_export_error(ckpt, tmp_path / "out", ["--for-generation", "--static-cache",
                                                "--max-cache-len", "300"],
                       ["--max-cache-len 300", "256 positions", "GPT2LMHeadModel"], 2)


def test_linear_layout_refused(tmp_path):
    """A c_attn stored [out, in], as a Linear's would be, is named with both shapes: read as
    Conv1D's [in, out] it would be silently transposed."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    header, data = read_safetensors(ckpt / "model.safetensors")
    header["transformer.h.1.attn.c_attn.weight"]["shape"] = [192, 64]
    write_safetensors(ckpt / "model.safetensors", header, data)
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"],
                       ["transformer.h.1.attn.c_attn.weight", "[192, 64]", "[64, 192]"], 1)
