"""The genai runtimes run ferry's exports of Qwen2-VL and Qwen2.5-VL as they are, each doing its
own image preprocessing, prompt expansion and M-RoPE positions:
- openvino-genai's VLMPipeline, the stateful OpenVINO export (it reads config.json and
  preprocessor_config.json, computes the tower's angles and masks, decodes with the language
  model's variables), under both of its attention backends; the tokenizer (a small byte-level
  BPE with Qwen's special tokens, trained here) converted by openvino-tokenizers, as the
  `ferry` command pip installs does;
- onnxruntime-genai's og.Model with its multimodal processor, the ONNX export (genai_config.json
  with vision = image_encoder.onnx, embedding = genai_embedding.onnx, decoder =
  genai_decoder.onnx; genai_processor_config.json).
Their tokens equal transformers' greedy tokens for the same prompt and image."""
import numpy as np
import pytest
import torch

from conftest import CONVERT_TOKENIZER_ENV, ferry_export
from test_qwen2_vl import _init

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>",
            "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
NEW_TOKENS = 12


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(
        ["Describe the image. What is in this picture? user assistant system"] * 50,
        trainers.BpeTrainer(vocab_size=300, special_tokens=SPECIALS,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                 pad_token="<|endoftext|>", additional_special_tokens=SPECIALS[3:])
    hf.chat_template = ("{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
                        "{{ message['content'] }}<|im_end|>\n{% endfor %}"
                        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    return hf


@pytest.fixture(scope="module", params=["qwen2_vl", "qwen2_5_vl"])
def checkpoint(request, tmp_path_factory):
    """(checkpoint, model, tokenizer) of a tiny random model whose special tokens are the
    tokenizer's, with the image processor's config."""
    from transformers import (Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              Qwen2VLConfig, Qwen2VLForConditionalGeneration)
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    tok = tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in SPECIALS}
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                 "mrope_section": [2, 3, 3]},
                bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                pad_token_id=ids["<|endoftext|>"])
    special = dict(image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
                   vision_start_token_id=ids["<|vision_start|>"],
                   vision_end_token_id=ids["<|vision_end|>"])
    if request.param == "qwen2_vl":
        config = Qwen2VLConfig(text_config=text, **special, vision_config=dict(
            depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=14,
            spatial_merge_size=2, temporal_patch_size=2))
        cls = Qwen2VLForConditionalGeneration
    else:
        config = Qwen2_5_VLConfig(text_config=text, **special, vision_config=dict(
            depth=4, hidden_size=32, out_hidden_size=64, intermediate_size=48, num_heads=2,
            patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
            fullatt_block_indexes=[1, 3]))
        cls = Qwen2_5_VLForConditionalGeneration
    torch.manual_seed(0)
    model = cls(config).eval()
    _init(model, 3)
    root = tmp_path_factory.mktemp(request.param)
    model.save_pretrained(root / "ckpt")
    tok.save_pretrained(root / "ckpt")
    Qwen2VLImageProcessorPil().save_pretrained(root / "ckpt")
    return root / "ckpt", model, tok


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    """(ferry's stateful OpenVINO export with the converted tokenizer, as the `ferry` command
    pip installs writes it; model, tokenizer)"""
    ckpt, model, tok = checkpoint
    out = ferry_export(ckpt, tmp_path_factory.mktemp("ov") / "ov", "--format", "openvino",
                       "--dynamic", "--for-generation", "--quiet", env=CONVERT_TOKENIZER_ENV)
    assert (out / "openvino_detokenizer.xml").is_file()
    return out, model, tok


def reference(model, tok, prompt, pictures):
    """transformers' greedy tokens after `prompt` (its <|image_pad|> expanded to each image's
    tokens) with the images as its image processor makes them, and the prompt's ids."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    enc = dict(Qwen2VLImageProcessorPil()(images=pictures, return_tensors="pt")) \
        if pictures else {}
    text = prompt
    for t, h, w in (enc["image_grid_thw"].tolist() if pictures else []):
        text = text.replace("<|image_pad|>", "<|IMAGE|>" * (t * h * w // 4), 1)
    inputs = tok(text.replace("<|IMAGE|>", "<|image_pad|>"), return_tensors="pt")
    types = (inputs["input_ids"] == model.config.image_token_id).int()
    with torch.no_grad():
        out = model.generate(**inputs, mm_token_type_ids=types, **enc,
                             max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False)
    return out[0, inputs["input_ids"].shape[1]:].tolist(), inputs["input_ids"][0].tolist()


@pytest.mark.parametrize("case", ["one image", "two images", "text only"])
def test_onnxruntime_genai_runs_the_export(checkpoint, tmp_path, case):
    """og.Model over the ONNX export, its multimodal processor given the prompt and PNG
    files: the prompt's ids, its pixel rows, and the greedy tokens are transformers'."""
    og = pytest.importorskip("onnxruntime_genai")
    from PIL import Image

    ckpt, model, tok = checkpoint
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--for-generation", "--quiet")
    rng = np.random.default_rng(2)
    sizes = {"one image": [(84, 140)], "two images": [(84, 140), (56, 56)],
             "text only": []}[case]
    pictures = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in sizes]
    files = []
    for i, picture in enumerate(pictures):
        files.append(str(tmp_path / f"{i}.png"))
        Image.fromarray(picture).save(files[-1])
    prompt = "<|vision_start|><|image_pad|><|vision_end|>" * len(pictures) + \
        "Describe the image."
    want, prompt_ids = reference(model, tok, prompt, pictures)
    assert want
    genai = og.Model(str(out))
    inputs = genai.create_multimodal_processor()(
        prompt, images=og.Images.open(*files) if files else None)
    assert inputs["input_ids"].as_numpy().reshape(-1).tolist() == prompt_ids
    params = og.GeneratorParams(genai)
    params.set_search_options(max_length=len(prompt_ids) + NEW_TOKENS,
                              min_length=len(prompt_ids) + NEW_TOKENS, do_sample=False)
    generator = og.Generator(genai, params)
    generator.set_inputs(inputs)
    got = []
    while not generator.is_done():
        generator.generate_next_token()
        got.append(int(generator.get_next_tokens()[0]))
    assert got == want


@pytest.mark.parametrize("backend", ["SDPA", "PA"])
def test_vlm_pipeline_runs_the_export(exported, backend):
    """An 84x140 image (its windows cut at the edges in Qwen2.5-VL) before a question: the
    pipeline's greedy text is transformers'."""
    import openvino as ov
    ovg = pytest.importorskip("openvino_genai")

    out, model, tok = exported
    image = np.random.default_rng(1).integers(0, 256, (84, 140, 3), dtype=np.uint8)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>Describe the image."
    tokens, prompt_ids = reference(model, tok, prompt, [image])
    want = tok.decode(tokens, skip_special_tokens=True)
    pipe = ovg.VLMPipeline(str(out), "CPU", ATTENTION_BACKEND=backend,
                           INFERENCE_PRECISION_HINT="f32")
    config = ovg.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = NEW_TOKENS
    config.do_sample, config.apply_chat_template = False, False
    result = pipe.generate(prompt, images=[ov.Tensor(image[None])], generation_config=config)
    assert want and result.perf_metrics.get_num_input_tokens() == len(prompt_ids)
    assert result.texts[0] == want, (result.texts[0], want)
