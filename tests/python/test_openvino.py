"""The OpenVINO IR export (--format openvino) against the oracle: OpenVINO's CPU plugin runs the
openvino_model.xml/.bin ferry wrote, compiled with INFERENCE_PRECISION_HINT f32 (a CPU with
bf16 units would default to bf16), and transformers' eager model runs the same checkpoint. fp32
logits agree within 1e-4 at every real position, batch 1 and 3 (left-padded) x sequence 1, 7,
33, dynamic and static; fp16 and bf16 exports within the ONNX oracle's bounds; the real
SmolLM2-135M on real text too. The generation export is one stateful graph (the cache in
ReadValue/Assign variables, beam_idx): its greedy loop equals generate() for every family, and
openvino-genai's LLMPipeline runs ferry's SmolLM2 export to transformers' text. With
--disable-stateful (stateful=False) it is ONNX's components instead (prefill/decode, the cache
as past_key_values.* in and present.* out, or a static cache's input.*/output.* pairs): the
caller's loop gives generate()'s tokens, every call's logits within 1e-4. The CPU plugin fuses
what ferry writes (RMS, RoPE, ScaledDotProductAttention with its cache, FullyConnected on
f16/u8/u4 weights: read off the compiled runtime model), and int8/int4 and fp16-stored weights
hold SmolLM2's perplexity and top-1 agreement to measured bounds. What the backend cannot write
(a static cache in a stateful graph, blocks OpenVINO cannot hold) fails with one line and
writes nothing."""

import json

import numpy as np
import pytest

from conftest import (ARCHS, FP32_ATOL, assert_logits_close, check_export_error, ferry_export,
                      layer_linears, make_checkpoint, make_inputs, norms_per_layer,
                      num_layers, reference_logits, rotating_layers, run_ferry, softcapped,
                      model_linears, sparse_layers)
from test_oracle_onnx import BF16_ATOL, FP16_ATOL

ov = pytest.importorskip("openvino")

# fp32 on the real 30-layer model, whose logits reach ~30 (the tiny ones stay near 1): 1.4e-4
# measured, a relative 5e-6
REAL_ATOL = 5e-4

SHAPES = [(1, 1), (1, 7), (1, 33), (3, 1), (3, 7), (3, 33)]


def compile_ov(export, **config):
    core = ov.Core()
    model = core.read_model(str(export / "openvino_model.xml"))
    return model, core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                    **config})


def ov_inputs(compiled):
    return {i.get_any_name() for i in compiled.inputs}


def ov_logits(compiled, ids, mask, pos):
    """The logits for the inputs the model takes (a plain export computes its positions unless
    exported with --inputs ...,position_ids)."""
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    out = np.asarray(compiled({k: v for k, v in feeds.items()
                               if k in ov_inputs(compiled)})["logits"])
    if compiled.output("logits").get_element_type() == ov.Type.bf16:
        # numpy has no bfloat16: OpenVINO hands bf16 bits over as a float16 array
        return (out.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return out.astype(np.float32)


def check_shapes(ckpt, compiled, shapes, atol=FP32_ATOL, seed=0):
    vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
    worst = 0.0
    for batch, seq in shapes:
        ids, mask, pos = make_inputs(vocab, batch, seq, seed=seed)
        got = ov_logits(compiled, ids, mask, pos)
        # eager called as the graph is: with generate()'s positions where it takes them
        given = pos if "position_ids" in ov_inputs(compiled) else None
        worst = max(worst, assert_logits_close(got, reference_logits(ckpt, ids, mask, given),
                                               mask, atol=atol, what=f"{batch}x{seq}") or 0.0)
    return worst


@pytest.fixture(scope="module", params=list(ARCHS))
def family(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"ov-{arch}")
    ckpt = make_checkpoint(base / "ckpt", arch)
    out = ferry_export(ckpt, base / "ov", "--format", "openvino", "--dynamic", "--quiet")
    return arch, ckpt, out


def test_interface_and_files(family):
    arch, ckpt, out = family
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "export.json", "generation_config.json", "openvino_model.bin",
        "openvino_model.xml"]
    model, _ = compile_ov(out)
    ins = {i.get_any_name(): (i.get_element_type(), str(i.get_partial_shape()))
           for i in model.inputs}
    # GPT-2's sequence stops at its position table (n_positions)
    seq = "1..256" if arch == "gpt2" else "?"
    assert ins == {name: (ov.Type.i64, f"[?,{seq}]") for name in ("input_ids", "attention_mask")}
    (logits,) = model.outputs
    assert logits.get_any_name() == "logits"
    assert str(logits.get_partial_shape()) == "[?,?,160]"
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "openvino"
    component = manifest["components"]["model"]
    assert component["file"] == "openvino_model.xml"
    assert component["data_files"] == ["openvino_model.bin"]
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "format openvino" in stdout and "openvino_model.xml" in stdout, stdout


@pytest.mark.parametrize("batch,seq", SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_logits_match_eager(family, batch, seq, record_property):
    _, ckpt, out = family
    _, compiled = compile_ov(out)
    record_property("max_abs_error", check_shapes(ckpt, compiled, [(batch, seq)]))


def test_dim_range_enforced(ckpts, tmp_path):
    """--dim bounds reach the Parameters ("2..16"), so OpenVINO refuses a longer sequence."""
    out = ferry_export(ckpts("llama"), tmp_path / "ov", "--format", "openvino",
                       "--dim", "input_ids:1=sequence:2:16", "--quiet")
    model, compiled = compile_ov(out)
    assert str(model.inputs[0].get_partial_shape()) == "[1,2..16]"
    ids, mask, pos = make_inputs(160, 1, 20)
    with pytest.raises(RuntimeError):
        ov_logits(compiled, ids, mask, pos)


def test_static_shapes(ckpts, tmp_path):
    """Without --dynamic every dim is the example's, as for ONNX."""
    ckpt = ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino",
                       "--example-shape", "input_ids=3x7", "--quiet")
    model, compiled = compile_ov(out)
    assert all(str(i.get_partial_shape()) == "[3,7]" for i in model.inputs)
    check_shapes(ckpt, compiled, [(3, 7)])


@pytest.mark.parametrize("dtype,atol", [("fp16", FP16_ATOL), ("bf16", BF16_ATOL)])
def test_half_precisions(ckpts, tmp_path, dtype, atol):
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic", "--dtype",
                       dtype, "--quiet")
    model, compiled = compile_ov(out)
    assert model.outputs[0].get_element_type() == {"fp16": ov.Type.f16,
                                                   "bf16": ov.Type.bf16}[dtype]
    xml = (out / "openvino_model.xml").read_text()
    assert f'element_type="{dtype.replace("fp", "f")}" shape="160,64"' in xml  # the embedding
    check_shapes(ckpt, compiled, [(1, 7), (3, 33)], atol=atol)


def test_real_model(smollm2, tmp_path):
    """SmolLM2-135M-Instruct (tied embeddings, 30 layers) on a real sentence."""
    from transformers import AutoTokenizer

    out = ferry_export(smollm2, tmp_path / "ov", "--format", "openvino", "--dynamic", "--quiet")
    _, compiled = compile_ov(out)
    enc = AutoTokenizer.from_pretrained(smollm2, padding_side="left")(
        ["The capital of France is Paris, and the capital of Italy is", "Hello"],
        padding=True, return_tensors="np")
    ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
    assert (mask[1, 0] == 0), "the tokenizer pads on the left"
    pos = np.cumsum(mask, -1) - 1
    pos[mask == 0] = 1
    got = ov_logits(compiled, ids, mask, pos)
    want = reference_logits(smollm2, ids, mask, None)  # the graph's positions: from 0
    # 30 layers summed in another order than torch's, logits up to ~30: measured 1.4e-4
    assert_logits_close(got, want, mask, atol=REAL_ATOL)
    real = mask == 1
    assert (got.argmax(-1)[real] == want.argmax(-1)[real]).all()
    assert sorted(json.loads((out / "export.json").read_text())["tokenizer_files"]) == sorted(
        p.name for p in smollm2.iterdir() if p.name.startswith(("tokenizer", "chat_template")))


# the stateful generation export's refusals name --disable-stateful, which writes each of them;
# options that contradict each other (or the model's inputs) are a bad command line, exit 2
# (the library's refusals of them exited 1); what the checkpoint decides is 1
ERRORS = {
    "static-cache": (["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "32"],
                     ["openvino", "static cache", "not supported", "--disable-stateful"], 2),
    "single-token": (["--dynamic", "--for-generation", "--single-token-decode"],
                     ["openvino runs generation as one graph", "multi-token",
                      "--disable-stateful"], 2),
    "static-shapes": (["--for-generation"], ["openvino runs generation as one graph",
                                             "dynamic shapes", "--disable-stateful"], 2),
    # decode takes one token a call: a sequence dim starting above 1 cannot
    "dim-above-1": (["--for-generation", "--dim", "input_ids:1=s:2:64"],
                    ["the stateful graph takes the prompt, then 1 token a call",
                     "starts at 2", "min 1"], 2),
    # OpenVINO's compressed weights are [out, in/block, block]: rows of whole blocks only
    "short-block": (["--dynamic", "--quantize", "int4", "--block-size", "256"],
                    ["OpenVINO", "blocks of 256", "choose a block size"], 1),
    "compress-half": (["--dynamic", "--compress-to-fp16", "--dtype", "fp16"],
                      ["compress_to_fp16", "fp16"], 2),
    "stateless-plain": (["--dynamic", "--disable-stateful"],
                        ["--disable-stateful", "--for-generation"], 2),
    # an OpenVINO-only option with another format is a usage error (exit 1)
    "onnx-compress": (["--dynamic", "--compress-to-fp16", "--format", "onnx"],
                      ["--compress-to-fp16", "OpenVINO option"], 2),
    "onnx-stateless": (["--dynamic", "--for-generation", "--disable-stateful", "--format",
                        "onnx"], ["--disable-stateful", "OpenVINO option"], 2),
    "ort-fusions": (["--dynamic", "--ort-fusions", "cpu"], ["ort_fusions", "onnx"], 2),
    "opset": (["--dynamic", "--opset", "21"], ["opset", "ONNX"], 2),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_what_it_cannot_write_yet(ckpts, tmp_path, case):
    flags, needles, code = ERRORS[case]
    check_export_error(ckpts("llama"), tmp_path / "out", ["--format", "openvino", *flags],
                       needles, code)


def test_python_api(ckpts, tmp_path):
    """The guide's OpenVINOExporter / OpenVINOConfig: export, save, load, call (on OpenVINO)."""
    from ferry import (AutoExportConfig, ExportedModel, FerryError, OpenVINOConfig,
                       OpenVINOExporter)

    ckpt = ckpts("mistral")
    exported = OpenVINOExporter().export(ckpt, config=OpenVINOConfig(dynamic=True))
    assert exported.files == {"model": "openvino_model.xml"}
    ids, mask, pos = make_inputs(160, 3, 7)
    want = reference_logits(ckpt, ids, mask, None)
    assert_logits_close(exported(input_ids=ids, attention_mask=mask).logits, want, mask)
    exported.save_pretrained(tmp_path / "ov")
    loaded = ExportedModel.from_pretrained(tmp_path / "ov")
    assert_logits_close(loaded(input_ids=ids, attention_mask=mask).logits, want, mask)
    recipe = AutoExportConfig.from_dict({"export_format": "openvino", "dynamic": True})
    assert isinstance(recipe, OpenVINOConfig)
    # the exporter decides the format, whatever config class it is handed
    from ferry import OnnxConfig
    assert OpenVINOExporter().export(ckpt, config=OnnxConfig(dynamic=True)).files == {
        "model": "openvino_model.xml"}
    with pytest.raises(FerryError, match="opset"):
        OpenVINOExporter().export(ckpt, config=OnnxConfig(dynamic=True, opset=21))
    # refused when made, as the CLI refuses the flags (made, refused at export)
    with pytest.raises(FerryError, match="compress_to_fp16"):
        OpenVINOConfig(compress_to_fp16=True, dtype="fp16")
    # stateful=False on a plain export holds as it is: the graph keeps nothing in variables
    # (transformers' exporter takes it so, and a recipe it saved is read as it is)
    stateless = OpenVINOExporter().export(ckpt, config=OpenVINOConfig(dynamic=True,
                                                                     stateful=False))
    assert stateless.files == {"model": "openvino_model.xml"}
    assert not stateless.components["model"].program.get_sinks()
    assert_logits_close(stateless(input_ids=ids, attention_mask=mask).logits, want, mask)
    small = OpenVINOExporter().export(ckpt, config=OpenVINOConfig(dynamic=True,
                                                                 compress_to_fp16=True))
    assert_logits_close(small(input_ids=ids, attention_mask=mask).logits, want, mask,
                        atol=FP16_ATOL)
    # MatMulNBits' accuracy_level means nothing to OpenVINO (a recipe's was
    # recorded and ignored)
    # refused when made, in OpenVINO's words (checked as ONNX first, it gave
    # ONNX's advice)
    with pytest.raises(FerryError, match="accuracy_level is an attribute of onnxruntime's "
                       "MatMulNBits; OpenVINO has none"):
        OpenVINOConfig(dynamic=True, quantizer={"bits": 4, "accuracy_level": 2})
    int8 = OpenVINOExporter().export(ckpt, config=OpenVINOConfig(dynamic=True, quantizer="int8"))
    assert np.isfinite(int8(input_ids=ids, attention_mask=mask).logits).all()
    recorded = int8.manifest["components"]["model"]["metadata"]["export_config"]
    assert recorded["quantizer"]["bits"] == 8
    gen = OpenVINOExporter().export_for_generation(ckpt)
    assert gen.files == {"decode": "openvino_model.xml"}
    with pytest.raises(FerryError, match="LLMPipeline"):
        gen(input_ids=ids)
    with pytest.raises(FerryError, match="static cache.*stateful=False"):
        OpenVINOExporter().export_for_generation(
            ckpt, generation_config={"cache_implementation": "static", "max_cache_len": 32})


# ---------------------------------------------------------------------------------------------
# generation: one stateful graph


def left_pad(rows, pad=2):
    """(input_ids, attention_mask) of token lists `rows` left-padded into one batch."""
    batch, width = len(rows), max(len(r) for r in rows)
    ids = np.full((batch, width), pad, np.int64)
    mask = np.zeros((batch, width), np.int64)
    for i, r in enumerate(rows):
        ids[i, width - len(r):] = r
        mask[i, width - len(r):] = 1
    return ids, mask


def stateful_greedy(compiled, rows, new_tokens, pad=2, logits=None):
    """Greedy tokens of OpenVINO's stateful graph for `rows` (left-padded into one batch): the
    prompt in one call, then one token a call; the cache stays in the model's variables."""
    ids, mask = left_pad(rows, pad)
    batch, width = ids.shape
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    request = compiled.create_infer_request()
    request.reset_state()
    feed_ids, out = ids, []
    for _ in range(new_tokens):
        request.infer({"input_ids": feed_ids, "attention_mask": mask, "position_ids": pos,
                       "beam_idx": np.arange(batch, dtype=np.int32)})
        last = np.asarray(request.get_tensor("logits").data[:, -1])
        if compiled.output("logits").get_element_type() == ov.Type.bf16:
            last = (last.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        if logits is not None:
            logits.append(last.astype(np.float32))
        nxt = last.argmax(-1).astype(np.int64)
        out.append(nxt)
        feed_ids = nxt[:, None]
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], 1)
        pos = mask.sum(-1, keepdims=True) - 1
    return ids, mask[:, :width], np.stack(out, 1)


def hf_greedy(ckpt, ids, mask, new_tokens, pad=2):
    import torch
    from conftest import reference_model
    model = reference_model(ckpt)
    with torch.no_grad():
        out = model.generate(torch.tensor(ids), attention_mask=torch.tensor(mask),
                             max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=pad)
    return out[:, ids.shape[1]:].numpy()


@pytest.fixture(scope="module", params=list(ARCHS))
def stateful(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"ov-gen-{arch}")
    ckpt = make_checkpoint(base / "ckpt", arch)
    out = ferry_export(ckpt, base / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    return ckpt, out


@pytest.mark.parametrize("backend", ["SDPA", "PA"])
def test_llm_pipeline_greedy_equals_generate(stateful, backend):
    """openvino-genai's LLMPipeline runs every family's stateful export as it is: its greedy
    tokens equal transformers' generate(), with its SDPA backend and with PA (its paged
    attention rewrite of the graph), over a prompt past Gemma 2/3's window. Gemma 2's soft-capped
    scores are plain ops, since OpenVINO's SDPA takes no cap: PA, which rewrites SDPA nodes,
    refuses that graph (openvino-genai's own message), and SDPA runs it."""
    ovg = pytest.importorskip("openvino_genai")
    ckpt, out = stateful
    if backend == "PA" and softcapped(json.loads((ckpt / "config.json").read_text())["model_type"]):
        with pytest.raises(RuntimeError, match="ScaledDotProductAttention"):
            ovg.LLMPipeline(str(out), "CPU", ATTENTION_BACKEND=backend)
        return
    pipe = ovg.LLMPipeline(str(out), "CPU", ATTENTION_BACKEND=backend,
                           INFERENCE_PRECISION_HINT="f32")
    config = ovg.GenerationConfig()
    config.max_new_tokens, config.do_sample, config.ignore_eos = 16, False, True
    config.eos_token_id = 2  # ignored; genai refuses the -1 it reads where a config has none
    ids = np.array(prompts([12]), dtype=np.int64)
    got = pipe.generate(ovg.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))),
                        config).tokens[0]
    assert list(got) == hf_greedy(ckpt, ids, np.ones_like(ids), 16)[0].tolist()


def test_stateful_graph_from_named_dims(ckpts, tmp_path):
    """Dims on batch and sequence instead of --dynamic make the same growing stateful graph
    (a dim alone once froze the cache length, and was refused): greedy tokens = generate()."""
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--for-generation",
                       "--dim", "input_ids:0=b:1:4", "--dim", "input_ids:1=s:1:128", "--quiet")
    _, compiled = compile_ov(out)
    rng = np.random.default_rng(5)
    prompts = [rng.integers(3, 160, n).tolist() for n in (9, 4)]
    ids, mask, got = stateful_greedy(compiled, prompts, 16)
    assert (got == hf_greedy(ckpt, ids, mask, got.shape[1])).all()


def test_stateful_interface(stateful):
    ckpt, out = stateful
    model, _ = compile_ov(out)
    assert [i.get_any_name() for i in model.inputs] == ["input_ids", "attention_mask",
                                                        "position_ids", "beam_idx"]
    assert [o.get_any_name() for o in model.outputs] == ["logits"]
    layers = num_layers(ckpt)
    assert len(model.get_sinks()) == 2 * layers          # one Assign per key and value cache
    manifest = json.loads((out / "export.json").read_text())
    component = manifest["components"]["decode"]
    assert component["file"] == "openvino_model.xml" and component["metadata"]["stateful"]
    rc, stdout, _ = run_ferry("inspect", out, "--verbose")  # every variable by its name
    assert rc == 0 and "beam_idx" in stdout and "one stateful graph" in stdout, stdout
    assert "cache inputs -> outputs" not in stdout and "past_key_values.0.key" in stdout


@pytest.mark.parametrize("rows", [[1], [5], [40], [7, 3]], ids=["p1", "p5", "p40", "b2"])
def test_stateful_greedy_equals_generate(stateful, rows):
    ckpt, out = stateful
    _, compiled = compile_ov(out)
    rng = np.random.default_rng(len(rows) * 100 + rows[0])
    prompts = [rng.integers(3, 160, n).tolist() for n in rows]
    ids, mask, got = stateful_greedy(compiled, prompts, 32 if rows == [5] else 12)
    want = hf_greedy(ckpt, ids, mask, got.shape[1])
    assert (got == want).all(), (got, want)


def test_llm_pipeline_runs_the_export(smollm2, tmp_path):
    """openvino-genai's LLMPipeline on ferry's SmolLM2 export as the `ferry` command pip
    installs writes it (the tokenizer converted by openvino-tokenizers) writes transformers' greedy text,
    with either attention backend, and its ContinuousBatchingPipeline does for three prompts
    batched together."""
    import torch
    ovg = pytest.importorskip("openvino_genai")
    from transformers import AutoTokenizer

    from conftest import CONVERT_TOKENIZER_ENV, reference_model

    out = ferry_export(smollm2, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet", env=CONVERT_TOKENIZER_ENV)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = reference_model(smollm2)
    config = ovg.GenerationConfig()
    config.max_new_tokens, config.do_sample, config.apply_chat_template = 24, False, False
    texts, wants = [], []
    for question in ("What is the capital of France?", "Write a haiku about the sea.",
                     "Name three primary colors."):
        chat = [{"role": "user", "content": question}]
        texts.append(tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                                   tokenize=False))
        enc = tokenizer(texts[-1], return_tensors="pt")
        with torch.no_grad():
            ref = model.generate(**enc, max_new_tokens=24, do_sample=False)
        wants.append(tokenizer.decode(ref[0, enc["input_ids"].shape[1]:],
                                      skip_special_tokens=True))
    # both of its attention backends: the stateful graph as written (SDPA), and paged attention
    # (PA), which openvino-genai makes by rewriting ferry's ScaledDotProductAttention
    for backend in ("SDPA", "PA"):
        pipe = ovg.LLMPipeline(str(out), "CPU", ATTENTION_BACKEND=backend,
                               INFERENCE_PRECISION_HINT="f32")
        for text, want in zip(texts, wants):
            got = str(pipe.generate(text, config))
            assert got == want, (backend, got, want)
    # an fp16 export's stateful graph gives fp32 logits, which genai's sampler needs (found by
    # review: an fp16 logits output failed in LLMPipeline); fp16 arithmetic may pick other
    # tokens than fp32 eager late in a reply, so the first words are compared
    half = ferry_export(smollm2, tmp_path / "ov16", "--format", "openvino", "--dynamic",
                        "--for-generation", "--dtype", "fp16", "--quiet",
                        env=CONVERT_TOKENIZER_ENV)
    pipe = ovg.LLMPipeline(str(half), "CPU")
    got = str(pipe.generate(texts[0], config))
    assert got.split()[:4] == wants[0].split()[:4], (got, wants[0])
    # continuous batching: the three prompts at once in paged attention
    scheduler = ovg.SchedulerConfig()
    scheduler.cache_size = 1
    pipe = ovg.ContinuousBatchingPipeline(str(out), scheduler, "CPU",
                                          {"INFERENCE_PRECISION_HINT": "f32",
                                           "KV_CACHE_PRECISION": "f32"})
    got = [r.m_generation_ids[0] for r in pipe.generate(texts, [config] * len(texts))]
    assert got == wants, (got, wants)


@pytest.mark.parametrize("dtype,atol", [("fp16", FP16_ATOL), ("bf16", BF16_ATOL)])
def test_stateful_half_precisions(ckpts, tmp_path, dtype, atol):
    """fp16 and bf16 caches grow call after call (the first call failed when
    the variables had an initialiser); every step's logits are transformers' on the sequence so
    far, within the precision's bound."""
    ckpt = ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--dtype", dtype, "--quiet")
    _, compiled = compile_ov(out)
    rng = np.random.default_rng(11)
    steps = []
    ids, mask, got = stateful_greedy(compiled, [rng.integers(3, 160, n).tolist() for n in (6, 2)],
                                     5, logits=steps)
    full_ids = np.concatenate([ids, got], 1)
    full_mask = np.concatenate([mask, np.ones_like(got)], 1)
    pos = np.where(full_mask == 1, np.cumsum(full_mask, -1) - 1, 1)
    want = reference_logits(ckpt, full_ids, full_mask, pos)
    for k, step in enumerate(steps):
        column = ids.shape[1] - 1 + k
        assert np.abs(step - want[:, column]).max() <= atol, (dtype, k)


# ---------------------------------------------------------------------------------------------
# what OpenVINO's CPU plugin makes of ferry's graphs; compressed and quantized weights


def runtime_layers(compiled):
    """(layerType, runtimePrecision, number of inputs) of every node of the compiled model."""
    out = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        out.append((rt["layerType"].astype(str), rt["runtimePrecision"].astype(str),
                    op.get_input_size()))
    return out


FUSION_CASES = [(arch, [], "f32") for arch in ARCHS] + [
    ("llama", ["--compress-to-fp16"], "f16"), ("llama", ["--quantize", "int8"], "u8"),
    ("llama", ["--quantize", "int4"], "u4")]


@pytest.mark.parametrize("arch,flags,weights", FUSION_CASES,
                         ids=[f"{a}-{w}" for a, _, w in FUSION_CASES])
def test_cpu_plugin_fuses_the_stateful_graph(ckpts, tmp_path, arch, flags, weights):
    """The forms ferry writes are the ones the CPU plugin fuses: every RMSNorm becomes one RMS
    node, every rotation one RoPE, each layer's attention with its cache (ReadValue, beam_idx
    Gather, Concat, the grouped-kv Broadcast, Assign) one ScaledDotProductAttention that keeps
    the cache itself (8 inputs: q, k, v, mask, scale, beam_idx and both past caches), and every
    linear a FullyConnected running on the weights as stored (f16, u8, u4: never unpacked to f32)."""
    ckpt = ckpts(arch)   # 4 query heads over 2 kv heads
    layers = num_layers(ckpt)
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", *flags, "--quiet")
    _, compiled = compile_ov(out)
    found = runtime_layers(compiled)
    kinds = [k for k, _, _ in found]
    sparse = len(sparse_layers(ckpt))
    block, qk = norms_per_layer(arch)
    # GPT-2's LayerNorms: one MVN each (its weight and bias multiply-add fused in)
    norm = "MVN" if arch == "gpt2" else "RMS"
    assert kinds.count(norm) == (block + qk) * layers + 1, kinds
    assert kinds.count("RoPE") == 2 * rotating_layers(ckpt), kinds
    sdpa = [n for k, _, n in found if k == "ScaledDotProductAttention"]
    if softcapped(arch):   # SDPA takes no cap: grouped matmuls and a softmax per layer
        assert sdpa == [] and kinds.count("Softmax") == layers, kinds
    else:
        # a sparse layer's router keeps its softmax (before top-k)
        assert sdpa == [8] * layers, found
        assert "MatMul" not in kinds and kinds.count("Softmax") == sparse, kinds
    fc = [p for k, p, _ in found if k == "FullyConnected"]
    # a sparse layer's experts are GatherMatmuls (gate, up, down: the chosen experts only);
    # its router (and Qwen2-MoE's shared expert and gate) FullyConnecteds
    assert kinds.count("GatherMatmul") == 3 * sparse, kinds
    assert fc == [weights] * (model_linears(arch, ckpt) + 1), fc   # and lm_head


def test_runtime_options(ckpts, tmp_path):
    """A stateful export tells the plugin to keep its cache in the export's precision (the
    default, u8 on CPUs without bf16, moves fp32 logits by ~5e-4); a caller's setting wins. An
    fp32 export also records f32 compute, which ferry's runner asks for (found on a CPU with
    AVX512-BF16: OpenVINO does not apply that hint from rt_info)."""
    ckpt = ckpts("llama")
    for dtype, want in (("fp32", ov.Type.f32), ("fp16", ov.Type.f16)):
        out = ferry_export(ckpt, tmp_path / dtype, "--format", "openvino", "--dynamic",
                           "--for-generation", "--dtype", dtype, "--quiet")
        model, compiled = compile_ov(out)
        assert model.get_rt_info(["runtime_options", "KV_CACHE_PRECISION"]).astype(str) == \
            want.get_type_name()
        assert compiled.get_property("KV_CACHE_PRECISION") == want
    _, compiled = compile_ov(out, KV_CACHE_PRECISION="u8")
    assert compiled.get_property("KV_CACHE_PRECISION") == ov.Type.u8
    # Without a cache there is no KV_CACHE_PRECISION; an fp32 export records f32 compute as
    # its hint, which OpenVINO 2026.4's core does not apply from rt_info (on a CPU with bf16 a
    # bare compile_model computes in bf16), so ferry's own runner passes it.
    plain = ferry_export(ckpt, tmp_path / "plain", "--format", "openvino", "--dynamic", "--quiet")
    model = ov.Core().read_model(str(plain / "openvino_model.xml"))
    assert model.get_rt_info(["runtime_options", "INFERENCE_PRECISION_HINT"]).astype(str) == "f32"
    assert not model.has_rt_info(["runtime_options", "KV_CACHE_PRECISION"])
    from ferry.runtime import OpenVINOSession
    session = OpenVINOSession(plain / "openvino_model.xml", "fp32", "cpu")
    assert session._compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    meta = json.loads((plain / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["runtime_options"] == {"INFERENCE_PRECISION_HINT": "f32"}
    # fp16 too (at the CPU's bf16 an fp16 export's logits were 5.4e-2 from
    # eager, past validate's 2e-2; at f32 4.9e-3); bf16 keeps the plugin's choice
    half = ferry_export(ckpt, tmp_path / "half", "--format", "openvino", "--dynamic", "--dtype",
                        "fp16", "--quiet")
    model = ov.Core().read_model(str(half / "openvino_model.xml"))
    assert model.get_rt_info(["runtime_options", "INFERENCE_PRECISION_HINT"]).astype(str) == "f32"
    session = OpenVINOSession(half / "openvino_model.xml", "fp16", "cpu")
    assert session._compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    from ferry import ExportedModel
    runner = ExportedModel.from_pretrained(tmp_path / "fp16", device="cpu").runners["decode"]
    assert runner.compiled.get_property("INFERENCE_PRECISION_HINT") == ov.Type.f32
    brain = ferry_export(ckpt, tmp_path / "brain", "--format", "openvino", "--dynamic",
                         "--dtype", "bf16", "--quiet")
    assert "runtime_options" not in (brain / "openvino_model.xml").read_text()


def test_compress_to_fp16(ckpts, tmp_path):
    """compress_to_fp16: fp16 Consts, each converted to fp32 under OpenVINO's "decompression"
    mark (without it the plugin folds them back to fp32); half the bytes; fp32 compute, so the
    logits are within fp16 rounding of the weights."""
    ckpt = ckpts("qwen2")
    full = ferry_export(ckpt, tmp_path / "f32", "--format", "openvino", "--dynamic", "--quiet")
    half = ferry_export(ckpt, tmp_path / "c16", "--format", "openvino", "--dynamic",
                        "--compress-to-fp16", "--quiet")
    model, compiled = compile_ov(half)
    weights = [op for op in model.get_ops() if op.get_type_name() == "Constant"
               and op.get_output_element_type(0).is_real() and op.get_byte_size() >= 256]
    assert weights and all(op.get_output_element_type(0) == ov.Type.f16 for op in weights)
    for op in weights:
        (convert,) = [i.get_node() for i in op.output(0).get_target_inputs()]
        assert convert.get_type_name() == "Convert"
        assert any(k.startswith("decompression") for k in convert.get_rt_info())
    assert all(o.get_element_type() == ov.Type.f32 for o in model.outputs)
    ratio = (half / "openvino_model.bin").stat().st_size / (full / "openvino_model.bin").stat().st_size
    assert 0.49 < ratio < 0.52, ratio
    manifest = json.loads((half / "export.json").read_text())
    assert manifest["components"]["model"]["metadata"]["export_config"]["compress_to_fp16"]
    worst = check_shapes(ckpt, compiled, [(3, 7)], atol=FP16_ATOL)
    assert worst > 1e-6   # the weights really are rounded: not the fp32 export again


def test_asymmetric_int4_zero_points_match_onnxruntime(ckpts, tmp_path):
    """Asymmetric int4 in blocks of 32 over the tiny model: q/k/v/o/gate/up rows hold 2 blocks
    (zero points packed u4), down_proj's 96 inputs 3 (an odd number: the zero points one a
    byte, u8, which a u4 constant could not hold). The same codes, scales and zero points run in
    onnxruntime's MatMulNBits (fp32 accuracy) give the same logits, and OpenVINO runs every
    linear on u4 weights."""
    import onnxruntime
    ckpt = ckpts("llama")
    flags = ["--dynamic", "--quantize", "int4", "--asymmetric", "--block-size", "32", "--quiet"]
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", *flags)
    ort = ferry_export(ckpt, tmp_path / "ort", "--ort-fusions", "cpu", "--accuracy-level", "1",
                       *flags)
    xml = (out / "openvino_model.xml").read_text()
    assert 'name="model.layers.0.mlp.down_proj.weight/zero_point" type="Const"' in xml
    down = xml.split('name="model.layers.0.mlp.down_proj.weight/zero_point"')[1].split("/>")[0]
    up = xml.split('name="model.layers.0.mlp.up_proj.weight/zero_point"')[1].split("/>")[0]
    assert 'element_type="u8"' in down and 'element_type="u4"' in up, (down, up)
    # activations in f32 as MatMulNBits' accuracy level 1 keeps them (CPUs with AVX-512 quantize
    # them to int8 in groups of 32 by default: 0.135 off)
    _, compiled = compile_ov(out, DYNAMIC_QUANTIZATION_GROUP_SIZE="0")
    assert {p for k, p, _ in runtime_layers(compiled) if k == "FullyConnected"} == {"u4"}
    ids, mask, pos = make_inputs(160, 3, 7)
    got = ov_logits(compiled, ids, mask, pos)
    session = onnxruntime.InferenceSession(str(ort / "model.onnx"),
                                           providers=["CPUExecutionProvider"])
    want = session.run(["logits"], {"input_ids": ids, "attention_mask": mask})[0]
    assert np.abs(got - want)[mask == 1].max() < 1e-4


def test_compress_to_fp16_matches_openvinos_own(ckpts, tmp_path):
    """A weight beyond fp16's range (1e5) is stored as fp16's largest finite value, as
    OpenVINO's own compress_to_fp16 (ov.save_model) stores it, not as inf (it
    became inf and every logit NaN): ferry's compressed export and OpenVINO's compression of
    ferry's fp32 export give the same logits."""
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(ckpts("llama"), dtype=torch.float32)
    with torch.no_grad():
        model.model.layers[0].mlp.down_proj.weight[3, 5] = 1e5
    model.save_pretrained(tmp_path / "big")
    full = ferry_export(tmp_path / "big", tmp_path / "f32", "--format", "openvino", "--dynamic",
                        "--quiet")
    ours = ferry_export(tmp_path / "big", tmp_path / "c16", "--format", "openvino", "--dynamic",
                        "--compress-to-fp16", "--quiet")
    theirs = tmp_path / "ov-c16"
    ov.save_model(ov.Core().read_model(str(full / "openvino_model.xml")),
                  str(theirs / "openvino_model.xml"), compress_to_fp16=True)
    ids, mask, pos = make_inputs(160, 3, 7)
    got = ov_logits(compile_ov(ours)[1], ids, mask, pos)
    want = ov_logits(compile_ov(theirs)[1], ids, mask, pos)
    assert np.isfinite(got).all()
    assert np.abs(got - want)[mask == 1].max() < 1e-5


# measured on SmolLM2-135M, 512 tokens of tests/python/data/perplexity.txt, OpenVINO CPU (f32
# inference precision): exactly the standard ONNX graph's figures (test_quantize_quality.py),
#   fp16 weights  ppl 30.291 (fp32 30.290)  top-1 1.000
#   int8 b32      30.379                          0.977
#   int4 b32      39.551                          0.605
#   int4 b32 asym 38.681                          0.652
#   int4 b64      44.295                          0.566
#   int4 b64 asym 43.390                          0.577   (9 blocks a row of 576: u8 zero points)
# bounds: those of the ONNX test, ~10% of the measured loss as margin
OV_QUANT = {
    "fp16-weights": (["--compress-to-fp16"], 1.001, 0.99, "f16"),
    "int8-b32": (["--quantize", "int8"], 1.01, 0.93, "u8"),
    "int4-b32": (["--quantize", "int4"], 1.36, 0.57, "u4"),
    "int4-b32-asym": (["--quantize", "int4", "--asymmetric"], 1.33, 0.62, "u4"),
    "int4-b64": (["--quantize", "int4", "--block-size", "64"], 1.52, 0.53, "u4"),
    "int4-b64-asym": (["--quantize", "int4", "--block-size", "64", "--asymmetric"], 1.48, 0.53,
                      "u4"),
}


@pytest.fixture(scope="module")
def real_text(smollm2):
    import torch
    from transformers import AutoModelForCausalLM
    from real_models import perplexity_text, token_ids
    ids = np.array(token_ids(smollm2, perplexity_text())[:512], np.int64)[None]
    model = AutoModelForCausalLM.from_pretrained(smollm2, dtype=torch.float32).eval()
    with torch.no_grad():
        return ids, model(torch.from_numpy(ids)).logits[0].numpy()


@pytest.mark.parametrize("name", list(OV_QUANT))
def test_quantized_quality_real_model(smollm2, real_text, tmp_path, name, record_property):
    from real_models import perplexity, top1_agreement
    flags, max_ratio, min_top1, weights = OV_QUANT[name]
    ids, fp32 = real_text
    out = ferry_export(smollm2, tmp_path / "ov", "--format", "openvino", "--dynamic", *flags,
                       "--quiet")
    _, compiled = compile_ov(out)
    fc = {p for k, p, _ in runtime_layers(compiled) if k == "FullyConnected"}
    assert fc == {weights}, fc
    logits = ov_logits(compiled, ids, np.ones_like(ids), np.arange(ids.shape[1])[None])[0]
    assert np.isfinite(logits).all()
    base, ppl = perplexity(fp32, ids[0]), perplexity(logits, ids[0])
    top1 = top1_agreement(logits[:-1], fp32[:-1])
    record_property("perplexity_ratio", round(ppl / base, 4))
    record_property("top1_agreement", round(top1, 4))
    assert ppl / base <= max_ratio, (name, ppl, base)
    assert top1 >= min_top1, (name, top1)


# ---------------------------------------------------------------------------------------------
# generation with stateful=False (--disable-stateful): the cache as explicit inputs and outputs,
# in the components an ONNX generation export has, driven by the caller's loop


def compile_components(out):
    """(export.json, {component: compiled model}) of a generation export, at f32 (no variables
    here, so KV_CACHE_PRECISION, which sets a stateful model's cache, has nothing to apply to)."""
    core = ov.Core()
    manifest = json.loads((out / "export.json").read_text())
    return manifest, {name: core.compile_model(core.read_model(str(out / c["file"])), "CPU",
                                               {"INFERENCE_PRECISION_HINT": "f32"})
                      for name, c in manifest["components"].items()}


def eos_ids(ckpt):
    """The ids min_new_tokens keeps generate() from picking (hf_greedy asks for every token)."""
    eos = json.loads((ckpt / "generation_config.json").read_text()).get("eos_token_id")
    return [] if eos is None else [eos] if isinstance(eos, int) else list(eos)


def pick(logits, suppressed):
    scores = logits[:, -1].astype(np.float64)
    scores[:, suppressed] = -np.inf
    return scores.argmax(-1).astype(np.int64)


def stateless_greedy(manifest, compiled, rows, new_tokens, suppressed, chunk=None):
    """Greedy tokens of a dynamic-cache export for `rows` (left-padded into one batch): the
    prompt through "prefill" (or, with `chunk`, through "decode" on an empty past, `chunk`
    tokens a call), then "decode" one token a call, each call's present.* fed back as the next
    call's past_key_values.* (export.json's cache pairs) and the mask one column longer.
    -> (ids, mask, tokens, calls: [(first position, logits [batch, query, vocab])])."""
    ids, mask = left_pad(rows)
    batch, width = ids.shape
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    cache = manifest["components"]["decode"]["metadata"]["cache"]
    to_past = {p["output"]: p["input"] for p in cache["pairs"]}
    calls = []

    def call(component, feeds, start):
        outs = compiled[component](feeds)
        calls.append((start, np.asarray(outs["logits"])))
        return {to_past[name]: np.asarray(outs[name]) for name in to_past}

    if chunk is None:
        past = call("prefill", {"input_ids": ids, "attention_mask": mask, "position_ids": pos}, 0)
    else:
        past = {name: np.zeros((batch, cache["kv_heads"], 0, cache["head_dim"]), np.float32)
                for name in to_past.values()}
        for start in range(0, width, chunk):
            stop = min(width, start + chunk)
            past = call("decode", {"input_ids": ids[:, start:stop], "attention_mask": mask[:, :stop],
                                   "position_ids": pos[:, start:stop], **past}, start)
    tokens, grown = [], mask
    for k in range(new_tokens):
        tokens.append(pick(calls[-1][1], suppressed))
        if k == new_tokens - 1:
            break
        grown = np.concatenate([grown, np.ones((batch, 1), np.int64)], 1)
        past = call("decode", {"input_ids": tokens[-1][:, None], "attention_mask": grown,
                               "position_ids": grown.sum(-1, keepdims=True) - 1, **past},
                    width + k)
        assert next(iter(past.values())).shape[2] == width + k + 1
    return ids, mask, np.stack(tokens, 1), calls


def static_greedy(manifest, compiled, rows, new_tokens, suppressed):
    """The static-cache loop of test_generation.py (the guide's), here for left-padded rows too:
    zero input.<name> buffers of max_cache_len slots (slot = column of the padded sequence), the
    prompt through "prefill" (or "decode" when it is the only component), then one token a
    call, every output.<name> fed back as input.<name>. The bool mask [batch, 1, query,
    max_cache_len] lets a query at slot s see slots pad..s of its row."""
    ids, mask = left_pad(rows)
    batch, width = ids.shape
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    pads = (mask == 0).sum(-1)
    decode = manifest["components"]["decode"]["metadata"]
    max_len = decode["cache"]["max_cache_len"]
    buffers = {i["name"][len("input."):]: np.zeros(
        [batch if d == "batch" else max_len if d == "max_cache_len" else d for d in i["shape"]],
        {"float32": np.float32, "int64": np.int64}[i["dtype"]])
        for i in decode["inputs"] if i["name"].startswith("input.")}
    assert buffers, "no input.<name> cache inputs"
    slots = np.arange(max_len)
    calls = []

    def call(component, tokens, first, positions):
        nonlocal buffers
        query = first + np.arange(tokens.shape[1])
        visible = (slots[None, None, :] <= query[None, :, None]) & \
            (slots[None, None, :] >= pads[:, None, None])
        outs = compiled[component]({"input_ids": tokens, "attention_mask": visible[:, None],
                                    "position_ids": positions,
                                    **{f"input.{n}": v for n, v in buffers.items()}})
        buffers = {n: np.asarray(outs[f"output.{n}"]) for n in buffers}
        calls.append((first, np.asarray(outs["logits"])))

    call("prefill" if "prefill" in compiled else "decode", ids, 0, pos)
    tokens = []
    for k in range(new_tokens):
        tokens.append(pick(calls[-1][1], suppressed))
        if k < new_tokens - 1:
            call("decode", tokens[-1][:, None], width + k, pos[:, -1:] + k + 1)
    counters = [int(v[0]) for n, v in buffers.items() if n.endswith("cumulative_length")]
    assert counters and set(counters) == {width + new_tokens - 1}, counters
    return ids, mask, np.stack(tokens, 1), calls


def check_calls(ckpt, ids, mask, tokens, calls):
    """Every call's logits against one eager forward over the prompt and the fed tokens, at
    the real positions; -> the worst |ov - eager|."""
    fed = tokens[:, :-1]
    full_ids = np.concatenate([ids, fed], 1)
    full_mask = np.concatenate([mask, np.ones_like(fed)], 1)
    want = reference_logits(ckpt, full_ids, full_mask,
                            np.where(full_mask == 1, np.cumsum(full_mask, -1) - 1, 1))
    worst, covered = 0.0, 0
    for start, got in calls:
        stop = start + got.shape[1]
        worst = max(worst, assert_logits_close(got, want[:, start:stop], full_mask[:, start:stop],
                                               what=f"positions {start}:{stop}"))
        covered += got.shape[1]
    assert covered == full_ids.shape[1]
    return worst


def prompts(rows):
    rng = np.random.default_rng(len(rows) * 100 + rows[0])
    return [rng.integers(3, 160, n).tolist() for n in rows]


@pytest.fixture(scope="module", params=list(ARCHS))
def stateless(request, ckpts, tmp_path_factory):
    ckpt = ckpts(request.param)
    out = ferry_export(ckpt, tmp_path_factory.mktemp("ov-stateless") / "ov", "--format",
                       "openvino", "--dynamic", "--for-generation", "--disable-stateful",
                       "--quiet")
    return ckpt, out, *compile_components(out)


def test_stateless_interface(stateless, tmp_path):
    """Two plain graphs (no ReadValue/Assign, no beam_idx) with the inputs, outputs and
    export.json cache pairs of the ONNX generation export of the same checkpoint."""
    import onnx

    ckpt, out, manifest, _ = stateless
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "export.json", "generation_config.json", "openvino_decode.bin",
        "openvino_decode.xml", "openvino_prefill.bin", "openvino_prefill.xml"]
    onnx_out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--for-generation", "--quiet")
    onnx_manifest = json.loads((onnx_out / "export.json").read_text())
    assert manifest["generation"] == onnx_manifest["generation"]
    core = ov.Core()
    for name in ("prefill", "decode"):
        component = manifest["components"][name]
        assert component["file"] == f"openvino_{name}.xml"
        assert component["metadata"]["stateful"] is False
        assert component["metadata"]["cache"] == \
            onnx_manifest["components"][name]["metadata"]["cache"]
        model = core.read_model(str(out / component["file"]))
        assert not model.get_sinks() and not model.get_variables()
        assert not {op.get_type_name() for op in model.get_ordered_ops()} & {"ReadValue",
                                                                              "Assign"}
        graph = onnx.load(str(onnx_out / f"{name}.onnx"), load_external_data=False).graph
        assert [i.get_any_name() for i in model.inputs] == [i.name for i in graph.input]
        assert [o.get_any_name() for o in model.outputs] == [o.name for o in graph.output]
    rc, stdout, _ = run_ferry("inspect", out, "--verbose")  # every input and output by name
    assert rc == 0 and "components are run by the caller's loop" in stdout, stdout
    assert "one stateful graph" not in stdout and "beam_idx" not in stdout
    assert "past_key_values.0.key" in stdout and "present.1.value" in stdout


@pytest.mark.parametrize("rows", [[1], [5], [40], [7, 3]], ids=["p1", "p5", "p40", "b2"])
def test_stateless_greedy_equals_generate(stateless, rows, record_property):
    """prefill, then 32 one-token decode calls fed the previous call's present.*: generate()'s
    tokens, and every call's logits the eager model's within 1e-4."""
    ckpt, _, manifest, compiled = stateless
    ids, mask, got, calls = stateless_greedy(manifest, compiled, prompts(rows), 32,
                                             eos_ids(ckpt))
    want = hf_greedy(ckpt, ids, mask, 32)
    assert (got == want).all(), (got, want)
    record_property("max_abs_error", check_calls(ckpt, ids, mask, got, calls))


@pytest.mark.parametrize("stateless", ["qwen3"], indirect=True)
def test_stateless_decode_takes_chunks(stateless, record_property):
    """decode's query is any length by default (--dynamic): the prompt in chunks of 3 on an
    empty past instead of prefill gives the same tokens and logits."""
    ckpt, _, manifest, compiled = stateless
    ids, mask, got, calls = stateless_greedy(manifest, compiled, prompts([7, 3]), 8,
                                             eos_ids(ckpt), chunk=3)
    assert [start for start, _ in calls[:3]] == [0, 3, 6]
    assert (got == hf_greedy(ckpt, ids, mask, 8)).all()
    record_property("max_abs_error", check_calls(ckpt, ids, mask, got, calls))


def test_stateless_single_token_decode(ckpts, tmp_path):
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--disable-stateful", "--single-token-decode",
                       "--quiet")
    manifest, compiled = compile_components(out)
    assert manifest["generation"]["multi_token_decode"] is False
    assert str(compiled["decode"].input("input_ids").get_partial_shape()) == "[?,1]"
    for rows in ([5], [7, 3]):
        ids, mask, got, calls = stateless_greedy(manifest, compiled, prompts(rows), 32,
                                                 eos_ids(ckpt))
        assert (got == hf_greedy(ckpt, ids, mask, 32)).all(), rows
        check_calls(ckpt, ids, mask, got, calls)


# 33 + 31 fed tokens fill the 64 slots exactly
@pytest.mark.parametrize("arch,flags", [("llama", []), ("mistral", ["--multi-token-decode"])],
                         ids=["llama", "mistral-window8-one-graph"])
def test_stateless_static_cache_greedy_equals_generate(ckpts, tmp_path, arch, flags):
    """--static-cache --max-cache-len 64: prefill + decode (or one multi-token decode), the
    input.<name> / output.<name> pairs ONNX has; Mistral with a sliding window of 8, crossed in
    the prompt and while decoding. Tokens equal generate()'s, logits the eager model's."""
    ckpt = ckpts(arch, sliding_window=8) if arch == "mistral" else ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--disable-stateful", "--static-cache",
                       "--max-cache-len", "64", "--dim", "input_ids:0=batch", *flags, "--quiet")
    manifest, compiled = compile_components(out)
    assert sorted(compiled) == (["decode"] if flags else ["decode", "prefill"])
    pairs = manifest["components"]["decode"]["metadata"]["cache"]["pairs"]
    assert all(p["in_place"] and p["input"] == "input." + p["output"][len("output."):]
               for p in pairs) and len(pairs) == 3 * 2
    for rows in ([1], [5], [33], [7, 3]):
        ids, mask, got, calls = static_greedy(manifest, compiled, prompts(rows), 32,
                                              eos_ids(ckpt))
        assert (got == hf_greedy(ckpt, ids, mask, 32)).all(), rows
        check_calls(ckpt, ids, mask, got, calls)


def test_stateless_python_api(ckpts, tmp_path):
    """OpenVINOConfig(stateful=False) through OpenVINOExporter: the CLI's files byte for byte;
    calling the export is refused as for an ONNX generation export (its components are a loop's
    stages; no LLMPipeline, which cannot run them); the saved components, driven by the loop
    above, give generate()'s tokens."""
    from ferry import ExportedModel, FerryError, OpenVINOConfig, OpenVINOExporter

    ckpt = ckpts("qwen2")
    config = OpenVINOConfig(dynamic=True, stateful=False)
    exported = OpenVINOExporter().export_for_generation(ckpt, config=config)
    assert exported.files == {"prefill": "openvino_prefill.xml",
                                   "decode": "openvino_decode.xml"}
    ids, mask, _ = make_inputs(160, 2, 7)
    with pytest.raises(FerryError, match="stages of a generation loop") as err:
        exported(input_ids=ids, attention_mask=mask)
    assert "OpenVINO" in str(err.value) and "LLMPipeline" not in str(err.value)
    exported.save_pretrained(tmp_path / "api")
    cli = ferry_export(ckpt, tmp_path / "cli", "--format", "openvino", "--dynamic",
                       "--for-generation", "--disable-stateful", "--quiet")
    for name in ("openvino_prefill.xml", "openvino_prefill.bin", "openvino_decode.xml",
                 "openvino_decode.bin"):
        assert (tmp_path / "api" / name).read_bytes() == (cli / name).read_bytes(), name
    loaded = ExportedModel.from_pretrained(tmp_path / "api")
    assert loaded.files == exported.files
    with pytest.raises(FerryError, match="stages of a generation loop"):
        loaded(input_ids=ids)
    manifest, compiled = compile_components(tmp_path / "api")
    ids, mask, got, calls = stateless_greedy(manifest, compiled, prompts([7, 3]), 32,
                                             eos_ids(ckpt))
    assert (got == hf_greedy(ckpt, ids, mask, 32)).all()
    check_calls(ckpt, ids, mask, got, calls)
    static = OpenVINOExporter().export_for_generation(
        ckpt, config=config,
        generation_config={"cache_implementation": "static", "max_cache_len": 64})
    assert static.files == {"prefill": "openvino_prefill.xml",
                                 "decode": "openvino_decode.xml"}
    pairs = static.manifest["components"]["decode"]["metadata"]["cache"]["pairs"]
    assert pairs[0]["input"] == "input.past_key_values.0.key"


@pytest.mark.parametrize("arch,overrides,windows", [
    ("mistral", {"sliding_window": 8}, [8, 8]),
    ("qwen2", {"sliding_window": 8, "use_sliding_window": True, "max_window_layers": 1}, [0, 8]),
], ids=["mistral-window-8", "qwen2-second-layer-slides"])
def test_paged_attention_keeps_the_sliding_window(ckpts, tmp_path, arch, overrides, windows):
    """openvino-genai's paged attention (its PA backend, ContinuousBatchingPipeline) rewrites
    the stateful graph and reads each layer's window from the one mask form it knows, dropping
    any other without a word (past the window its tokens parted from
    transformers'). ferry writes that form: each layer keeps its window through OpenVINO's
    rewrite, and PA's greedy tokens equal generate()'s over a prompt longer than the window."""
    ovg = pytest.importorskip("openvino_genai")
    import openvino.opset13 as ops
    from openvino._offline_transformations import paged_attention_transformation

    ckpt = ckpts(arch, **overrides)
    out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    model = ov.Core().read_model(str(out / "openvino_model.xml"))
    paged_attention_transformation(model)
    found = []
    for node in model.get_ordered_ops():
        if node.get_type_name() == "PagedAttentionExtension":   # input 10: sliding_window
            window = ov.Model([ops.result(node.input_value(10))], [])
            found.append(int(ov.Core().compile_model(window, "CPU")({})[0]))
    assert found == windows, found
    pipe = ovg.LLMPipeline(str(out), "CPU", ATTENTION_BACKEND="PA",
                           INFERENCE_PRECISION_HINT="f32")
    config = ovg.GenerationConfig()
    config.max_new_tokens, config.do_sample, config.ignore_eos = 16, False, True
    config.eos_token_id = 2  # ignored; genai refuses the -1 it reads where a config has none
    ids = np.array(prompts([12]), dtype=np.int64)
    got = pipe.generate(ovg.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))),
                        config).tokens[0]
    assert list(got) == hf_greedy(ckpt, ids, np.ones_like(ids), 16)[0].tolist()
