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


def _edit_config(ckpt, **changes):
    config = json.loads((ckpt / "config.json").read_text())
    for key, value in changes.items():
        if value is DELETE:
            config.pop(key, None)
        else:
            config[key] = value
    (ckpt / "config.json").write_text(json.dumps(config))


DELETE = object()


def test_transformers_key_names(tmp_path):
    """GPT2Config maps num_attention_heads, num_hidden_layers, hidden_size and
    max_position_embeddings onto its n_* keys: a config.json that uses them is read as
    transformers reads it; one that gives both names different values is refused."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=8)
    _edit_config(ckpt, n_head=DELETE, num_attention_heads=4, n_layer=DELETE,
                 num_hidden_layers=2, n_embd=DELETE, hidden_size=64)
    assert reference_model(ckpt).config.n_head == 4
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    check_against_reference(ckpt, out / "model.onnx", SHAPES)
    _edit_config(ckpt, n_head=8)
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"],
                       ["'n_head' (8)", "'num_attention_heads' (4)", "disagree"], 1)


def test_odd_head_dim(tmp_path):
    """GPT-2 has no rope, so a head of 9 is fine (as in transformers)."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=9, n_embd=36, n_head=4, n_inner=40)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    check_against_reference(ckpt, out / "model.onnx", SHAPES)


def test_null_activation_refused(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    _edit_config(ckpt, activation_function=None)
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"],
                       ["'activation_function' is null"], 1)


def _renamed(ckpt, dst, rename, drop=()):
    header, data = read_safetensors(ckpt / "model.safetensors")
    header.pop("__metadata__", None)
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        for new in rename(name):
            tensors[new] = (info["dtype"], info["shape"], data[begin:end])
    for name in drop:
        tensors.pop(name)
    dst.mkdir()
    for f in ("config.json", "generation_config.json"):
        (dst / f).write_bytes((ckpt / f).read_bytes())
    _write(dst / "model.safetensors", tensors)
    return dst


def test_both_namings_refused(tmp_path):
    """transformers would load a mixture of the two sets: refused, naming both."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    both = _renamed(ckpt, tmp_path / "both",
                    lambda n: [n, n.removeprefix("transformer.")] if n.startswith("transformer.")
                    else [n])
    check_export_error(both, tmp_path / "out", ["--dynamic"],
                       ["'transformer.wpe.weight'", "'wpe.weight'", "keep one"], 1)


def test_hub_names_with_only_the_head(tmp_path):
    """The hub's naming with the tied table stored as lm_head.weight alone: transformers ties
    the embedding to it, as ferry does."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=10)
    header, data = read_safetensors(ckpt / "model.safetensors")
    head_only = _renamed(ckpt, tmp_path / "head",
                         lambda n: ["lm_head.weight"] if n == "transformer.wte.weight"
                         else [n.removeprefix("transformer.")])
    out = ferry_export(head_only, tmp_path / "onnx", "--dynamic", "--quiet")
    check_against_reference(ckpt, out / "model.onnx", SHAPES)


def test_quantized_embeddings_keep_positions_float(tmp_path):
    """--quantize-embeddings quantizes the token table, which the token ids index; the position
    table stays float, as onnxruntime-genai's builder and transformers' quantizers keep it."""
    import onnx

    from quant_ref import dequantized_checkpoint

    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=12)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quantize", "int4",
                       "--quantize-embeddings", "--ort-fusions", "cpu", "--accuracy-level", "0",
                       "--quiet")
    model = onnx.load(out / "model.onnx", load_external_data=False)
    floats = {t.name for t in model.graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    assert "transformer.wpe.weight" in floats
    assert [n.op_type for n in model.graph.node if n.op_type == "GatherBlockQuantized"] == \
        ["GatherBlockQuantized"]
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 32, True, embeddings=True)
    check_against_reference(ref, out / "model.onnx", SHAPES, atol=2e-3)


def test_validate_a_plain_export(tmp_path):
    """`ferry export --validate` runs a plain GPT-2 export as the causal LM it is (its output
    class is CausalLMOutputWithCrossAttentions, not an encoder's)."""
    import os
    import sys

    from conftest import ROOT

    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2")
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, stdout, stderr = run_ferry("export", ckpt, tmp_path / "out", "--dynamic", "--validate",
                                   env=env)
    assert rc == 0, (stdout, stderr)
    assert "PASS" in stdout and "FAIL" not in stdout, stdout


def test_generate_stops_at_the_position_table(tmp_path):
    """generate() takes no step past n_positions: by default it stops there, as transformers'
    does; asked for more, it refuses before running (transformers fails there too), in every
    runtime (OpenVINO would read past the table without a word)."""
    import ferry

    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=13, n_positions=32)
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    exported = ferry.ExportedModel.from_pretrained(out)
    ids = np.random.default_rng(2).integers(3, 160, (1, 28))
    got = exported.generate(ids, do_sample=False)
    assert got.shape[1] == 32
    with torch.no_grad():
        want = reference_model(ckpt).generate(torch.from_numpy(ids), max_new_tokens=4,
                                              do_sample=False, pad_token_id=0)
    assert np.array_equal(got, want.numpy())
    with pytest.raises(ferry.FerryError, match="n_positions"):
        exported.generate(ids, max_new_tokens=5, do_sample=False)


@pytest.mark.parametrize("max_positions", [None, 64, "32", 0, True])
def test_position_table_without_or_with_a_bad_max_positions(tmp_path, max_positions):
    """An export.json without generation.max_positions (written before ferry recorded it) or
    with a larger one still refuses a generation past config.json's n_positions (OpenVINO would
    run on with zeros for positions); a malformed one is refused, naming the key."""
    import ferry

    ckpt = make_checkpoint(tmp_path / "ckpt", "gpt2", seed=13, n_positions=32)
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    path = out / "export.json"
    manifest = json.loads(path.read_text())
    if max_positions is None:
        del manifest["generation"]["max_positions"]
    else:
        manifest["generation"]["max_positions"] = max_positions
    path.write_text(json.dumps(manifest))
    ids = np.random.default_rng(2).integers(3, 160, (1, 28))
    if max_positions in (None, 64):
        exported = ferry.ExportedModel.from_pretrained(out)
        with pytest.raises(ferry.FerryError, match="past the 32 rows"):
            exported.generate(ids, max_new_tokens=5, do_sample=False)
    else:
        with pytest.raises(ferry.FerryError, match="generation.max_positions must be a positive"):
            ferry.ExportedModel.from_pretrained(out).generate(ids, max_new_tokens=5)
