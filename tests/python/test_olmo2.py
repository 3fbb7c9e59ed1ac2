"""OLMo 2's shape beyond the oracle tests every family gets (conftest's ARCHS has a 2-layer
OLMo 2): the graph has no norm before a block, one after each, q/k norms over the whole
projections before the heads split, every norm's weight multiplied in fp32, and
rms_norm_eps's own default when the key is absent."""

import json
import re
import subprocess

from conftest import FERRY_BIN, make_checkpoint


def semantic_graph(ckpt):
    return subprocess.run([str(FERRY_BIN), "graph", str(ckpt), "--dynamic", "--stage",
                           "semantic"], capture_output=True, text=True, check=True).stdout


def test_norms_follow_the_blocks(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "olmo2")
    text = semantic_graph(ckpt)
    assert "input_layernorm" not in text and "pre_feedforward" not in text
    assert text.count("= rms_norm(") == 2 * 2 + 2 * 2      # per layer: 2 after blocks, q, k
    assert text.count("= skip_rms_norm(") == 1            # the final norm with the last add
    # q and k normed as [batch, sequence, heads * head_dim], then split
    q_norm = re.search(r"self_attn/q_norm = rms_norm\(([^,]+), .*-> \S+ f32 \[(.*?)\]", text)
    assert q_norm and q_norm.group(1).endswith("q_proj_output_0"), text
    assert q_norm.group(2) == "batch, sequence, 64"
    k_norm = re.search(r"self_attn/k_norm = rms_norm\(.*-> \S+ f32 \[(.*?)\]", text)
    assert k_norm.group(1) == "batch, sequence, 32"
    norms = [line for line in text.splitlines() if "rms_norm(" in line]
    assert all("f32_weight" in line and "eps=1e-05" in line for line in norms), norms


def test_eps_default_is_olmo2s(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "olmo2", rms_norm_eps=3e-6)
    assert "eps=3e-06" in semantic_graph(ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.pop("rms_norm_eps")
    (ckpt / "config.json").write_text(json.dumps(cfg))
    text = semantic_graph(ckpt)
    assert "eps=1e-05" in text and "eps=1e-06" not in text
