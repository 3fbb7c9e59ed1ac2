"""onnxruntime-genai runs ferry's exports as they are: a --for-generation --multi-token-decode
ONNX export (one decoder graph for the prompt and each token, a growing cache) carries a
genai_config.json derived from config.json and generation_config.json, and og.Model /
og.Generator over the export directory give transformers' generate() token for token: on the
real SmolLM2-135M-Instruct with its own tokenizer files (og.Tokenizer reads them from the
export), and on random weights of every family, fused graphs too. Layouts genai cannot drive get
no config and say why (export.json, inspect)."""

import json

import numpy as np
import pytest
import torch

from conftest import ARCHS, ferry_export, run_ferry

og = pytest.importorskip("onnxruntime_genai")

MTD = ["--dynamic", "--for-generation", "--multi-token-decode", "--quiet"]


def og_greedy(export, ids, new_tokens):
    model = og.Model(str(export))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=len(ids) + new_tokens, do_sample=False)
    gen = og.Generator(model, params)
    gen.append_tokens(np.array(ids, np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    return [int(t) for t in gen.get_sequence(0)]


def hf_greedy(ckpt, ids, new_tokens):
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens,
                             min_new_tokens=new_tokens, do_sample=False)
    return out[0].tolist()


def test_real_model_with_its_tokenizer(smollm2, tmp_path):
    """SmolLM2 through og.Tokenizer (the export's own tokenizer.json) and og.Generator: greedy
    tokens equal generate(), and the answer is the model's."""
    out = ferry_export(smollm2, tmp_path / "out", *MTD)
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["decoder"]["filename"] == "decode.onnx"
    assert config["model"]["type"] == "llama" and config["model"]["eos_token_id"] == 2
    assert config["search"]["past_present_share_buffer"] is False
    tokenizer = og.Tokenizer(og.Model(str(out)))
    for prompt in ["The capital of France is", "def fibonacci(n):"]:
        ids = [int(t) for t in tokenizer.encode(prompt)]
        got = og_greedy(out, ids, 16)
        assert got == hf_greedy(smollm2, ids, len(got) - len(ids)), prompt
        if "France" in prompt:
            assert "Paris" in tokenizer.decode(np.array(got[len(ids):], np.int32))
    rc, stdout, _ = run_ferry("inspect", out)
    assert "onnxruntime-genai: runs this directory as it is (genai_config.json)" in stdout


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused-cpu"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_family_greedy_equals_generate(ckpts, tmp_path, arch, fused):
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "out", *MTD, *(["--ort-fusions", "cpu"] if fused else []))
    cfg = json.loads((ckpt / "config.json").read_text())
    decoder = json.loads((out / "genai_config.json").read_text())["model"]["decoder"]
    assert decoder["num_hidden_layers"] == cfg["num_hidden_layers"]
    assert decoder["num_key_value_heads"] == cfg["num_key_value_heads"]
    rng = np.random.default_rng(3)
    for length in (1, 7):
        ids = rng.integers(3, cfg["vocab_size"], length).tolist()
        got = og_greedy(out, ids, 12)
        assert len(got) == length + 12
        assert got == hf_greedy(ckpt, ids, 12), (arch, length)


LAYOUTS = {
    "prefill-decode": (["--dynamic", "--for-generation"], "--multi-token-decode"),
    "static": (["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "32"],
               "static cache"),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layouts_genai_cannot_run_say_why(ckpts, tmp_path, layout):
    flags, why = LAYOUTS[layout]
    out = ferry_export(ckpts("llama"), tmp_path / "out", *flags, "--quiet")
    assert not (out / "genai_config.json").exists()
    manifest = json.loads((out / "export.json").read_text())
    assert why in manifest["onnxruntime_genai"]["unsupported"]
    rc, stdout, _ = run_ferry("inspect", out)
    assert "onnxruntime-genai: cannot run it: " in stdout and why in stdout, stdout
    plain = ferry_export(ckpts("llama"), tmp_path / "plain", "--quiet")
    assert "onnxruntime_genai" not in json.loads((plain / "export.json").read_text())


def test_force_replaces_the_config_it_wrote(ckpts, tmp_path):
    out = ferry_export(ckpts("llama"), tmp_path / "out", *MTD)
    assert (out / "genai_config.json").exists()
    ferry_export(ckpts("llama"), out, "--force", "--quiet")
    assert not (out / "genai_config.json").exists()
    (out / "genai_config.json").write_text("{}")      # the user's, not listed: kept, refused
    rc, _, stderr = run_ferry("export", ckpts("llama"), out, "--force", *MTD)
    assert rc == 1 and "genai_config.json" in stderr, stderr
