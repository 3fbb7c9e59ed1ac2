"""Gemma 2's and Gemma 3's own config keys, beyond the oracle tests every family gets (conftest's
ARCHS has a 2-layer Gemma 2 with both soft-caps active and a Gemma 3 with a rope per layer
type): the forms transformers 4 wrote and the defaults transformers fills in for absent keys,
each held to transformers' eager model on the same checkpoint (ONNX logits past the window: the
other formats lower the same semantic graph), and the keys ferry refuses by name."""

import json

import pytest

from conftest import (assert_logits_close, check_export_error, ferry_export, make_checkpoint,
                      make_inputs, reference_logits)

VOCAB = 160
SHAPES = [(1, 1), (1, 12), (3, 9)]


def run_onnx(out, ids, mask):
    import onnxruntime as ort

    sess = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    return sess.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]


def rewrite_config(ckpt, edit):
    cfg = json.loads((ckpt / "config.json").read_text())
    edit(cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg))


def check_logits(ckpt, out):
    for batch, seq in SHAPES:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        assert_logits_close(run_onnx(out, ids, mask), reference_logits(ckpt, ids, mask, None),
                            mask, what=f"{batch}x{seq}")


def gemma3_v4_ropes(cfg):
    """transformers 4's form: rope_theta and rope_scaling for the full layers,
    rope_local_base_freq for the sliding ones."""
    cfg.pop("rope_parameters")
    cfg.update(rope_theta=5e5, rope_local_base_freq=2e4,
               rope_scaling={"rope_type": "linear", "factor": 3.0})


def gemma3_default_ropes(cfg):
    """No rope keys at all: theta 1e6 on the full layers, 1e4 on the sliding ones."""
    cfg.pop("rope_parameters")


def gemma3_local_theta_from_base_freq(cfg):
    """A sliding set without its theta takes rope_local_base_freq."""
    cfg["rope_parameters"]["sliding_attention"].pop("rope_theta")
    cfg["rope_local_base_freq"] = 3e3


def gemma3_pattern(cfg):
    """No layer_types: five of every sliding_window_pattern layers slide (here 1 of 3)."""
    cfg.pop("layer_types")
    cfg["sliding_window_pattern"] = 3


def gemma2_default_caps(cfg):
    """Soft-caps absent: Gemma 2's defaults 50 and 30; layer_types absent: every other."""
    cfg.pop("attn_logit_softcapping")
    cfg.pop("final_logit_softcapping")
    cfg.pop("layer_types")


def gemma2_no_caps(cfg):
    """Soft-caps null: none at all."""
    cfg.update(attn_logit_softcapping=None, final_logit_softcapping=None)


THREE_LAYERS = dict(num_hidden_layers=3, layer_types=None)   # types derived, as read

CASES = {
    "gemma3-v4-ropes": ("gemma3", gemma3_v4_ropes, {}),
    "gemma3-default-ropes": ("gemma3", gemma3_default_ropes, {}),
    "gemma3-local-theta": ("gemma3", gemma3_local_theta_from_base_freq, {}),
    "gemma3-pattern": ("gemma3", gemma3_pattern, THREE_LAYERS),
    "gemma2-default-caps": ("gemma2", gemma2_default_caps, THREE_LAYERS),
    "gemma2-no-caps": ("gemma2", gemma2_no_caps, {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_config_forms_match_transformers(tmp_path, case):
    arch, edit, overrides = CASES[case]
    ckpt = make_checkpoint(tmp_path / "ckpt", arch, **overrides)
    rewrite_config(ckpt, edit)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    check_logits(ckpt, out)


def test_semantic_graph_follows_the_keys(tmp_path):
    """What the cases above compute, visible in the graph: Gemma 2's default caps on every
    layer's scores and the logits, none when null; Gemma 3's sliding layers rotating with
    their own theta."""
    import subprocess
    from conftest import FERRY_BIN

    def graph(ckpt):
        return subprocess.run([str(FERRY_BIN), "graph", str(ckpt), "--dynamic", "--stage",
                               "semantic"], capture_output=True, text=True, check=True).stdout

    ckpt = make_checkpoint(tmp_path / "g2", "gemma2", **THREE_LAYERS)
    rewrite_config(ckpt, gemma2_default_caps)
    text = graph(ckpt)
    assert text.count("softcap=50") == 3 and "final_logit_softcapping" in text
    assert text.count("window=6") == 2      # layers 0 and 2 slide
    rewrite_config(ckpt, gemma2_no_caps)
    text = graph(ckpt)
    assert "softcap" not in text
    ckpt = make_checkpoint(tmp_path / "g3", "gemma3")
    rewrite_config(ckpt, gemma3_v4_ropes)
    text = graph(ckpt)
    assert "q_rope" in text and text.count("theta=20000") == 2 and text.count("theta=500000") == 2
    assert "rope=linear" in text and "factor=3" in text


@pytest.mark.parametrize("arch,edit,needles", [
    ("gemma3", lambda c: c.update(use_bidirectional_attention=True),
     ["use_bidirectional_attention"]),
    ("gemma2", lambda c: c.update(hidden_activation="relu"), ["hidden_activation", "relu"]),
    ("gemma3", lambda c: c.update(rope_parameters={"rope_type": "default", "rope_theta": 1e4}),
     ["rope_parameters", "per layer type"]),
    ("gemma2", lambda c: c.update(attn_logit_softcapping=-1.0), ["attn_logit_softcapping"]),
    ("gemma3", lambda c: c.update(query_pre_attn_scalar=0), ["query_pre_attn_scalar"]),
    ("gemma3", lambda c: c.update(sliding_window_pattern=0, layer_types=None),
     ["sliding_window_pattern"]),
    # transformers' Gemma 3 attention ignores the key: refused rather than applied
    ("gemma3", lambda c: c.update(attn_logit_softcapping=30.0),
     ["attn_logit_softcapping", "does not apply it"]),
    ("gemma2", lambda c: c.update(query_pre_attn_scalar=None), ["query_pre_attn_scalar", "null"]),
], ids=["bidirectional", "activation", "flat-rope", "negative-cap", "zero-scalar", "pattern-0",
        "gemma3-attn-cap", "null-scalar"])
def test_bad_keys_refused(tmp_path, arch, edit, needles):
    ckpt = make_checkpoint(tmp_path / "ckpt", arch)
    rewrite_config(ckpt, edit)
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"], needles, 1)
