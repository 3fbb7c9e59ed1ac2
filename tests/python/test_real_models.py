"""The real-model fixture (real_models.py) is what the quantization-quality tests stand on: if
the GGUF dequantization or the re-save went wrong (weights transposed, q/k heads permuted the
wrong way, a tensor dropped, the wrong tokenizer), perplexity on plain English explodes.

Measured with the pins of requirements-test.txt: perplexity 30.3 on the first 512 tokens of
data/perplexity.txt (eager, float32; a 135M instruct model at Q4_1 on prose it has never seen).
The bound leaves 2x room. Broken conversions measured on the same text: q/k rows left in GGUF's
rotary order 303, every input RMSNorm weight set to 1 about 84000, down_proj rows reversed about
1.8e8 (uniform logits: 49152).
"""

import json

import numpy as np
import safetensors
import torch

from conftest import reference_model
from real_models import perplexity, perplexity_text, token_ids, top1_agreement

MAX_TOKENS = 512
MEASURED_PPL = 30.3


def test_smollm2_checkpoint_config(smollm2):
    config = json.loads((smollm2 / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == 576
    assert config["num_hidden_layers"] == 30
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (9, 3)
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    for name in ("model.safetensors", "generation_config.json", "tokenizer.json",
                 "tokenizer_config.json"):
        assert (smollm2 / name).is_file(), name
    with safetensors.safe_open(smollm2 / "model.safetensors", "pt") as f:
        keys = list(f.keys())
        assert len(keys) == 1 + 30 * 9 + 1          # embeddings, 9 tensors a layer, final norm
        assert {str(f.get_slice(k).get_dtype()) for k in keys} == {"F32"}
        assert f.get_slice("model.embed_tokens.weight").get_shape() == [49152, 576]


def test_smollm2_perplexity(smollm2, record_property):
    ids = token_ids(smollm2, perplexity_text())
    assert len(ids) > MAX_TOKENS, "the text should fill the window"
    ids = ids[:MAX_TOKENS]
    model = reference_model(smollm2)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float().numpy()
    assert logits.shape == (MAX_TOKENS, 49152)
    ppl = perplexity(logits, ids)
    record_property("smollm2_perplexity", ppl)
    assert 2.0 < ppl < 2 * MEASURED_PPL, f"perplexity {ppl:.2f} (measured {MEASURED_PPL})"
    # The metrics themselves: identical logits agree everywhere, shifted ones mostly not.
    assert top1_agreement(logits, logits) == 1.0
    assert top1_agreement(logits[1:], logits[:-1]) < 0.5
    assert np.isclose(perplexity(np.zeros((4, 10)), [1, 2, 3, 4]), 10.0)
