"""Granite's multipliers beyond the oracle tests every family gets (conftest's ARCHS has a
Granite whose four multipliers are all away from 1): multipliers of 1 change no value and
leave no node, and a multiplier that is not a positive number is refused by its key."""

import json
import subprocess

import pytest

from conftest import FERRY_BIN, check_export_error, make_checkpoint


def semantic_graph(ckpt):
    return subprocess.run([str(FERRY_BIN), "graph", str(ckpt), "--dynamic", "--stage",
                           "semantic"], capture_output=True, text=True, check=True).stdout


def test_multipliers_of_one_leave_no_node(tmp_path):
    ones = make_checkpoint(tmp_path / "ones", "granite", embedding_multiplier=1.0,
                           residual_multiplier=1.0, logits_scaling=1.0)
    text = semantic_graph(ones)
    for name in ("/model/scale =", "residual_scale", "logits_scaling"):
        assert name not in text, name
    # the scores' scale is the attention multiplier whatever its value, not 1/sqrt(head_dim)
    assert "scale=0.19" in text and "scale=0.25" not in text
    scaled = semantic_graph(make_checkpoint(tmp_path / "scaled", "granite"))
    # the embeddings scaled in the model's forward, not in its plain Embedding module
    assert "/model/scale =" in scaled and "/model/embed_tokens/scale" not in scaled
    assert scaled.count("residual_scale") >= 2 * 2 and "logits_scaling" in scaled


@pytest.mark.parametrize("key,value", [("residual_multiplier", 0), ("logits_scaling", -2.0),
                                       ("attention_multiplier", "0.1"),
                                       ("embedding_multiplier", True)])
def test_bad_multiplier_refused(tmp_path, key, value):
    ckpt = make_checkpoint(tmp_path / "ckpt", "granite")
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg[key] = value
    (ckpt / "config.json").write_text(json.dumps(cfg))
    check_export_error(ckpt, tmp_path / "out", ["--dynamic"], [key], 1)
