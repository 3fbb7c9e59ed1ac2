"""Gemma3ForConditionalGeneration exported text-only (--text-only, the recipe's text_only): its
language model alone, read from the checkpoint's "language_model." tensors, runs as
transformers' Gemma3ForConditionalGeneration does when given no image, in every format; the
vision tower and projector are left out without a warning. Without the option such a checkpoint
is refused, naming it; with it, a text model is refused."""

import json

import numpy as np
import pytest
import torch

from conftest import (ARCHS, BASE_CONFIG, DROP, _init_weights, assert_logits_close,
                      check_export_error, ferry_export, make_checkpoint, make_inputs,
                      reference_logits, reference_model, run_ferry)

VOCAB = 160
FORMATS = {
    "onnx": [],
    "onnx-fused": ["--ort-fusions", "cpu"],
    "openvino": ["--format", "openvino"],
    "pt2": ["--format", "pt2"],
    "executorch": ["--format", "executorch"],
}


@pytest.fixture(scope="module")
def conditional(tmp_path_factory):
    """A tiny Gemma3ForConditionalGeneration: conftest's Gemma 3 text model (windows, a rope
    per layer type, tied embeddings; random weights) beside a one-layer SigLIP vision tower."""
    import transformers

    text = dict(BASE_CONFIG)
    text.update(ARCHS["gemma3"][2])
    text = {k: v for k, v in text.items() if v is not DROP}
    vision = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision,
                                       mm_tokens_per_image=4, image_token_index=150,
                                       boi_token_index=151, eoi_token_index=152)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    _init_weights(model.model.language_model, 7)   # the vision tower keeps its own init
    path = tmp_path_factory.mktemp("gemma3-conditional") / "ckpt"
    model.save_pretrained(path)
    return path


def test_refused_without_text_only(conditional, tmp_path):
    check_export_error(conditional, tmp_path / "out", ["--dynamic"],
                       ["Gemma3ForConditionalGeneration", "vision tower", "--text-only"], 1)


def test_text_model_refuses_text_only(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    check_export_error(ckpt, tmp_path / "out", ["--dynamic", "--text-only"],
                       ["text_only", "LlamaForCausalLM is a text model already"], 2)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_logits_match_eager(conditional, tmp_path, fmt):
    """Batch 3 left-padded and batch 1 over sequences past the window: ferry's runner on each
    format against Gemma3ForConditionalGeneration's eager logits with no image."""
    import ferry

    rc, _, stderr = run_ferry("export", conditional, tmp_path / fmt, "--dynamic",
                              "--text-only", *FORMATS[fmt])
    assert rc == 0, stderr
    assert "not used" not in stderr, stderr   # the vision tower is left out by request
    manifest = json.loads((tmp_path / fmt / "export.json").read_text())
    assert manifest["components"]["model"]["metadata"]["export_config"]["text_only"] is True
    exported = ferry.ExportedModel.from_pretrained(tmp_path / fmt)
    assert type(reference_model(conditional)).__name__ == "Gemma3ForConditionalGeneration"
    for batch, seq in [(3, 7), (1, 33)]:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        got = exported(input_ids=ids, attention_mask=mask).logits
        assert_logits_close(got, reference_logits(conditional, ids, mask, None), mask,
                            what=f"{fmt} {batch}x{seq}")


def test_pt2_state_dict_is_the_causal_lms(conditional, tmp_path):
    """The program's parameters are Gemma3ForCausalLM's (model.layers.0..., lm_head tied), each
    the checkpoint's language_model tensor, so that the causal LM loads them."""
    import transformers
    from safetensors.torch import load_file

    out = ferry_export(conditional, tmp_path / "pt2", "--format", "pt2", "--dynamic",
                       "--text-only", "--quiet")
    state = torch.export.load(out / "model.pt2").state_dict
    stored = load_file(conditional / "model.safetensors")
    for name, value in state.items():
        source = "language_model.model.embed_tokens.weight" if name == "lm_head.weight" \
            else "language_model." + name
        assert torch.equal(value, stored[source]), name
    text = transformers.Gemma3TextConfig.from_dict(
        json.loads((conditional / "config.json").read_text())["text_config"])
    causal = transformers.Gemma3ForCausalLM(text)
    assert set(state) == set(causal.state_dict())


def test_generate_equals_transformers(conditional, tmp_path):
    import ferry

    out = ferry_export(conditional, tmp_path / "gen", "--dynamic", "--for-generation",
                       "--text-only", "--quiet")
    exported = ferry.ExportedModel.from_pretrained(out)
    ids, mask, _ = make_inputs(VOCAB, 2, 9)
    got = exported.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
    with torch.no_grad():
        want = reference_model(conditional).generate(
            torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
            min_new_tokens=12, do_sample=False, pad_token_id=0)
    assert np.array_equal(np.asarray(got)[:, 9:], want[:, 9:].numpy())


def test_python_configs_take_text_only(conditional, tmp_path):
    """The guide's exporters with text_only=True in the config (every format's), and the
    recipe's key through AutoExportConfig."""
    import ferry

    for config in (ferry.OnnxConfig(dynamic=True, text_only=True),
                   ferry.OpenVINOConfig(dynamic=True, text_only=True),
                   ferry.DynamoConfig(dynamic=True, text_only=True),
                   ferry.ExecutorchConfig(dynamic=True, text_only=True),
                   ferry.AutoExportConfig.from_dict({"export_format": "onnx", "text_only": True})):
        assert config.to_dict()["text_only"] is True
    exported = ferry.OnnxExporter().export(str(conditional), config=ferry.OnnxConfig(
        dynamic=True, text_only=True))
    ids, mask, _ = make_inputs(VOCAB, 2, 5)
    assert_logits_close(exported(input_ids=ids, attention_mask=mask).logits,
                        reference_logits(conditional, ids, mask, None), mask)
    with pytest.raises(ferry.FerryError, match="text_only"):
        ferry.OnnxConfig(text_only="yes")
