"""Rope and norm parameters outside their documented ranges (docs/security.md, src/model/config.c)
are refused by name; inside them, even at the extremes and all at once, the export computes
finite logits. "Finite and > 0" used to be the only rule: rope_theta 1e-300 (0 in float32) or a
factor of 1e-40 (a denormal) filled the rope tables with inf, and rms_norm_eps 0 made a zero
embedding row 0/0 - exports that ran and returned NaN. Each boundary is tested in tests/c/test_config_ranges.c;
here the CLI refuses a few, and real exports at the corners of the ranges run in onnxruntime."""

import json

import numpy as np
import pytest

from conftest import (ferry_export, make_checkpoint, make_inputs, ort_session,
                      run_ferry, run_onnx)


@pytest.fixture(scope="module")
def base_ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("ranges") / "ckpt", "llama")


def with_config(src, dst, **changes):
    import shutil

    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    cfg.update(changes)
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


@pytest.mark.parametrize("changes,key,range_text", [
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e-300}}, "rope_theta",
     "[10, 1e+15]"),
    ({"rope_parameters": {"rope_type": "default", "rope_theta": 1e300}}, "rope_theta",
     "[10, 1e+15]"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4, "factor": 1e-40}}, "factor",
     "[1, 10000]"),
    ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 8,
                          "low_freq_factor": 1e-300, "high_freq_factor": 4,
                          "original_max_position_embeddings": 64}}, "low_freq_factor",
     "[0.01, 1000]"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4,
                          "original_max_position_embeddings": 64, "beta_fast": 1e-300}},
     "beta_fast", "[0.01, 1000]"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4,
                          "original_max_position_embeddings": 64, "attention_factor": 1e6}},
     "attention_factor", "[0.01, 100]"),
    ({"rms_norm_eps": 0}, "rms_norm_eps", "[1e-12, 1]"),
    ({"rms_norm_eps": 1e-300}, "rms_norm_eps", "[1e-12, 1]"),
], ids=["theta-1e-300", "theta-1e300", "factor-1e-40", "low-freq-1e-300", "beta-1e-300",
        "attention-1e6", "eps-0", "eps-1e-300"])
def test_degenerate_values_refused(base_ckpt, tmp_path, build, changes, key, range_text):
    ckpt = with_config(base_ckpt, tmp_path / "ckpt", **changes)
    parent = tmp_path / "outs"
    parent.mkdir()
    rc, _, stderr = run_ferry("export", ckpt, parent / "out", "-q", binary=build)
    assert rc == 1, stderr
    line = stderr.strip()
    assert "\n" not in line and "config.json" in line, line
    assert f"key '{key}' must be a number in {range_text}" in line, line
    assert list(parent.iterdir()) == []


CORNERS = {
    "default-theta-10": {"rope_type": "default", "rope_theta": 10.0},
    "default-theta-1e15": {"rope_type": "default", "rope_theta": 1e15},
    "linear-max": {"rope_type": "linear", "rope_theta": 1e15, "factor": 1e4},
    "dynamic-max": {"rope_type": "dynamic", "rope_theta": 1e15, "factor": 1e4},
    "llama3-extremes": {"rope_type": "llama3", "rope_theta": 10.0, "factor": 1e4,
                        "low_freq_factor": 0.01, "high_freq_factor": 1000.0,
                        "original_max_position_embeddings": 1},
    "yarn-extremes": {"rope_type": "yarn", "rope_theta": 1e15, "factor": 1e4,
                      "original_max_position_embeddings": 4294967296, "beta_fast": 0.01,
                      "beta_slow": 1000.0, "mscale": 10.0, "mscale_all_dim": 0.0},
    "yarn-attention-max": {"rope_type": "yarn", "rope_theta": 10.0, "factor": 1.0,
                           "original_max_position_embeddings": 1, "beta_fast": 1000.0,
                           "beta_slow": 0.01, "attention_factor": 100.0},
}


@pytest.mark.parametrize("name", list(CORNERS))
@pytest.mark.parametrize("eps", [1e-12, 1.0])
def test_corners_give_finite_logits(base_ckpt, tmp_path, name, eps):
    """At the ends of every range, rope and RMSNorm stay finite in float32, fp16 included, also
    over a zero embedding row (token 0), which eps alone keeps from 0/0."""
    from safetensors.numpy import load_file, save_file

    ckpt = with_config(base_ckpt, tmp_path / "ckpt", rms_norm_eps=eps,
                       rope_parameters=CORNERS[name])
    weights = load_file(ckpt / "model.safetensors")
    weights["model.embed_tokens.weight"][0] = 0
    save_file(weights, ckpt / "model.safetensors", metadata={"format": "pt"})
    vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
    ids, mask, pos = make_inputs(vocab, 2, 16)
    ids[:, :3] = 0
    for dtype in ("fp32", "fp16"):
        out = ferry_export(ckpt, tmp_path / f"out-{dtype}", "--dynamic", "--dtype", dtype, "-q")
        logits = run_onnx(ort_session(out / "model.onnx"), ids, mask, pos)
        assert np.isfinite(logits[mask == 1]).all(), f"{name}, eps {eps}, {dtype}: non-finite"
