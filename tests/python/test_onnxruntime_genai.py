"""onnxruntime-genai runs ferry's exports as they are. A --for-generation --dynamic ONNX export
(by default its decode graph takes the prompt and each token over a growing cache) carries a
genai_config.json derived from config.json and generation_config.json, and og.Model /
og.Generator over the export directory give transformers' generate() token for token: on the
real SmolLM2-135M-Instruct with its own tokenizer files (og.Tokenizer reads them from the export
and applies its chat template), batch 1 and batch 2; on random weights of every family, fused
graphs too; and on int4 graphs, against transformers on the weights the export holds. Layouts
genai cannot drive get no config and say why (export.json, inspect).

Batches: onnxruntime-genai pads a batch on the right with pad_token_id and masks the trailing
run of it (og.Tokenizer.encode_batch does the same), so each row must continue as its prompt
alone does in generate()."""

import json
import shutil

import numpy as np
import pytest
import torch

from conftest import ARCHS, NO_GENAI, ferry_export, run_ferry
from quant_ref import dequantized_checkpoint

og = pytest.importorskip("onnxruntime_genai")

GEN = ["--dynamic", "--for-generation", "--quiet"]     # the layout genai runs, by default


def og_generate(export, rows, new_tokens):
    """Greedy onnxruntime-genai over `rows` (token lists, one batch, right-padded as genai
    expects): each row's new tokens."""
    model = og.Model(str(export))
    pad = json.loads((export / "genai_config.json").read_text())["model"]["pad_token_id"]
    width = max(len(r) for r in rows)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=width + new_tokens, do_sample=False,
                              batch_size=len(rows))
    gen = og.Generator(model, params)
    gen.append_tokens(np.array([r + [pad] * (width - len(r)) for r in rows], np.int32))
    while not gen.is_done():
        gen.generate_next_token()
    return [[int(t) for t in gen.get_sequence(i)][width:] for i in range(len(rows))]


def hf_generate(ckpt, rows, new_tokens):
    """transformers' greedy generate() of each row on its own: its new tokens."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
    out = []
    with torch.no_grad():
        for ids in rows:
            seq = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids)),
                                 max_new_tokens=new_tokens, do_sample=False)
            out.append(seq[0, len(ids):].tolist())
    return out


def check_same_tokens(export, ckpt, rows, new_tokens):
    """genai's greedy tokens for `rows` (one batch) are generate()'s for each row alone, up to
    its eos; genai does not append the eos and fills a finished row with pad tokens."""
    model = json.loads((export / "genai_config.json").read_text())["model"]
    eos = model["eos_token_id"]
    eos = set(eos) if isinstance(eos, list) else {eos}
    got = og_generate(export, rows, new_tokens)
    want = hf_generate(ckpt, rows, new_tokens)
    for row, g, w in zip(rows, got, want):
        stop = next((i for i, t in enumerate(w) if t in eos), len(w))
        assert g[:stop] == w[:stop], (len(row), g, w)
        assert all(t in eos or t == model["pad_token_id"] for t in g[stop:]), (len(row), g, w)
    return got


CHATS = [[{"role": "user", "content": "What is the capital of France?"}],
         [{"role": "system", "content": "Answer in one word."},
          {"role": "user", "content": "Name a primary colour."}]]


def test_real_model_chat_batch_1_and_2(smollm2, tmp_path):
    """SmolLM2 through og.Tokenizer (the export's own tokenizer files and chat template) and
    og.Generator: greedy tokens equal generate(), alone and as a right-padded batch of 2."""
    from transformers import AutoTokenizer

    out = ferry_export(smollm2, tmp_path / "out", *GEN)
    config = json.loads((out / "genai_config.json").read_text())
    model = config["model"]
    assert model["decoder"]["filename"] == "decode.onnx" and model["type"] == "llama"
    assert model["eos_token_id"] == 2 and model["pad_token_id"] == 2
    assert config["search"]["past_present_share_buffer"] is False
    tokenizer = og.Tokenizer(og.Model(str(out)))
    theirs = AutoTokenizer.from_pretrained(smollm2)
    prompts = []
    for chat in CHATS:
        text = tokenizer.apply_chat_template(json.dumps(chat), add_generation_prompt=True)
        assert text == theirs.apply_chat_template(chat, add_generation_prompt=True,
                                                  tokenize=False)
        prompts.append(text)
    rows = [[int(t) for t in tokenizer.encode(p)] for p in prompts]
    batch = tokenizer.encode_batch(prompts).as_numpy()
    short = min(range(2), key=lambda i: len(rows[i]))
    assert batch.shape == (2, max(map(len, rows))) and len(rows[0]) != len(rows[1])
    assert (batch[short, len(rows[short]):] == model["pad_token_id"]).all(), batch
    for each in ([rows[0]], [rows[1]], rows):
        got = check_same_tokens(out, smollm2, each, 16)
    assert "Paris" in tokenizer.decode(np.array(got[0], np.int32))
    rc, stdout, _ = run_ferry("inspect", out)
    assert "onnxruntime-genai: runs this directory as it is (genai_config.json)" in stdout


def test_real_model_int4(smollm2, tmp_path):
    """An int4 export of SmolLM2 (standard ONNX) through genai gives transformers' greedy tokens
    on the weights onnxruntime's quantizer makes of the checkpoint (the bytes ferry writes)."""
    out = ferry_export(smollm2, tmp_path / "out", *GEN, "--quantize", "int4")
    ref = dequantized_checkpoint(smollm2, tmp_path / "ref", 4, 32, True)
    tokenizer = og.Tokenizer(og.Model(str(out)))
    prompt = tokenizer.apply_chat_template(json.dumps(CHATS[0]), add_generation_prompt=True)
    rows = [[int(t) for t in tokenizer.encode(text)] for text in (prompt, "1, 2, 3,")]
    check_same_tokens(out, ref, rows, 12)


# genai pads a batch with pad_token_id (ferry writes eos when the checkpoint has no pad) and masks
# it: the random checkpoints get the ids a real one has, so that padding means something.
TOKEN_IDS = dict(bos_token_id=1, eos_token_id=2)


def random_rows(cfg, lengths, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(3, cfg["vocab_size"], n).tolist() for n in lengths]


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused-cpu"])
@pytest.mark.parametrize("arch", list(ARCHS))
def test_every_family_greedy_equals_generate(ckpts, tmp_path, arch, fused):
    ckpt = ckpts(arch, **TOKEN_IDS)
    out = ferry_export(ckpt, tmp_path / "out", *GEN, *(["--ort-fusions", "cpu"] if fused else []))
    if arch in NO_GENAI:
        why = json.loads((out / "export.json").read_text())["onnxruntime_genai"]["unsupported"]
        assert "no model type" in why and not (out / "genai_config.json").exists()
        return
    cfg = json.loads((ckpt / "config.json").read_text())
    config = json.loads((out / "genai_config.json").read_text())
    decoder = config["model"]["decoder"]
    assert decoder["num_hidden_layers"] == cfg["num_hidden_layers"]
    assert decoder["num_key_value_heads"] == cfg["num_key_value_heads"]
    # GroupQueryAttention writes the new rows into the buffer genai binds as past and present
    assert config["search"]["past_present_share_buffer"] is fused
    for lengths in ([1], [7], [7, 3]):
        check_same_tokens(out, ckpt, random_rows(cfg, lengths), 12)


def test_named_dims_run_in_genai(ckpts, tmp_path):
    """Dims on both axes of input_ids instead of --dynamic: the same graphs, which genai runs
    (it was refused: its check read --dynamic itself)."""
    ckpt = ckpts("llama", **TOKEN_IDS)
    out = ferry_export(ckpt, tmp_path / "out", "--for-generation", "--dim", "input_ids:0=b:1:8",
                       "--dim", "input_ids:1=s:1:512", "--quiet")
    cfg = json.loads((ckpt / "config.json").read_text())
    check_same_tokens(out, ckpt, random_rows(cfg, [7, 3]), 12)
    half = ferry_export(ckpt, tmp_path / "batch-only", "--for-generation", "--dim",
                        "input_ids:0=b", "--quiet")
    why = json.loads((half / "export.json").read_text())["onnxruntime_genai"]["unsupported"]
    assert "export with --dynamic (or dims on both axes of input_ids)" in why


WINDOWED = {"mistral": dict(sliding_window=4),
            "qwen2": dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)}


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused-cpu"])
@pytest.mark.parametrize("arch", list(WINDOWED))
def test_sliding_window_rows_with_padding_inside(ckpts, tmp_path, arch, fused):
    """genai appends a short row's new tokens after its right padding: the window must count
    that row's real tokens, not cache slots, or the row loses its own prompt
    (Mistral with a window of 6 answered 50, 15, 53 where generate() says 50, 5, 5)."""
    ckpt = ckpts(arch, **TOKEN_IDS, **WINDOWED[arch])
    out = ferry_export(ckpt, tmp_path / "out", *GEN, *(["--ort-fusions", "cpu"] if fused else []))
    cfg = json.loads((ckpt / "config.json").read_text())
    for lengths in ([9, 3], [6, 2, 5]):
        check_same_tokens(out, ckpt, random_rows(cfg, lengths, seed=7), 10)


@pytest.mark.parametrize("fused", [False, True], ids=["standard", "fused-cpu"])
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_int4_greedy_equals_generate_on_its_weights(ckpts, tmp_path, arch, fused):
    """int4 through genai: DequantizeLinear + MatMul, or MatMulNBits (accuracy level 0: fp32
    arithmetic, so the reference is exact) under GroupQueryAttention."""
    ckpt = ckpts(arch, **TOKEN_IDS)
    flags = ["--quantize", "int4", "--block-size", "16"]
    if fused:
        flags += ["--ort-fusions", "cpu", "--accuracy-level", "0"]
    out = ferry_export(ckpt, tmp_path / "out", *GEN, *flags)
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 16, True)
    cfg = json.loads((ckpt / "config.json").read_text())
    for lengths in ([7], [5, 2]):
        check_same_tokens(out, ref, random_rows(cfg, lengths, seed=4), 10)


@pytest.mark.parametrize("provider, flags, shared",
                         [("cuda", ["--dtype", "fp16"], True), ("cuda", [], False),
                          ("webgpu", [], True), ("dml", [], False)],
                         ids=["cuda-fp16", "cuda-fp32", "webgpu", "dml"])
def test_other_providers_config(ckpts, tmp_path, provider, flags, shared):
    """A graph fused for another provider names it in the session options (its kernels may
    exist only there), and shares the cache buffer only where GroupQueryAttention writes it
    (dml's MultiHeadAttention, and cuda's at fp32, read a joined cache). No such provider here
    to run them."""
    out = ferry_export(ckpts("llama"), tmp_path / "out", *GEN, "--ort-fusions", provider, *flags)
    config = json.loads((out / "genai_config.json").read_text())
    assert config["model"]["decoder"]["session_options"]["provider_options"] == [{provider: {}}]
    assert config["search"]["past_present_share_buffer"] is shared


LAYOUTS = {
    "single-token-decode": (["--dynamic", "--for-generation", "--single-token-decode"],
                            "decode takes one token (--single-token-decode"),
    "static-cache": (["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "32"],
                     "static cache"),
    "static-shapes": (["--for-generation"], "export with --dynamic"),
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


def test_decode_layout_flags(ckpts, tmp_path):
    """--for-generation --dynamic makes decode take any number of tokens unless told otherwise;
    the two flags contradict each other, and apply to generation exports only."""
    import onnx

    def query_axis(out):
        model = onnx.load(str(out / "decode.onnx"), load_external_data=False)
        ids = next(i for i in model.graph.input if i.name == "input_ids")
        dim = ids.type.tensor_type.shape.dim[1]
        return dim.dim_param or dim.dim_value

    ckpt = ckpts("llama")
    assert query_axis(ferry_export(ckpt, tmp_path / "default", *GEN)) == "sequence"
    assert query_axis(ferry_export(ckpt, tmp_path / "one", *GEN, "--single-token-decode")) == 1
    assert query_axis(ferry_export(ckpt, tmp_path / "many", *GEN, "--multi-token-decode")) \
        == "sequence"
    for flags, needle in [(["--multi-token-decode", "--single-token-decode"], "contradict"),
                          (["--dynamic", "--single-token-decode"], "--for-generation")]:
        rc, _, stderr = run_ferry("export", ckpt, tmp_path / "bad", *flags)
        assert rc == 2 and needle in stderr and not (tmp_path / "bad").exists(), stderr


def test_force_replaces_the_config_it_wrote(ckpts, tmp_path):
    out = ferry_export(ckpts("llama"), tmp_path / "out", *GEN)
    assert (out / "genai_config.json").exists()
    ferry_export(ckpts("llama"), out, "--force", "--quiet")
    assert not (out / "genai_config.json").exists()
    (out / "genai_config.json").write_text("{}")      # the user's, not listed: kept, refused
    rc, _, stderr = run_ferry("export", ckpts("llama"), out, "--force", *GEN)
    assert rc == 1 and "genai_config.json" in stderr, stderr


BAD_IDS = {"eos-negative": {"eos_token_id": -1}, "eos-too-large": {"eos_token_id": 100000},
           "eos-nested": {"eos_token_id": [[2]]}, "eos-bool": {"eos_token_id": True},
           "bos-string": {"bos_token_id": "<s>"}, "pad-list": {"pad_token_id": [0, 1]}}


@pytest.mark.parametrize("case", list(BAD_IDS))
def test_token_ids_genai_cannot_take(ckpts, tmp_path, case):
    """A token id genai would refuse at load or generation time gives no
    config and says which key; the export itself succeeds."""
    ckpt = tmp_path / "ckpt"
    shutil.copytree(ckpts("llama"), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config.update(BAD_IDS[case])
    (ckpt / "config.json").write_text(json.dumps(config))
    (ckpt / "generation_config.json").unlink(missing_ok=True)
    out = ferry_export(ckpt, tmp_path / "out", *GEN)
    assert not (out / "genai_config.json").exists()
    key = next(iter(BAD_IDS[case]))
    assert key in json.loads((out / "export.json").read_text())["onnxruntime_genai"]["unsupported"]


def test_bf16_and_model_type(ckpts, tmp_path):
    """bf16 does not run on onnxruntime's CPU provider: no config. A checkpoint whose model_type
    genai does not know still gets genai's type for its architecture."""
    out = ferry_export(ckpts("llama"), tmp_path / "bf16", *GEN, "--dtype", "bf16")
    assert "bf16" in json.loads((out / "export.json").read_text())["onnxruntime_genai"][
        "unsupported"]
    ckpt = tmp_path / "ckpt"
    shutil.copytree(ckpts("llama", **TOKEN_IDS), ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config["model_type"] = "smollm"  # a fine-tune's own name (reported by review)
    (ckpt / "config.json").write_text(json.dumps(config))
    out = ferry_export(ckpt, tmp_path / "out", *GEN)
    assert json.loads((out / "genai_config.json").read_text())["model"]["type"] == "llama"
