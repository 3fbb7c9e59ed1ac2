"""SmolVLM (SmolVLMForConditionalGeneration) exported for generation: its image_encoder (the
SigLIP tower), connector (pixel shuffle and projection), embed_tokens, language_model (Llama),
lm_head and decode, each run in its runtime against transformers' eager submodule, and the
pipeline's greedy tokens against transformers' generate(). The tiles are the model's own image
processor's, of generated pictures; the prompts' image tokens are laid out as its processor
lays them (a row/column marker, then the tile's tokens, per tile)."""
import json

import numpy as np
import pytest
import torch

from conftest import FP32_ATOL, ferry_export, run_ferry
from test_qwen2_vl import FORMATS, Components, _init

IMAGE, FAKE, ROW = 250, 251, 252
NEW_TOKENS = 24
# 64-pixel tiles of 16-pixel patches: 16 patches, 4 image tokens a tile after the shuffle
TILE, TOKENS_PER_TILE = 64, 4


def processor():
    from transformers.models.smolvlm.image_processing_pil_smolvlm import (
        SmolVLMImageProcessorPil)

    return SmolVLMImageProcessorPil(size={"longest_edge": 2 * TILE},
                                    max_image_size={"longest_edge": TILE})


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import SmolVLMConfig, SmolVLMForConditionalGeneration

    config = SmolVLMConfig(
        text_config=dict(model_type="llama", vocab_size=256, hidden_size=64,
                         intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, max_position_embeddings=512, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0),
        vision_config=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=2, image_size=TILE, patch_size=16),
        scale_factor=2, image_token_id=IMAGE)
    torch.manual_seed(0)
    model = SmolVLMForConditionalGeneration(config).eval()
    _init(model, 4)
    path = tmp_path_factory.mktemp("smolvlm") / "ckpt"
    model.save_pretrained(path)
    processor().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(ckpt):
    from transformers import SmolVLMForConditionalGeneration

    return SmolVLMForConditionalGeneration.from_pretrained(ckpt).eval()


@pytest.fixture(scope="module", params=list(FORMATS))
def export(request, ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"smolvlm-{request.param}") / "out"
    ferry_export(ckpt, out, *FORMATS[request.param], "--dynamic", "--for-generation", "--quiet")
    return request.param, out


def inputs(images_per_row, seed=0):
    """input_ids and attention_mask (left padding) of prompts with that many pictures a row,
    and the processor's pixel_values and pixel_attention_mask (rows with fewer pictures padded
    with all-zero tiles)."""
    rng = np.random.default_rng(seed)
    pictures = [[rng.integers(0, 256, (100, 70, 3), dtype=np.uint8) for _ in range(n)]
                for n in images_per_row]
    enc = dict(processor()(images=pictures, return_tensors="pt")) if any(pictures) else {}
    rows = []
    for picture in pictures:
        ids = [10, 11]
        for p in picture:
            tiles = processor()(images=[[p]], return_tensors="np")["pixel_values"].shape[1]
            ids += ([FAKE, ROW] + [IMAGE] * TOKENS_PER_TILE) * tiles + [FAKE]
        rows.append(ids + [12, 13])
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, {k: enc[k] for k in ("pixel_values", "pixel_attention_mask") if k in enc}


def test_image_encoder_and_connector_match(model, export):
    """Four tiles of one picture (an ExecuTorch program takes at most max_batch_size, 4): the
    tower's last hidden state and the connector's features against transformers' submodules."""
    _, _, enc = inputs([1])
    tiles = enc["pixel_values"][0][:4]
    with torch.no_grad():
        hidden = model.model.vision_model(pixel_values=tiles).last_hidden_state
        features = model.model.connector(hidden)
    run = Components(*export, names=("image_encoder", "connector"))
    got = run("image_encoder", {"pixel_values": tiles.numpy()})["last_hidden_state"]
    np.testing.assert_allclose(got, hidden.numpy(), atol=FP32_ATOL, rtol=0)
    got = run("connector", {"image_hidden_states": hidden.numpy()})["image_features"]
    np.testing.assert_allclose(got, features.numpy(), atol=FP32_ATOL, rtol=0)


@pytest.mark.parametrize("rows", [[1], [2], [0], [2, 1]],
                         ids=["one picture", "two pictures", "text only", "batch 2"])
def test_generate_equals_transformers(model, export, rows):
    """ExportedModel.generate() with the processor's tiles gives transformers' 24 greedy
    tokens; a batch's shorter row is left-padded and its missing tiles are all-zero ones."""
    from ferry import ExportedModel

    ids, mask, enc = inputs(rows)
    got = ExportedModel.from_pretrained(export[1]).generate(
        ids, mask, **enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    assert got.tolist() == want.tolist()


def test_static_cache(model, ckpt, tmp_path):
    from ferry import ExportedModel

    out = ferry_export(ckpt, tmp_path / "static", "--dynamic", "--for-generation",
                       "--static-cache", "--max-cache-len", "96", "--dim", "input_ids:0=batch",
                       "--quiet")
    ids, mask, enc = inputs([1, 2])
    got = ExportedModel.from_pretrained(out).generate(
        ids, mask, **enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    assert got.tolist() == want.tolist()


def test_generate_refuses_what_it_cannot_run(export):
    """A tile the pixel mask cuts, tiles of another size, and image tokens the tiles do not
    fill: one line each."""
    from ferry import ExportedModel, FerryError

    exported = ExportedModel.from_pretrained(export[1])
    ids, mask, enc = inputs([1])
    cut = enc["pixel_attention_mask"].clone()
    cut[0, 0, :, TILE // 2:] = 0
    with pytest.raises(FerryError, match="pixel_attention_mask masks part of tile 0"):
        exported.generate(ids, mask, pixel_values=enc["pixel_values"],
                          pixel_attention_mask=cut, max_new_tokens=2)
    with pytest.raises(FerryError, match=r"pixel_values has shape \[1, 5, 3, 32, 32\]"):
        exported.generate(ids, mask, pixel_values=enc["pixel_values"][..., :32, :32],
                          max_new_tokens=2)
    with pytest.raises(FerryError, match="image tokens but no pixel_values"):
        exported.generate(ids, mask, max_new_tokens=2)
    fewer = {"pixel_values": enc["pixel_values"][:, :3]}
    with pytest.raises(FerryError, match="holds 20 image tokens, and the 3 tiles give 12"):
        exported.generate(ids, mask, **fewer, max_new_tokens=2)


@pytest.mark.parametrize("flags,why", [
    ((), "export it for generation"),
    (("--for-generation", "--dynamic", "--format", "openvino"),
     "stateful=False (--disable-stateful) writes its components"),
])
def test_what_is_not_written_is_refused(ckpt, tmp_path, flags, why):
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", *flags)
    assert rc != 0 and why in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key,value,why", [
    ("hidden_act", "gelu", "vision_config.hidden_act 'gelu' is not supported"),
    ("image_size", 72, "image_size 72 is not a whole number of patch_size 16 patches"),
    ("patch_size", 64, "scale_factor 2 does not divide the 1 patches"),
])
def test_a_tower_ferry_cannot_build_is_refused(ckpt, tmp_path, key, value, why):
    bad = tmp_path / "bad"
    bad.mkdir()
    config = json.loads((ckpt / "config.json").read_text())
    config["vision_config"][key] = value
    (bad / "config.json").write_text(json.dumps(config))
    (bad / "model.safetensors").symlink_to(ckpt / "model.safetensors")
    rc, _, err = run_ferry("export", bad, tmp_path / "out", "--dynamic", "--for-generation")
    assert rc != 0 and why in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists()
