"""Qwen2-VL (Qwen2VLForConditionalGeneration) exported for generation: its image_encoder,
language_model, lm_head and decode components, each run in its runtime (onnxruntime; OpenVINO's
CPU plugin) against transformers' eager submodule on the same inputs, and the pipeline's greedy
tokens against transformers' generate(). The images are generated pixels, made into
pixel_values and image_grid_thw by the model's own image processor; position_ids are
transformers' own (get_rope_index behind a text row, as generate() passes them)."""
import numpy as np
import pytest
import torch

from conftest import FP32_ATOL, ferry_export, run_ferry

IMAGE, VIDEO, START, END = 250, 251, 252, 253
VOCAB = 256
NEW_TOKENS = 24
FORMATS = {"onnx": ("--format", "onnx"),
           "openvino": ("--format", "openvino", "--disable-stateful"),
           # torch's programs write a cache of fixed size into the caller's tensors
           "pt2-dynamic": ("--format", "pt2"),
           "pt2": ("--format", "pt2", "--static-cache", "--max-cache-len", "96"),
           "executorch": ("--format", "executorch", "--static-cache", "--max-cache-len", "96")}


def _init(model, seed):
    """Values of O(1) everywhere (transformers' init hides a dropped bias or norm): norms
    U(0.5, 1.5), biases N(0, 0.2), embeddings N(0, 1), every matrix and the patch embedding's
    kernel of unit gain over its fan-in."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name) and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=gen) * 1.2 / fan_in ** 0.5)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration

    config = Qwen2VLConfig(
        text_config=dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                          "mrope_section": [2, 3, 3]},
                         bos_token_id=1, eos_token_id=2, pad_token_id=0),
        vision_config=dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2,
                           patch_size=14, spatial_merge_size=2, temporal_patch_size=2),
        image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=START,
        vision_end_token_id=END)
    torch.manual_seed(0)
    model = Qwen2VLForConditionalGeneration(config).eval()
    _init(model, 1)
    path = tmp_path_factory.mktemp("qwen2_vl") / "ckpt"
    model.save_pretrained(path)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    Qwen2VLImageProcessorPil().save_pretrained(path)  # preprocessor_config.json
    return path


@pytest.fixture(scope="module")
def model(ckpt):
    from transformers import Qwen2VLForConditionalGeneration

    return Qwen2VLForConditionalGeneration.from_pretrained(ckpt).eval()


@pytest.fixture(scope="module", params=list(FORMATS))
def export(request, ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"qwen2_vl-{request.param}") / "out"
    ferry_export(ckpt, out, *FORMATS[request.param], "--dynamic", "--for-generation", "--quiet")
    return request.param, out


class Components:
    """Each component's program in its runtime (ferry's session for the format: onnxruntime,
    OpenVINO's CPU plugin, torch.export.load, ExecuTorch's runtime), called with a dict of
    numpy inputs; returns {output name: array}. A static cache's tensors are written into the
    arrays fed (torch) or come back among the outputs (ExecuTorch)."""

    def __init__(self, fmt, out, names=("image_encoder", "embed_tokens", "language_model",
                                        "lm_head", "decode")):
        import json

        from ferry.runtime import open_session

        manifest = json.loads((out / "export.json").read_text())
        self.meta, self.sessions = {}, {}
        for name in names:
            entry = manifest["components"][name]
            self.meta[name] = entry["metadata"]
            self.sessions[name] = open_session(str(out / entry["file"]), manifest["format"],
                                               entry["metadata"].get("precision"), None,
                                               entry["metadata"])

    def __call__(self, name, feeds):
        names = [o.name for o in self.sessions[name].get_outputs()]
        return dict(zip(names, self.sessions[name].run(names, feeds)))

    def static_cache(self, name):
        """{input: output} of `name`'s static cache pairs, or None for a growing cache."""
        cache = self.meta[name].get("cache", {})
        if cache.get("implementation") != "static":
            return None
        return {p["input"]: p["output"] for p in cache["pairs"]}


@pytest.fixture(scope="module")
def components(export):
    return Components(*export)


def images(sizes, seed=0):
    """pixel_values and image_grid_thw of random RGB images (height, width), as the model's
    image processor makes them."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    rng = np.random.default_rng(seed)
    pictures = [rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8) for h, w in sizes]
    return dict(Qwen2VLImageProcessorPil()(images=pictures, return_tensors="pt"))


def prompt(grid, before=(10, 11), after=(12, 13, 14)):
    """Token ids: text, then each image's tokens between vision start and end, then text."""
    ids = list(before)
    for t, h, w in ([] if grid is None else grid.tolist()):
        ids += [START] + [IMAGE] * (t * h * w // 4) + [END]
    return ids + list(after)


def batch(rows):
    """input_ids, attention_mask (left padding) and mm_token_type_ids of token rows."""
    width = max(map(len, rows))
    ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask, (ids == IMAGE).int()


def positions(model, ids, mask, mm, grid):
    """position_ids [4, b, s] as generate() passes them: the text row, then M-RoPE's rows."""
    with torch.no_grad():
        rope, _ = model.model.get_rope_index(ids, mm, grid, None, mask)
    text = (mask.cumsum(-1) - 1).clamp(min=0) * mask
    return torch.cat([text[None], rope], 0).numpy().astype(np.int64)


@pytest.mark.parametrize("sizes", [[(56, 84)], [(56, 84), (84, 56)],
                                   [(112, 56), (56, 56), (84, 84)]])
def test_image_encoder_matches_the_tower(model, components, sizes):
    """One to three images of different sizes in one call: the tower's last hidden state and
    the merged features (pooler_output), against model.visual on the same pixels."""
    enc = images(sizes)
    with torch.no_grad():
        want = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    got = components("image_encoder", {"pixel_values": enc["pixel_values"].numpy(),
                                       "image_grid_thw": enc["image_grid_thw"].numpy()})
    np.testing.assert_allclose(got["last_hidden_state"], want.last_hidden_state.numpy(),
                               atol=FP32_ATOL, rtol=0)
    np.testing.assert_allclose(got["pooler_output"], want.pooler_output.numpy(),
                               atol=FP32_ATOL, rtol=0)


def test_language_model_and_lm_head_match(model, components):
    """The prompt's embeddings with an image's features in place, batch 2 left-padded: the
    text model's last hidden state and cache, and lm_head's logits, against transformers'."""
    enc = images([(56, 84)])
    grid = enc["image_grid_thw"]
    ids, mask, mm = batch([prompt(grid), prompt(grid, before=(10,), after=(12,))])
    pixel_values = torch.cat([enc["pixel_values"]] * 2)
    grids = torch.cat([grid] * 2)
    with torch.no_grad():
        embeds = model.model.get_input_embeddings()(ids)
        features = model.model.visual(pixel_values, grid_thw=grids).pooler_output
        embeds[ids == IMAGE] = features
    pos = positions(model, ids, mask, mm, grids)
    with torch.no_grad():
        want = model.model.language_model(inputs_embeds=embeds, attention_mask=mask,
                                          position_ids=torch.from_numpy(pos), use_cache=True)
        want_logits = model.lm_head(want.last_hidden_state)
    feeds = {"inputs_embeds": embeds.numpy(), "attention_mask": mask.numpy(),
             "position_ids": pos}
    pairs = components.static_cache("language_model")
    if pairs is not None:  # empty buffers of max_cache_len slots, the prompt written from 0
        from ferry.runners import static_mask

        meta = components.meta["language_model"]
        slots = meta["cache"]["max_cache_len"]
        for spec in meta["inputs"]:
            if spec["name"] in pairs:
                shape = [{"batch": 2, "max_cache_len": slots}.get(d, d) for d in spec["shape"]]
                feeds[spec["name"]] = np.zeros(shape, dtype=spec["dtype"])
        feeds["attention_mask"] = static_mask(mask.numpy(), 0, ids.shape[1], slots)
    got = components("language_model", feeds)
    real = mask.numpy().astype(bool)
    np.testing.assert_allclose(got["last_hidden_state"][real],
                               want.last_hidden_state.numpy()[real], atol=FP32_ATOL, rtol=0)
    for layer in range(2):
        keys = want.past_key_values.layers[layer].keys.numpy()
        if pairs is None:  # a returned cache: present.<l>.key, torch's present_<l>_key
            written = got.get(f"present.{layer}.key", got.get(f"present_{layer}_key"))
        else:
            name = f"past_key_values_{layer}_key"
            written = got.get(pairs[name], feeds[name])[:, :, :ids.shape[1]]
        np.testing.assert_allclose(written.transpose(0, 2, 1, 3)[real],
                                   keys.transpose(0, 2, 1, 3)[real], atol=FP32_ATOL, rtol=0)
    logits = components("lm_head", {"input": want.last_hidden_state.numpy()})["output"]
    np.testing.assert_allclose(logits, want_logits.numpy(), atol=FP32_ATOL, rtol=0)


def inputs(case):
    """(input_ids, attention_mask, mm_token_type_ids, image inputs) of a test prompt."""
    sizes = {"one image": [(56, 84)], "two images": [(56, 84), (84, 56)], "text only": [],
             "batch 2": [(56, 84)]}[case]
    enc = images(sizes) if sizes else {}
    rows = [prompt(enc.get("image_grid_thw"))]
    if case == "batch 2":  # a shorter second prompt, left-padded, with the same image
        rows.append(prompt(enc["image_grid_thw"], before=(10,), after=(12,)))
        enc = {k: torch.cat([v] * 2) for k, v in enc.items()}
    return (*batch(rows), enc)


@pytest.mark.parametrize("case", ["one image", "two images", "text only", "batch 2"])
def test_positions_are_transformers(model, case):
    """ferry's position_ids (a text row, then M-RoPE's three) are what transformers' generate()
    passes the model, padding and several images included."""
    from ferry.vision_language import rope_index

    ids, mask, mm, enc = inputs(case)
    grid = enc.get("image_grid_thw")
    got = rope_index(ids.numpy(), mask.numpy(), mm.numpy(), None if grid is None else
                     grid.numpy(), 2)
    np.testing.assert_array_equal(got, positions(model, ids, mask, mm, grid))


def test_embed_tokens_is_the_embedding(model, components):
    ids, _, _, _ = inputs("batch 2")
    got = components("embed_tokens", {"input_ids": ids.numpy()})["inputs_embeds"]
    with torch.no_grad():
        want = model.model.get_input_embeddings()(ids).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("case", ["one image", "two images", "text only", "batch 2"])
def test_generate_equals_transformers(model, export, case):
    """ExportedModel.generate() with what the processor returns gives transformers' 24 greedy
    tokens: image_encoder, embed_tokens, language_model, lm_head, then decode a token a call."""
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


def test_generate_refuses_what_disagrees(export):
    """Image tokens without their images, images for other tokens, videos: one line each."""
    from ferry import ExportedModel, FerryError

    exported = ExportedModel.from_pretrained(export[1])
    ids, mask, mm, enc = inputs("one image")
    with pytest.raises(FerryError, match="image tokens but no pixel_values"):
        exported.generate(ids, mask, mm_token_type_ids=mm, max_new_tokens=2)
    two = images([(56, 84), (84, 56)])
    with pytest.raises(FerryError, match="6 image tokens, and the images .* give 12 features"):
        exported.generate(ids, mask, mm_token_type_ids=mm, **two, max_new_tokens=2)
    # as many tokens as features, but in one run where the first image has 6
    run = torch.tensor([[10, START] + [IMAGE] * 12 + [END, 12]])
    with pytest.raises(FerryError, match="a run of 12 image tokens where the next image"):
        exported.generate(run, torch.ones_like(run), mm_token_type_ids=(run == IMAGE).int(),
                          **two, max_new_tokens=2)
    with pytest.raises(FerryError, match="pixel_values and image_grid_thw come together"):
        exported.generate(ids, mask, pixel_values=enc["pixel_values"], max_new_tokens=2)
    with pytest.raises(FerryError, match="videos are not exported"):
        exported.generate(ids, mask, **enc, video_grid_thw=enc["image_grid_thw"],
                          max_new_tokens=2)


@pytest.mark.parametrize("flags,why", [
    ((), "export it for generation"),
    (("--for-generation", "--dynamic", "--format", "openvino", "--dtype", "fp16"),
     "VLMPipeline passes f32 tensors between the stateful export's graphs"),
    (("--for-generation", "--dynamic", "--text-only"), "export it for generation without"),
])
def test_what_is_not_written_is_refused(ckpt, tmp_path, flags, why):
    """What ferry does not write for Qwen2-VL yet is one line naming what to do instead, and
    nothing on disk."""
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", *flags)
    assert rc != 0 and why in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists()


def test_validate_says_it_does_not_check_it(export):
    """ferry validate compares decoders' and encoders' logits: a vision-language export is
    refused in one line, not run as a decoder."""
    from test_validate import validate

    rc, _, err = validate(export[1])
    assert rc == 3 and "not yet a vision-language one" in err, (rc, err)


@pytest.mark.parametrize("name", ["Onnx", "Dynamo", "OpenVINO"])
def test_the_guides_call(ckpt, model, tmp_path, name):
    """The guide's export_for_generation(model, inputs, config=XConfig(dynamic=True)) with the
    processor's inputs, each tab's exporter with its defaults (pt2: a dynamic cache; OpenVINO:
    its stateful VLMPipeline layout), then generate(**inputs) before and after
    save_pretrained."""
    import ferry
    from ferry import ExportedModel

    ids, mask, mm, enc = inputs("one image")
    given = dict(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, **enc)
    exporter = getattr(ferry, f"{name}Exporter")()
    config = getattr(ferry, f"{name}Config")(dynamic=True)
    exported = exporter.export_for_generation(model if name != "Onnx" else str(ckpt), given,
                                              config=config)
    # the guide's components (then onnxruntime-genai's embedding and decoder; OpenVINO's are
    # VLMPipeline's files)
    if name == "Onnx":
        assert list(exported.components) == ["image_encoder", "embed_tokens", "language_model",
                                             "lm_head", "decode", "genai_embedding",
                                             "genai_decoder"]
    elif name == "Dynamo":
        assert list(exported.components) == ["image_encoder", "embed_tokens", "language_model",
                                             "lm_head", "decode"]
    with torch.no_grad():
        want = model.generate(**given, max_new_tokens=8, min_new_tokens=8, do_sample=False)
    assert exported.generate(**given, max_new_tokens=8, min_new_tokens=8).tolist() == \
        want.tolist()
    exported.save_pretrained(tmp_path / "saved")
    loaded = ExportedModel.from_pretrained(tmp_path / "saved")
    assert loaded.generate(**given, max_new_tokens=8, min_new_tokens=8).tolist() == want.tolist()


def test_generate_checks_the_grid_against_the_pixels(export):
    """The image encoder places every patch by image_grid_thw: a grid that does not describe
    the pixels is refused before it runs, naming what is wrong."""
    from ferry import ExportedModel, FerryError

    exported = ExportedModel.from_pretrained(export[1])
    ids, mask, mm, enc = inputs("one image")
    pixels = enc["pixel_values"]
    for grid, why in [([[1, 4, 8]], "describes 32 patches, but pixel_values has 24 rows"),
                      ([[1, 8, 3]], "multiples of spatial_merge_size"),
                      ([[0, 4, 6]], "must be positive"), ([[1, -4, -6]], "must be positive"),
                      ([[1.5, 4, 4]], "whole numbers"), ([1, 4, 6], r"it is \[images, 3\]")]:
        with pytest.raises(FerryError, match=why):
            exported.generate(ids, mask, mm_token_type_ids=mm, pixel_values=pixels,
                              image_grid_thw=torch.tensor(grid), max_new_tokens=2)
    with pytest.raises(FerryError, match=r"pixel_values has shape \[24, 100\]"):
        exported.generate(ids, mask, mm_token_type_ids=mm, pixel_values=pixels[:, :100],
                          image_grid_thw=enc["image_grid_thw"], max_new_tokens=2)
    with pytest.raises(FerryError, match="marks other tokens as image tokens"):
        exported.generate(ids, mask, mm_token_type_ids=torch.zeros_like(mm), **enc,
                          max_new_tokens=2)


def test_fp16_and_int4(ckpt, model, tmp_path):
    """An fp16 export takes the processor's float32 pixels (cast to its precision) and keeps
    transformers' tokens; --quantize int4 --float-lm-head keeps lm_head float as decode's, and
    the patch embedding float in both formats, whose rows no block size divides."""
    import onnx
    from ferry import ExportedModel

    ids, mask, mm, enc = inputs("one image")
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, **enc,
                              max_new_tokens=4, min_new_tokens=4, do_sample=False)
    half = ferry_export(ckpt, tmp_path / "fp16", "--dtype", "fp16", "--dynamic",
                        "--for-generation", "--quiet")
    got = ExportedModel.from_pretrained(half).generate(ids, mask, mm_token_type_ids=mm, **enc,
                                                       max_new_tokens=4, min_new_tokens=4)
    assert got.tolist() == want.tolist()
    int4 = ferry_export(ckpt, tmp_path / "int4", "--quantize", "int4", "--float-lm-head",
                        "--dynamic", "--for-generation", "--quiet")
    ops = {name: {n.op_type for n in onnx.load(int4 / f"{name}.onnx",
                                               load_external_data=False).graph.node}
           for name in ("lm_head", "decode", "image_encoder")}
    assert not ops["lm_head"] & {"MatMulNBits", "DequantizeLinear"}, ops["lm_head"]
    assert ops["decode"] & {"MatMulNBits", "DequantizeLinear"}, ops["decode"]
    encoder = onnx.load(int4 / "image_encoder.onnx", load_external_data=False)
    patch = [n for n in encoder.graph.node if n.name.startswith("/patch_embed/proj")]
    assert patch and not any(n.op_type in ("MatMulNBits", "DequantizeLinear") for n in patch)
    ExportedModel.from_pretrained(int4).generate(ids, mask, mm_token_type_ids=mm, **enc,
                                                 max_new_tokens=2)
    ferry_export(ckpt, tmp_path / "ov-int4", "--format", "openvino", "--disable-stateful",
                 "--quantize", "int4", "--dynamic", "--for-generation", "--quiet")
    # torch's programs: fp16 keeps the tokens; an int4 .pte runs its pipeline
    for fmt in ("pt2", "executorch"):
        half = ferry_export(ckpt, tmp_path / f"{fmt}-fp16", *FORMATS[fmt], "--dtype", "fp16",
                            "--dynamic", "--for-generation", "--quiet")
        got = ExportedModel.from_pretrained(half).generate(
            ids, mask, mm_token_type_ids=mm, **enc, max_new_tokens=4, min_new_tokens=4)
        assert got.tolist() == want.tolist(), fmt
    int4 = ferry_export(ckpt, tmp_path / "pte-int4", *FORMATS["executorch"], "--quantize",
                        "int4", "--dynamic", "--for-generation", "--quiet")
    ExportedModel.from_pretrained(int4).generate(ids, mask, mm_token_type_ids=mm, **enc,
                                                 max_new_tokens=2)


def test_the_processor_comes_with_the_export(export):
    """preprocessor_config.json is saved with the export, as the tokenizer's files are."""
    assert (export[1] / "preprocessor_config.json").is_file()


def test_export_json_says_why_transformers_cannot_run_it(export):
    """transformers' runners have no image encoder to call: export.json (and inspect) say so,
    not that the cache is named otherwise."""
    import json

    why = json.loads((export[1] / "export.json").read_text())["transformers"]["unsupported"]
    assert "no image encoder to call" in why and "cache" not in why, why


def test_transformers_4_52_layout(ckpt, tmp_path):
    """transformers 4.52-4.57 saved the tower under model.visual. and the language model under
    model.language_model.: the same model, exported to the same bytes."""
    import shutil

    from safetensors.torch import load_file, save_file

    moved = tmp_path / "4.52"
    shutil.copytree(ckpt, moved)
    tensors = load_file(ckpt / "model.safetensors")
    renamed = {("model." + k if k.startswith("visual.") else
                "model.language_model." + k[len("model."):] if k.startswith("model.") else k): v
               for k, v in tensors.items()}
    assert "model.visual.patch_embed.proj.weight" in renamed
    save_file(renamed, moved / "model.safetensors", metadata={"format": "pt"})
    flags = ("--dynamic", "--for-generation", "--quiet")
    a = ferry_export(ckpt, tmp_path / "a", *flags)
    b = ferry_export(moved, tmp_path / "b", *flags)
    assert (a / "model.onnx.data").read_bytes() == (b / "model.onnx.data").read_bytes()


def test_images_and_prompts_past_the_exports_bounds_are_refused(ckpt, tmp_path):
    """An image with more patches than the export's --dim range, any image of another size
    than a static export's, a prompt longer than its, and a traced patch count no image
    gives: one line each, before anything runs."""
    from ferry import ExportedModel, FerryError

    bounded = ferry_export(ckpt, tmp_path / "bounded", "--for-generation", "--dynamic",
                           "--dim", "pixel_values:0=patches:4:64", "--quiet")
    exported = ExportedModel.from_pretrained(bounded)
    ids, mask, mm, enc = inputs("two images")  # 24 patches each
    assert exported.generate(ids, mask, mm_token_type_ids=mm, **enc,
                             max_new_tokens=2).shape[1] == ids.shape[1] + 2
    big = images([(168, 168)])  # 144 patches
    ids, mask, mm = batch([prompt(big["image_grid_thw"])])
    with pytest.raises(FerryError, match=r"image_encoder: input pixel_values would be "
                                         r"\[144, 1176\], but its axis 0 \(4\*merged_patches\) takes 4 "
                                         "to 64"):
        exported.generate(ids, mask, mm_token_type_ids=mm, **big, max_new_tokens=2)

    static = ExportedModel.from_pretrained(
        ferry_export(ckpt, tmp_path / "static", "--for-generation", "--example-shape",
                     "pixel_values=16", "--quiet"))
    ids, mask, mm, enc = inputs("one image")
    with pytest.raises(FerryError, match=r"pixel_values would be \[24, 1176\], but its axis 0 "
                                         "is fixed at 16"):
        static.generate(ids, mask, mm_token_type_ids=mm, **enc, max_new_tokens=2)
    square = images([(56, 56)])  # the 16 patches it was traced at, in an 11-token prompt
    ids, mask, mm = batch([prompt(square["image_grid_thw"])])
    with pytest.raises(FerryError, match=r"embed_tokens: input input_ids would be \[1, 11\], "
                                         "but its axis 1 is fixed at 8"):
        static.generate(ids, mask, mm_token_type_ids=mm, **square, max_new_tokens=2)

    rc, _, err = run_ferry("export", ckpt, tmp_path / "odd", "--for-generation", "--dynamic",
                           "--example-shape", "pixel_values=18")
    assert rc == 2 and "18 patches is not a whole number of merged blocks" in err, (rc, err)
    assert not (tmp_path / "odd").exists()


@pytest.fixture(scope="module")
def stateful(ckpt, tmp_path_factory):
    """OpenVINO's stateful export, laid out as openvino-genai's VLMPipeline loads it."""
    out = tmp_path_factory.mktemp("qwen2_vl-stateful") / "out"
    return ferry_export(ckpt, out, "--format", "openvino", "--dynamic", "--for-generation",
                        "--quiet")


def test_stateful_openvino_is_vlm_pipelines_layout(stateful):
    """The files openvino-genai's VLMPipeline loads: the patch embedding (one input), the
    blocks and merger given the angles and masks, the text embedding, and one stateful language
    model from inputs_embeds and M-RoPE's three rows."""
    import openvino as ov

    core = ov.Core()
    io = {}
    for name in ("vision_embeddings", "vision_embeddings_merger", "text_embeddings",
                 "language"):
        model = core.read_model(stateful / f"openvino_{name}_model.xml")
        io[name] = ({p.get_any_name(): p.get_partial_shape() for p in model.inputs},
                    len(model.get_sinks()))
    assert list(io["vision_embeddings"][0]) == ["hidden_states"]
    assert set(io["vision_embeddings_merger"][0]) == {"hidden_states", "attention_mask",
                                                      "rotary_pos_emb"}
    assert str(io["vision_embeddings_merger"][0]["rotary_pos_emb"]) == "[?,8]"
    assert set(io["language"][0]) == {"inputs_embeds", "attention_mask", "position_ids",
                                      "beam_idx"}
    assert str(io["language"][0]["position_ids"]) == "[3,?,?]"
    assert io["language"][1] == 4 and io["text_embeddings"][1] == 0
    rc, out, _ = run_ferry("inspect", stateful)
    assert rc == 0 and "VLMPipeline runs this directory" in out and "LLMPipeline" not in out, out


@pytest.mark.parametrize("sizes", [[(56, 84)], [(112, 56), (56, 56), (84, 84)]])
def test_stateful_tower_matches_the_tower(model, stateful, sizes):
    """The two tower graphs, given the angles and masks as ferry's runner (and the pipeline)
    computes them, give transformers' merged features."""
    from ferry import ExportedModel

    enc = images(sizes)
    runners = ExportedModel.from_pretrained(stateful).runners
    got = runners._features(enc["pixel_values"].numpy(), enc["image_grid_thw"].numpy())
    with torch.no_grad():
        want = model.model.visual(enc["pixel_values"], grid_thw=enc["image_grid_thw"])
    np.testing.assert_allclose(got, want.pooler_output.numpy(), atol=FP32_ATOL, rtol=0)


@pytest.mark.parametrize("case", ["one image", "two images", "text only", "batch 2"])
def test_stateful_generate_equals_transformers(model, stateful, case):
    """ExportedModel.generate() over the stateful export (its cache in the language model's
    variables) gives transformers' 24 greedy tokens."""
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


STATIC = {"onnx": ("--format", "onnx"),
          "openvino-multi-token": ("--format", "openvino", "--disable-stateful",
                                   "--multi-token-decode"),
          "pt2-multi-token": ("--format", "pt2", "--multi-token-decode")}


@pytest.fixture(scope="module", params=list(STATIC))
def static(request, ckpt, tmp_path_factory):
    """A static cache of 64 slots: the language model writes the prompt into it in place and
    decode carries on (one token a call, or several)."""
    out = tmp_path_factory.mktemp(f"qwen2_vl-static-{request.param}") / "out"
    # (a static cache is allocated for the example's batch unless a dim names the axis)
    return ferry_export(ckpt, out, *STATIC[request.param], "--dynamic", "--for-generation",
                        "--static-cache", "--max-cache-len", "64", "--dim", "input_ids:0=batch",
                        "--quiet")


@pytest.mark.parametrize("case", ["two images", "text only", "batch 2"])
def test_static_cache_generate_equals_transformers(model, static, case):
    from ferry import ExportedModel

    ids, mask, mm, enc = inputs(case)
    got = ExportedModel.from_pretrained(static).generate(
        ids, mask, mm_token_type_ids=mm, **enc, max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS)
    with torch.no_grad():
        want = model.generate(input_ids=ids, attention_mask=mask, mm_token_type_ids=mm, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    assert got.tolist() == want.tolist()


def test_static_cache_is_written_in_place_and_bounded(static):
    """The language model and decode take the same input./output. pairs, each in place, and a
    generation past max_cache_len is refused before it runs."""
    import json

    from ferry import ExportedModel, FerryError

    comps = json.loads((static / "export.json").read_text())["components"]
    pairs = [comps[name]["metadata"]["cache"]["pairs"] for name in ("language_model", "decode")]
    assert pairs[0] == pairs[1] and all(p["in_place"] for p in pairs[0])
    ids, mask, mm, enc = inputs("two images")
    with pytest.raises(FerryError, match="the static cache has 64 slots"):
        ExportedModel.from_pretrained(static).generate(ids, mask, mm_token_type_ids=mm, **enc,
                                                       max_new_tokens=60)


def test_review_refusals(ckpt, tmp_path):
    """An images range the pipelines cannot call, a bf16 export ferry's generate() cannot feed,
    a checkpoint whose image token defaults past its vocabulary: one line each; an export
    onnxruntime-genai cannot run (a fixed batch) carries none of its files."""
    import json

    from ferry import ExportedModel, FerryError

    rc, _, err = run_ferry("export", ckpt, tmp_path / "images", "--for-generation", "--dynamic",
                           "--dim", "image_grid_thw:0=images:2:4")
    assert rc == 2 and "images axis must take 1" in err, (rc, err)
    bf16 = ferry_export(ckpt, tmp_path / "bf16", "--for-generation", "--dynamic", "--format",
                        "openvino", "--disable-stateful", "--dtype", "bf16", "--quiet")
    ids, mask, mm, enc = inputs("one image")
    with pytest.raises(FerryError, match="does not run a bf16 vision-language export"):
        ExportedModel.from_pretrained(bf16).generate(ids, mask, mm_token_type_ids=mm, **enc,
                                                     max_new_tokens=2)
    bare = tmp_path / "bare"
    bare.mkdir()
    config = json.loads((ckpt / "config.json").read_text())
    del config["image_token_id"]
    (bare / "config.json").write_text(json.dumps(config))
    (bare / "model.safetensors").symlink_to(ckpt / "model.safetensors")
    rc, _, err = run_ferry("export", bare, tmp_path / "bare-out", "--for-generation",
                           "--dynamic")
    assert rc != 0 and "key 'image_token_id' is absent, and Qwen2-VL's default 151655" in err
    fixed = ferry_export(ckpt, tmp_path / "fixed", "--for-generation", "--dim",
                         "input_ids:1=sequence:1:64", "--quiet")
    assert not list(fixed.glob("genai_*")), list(fixed.glob("genai_*"))


def test_inspect_says_genai_needs_the_tokenizer(ckpt, tmp_path):
    """The checkpoint carries preprocessor_config.json but no tokenizer: inspect says
    onnxruntime-genai runs the directory once tokenizer.json and tokenizer_config.json are
    there, not that it runs it as it is."""
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--for-generation", "--quiet")
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "og.Tokenizer needs tokenizer.json and tokenizer_config.json" in stdout
