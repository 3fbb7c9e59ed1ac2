"""Gemma3ForConditionalGeneration exported text-only (--text-only, the recipe's text_only): its
language model alone, read from the checkpoint's "language_model." tensors (or, as transformers
4.52-4.57 saved them, "model.language_model."), runs as transformers'
Gemma3ForConditionalGeneration does when given no image, in every format; the vision tower and
projector are left out without a warning. What the conditional model decides for itself is its
own: the head's tie (config.json's top level), no logit soft-cap, Gemma3TextConfig's defaults
for the keys Google's configs leave out, eos from the top level. Without the option such a
checkpoint is refused, naming it; with it, a text model is refused."""

import json
import shutil

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


def variant(source, path, config=None, tensors=None):
    """A copy of checkpoint `source` at `path`: config.json through `config` (a function that
    edits the dict), the tensors through `tensors` (a function of the state dict -> a new one)."""
    from safetensors.torch import load_file, save_file

    path.mkdir(parents=True)
    for name in ("config.json", "generation_config.json"):
        if (source / name).exists():
            shutil.copy(source / name, path / name)
    if config:
        data = json.loads((path / "config.json").read_text())
        config(data)
        (path / "config.json").write_text(json.dumps(data))
    state = load_file(source / "model.safetensors")
    save_file(tensors(state) if tensors else state, path / "model.safetensors",
              metadata={"format": "pt"})
    return path


def check_onnx_logits(ckpt, out, reference=None):
    """--text-only ONNX export of `ckpt` against the eager logits of `reference` (default:
    `ckpt`) with no image, batch 3 left-padded; -> ferry's stderr."""
    import ferry

    rc, _, stderr = run_ferry("export", ckpt, out, "--dynamic", "--text-only")
    assert rc == 0, stderr
    ids, mask, _ = make_inputs(VOCAB, 3, 7)
    got = ferry.ExportedModel.from_pretrained(out)(input_ids=ids, attention_mask=mask).logits
    assert_logits_close(got, reference_logits(reference or ckpt, ids, mask, None), mask)
    return stderr


def test_refused_without_text_only(conditional, tmp_path):
    check_export_error(conditional, tmp_path / "out", ["--dynamic"],
                       ["Gemma3ForConditionalGeneration", "vision tower", "--text-only",
                        "text_only=True"], 1)


def test_transformers_4_52_tensor_names(conditional, tmp_path):
    """transformers 4.52-4.57 saved the language model as "model.language_model.*", the tower
    as "model.vision_tower.*" and the head at the top: the same model, read and left out alike."""
    def newer(state):
        renamed = {}
        for name, value in state.items():
            if name.startswith("language_model.model."):
                name = "model.language_model." + name[len("language_model.model."):]
            elif name.startswith("language_model."):
                name = name[len("language_model."):]
            else:
                name = "model." + name
            renamed[name] = value
        assert any(n.startswith("model.vision_tower.") for n in renamed)
        return renamed

    ckpt = variant(conditional, tmp_path / "newer", tensors=newer)
    stderr = check_onnx_logits(ckpt, tmp_path / "onnx", reference=conditional)
    assert "not used" not in stderr, stderr
    rc, stdout, stderr = run_ferry("inspect", tmp_path / "onnx")
    assert rc == 0 and "text-only: the checkpoint's language model alone" in stdout, stderr


def test_gemma3_text_config_defaults(tmp_path):
    """google/gemma-3-4b-it's text_config names five keys and leaves the heads, head_dim,
    vocabulary and the rest to Gemma3TextConfig's defaults, as ferry does."""
    import transformers

    text = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, vocab_size=VOCAB,
                num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=6,
                rope_scaling={"rope_type": "linear", "factor": 8.0})
    config = transformers.Gemma3Config(
        text_config=text, vision_config=dict(hidden_size=32, intermediate_size=48,
                                             num_hidden_layers=1, num_attention_heads=2,
                                             image_size=28, patch_size=14),
        mm_tokens_per_image=4, image_token_index=150, boi_token_index=151, eoi_token_index=152)
    torch.manual_seed(0)
    model = transformers.Gemma3ForConditionalGeneration(config).eval()
    _init_weights(model.model.language_model, 7)
    model.save_pretrained(tmp_path / "saved")
    left_out = ["num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                "max_position_embeddings", "query_pre_attn_scalar"]

    def google_like(data):
        for key in left_out:
            data["text_config"].pop(key, None)

    ckpt = variant(tmp_path / "saved", tmp_path / "ckpt", config=google_like)
    assert reference_model(ckpt).config.text_config.num_key_value_heads == 4
    check_onnx_logits(ckpt, tmp_path / "onnx")
    # the vocabulary too: Gemma3TextConfig's 262208 rows, which this checkpoint has not
    bare = variant(ckpt, tmp_path / "bare", config=lambda d: d["text_config"].pop("vocab_size"))
    check_export_error(bare, tmp_path / "out", ["--dynamic", "--text-only"],
                       ["embed_tokens.weight", "262208"], 1)


def test_no_final_logit_softcapping(conditional, tmp_path):
    """Gemma3ForConditionalGeneration's forward never soft-caps its logits, whatever its
    text_config says (Gemma3ForCausalLM's does): neither does the export."""
    ckpt = variant(conditional, tmp_path / "ckpt", config=lambda d: d["text_config"].update(
        final_logit_softcapping=0.5))
    check_onnx_logits(ckpt, tmp_path / "onnx")


def test_tie_is_the_top_level_configs(conditional, tmp_path):
    """transformers ties the head by the model's own config (the top level); a text_config
    that says otherwise does not tie it, and the stored head is used without a warning."""
    def untie(data):
        data["tie_word_embeddings"] = False
        data["text_config"]["tie_word_embeddings"] = True

    def with_head(state):
        torch.manual_seed(3)
        embed = state["language_model.model.embed_tokens.weight"]
        return {**state, "language_model.lm_head.weight": torch.randn_like(embed) * 0.1}

    ckpt = variant(conditional, tmp_path / "ckpt", config=untie, tensors=with_head)
    ref = reference_model(ckpt)
    assert not torch.equal(ref.lm_head.weight, ref.get_input_embeddings().weight)
    stderr = check_onnx_logits(ckpt, tmp_path / "onnx")
    assert "tie_word_embeddings" not in stderr and "not used" not in stderr, stderr


def test_eos_from_the_top_level(conditional, tmp_path):
    """Without generation_config.json, generate() and genai_config.json stop on config.json's
    top-level eos_token_id before its text_config's, as GenerationConfig.from_model_config
    fills them."""
    from ferry.generation import resolve

    def eos(data):
        data["eos_token_id"] = [1, 106]
        data["text_config"]["eos_token_id"] = 1

    ckpt = variant(conditional, tmp_path / "ckpt", config=eos)
    (ckpt / "generation_config.json").unlink(missing_ok=True)
    out = ferry_export(ckpt, tmp_path / "gen", "--dynamic", "--for-generation", "--text-only",
                       "--quiet")
    assert resolve(out, {})["eos_token_id"] == [1, 106]
    # and onnxruntime-genai's config, which ferry writes from the same keys
    assert json.loads((out / "genai_config.json").read_text())["model"]["eos_token_id"] == \
        [1, 106]


def test_text_config_required(conditional, tmp_path):
    def flat(data):
        data.update(data.pop("text_config"))

    ckpt = variant(conditional, tmp_path / "ckpt", config=flat)
    check_export_error(ckpt, tmp_path / "out", ["--dynamic", "--text-only"],
                       ["config.json", "'text_config' is missing"], 1)


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
