"""openvino-genai's VLMPipeline runs ferry's stateful OpenVINO export of Qwen2-VL and Qwen2.5-VL
as it is: it reads the export's config.json and preprocessor_config.json, preprocesses the image
itself, computes the tower's angles and masks and M-RoPE's positions, and decodes with the
language model's variables, under both of its attention backends. Its text equals transformers'
greedy text for the same prompt and image. The tokenizer (a small byte-level BPE with Qwen's
special tokens, trained here) is converted by openvino-tokenizers, as a user converts one."""
import numpy as np
import pytest
import torch

from conftest import ferry_export
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
def exported(request, tmp_path_factory):
    """(checkpoint, ferry's stateful OpenVINO export with the converted tokenizer, model,
    tokenizer) of a tiny random model whose special tokens are the tokenizer's."""
    import openvino as ov
    from openvino_tokenizers import convert_tokenizer
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
    out = ferry_export(root / "ckpt", root / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    ov_tok, ov_detok = convert_tokenizer(tok, with_detokenizer=True)
    ov.save_model(ov_tok, str(out / "openvino_tokenizer.xml"))
    ov.save_model(ov_detok, str(out / "openvino_detokenizer.xml"))
    return out, model, tok


@pytest.mark.parametrize("backend", ["SDPA", "PA"])
def test_vlm_pipeline_runs_the_export(exported, backend):
    """An 84x140 image (its windows cut at the edges in Qwen2.5-VL) before a question: the
    pipeline's greedy text is transformers'."""
    import openvino as ov
    ovg = pytest.importorskip("openvino_genai")
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    out, model, tok = exported
    image = np.random.default_rng(1).integers(0, 256, (84, 140, 3), dtype=np.uint8)
    prompt = "<|vision_start|><|image_pad|><|vision_end|>Describe the image."
    enc = Qwen2VLImageProcessorPil()(images=[image], return_tensors="pt")
    tokens = int(enc["image_grid_thw"].prod()) // 4
    inputs = tok(prompt.replace("<|image_pad|>", "<|image_pad|>" * tokens), return_tensors="pt")
    types = (inputs["input_ids"] == model.config.image_token_id).int()
    with torch.no_grad():
        want = model.generate(**inputs, mm_token_type_ids=types, **enc,
                              max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                              do_sample=False)
    want = tok.decode(want[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
    pipe = ovg.VLMPipeline(str(out), "CPU", ATTENTION_BACKEND=backend,
                           INFERENCE_PRECISION_HINT="f32")
    config = ovg.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = NEW_TOKENS
    config.do_sample, config.apply_chat_template = False, False
    result = pipe.generate(prompt, images=[ov.Tensor(image[None])], generation_config=config)
    assert want and result.perf_metrics.get_num_input_tokens() == inputs["input_ids"].shape[1]
    assert result.texts[0] == want, (result.texts[0], want)
