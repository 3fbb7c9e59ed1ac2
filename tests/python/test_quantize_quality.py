"""Quantization quality on real weights: SmolLM2-135M-Instruct (the `smollm2` fixture), the
committed text tests/python/data/perplexity.txt (first 512 tokens), onnxruntime running ferry's
exports. fp32 is ferry's plain export (itself held to transformers within 1e-4 elsewhere; here
checked against eager once more). Each quantized export is measured as perplexity and top-1
next-token agreement with fp32, and bounded from the measured values: a broken scale, a shifted
nibble or a wrong zero point moves these by whole units, not by the margins allowed.

The side-by-side with onnxruntime-genai's builder on the same checkpoint is bench/quant_quality.py
(`make bench`), which needs the builder installed."""

import numpy as np
import pytest
import torch

from conftest import ferry_export, ort_session
from real_models import perplexity, perplexity_text, token_ids, top1_agreement

TOKENS = 512

# (flags, max perplexity ratio to fp32, min top-1 agreement with fp32), from these measurements
# (fp32 perplexity 30.29; standard / fused-cpu graph):
#   int8 b32        30.38 / 30.30   top-1 0.977 / 0.951
#   int4 b32        39.55 / 39.82         0.605 / 0.605
#   int4 b32 asym   38.68 / 38.78         0.652 / 0.650
#   int4 b64        44.30 / 44.58         0.566 / 0.566
#   int4 b128       48.94 / 49.76         0.513 / 0.515   (576 inputs: 4.5 blocks, the last short)
#   int4 b32 mse    38.32 (standard)      0.599   (--quant-method mse)
#   int4 b32 asym mse 36.87                0.667
# Round to nearest costs a 135M model a third of its perplexity at int4: small models are the
# hard case. The bounds leave ~10% of the measured loss as margin.
EXPORTS = {
    "int8-b32": (["--quantize", "int8", "--block-size", "32"], 1.01, 0.93),
    "int4-b32": (["--quantize", "int4", "--block-size", "32"], 1.36, 0.57),
    "int4-b32-asym": (["--quantize", "int4", "--block-size", "32", "--asymmetric"], 1.33, 0.62),
    "int4-b64": (["--quantize", "int4", "--block-size", "64"], 1.52, 0.53),
    "int4-b128": (["--quantize", "int4", "--block-size", "128"], 1.80, 0.47),
    "int4-b32-mse": (["--quantize", "int4", "--block-size", "32", "--quant-method", "mse"],
                     1.31, 0.56),
    "int4-b32-asym-mse": (["--quantize", "int4", "--block-size", "32", "--asymmetric",
                           "--quant-method", "mse"], 1.26, 0.62),
}


@pytest.fixture(scope="module")
def text_ids(smollm2):
    ids = token_ids(smollm2, perplexity_text())
    assert len(ids) >= TOKENS
    return np.array(ids[:TOKENS], np.int64)[None]


def logits_of(path, ids):
    session = ort_session(path)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids)}  # positions: inside
    return session.run(["logits"], feeds)[0][0]


@pytest.fixture(scope="module")
def fp32(smollm2, text_ids, tmp_path_factory):
    out = ferry_export(smollm2, tmp_path_factory.mktemp("fp32") / "out", "--dynamic", "--quiet")
    logits = logits_of(out / "model.onnx", text_ids)
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    with torch.no_grad():
        eager = model(torch.from_numpy(text_ids)).logits[0].numpy()
    assert np.abs(logits - eager).max() < 1e-3   # 512 tokens x 30 layers of fp32 sums
    return logits


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused-cpu"])
@pytest.mark.parametrize("name", list(EXPORTS))
def test_quantized_quality(smollm2, text_ids, fp32, tmp_path, name, fused, record_property):
    flags, max_ratio, min_top1 = EXPORTS[name]
    extra = ["--ort-fusions", "cpu"] if fused else []
    out = ferry_export(smollm2, tmp_path / "out", "--dynamic", *flags, *extra, "--quiet")
    logits = logits_of(out / "model.onnx", text_ids)
    ids = text_ids[0]
    base, ppl = perplexity(fp32, ids), perplexity(logits, ids)
    top1 = top1_agreement(logits[:-1], fp32[:-1])
    record_property("perplexity_fp32", round(base, 3))
    record_property("perplexity", round(ppl, 3))
    record_property("top1_agreement", round(top1, 4))
    assert ppl / base <= max_ratio, (name, ppl, base)
    assert top1 >= min_top1, (name, top1)


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_mse_beats_rtn_at_block_32(smollm2, text_ids, tmp_path, symmetric):
    """--quant-method mse is worth its export time where it was measured to help: at int4
    block 32 its perplexity is lower than round to nearest's by more than 2% (measured, in the
    standard graph: 38.32 vs 39.55 symmetric, 36.87 vs 38.68 asymmetric)."""
    ppl = {}
    for method in ("rtn", "mse"):
        out = ferry_export(smollm2, tmp_path / method, "--dynamic", "--quantize", "int4",
                           "--block-size", "32", "--quant-method", method,
                           *([] if symmetric else ["--asymmetric"]), "--quiet")
        ppl[method] = perplexity(logits_of(out / "model.onnx", text_ids), text_ids[0])
    assert ppl["mse"] < 0.98 * ppl["rtn"], ppl
