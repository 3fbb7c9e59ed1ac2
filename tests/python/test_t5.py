"""T5 (T5ForConditionalGeneration) exported for generation: its encoder (with each decoder block's
cross-attention keys and values) and its prefill/decode, in every backend and cache layout, run
in their runtimes against transformers' eager model on the same weights, and ferry's generate()
against transformers' generate(). Two checkpoints: the original T5's shape (relu MLP, the head
tied to the shared embedding and its input scaled by d_model^-0.5) and T5 v1.1's / flan-t5's
(gated-gelu, an lm_head of its own, no scaling)."""
import json

import numpy as np
import pytest
import torch

from conftest import FP32_ATOL, ferry_export, read_safetensors, run_ferry, write_safetensors

VOCAB = 96
NEW_TOKENS = 24
# prompts longer than relative_attention_max_distance (20): the far buckets are read too
LENGTH = 26
DYNAMIC = ("--dynamic", "--for-generation", "--quiet")
# a static cache is allocated for the example's batch unless a dim names the axis
STATIC = ("--static-cache", "--max-cache-len", "40", "--dim", "input_ids:0=batch")
FORMATS = {"onnx": ("--format", "onnx"),
           "onnx-fused": ("--format", "onnx", "--ort-fusions", "cpu"),
           "onnx-static": ("--format", "onnx", *STATIC),
           "onnx-single-token": ("--format", "onnx", "--single-token-decode"),
           "openvino": ("--format", "openvino"),
           "openvino-stateless": ("--format", "openvino", "--disable-stateful"),
           "pt2-dynamic": ("--format", "pt2"),
           "pt2": ("--format", "pt2", *STATIC),
           "executorch": ("--format", "executorch", *STATIC)}


def _init(model, seed):
    """Values of O(1) (transformers' init makes a tiny model emit one token forever): norms
    U(0.5, 1.5), the embedding N(0, 1), the position bias tables N(0, 1), matrices of unit gain
    over their fan-in."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name:
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif "shared" in name or "relative_attention_bias" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) * 1.2 / p.shape[1] ** 0.5)


def _checkpoint(path, v1_1):
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=2,
                      num_decoder_layers=2, num_heads=4, relative_attention_num_buckets=8,
                      relative_attention_max_distance=20, decoder_start_token_id=0,
                      pad_token_id=0, eos_token_id=1,
                      feed_forward_proj="gated-gelu" if v1_1 else "relu")
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).eval()
    _init(model, 4 if v1_1 else 13)
    model.save_pretrained(path)
    if v1_1:  # an lm_head of its own, and a config that says so (T5 v1.1's, flan-t5's)
        header, data = read_safetensors(path / "model.safetensors")
        header.pop("__metadata__", None)
        head = torch.randn(VOCAB, 32, generator=torch.Generator().manual_seed(9)) / 32 ** 0.5
        raw = head.numpy().astype(np.float32).tobytes()
        header["lm_head.weight"] = {"dtype": "F32", "shape": [VOCAB, 32],
                                    "data_offsets": [len(data), len(data) + len(raw)]}
        write_safetensors(path / "model.safetensors", header, data + raw)
        cfg = json.loads((path / "config.json").read_text())
        cfg.pop("scale_decoder_outputs", None)
        cfg["tie_word_embeddings"] = False
        (path / "config.json").write_text(json.dumps(cfg))
    return path


@pytest.fixture(scope="module", params=["t5", "t5-v1_1"])
def ckpt(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(request.param) / "ckpt"
    return request.param, _checkpoint(path, request.param == "t5-v1_1")


@pytest.fixture(scope="module")
def model(ckpt):
    from transformers import T5ForConditionalGeneration

    return T5ForConditionalGeneration.from_pretrained(ckpt[1]).eval()


@pytest.fixture(scope="module", params=list(FORMATS))
def export(request, ckpt, tmp_path_factory):
    name, path = ckpt
    if name != "t5" and request.param not in ("onnx", "openvino"):
        pytest.skip("T5 v1.1's checkpoint in the main formats; the original's in every one")
    out = tmp_path_factory.mktemp(f"{name}-{request.param}") / "out"
    ferry_export(path, out, *FORMATS[request.param], *DYNAMIC)
    return request.param, out


def prompt(batch, seed=0):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(2, VOCAB, (batch, LENGTH), generator=gen)
    mask = torch.ones(batch, LENGTH, dtype=torch.long)
    if batch > 1:
        ids[1, LENGTH - 5:] = 0
        mask[1, LENGTH - 5:] = 0  # the tokenizer pads on the right
    return ids, mask


def test_components_match_eager(export, model):
    """The encoder's last_hidden_state and a cross key (padded positions aside), then the
    decoder's logits over a prompt and two decoded tokens through the runners, each within
    FP32_ATOL of transformers' eager model."""
    from ferry import ExportedModel

    fmt, out = export
    runners = ExportedModel.from_pretrained(out).runners
    ids, mask = prompt(2, seed=5)
    with torch.no_grad():
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
    got = runners.encoder({"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    real = mask.bool().numpy()
    np.testing.assert_allclose(got["last_hidden_state"][real], hidden.numpy()[real],
                               atol=FP32_ATOL, rtol=0)
    with torch.no_grad():
        key = model.decoder.block[1].layer[1].EncDecAttention.k(hidden).view(2, LENGTH, 4, 8)
    cross = next(v for k, v in got.items() if k.replace("_", ".") == "present.1.cross.key")
    np.testing.assert_allclose(cross.transpose(0, 2, 1, 3)[real], key.numpy()[real],
                               atol=FP32_ATOL, rtol=0)

    runners.set_inputs(ids, mask)
    steps = [torch.tensor([[0, 9, 40], [0, 17, 3]]), torch.tensor([[11], [3]]),
             torch.tensor([[50], [17]])]
    seen = torch.empty(2, 0, dtype=torch.long)
    for i, step in enumerate(steps):
        seen = torch.cat([seen, step], 1)
        with torch.no_grad():
            want = model(encoder_outputs=(hidden,), attention_mask=mask,
                         decoder_input_ids=seen).logits[:, -step.shape[1]:]
        got = runners["prefill" if i == 0 else "decode"](step.numpy())
        np.testing.assert_allclose(got, want.numpy(), atol=FP32_ATOL, rtol=0,
                                   err_msg=f"{fmt}: step {i}")


@pytest.mark.parametrize("batch", [1, 2])
def test_generate_matches_transformers(export, model, batch):
    """Greedy tokens from decoder_start_token_id, the encoder's padding masked in every cross
    attention: transformers' sequences, the start token first."""
    from ferry import ExportedModel

    fmt, out = export
    ids, mask = prompt(batch, seed=batch)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    got = ExportedModel.from_pretrained(out).generate(ids, attention_mask=mask,
                                                      max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want.tolist(), fmt
    assert len(set(got[:, 1:].flatten().tolist())) >= 2, "one token repeated throughout"


def test_plain_export_refused(ckpt, tmp_path):
    rc, _, stderr = run_ferry("export", ckpt[1], tmp_path / "out", "--quiet")
    assert rc != 0 and "export it for generation" in stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags", [(), ("--quantize", "int4", "--block-size", "16")],
                         ids=["fp32", "int4"])
def test_validate(ckpt, tmp_path, flags):
    """`ferry validate`: a seeded prompt (its last row right-padded) through the encoder, then a
    decoder prompt and 8 greedy steps, against the eager model's logits (int4: by top-1
    agreement)."""
    import os
    import sys

    from conftest import ROOT

    out = ferry_export(ckpt[1], tmp_path / "out", "--format", "onnx", *flags, *DYNAMIC)
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, stdout, stderr = run_ferry("validate", out, env=env)
    assert rc == 0 and "PASS" in stdout and "decode: logits, 8 steps" in stdout, stdout + stderr


def test_default_buckets_over_long_prompts(tmp_path):
    """T5's own bucketing (32 buckets up to distance 128) over 150 encoder and 150 decoder
    tokens, so that every bucket of both directions is read, the far ones past max_distance
    too: the encoder's states and the prefill's logits are eager's (a bucket off by one
    would move them by its table row)."""
    import onnxruntime as ort
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=1,
                      num_decoder_layers=1, num_heads=4, decoder_start_token_id=0,
                      pad_token_id=0, eos_token_id=1)
    assert (config.relative_attention_num_buckets, config.relative_attention_max_distance) == \
        (32, 128)
    torch.manual_seed(0)
    model = T5ForConditionalGeneration(config).eval()
    _init(model, 5)
    model.save_pretrained(tmp_path / "ckpt")
    out = ferry_export(tmp_path / "ckpt", tmp_path / "out", "--format", "onnx", *DYNAMIC)
    gen = torch.Generator().manual_seed(6)
    ids = torch.randint(2, VOCAB, (1, 150), generator=gen)
    dec = torch.randint(2, VOCAB, (1, 150), generator=gen)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state
        want = model(encoder_outputs=(hidden,), attention_mask=mask, decoder_input_ids=dec).logits
    encoder = ort.InferenceSession(str(out / "encoder.onnx"))
    got = dict(zip([o.name for o in encoder.get_outputs()],
                   encoder.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})))
    np.testing.assert_allclose(got["last_hidden_state"], hidden.numpy(), atol=FP32_ATOL, rtol=0)
    prefill = ort.InferenceSession(str(out / "prefill.onnx"))
    feeds = {"input_ids": dec.numpy(), "encoder_attention_mask": mask.numpy(),
             "past_key_values.0.cross_key": got["present.0.cross_key"],
             "past_key_values.0.cross_value": got["present.0.cross_value"]}
    logits = prefill.run(["logits"], feeds)[0]
    np.testing.assert_allclose(logits, want.numpy(), atol=FP32_ATOL, rtol=0)


def test_max_distance_within_the_exact_buckets_refused(tmp_path):
    """A max_distance within the decoder's exact buckets (num_buckets / 2) makes transformers'
    logarithmic buckets undefined: refused by name, nothing written."""
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(vocab_size=VOCAB, d_model=32, d_kv=8, d_ff=48, num_layers=1, num_heads=4,
                      relative_attention_num_buckets=32, relative_attention_max_distance=16)
    T5ForConditionalGeneration(config).save_pretrained(tmp_path / "ckpt")
    rc, _, stderr = run_ferry("export", tmp_path / "ckpt", tmp_path / "out", *DYNAMIC)
    assert rc != 0 and "relative_attention_max_distance (16) must be more than" in stderr
    assert not (tmp_path / "out").exists()


def test_bf16_torch_program_generates(ckpt, tmp_path):
    """A bf16 pt2 export: the encoder's bf16 cross cache reaches the decoders as bf16 (the
    stage hands float32 back) and generate() runs to the end."""
    from ferry import ExportedModel

    out = ferry_export(ckpt[1], tmp_path / "out", "--format", "pt2", *STATIC, "--dtype", "bf16",
                       *DYNAMIC)
    ids, mask = prompt(2, seed=3)
    got = ExportedModel.from_pretrained(out).generate(ids, attention_mask=mask, max_new_tokens=6)
    assert got.shape == (2, 7) and (got[:, 0] == 0).all()


def test_static_shapes_take_the_start_token(ckpt, model, tmp_path):
    """Without --dynamic the decoder's prompt axis is decoder_start_token_id alone (not the
    8-token default example), so a static-shape export with a static cache runs generate()
    on prompts of the example's length."""
    from ferry import ExportedModel

    out = tmp_path / "out"
    ferry_export(ckpt[1], out, "--format", "onnx", "--for-generation", "--quiet",
                 "--example-shape", f"input_ids=1x{LENGTH}", *STATIC)
    ids, mask = prompt(1, seed=4)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    got = ExportedModel.from_pretrained(out).generate(ids, attention_mask=mask,
                                                      max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want.tolist()


def test_static_decoder_warning_names_the_decoder_input(ckpt, tmp_path):
    """A static decoder sequence gets the one-step warning, which names the input whose dim
    makes the decoder's sequence symbolic: decoder_input_ids (a dim on input_ids' axis 1 makes
    the encoder's symbolic and leaves the decoder at one step)."""
    rc, _, stderr = run_ferry("export", ckpt[1], tmp_path / "out", "--for-generation")
    assert rc == 0, stderr
    assert "decode's cache holds exactly 1 position (" in stderr
    assert "a dim on decoder_input_ids' axis 1" in stderr


def test_refusals_name_the_fix(export):
    """Each refusal of the Python side says what to give instead, in one line."""
    from ferry import ExportedModel, FerryError

    fmt, out = export
    if fmt != "onnx":
        pytest.skip("the Python runners' messages: one format is enough")
    exported = ExportedModel.from_pretrained(out)
    ids, mask = prompt(1)
    calls = [
        (lambda: exported.generate(input_features=torch.zeros(1, 8, 16)),
         "needs input_ids (this export takes token ids, not input_features)"),
        (lambda: exported.generate(ids, attention_mask=mask[:, 1:]),
         f"attention_mask has shape [1, {LENGTH - 1}], but input_ids [1, {LENGTH}]"),
        (lambda: ExportedModel.from_pretrained(out).runners["decode"](ids[:, :1].numpy()),
         "run the encoder for this sequence first (runners.set_inputs(input_ids, "
         "attention_mask)"),
    ]
    for call, needle in calls:
        with pytest.raises(FerryError) as e:
            call()
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
