"""Qwen2.5-VL (Qwen2_5_VLForConditionalGeneration) exported for generation. Its language model
and components are Qwen2-VL's (test_qwen2_vl.py checks them one by one); its vision tower is
its own: RMSNorms, a gated SiLU MLP, and attention within windows of merged blocks on every
layer but fullatt_block_indexes'. The tower runs in onnxruntime and OpenVINO against
transformers' on images whose windows are whole, cut at the right and bottom edges, and
several per call; the pipeline's greedy tokens against transformers' generate()."""
import json
import shutil

import numpy as np
import pytest
import torch

from conftest import FP32_ATOL, ferry_export, run_ferry
from test_qwen2_vl import (END, FORMATS, IMAGE, NEW_TOKENS, START, VIDEO, VOCAB, Components,
                           _init, images, inputs)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    # window_size 56 pixels: windows of 2 x 2 merged blocks, so a 56x84 image has a whole
    # window and one cut at its right edge
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 3, 3]},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(depth=4, hidden_size=32, out_hidden_size=64, intermediate_size=48,
                           num_heads=2, patch_size=14, spatial_merge_size=2,
                           temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1, 3]),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START,
        vision_end_token_id=END)
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration(config).eval()
    _init(model, 2)
    path = tmp_path_factory.mktemp("qwen2_5_vl") / "ckpt"
    model.save_pretrained(path)
    Qwen2VLImageProcessorPil().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(ckpt):
    from transformers import Qwen2_5_VLForConditionalGeneration

    return Qwen2_5_VLForConditionalGeneration.from_pretrained(ckpt).eval()


@pytest.fixture(scope="module", params=list(FORMATS))
def export(request, ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"qwen2_5_vl-{request.param}") / "out"
    ferry_export(ckpt, out, *FORMATS[request.param], "--dynamic", "--for-generation", "--quiet")
    return request.param, out


@pytest.mark.parametrize("sizes", [
    [(56, 84)],                          # a whole window and one cut at the right
    [(84, 140)],                         # windows cut at the right and at the bottom
    [(84, 140), (56, 56), (112, 56)],    # three images in one call
])
def test_image_encoder_matches_the_tower(model, export, sizes):
    """The merged features, and the last hidden state in transformers' window order, against
    model.visual on the same pixels."""
    enc = images(sizes)
    with torch.no_grad():
        want = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    got = Components(*export)("image_encoder", {
        "pixel_values": enc["pixel_values"].numpy(),
        "image_grid_thw": enc["image_grid_thw"].numpy()})
    np.testing.assert_allclose(got["last_hidden_state"], want.last_hidden_state.numpy(),
                               atol=FP32_ATOL, rtol=0)
    np.testing.assert_allclose(got["pooler_output"], want.pooler_output.numpy(),
                               atol=FP32_ATOL, rtol=0)


def test_windows_change_the_features(model, ckpt, tmp_path):
    """The window mask is what the tower computes: with every layer a full-attention one the
    features differ from the export's (so a mask that let windows see each other would be
    seen), and equal those of transformers' tower of the same configuration."""
    from transformers import Qwen2_5_VLForConditionalGeneration

    full = tmp_path / "full"
    shutil.copytree(ckpt, full)
    config = json.loads((full / "config.json").read_text())
    config["vision_config"]["fullatt_block_indexes"] = [0, 1, 2, 3]
    (full / "config.json").write_text(json.dumps(config))
    out = ferry_export(full, tmp_path / "out", "--dynamic", "--for-generation", "--quiet")
    enc = images([(84, 140)])
    feeds = {"pixel_values": enc["pixel_values"].numpy(),
             "image_grid_thw": enc["image_grid_thw"].numpy()}
    got = Components("onnx", out)("image_encoder", feeds)["pooler_output"]
    with torch.no_grad():
        windowed = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
        everywhere = Qwen2_5_VLForConditionalGeneration.from_pretrained(full).eval()
        want = everywhere.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    np.testing.assert_allclose(got, want.pooler_output.numpy(), atol=FP32_ATOL, rtol=0)
    assert np.abs(got - windowed.pooler_output.numpy()).max() > 100 * FP32_ATOL


@pytest.mark.parametrize("case", ["one image", "two images", "text only", "batch 2"])
def test_generate_equals_transformers(model, export, case):
    """ExportedModel.generate() with what the processor returns gives transformers' 24 greedy
    tokens."""
    from ferry import ExportedModel

    ids, mask, mm, enc = inputs(case)
    exported = ExportedModel.from_pretrained(export[1])
    got = exported.generate(ids, mask, mm_token_type_ids=mm, **enc, max_new_tokens=NEW_TOKENS,
                            min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    assert got.tolist() == want.tolist()


@pytest.mark.parametrize("key,value,why", [
    ("hidden_act", "gelu", r"vision_config.hidden_act 'gelu' is not supported \(supported: silu"),
    ("window_size", 27, "vision_config.window_size 27 is less than one merged block"),
    ("fullatt_block_indexes", [1, 4], "fullatt_block_indexes entry 1 must be a layer index "
                                      r"in \[0, 4\)"),
    ("fullatt_block_indexes", 3, "must be a list of layer indexes"),
    ("out_hidden_size", 48, "vision_config.out_hidden_size 48 .* differs from the language "
                            "model's hidden_size 64"),
])
def test_a_tower_ferry_cannot_build_is_refused(ckpt, tmp_path, key, value, why):
    """A vision_config ferry does not compute is one line naming the key, and nothing on
    disk."""
    import re

    bad = tmp_path / "bad"
    bad.mkdir()
    config = json.loads((ckpt / "config.json").read_text())
    config["vision_config"][key] = value
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "model.safetensors").symlink_to(ckpt / "model.safetensors")
    rc, _, err = run_ferry("export", bad, tmp_path / "out", "--dynamic", "--for-generation")
    assert rc != 0 and re.search(why, err) and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def stateful(ckpt, tmp_path_factory):
    """OpenVINO's stateful export, laid out as openvino-genai's VLMPipeline loads it: the
    merger takes window_index and both masks, and permutes as transformers does."""
    out = tmp_path_factory.mktemp("qwen2_5_vl-stateful") / "out"
    return ferry_export(ckpt, out, "--format", "openvino", "--dynamic", "--for-generation",
                        "--quiet")


@pytest.mark.parametrize("sizes", [[(84, 140)], [(84, 140), (56, 56), (112, 56)]])
def test_stateful_tower_matches_the_tower(model, stateful, sizes):
    """The merger given the window order and masks as ferry's runner (and the pipeline)
    computes them gives transformers' merged features, in image order."""
    import openvino as ov
    from ferry import ExportedModel

    inputs_ = {p.get_any_name() for p in ov.Core().read_model(
        stateful / "openvino_vision_embeddings_merger_model.xml").inputs}
    assert {"window_index", "window_attention_mask"} <= inputs_
    enc = images(sizes)
    runners = ExportedModel.from_pretrained(stateful).runners
    got = runners._features(enc["pixel_values"].numpy(), enc["image_grid_thw"].numpy())
    with torch.no_grad():
        want = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    np.testing.assert_allclose(got, want.pooler_output.numpy(), atol=FP32_ATOL, rtol=0)


@pytest.mark.parametrize("case", ["two images", "batch 2"])
def test_stateful_generate_equals_transformers(model, stateful, case):
    from ferry import ExportedModel

    ids, mask, mm, enc = inputs(case)
    got = ExportedModel.from_pretrained(stateful).generate(
        ids, mask, mm_token_type_ids=mm, **enc, max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    assert got.tolist() == want.tolist()


def test_stateful_tower_of_another_rope_theta(ckpt, tmp_path):
    """openvino-genai gives the merger angles of base 10000 whatever vision_config says: a tower
    of rope_theta 100 rescales them to its own, so its features are transformers' (ferry's
    runner gives the angles as the pipeline does)."""
    from ferry import ExportedModel
    from transformers import Qwen2_5_VLForConditionalGeneration

    other = tmp_path / "theta"
    shutil.copytree(ckpt, other)
    config = json.loads((other / "config.json").read_text())
    config["vision_config"]["rope_parameters"] = {"rope_type": "axial", "rope_theta": 100.0}
    (other / "config.json").write_text(json.dumps(config))
    out = ferry_export(other, tmp_path / "out", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    enc = images([(84, 140)])
    got = ExportedModel.from_pretrained(out).runners._features(enc["pixel_values"].numpy(),
                                                              enc["image_grid_thw"].numpy())
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(other).eval()
    with torch.no_grad():
        want = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
        base = Qwen2_5_VLForConditionalGeneration.from_pretrained(ckpt).eval().model.visual(
            enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    np.testing.assert_allclose(got, want.pooler_output.numpy(), atol=FP32_ATOL, rtol=0)
    assert np.abs(got - base.pooler_output.numpy()).max() > 100 * FP32_ATOL
