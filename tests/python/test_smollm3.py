"""SmolLM3's own config keys, beyond the oracle tests every family gets (conftest's ARCHS has a
2-layer SmolLM3 whose second layer is NoPE): the NoPE layers derived from no_rope_layer_interval
when no_rope_layers is absent, and the sliding window SmolLM3Config then puts on them: ONNX
logits against transformers' eager model past the window (the other formats lower the same
semantic graph, and the oracle tests run each of them on conftest's SmolLM3)."""

import json

import numpy as np
import pytest

from conftest import (assert_logits_close, check_export_error, ferry_export, make_checkpoint,
                      make_inputs, reference_logits, rotating_layers)

VOCAB = 160


def run_onnx(out, ids, mask):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]


@pytest.mark.parametrize("window", [0, 5], ids=["full", "sliding"])
def test_interval_nope_layers_and_their_window(tmp_path, window):
    overrides = dict(num_hidden_layers=4, no_rope_layers=None, no_rope_layer_interval=2)
    if window:
        overrides.update(use_sliding_window=True, sliding_window=window)
    ckpt = make_checkpoint(tmp_path / "ckpt", "smollm3", **overrides)
    cfg = json.loads((ckpt / "config.json").read_text())
    # transformers' own derivation: layers 1 and 3 are NoPE, and slide when asked
    assert cfg["no_rope_layers"] == [1, 0, 1, 0] and rotating_layers(ckpt) == 2
    assert cfg["layer_types"].count("sliding_attention") == (2 if window else 0)
    # as transformers' default derivation is what ferry reads without the list, drop it
    cfg.pop("no_rope_layers")
    cfg.pop("layer_types")
    (ckpt / "config.json").write_text(json.dumps(cfg))
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    for batch, seq in [(1, 1), (1, 12), (3, 9)]:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        assert_logits_close(run_onnx(out, ids, mask), reference_logits(ckpt, ids, mask, None),
                            mask, what=f"{batch}x{seq}")


@pytest.mark.parametrize("value,needle", [
    ([1, 2], "entry 1 is not 0 or 1"),
    ([1], "list of num_hidden_layers (2)"),
    ("all", "list of num_hidden_layers (2)"),
])
def test_bad_no_rope_layers_refused(tmp_path, value, needle):
    ckpt = make_checkpoint(tmp_path / "ckpt", "smollm3")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["no_rope_layers"] = value
    (ckpt / "config.json").write_text(json.dumps(cfg))
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"], ["no_rope_layers", needle], 1)
