"""Phi-3's LongRoPE past its switching point, beyond the oracle tests every family gets
(conftest's ARCHS has a Phi-3 whose short factors cover every length they use): logits of
sequences longer than original_max_position_embeddings (the long factors) against
transformers' eager model, and generate() across the switch, where transformers drops its
cache and runs the whole sequence again with the long factors (ferry's generate() does the
same), in every backend's generation export. Also the fused projections as transformers
computes them (one linear, then slices) and the keys ferry refuses."""

import json

import numpy as np
import pytest
import torch

from conftest import (assert_logits_close, check_export_error, ferry_export, make_checkpoint,
                      make_inputs, reference_logits, reference_model)

VOCAB = 160
# the switch at 33 positions; windows wider than every sequence here
LONG = dict(original_max_position_embeddings=32, max_position_embeddings=96, sliding_window=None)
GEN = ["--dynamic", "--for-generation", "--quiet"]
STATIC = ["--static-cache", "--max-cache-len", "64"]
LAYOUTS = {
    "onnx": ["--format", "onnx", *GEN],
    "onnx-fused": ["--format", "onnx", "--ort-fusions", "cpu", *GEN],
    "openvino": ["--format", "openvino", *GEN],
    "pt2": ["--format", "pt2", *STATIC, *GEN],
    "executorch": ["--format", "executorch", *STATIC, "--multi-token-decode", *GEN],
}


@pytest.fixture(scope="module")
def long_ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("phi3-long") / "ckpt", "phi3", **LONG)


def test_long_factors_match_eager(long_ckpt, tmp_path):
    import onnxruntime as ort

    out = ferry_export(long_ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    for batch, seq in [(1, 32), (1, 33), (2, 50)]:   # the short set, then the long one
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        got = sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
        assert_logits_close(got, reference_logits(long_ckpt, ids, mask, None), mask,
                            what=f"{batch}x{seq}")


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_generate_across_the_switch(long_ckpt, tmp_path, layout):
    import ferry

    out = ferry_export(long_ckpt, tmp_path / layout, *LAYOUTS[layout])
    rng = np.random.default_rng(7)
    ids = rng.integers(3, VOCAB, (2, 24)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, :5] = 0
    with torch.no_grad():
        want = reference_model(long_ckpt).generate(
            torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=20,
            do_sample=False, pad_token_id=0).numpy()
    got = ferry.ExportedModel.from_pretrained(out).generate(ids, mask, max_new_tokens=20,
                                                            pad_token_id=0)
    assert np.array_equal(got, want), (layout, got, want)


@pytest.mark.parametrize("layout", ["onnx", "openvino"])
def test_validate_across_the_switch(tmp_path, layout):
    """`ferry validate` runs a prompt and 8 steps: with the switch among them it re-runs the
    sequence there, as generate() does, and holds each call to eager over what it had seen
    (the prompt's logits to the short factors, not to a forward over the whole run)."""
    from test_validate import validate

    ckpt = make_checkpoint(tmp_path / "ckpt", "phi3", **dict(LONG,
                                                              original_max_position_embeddings=20))
    out = ferry_export(ckpt, tmp_path / layout, *LAYOUTS[layout])
    rc, stdout, stderr = validate(out, "--no-record")
    assert rc == 0 and "FAIL" not in stdout, stdout + stderr


def test_fused_projections_stay_fused(tmp_path):
    """One linear over qkv_proj and one over gate_up_proj, sliced after: the parameters are the
    checkpoint's own (a .pt2's state dict names them as the checkpoint does)."""
    import subprocess
    from conftest import FERRY_BIN

    ckpt = make_checkpoint(tmp_path / "ckpt", "phi3")
    text = subprocess.run([str(FERRY_BIN), "graph", str(ckpt), "--dynamic", "--stage",
                           "semantic"], capture_output=True, text=True, check=True).stdout
    assert text.count("= linear(") == 2 * 4 + 1      # qkv, o, gate_up, down; the head
    assert "self_attn/qkv_proj = linear" in text and "mlp/gate_up_proj = linear" in text
    assert "q_proj" not in text and "gate_proj " not in text


@pytest.mark.parametrize("edit,needles", [
    (lambda c: c["rope_parameters"].update(rope_type="yarn", factor=2.0),
     ["rope type 'yarn'", "old name for longrope"]),
    (lambda c: c["rope_parameters"].update(rope_type="llama3", factor=2.0,
                                           low_freq_factor=1.0, high_freq_factor=4.0),
     ["rope type 'llama3'", "default and longrope"]),
], ids=["yarn", "llama3"])
def test_bad_keys_refused(tmp_path, edit, needles):
    ckpt = make_checkpoint(tmp_path / "ckpt", "phi3")
    cfg = json.loads((ckpt / "config.json").read_text())
    edit(cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"], needles, 1)
