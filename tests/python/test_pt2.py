"""The torch.export archive (--format pt2, the guide's DynamoExporter) against the oracle: torch
2.13 loads the model.pt2 ferry wrote with torch.export.load, its .module() runs it, and
transformers' eager model runs the same checkpoint. fp32 logits agree within 1e-4 at every real
position, batch 1 and 3 (left-padded) x sequence 1, 7, 33, dynamic and static, for every
family; fp16 and bf16 exports within the ONNX oracle's bounds. run_decompositions() lowers the
program to core aten and gives the same logits, and AOTInductor compiles it into a package
that runs to the same logits. The archive holds what torch's own exporter puts there:
parameters named by the checkpoint's state_dict keys, holding its values; one symbol per
dynamic axis with its range, which the loaded module enforces. Generation (a static cache) is
written as a module that owns its cache would write it: the program writes the new rows into
the caller's cache tensors (aten.index_copy_; run_decompositions() makes them
USER_INPUT_MUTATIONs, as for a traced module), and greedy decoding over those same tensors
equals generate() for every family, prompts of 1, 5 and 40 tokens and a left-padded batch.
A dynamic cache is taken and returned whole (past_key_values_<l>_key in, present_<l>_key out),
and ferry's generate() over it equals transformers'. What the format cannot hold yet (quantized
weights, a returned cache in a ModelOutput) and other formats' options fail with one line and
write nothing."""

import io
import json
import os
import zipfile

import numpy as np
import pytest
import torch

from conftest import (ARCHS, FIXTURE, FP32_ATOL, MOE_ARCHS, assert_logits_close, check_export_error,
                      ferry_export, layer_linears, make_checkpoint, make_inputs, reference_logits,
                      reference_model, record_sizes, run_ferry)
from test_oracle_onnx import BF16_ATOL, FP16_ATOL
from test_openvino import check_calls, eos_ids, hf_greedy, left_pad, pick, prompts

SHAPES = [(1, 1), (1, 7), (1, 33), (3, 1), (3, 7), (3, 33)]
VOCAB = 160


def load(out, component="model"):
    return torch.export.load(str(out / f"{component}.pt2"))


def run(module, ids, mask, pos=None):
    """The logits of a plain program; position_ids passed only where given, to a program
    exported with --inputs ...,position_ids (by default it computes its own, and a program's
    module refuses keywords it does not take)."""
    given = {} if pos is None else {"position_ids": torch.from_numpy(pos)}
    with torch.no_grad():
        out = module(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     **given)
    return out["logits"].float().numpy()


def check_shapes(ckpt, module, shapes, atol=FP32_ATOL, seed=0, positions=False):
    """Each shape against eager called as the program is: with generate()'s position_ids when
    it takes them (`positions`), else without."""
    worst = 0.0
    for batch, seq in shapes:
        ids, mask, pos = make_inputs(VOCAB, batch, seq, seed=seed)
        pos = pos if positions else None
        worst = max(worst, assert_logits_close(run(module, ids, mask, pos),
                                               reference_logits(ckpt, ids, mask, pos), mask,
                                               atol=atol, what=f"{batch}x{seq}") or 0.0)
    return worst


@pytest.fixture(scope="module", params=list(ARCHS))
def family(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"pt2-{arch}")
    ckpt = make_checkpoint(base / "ckpt", arch)
    out = ferry_export(ckpt, base / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    program = load(out)
    return arch, ckpt, out, program, program.module()


def test_interface_and_files(family):
    arch, ckpt, out, program, _ = family
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "export.json", "generation_config.json", "model.pt2"]
    raw = (out / "model.pt2").read_bytes()
    with zipfile.ZipFile(out / "model.pt2") as z:
        names = z.namelist()
        assert all(n.startswith("model/") for n in names), names
        assert z.read("model/archive_format") == b"pt2"
        assert z.testzip() is None  # every CRC right
        for info in z.infolist():
            assert info.compress_type == zipfile.ZIP_STORED
            # data 64-byte aligned, as torch writes it
            header = raw[info.header_offset:info.header_offset + 30]
            data = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + \
                int.from_bytes(header[28:30], "little")
            assert data % 64 == 0, (info.filename, data)
    # parameters: the checkpoint's own names and values (one blob per dtype)
    state = program.state_dict
    from safetensors.torch import load_file

    weights = {}
    for f in ckpt.glob("*.safetensors"):
        weights.update(load_file(f))
    if arch in MOE_ARCHS:
        # transformers 5 holds a layer's experts as two stacks (experts.gate_up_proj and
        # down_proj) and Mixtral's block_sparse_moe as mlp: the module's own names, as
        # torch.export keeps them
        weights = dict(reference_model(ckpt).state_dict())
    if reference_model(ckpt).config.tie_word_embeddings:
        # a tied head is one parameter under both names, as torch.export keeps it
        embed = "transformer.wte.weight" if arch == "gpt2" else "model.embed_tokens.weight"
        weights.setdefault("lm_head.weight", weights[embed])
    assert set(state) == set(weights), set(state) ^ set(weights)
    for name, value in state.items():
        assert isinstance(value, torch.nn.Parameter), name
        assert torch.equal(value.detach(), weights[name]), name
    sig = program.graph_signature
    assert list(sig.user_inputs) == ["input_ids", "attention_mask"]
    assert [str(s) for s in sorted(program.range_constraints, key=str)] == ["s0", "s1"]
    # the traced module's own verifier passes: in-graph ops, metadata, signature
    assert program.verifiers[0].dialect == "TRAINING"
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "pt2"
    assert manifest["components"]["model"]["file"] == "model.pt2"
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "format pt2" in stdout and "model.pt2" in stdout, stdout


@pytest.mark.parametrize("batch,seq", SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_logits_match_eager(family, batch, seq, record_property):
    _, ckpt, _, _, module = family
    record_property("max_abs_error", check_shapes(ckpt, module, [(batch, seq)]))


def test_position_ids_input(ckpts, tmp_path, record_property):
    """--inputs with position_ids: the program takes them, and matches eager given generate()'s
    positions, through run_decompositions() too."""
    ckpt = ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--inputs",
                       "input_ids,attention_mask,position_ids", "--quiet")
    program = load(out)
    assert list(program.graph_signature.user_inputs) == ["input_ids", "attention_mask",
                                                         "position_ids"]
    worst = check_shapes(ckpt, program.module(), [(1, 7), (3, 33)], positions=True)
    worst = max(worst, check_shapes(ckpt, program.run_decompositions().module(), [(3, 7)],
                                    positions=True))
    record_property("max_abs_error", worst)


# A retrace costs ~30 s a family: the families whose programs hold ops the others do not
# (soft-caps, LongRoPE's tables, GPT-2's Conv1D and LayerNorm, per-layer rope, experts)
DECOMPOSED = ["llama", "gemma2", "gemma3", "phi3", "gpt2", "qwen3_moe"]


@pytest.mark.parametrize("family", DECOMPOSED, indirect=True)
def test_run_decompositions(family, record_property):
    """Core aten (what ExecuTorch and other compilers take) runs to the same logits, batch 1
    included: the symbols keep their ranges through the retrace."""
    _, ckpt, _, program, _ = family
    decomposed = program.run_decompositions()
    assert decomposed.verifiers[0].dialect == "ATEN"
    targets = {str(n.target) for n in decomposed.graph.nodes if n.op == "call_function"}
    assert "aten.linear.default" not in targets  # really decomposed
    record_property("max_abs_error",
                    check_shapes(ckpt, decomposed.module(), [(1, 1), (1, 7), (3, 33)]))


def test_static_shapes(ckpts, tmp_path):
    """Without --dynamic every size is the example's, and the module refuses another."""
    ckpt = ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--example-shape",
                       "input_ids=3x7", "--quiet")
    program = load(out)
    assert not program.range_constraints
    check_shapes(ckpt, program.module(), [(3, 7)])
    ids, mask, pos = make_inputs(VOCAB, 3, 8)
    # torch's words for it: "Guard failed: input_ids.size()[1] == 7" where the program has
    # example inputs, as ferry's have, "... to be equal to 7" where it has none
    with pytest.raises(Exception, match=r"input_ids.*(== 7|equal to 7)"):
        run(program.module(), ids, mask)


def test_dim_range_enforced(ckpts, tmp_path):
    """--dim bounds become the symbol's range: the module refuses a longer sequence."""
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2",
                       "--dim", "input_ids:1=sequence:2:16", "--quiet")
    program = load(out)
    (vr,) = program.range_constraints.values()
    assert (int(vr.lower), int(vr.upper)) == (2, 16)
    check_shapes(ckpt, program.module(), [(1, 2), (1, 16)])
    ids, mask, pos = make_inputs(VOCAB, 1, 20)
    with pytest.raises(Exception, match="<= 16"):
        run(program.module(), ids, mask)


@pytest.mark.parametrize("dtype,atol", [("fp16", FP16_ATOL), ("bf16", BF16_ATOL)])
def test_half_precisions(ckpts, tmp_path, dtype, atol, record_property):
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--dtype", dtype,
                       "--quiet")
    program = load(out)
    want = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    assert {p.dtype for p in program.state_dict.values()} == {want}
    ids, mask, pos = make_inputs(VOCAB, 1, 7)
    with torch.no_grad():
        logits = program.module()(input_ids=torch.from_numpy(ids),
                                  attention_mask=torch.from_numpy(mask))["logits"]
    assert logits.dtype == want
    record_property("max_abs_error",
                    check_shapes(ckpt, program.module(), [(1, 7), (3, 33)], atol=atol))


def test_tied_embeddings(ckpts, tmp_path):
    """A tied lm_head is what transformers' module holds: two parameters, lm_head.weight and
    model.embed_tokens.weight, over one storage, stored once in the archive."""
    ckpt = ckpts("llama", tie_word_embeddings=True)
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    program = load(out)
    state = program.state_dict
    assert set(state) == set(reference_model(ckpt).state_dict())
    head, table = state["lm_head.weight"], state["model.embed_tokens.weight"]
    assert head.untyped_storage().data_ptr() == table.untyped_storage().data_ptr()
    assert head.storage_offset() == table.storage_offset() and torch.equal(head, table)
    stored = sum(p.numel() * 4 for n, p in state.items() if n != "lm_head.weight")
    assert (out / "model.pt2").stat().st_size < stored + 200_000
    check_shapes(ckpt, program.module(), [(3, 7)])
    # export.json and inspect count as torch does (one short)
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["parameters"] == len(program.graph_signature.parameters) == len(state)
    assert meta["lm_head_shares"] == "model.embed_tokens.weight"
    rc, text, _ = run_ferry("inspect", out)
    assert rc == 0 and f"{len(state)} parameters (lm_head.weight over " \
        "model.embed_tokens.weight's storage, stored once)" in text, text


def test_aot_compile(ckpts, tmp_path, record_property):
    """AOTInductor compiles the loaded program as it is, against the example inputs the archive
    carries (what torch.save writes, at the symbols' hints), into a package that runs, at
    other shapes too, to eager's logits."""
    ckpt = ckpts("qwen2")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    program = load(out)
    args, kwargs = program.example_inputs
    assert args == () and list(kwargs) == ["input_ids", "attention_mask"]
    # batch and sequence at their hints: 2 (a traced 1 would make torch specialise), and 8
    assert all(t.shape == (2, 8) and t.dtype == torch.int64 for t in kwargs.values())
    assert not kwargs["input_ids"].any() and kwargs["attention_mask"].eq(1).all()
    # a program that takes position_ids gets them in its example too, from 0
    given = ferry_export(ckpt, tmp_path / "positions", "--format", "pt2", "--dynamic",
                         "--inputs", "input_ids,attention_mask,position_ids", "--quiet")
    _, examples = load(given).example_inputs
    assert list(examples) == ["input_ids", "attention_mask", "position_ids"]
    assert examples["position_ids"].tolist() == [list(range(8))] * 2
    package = torch._inductor.aoti_compile_and_package(
        program, package_path=str(tmp_path / "aoti.pt2"))
    compiled = torch._inductor.aoti_load_package(package)
    record_property("max_abs_error", check_shapes(ckpt, compiled, [(1, 1), (2, 7), (3, 33)]))


def test_python_api(ckpts, tmp_path):
    """The guide's DynamoExporter / DynamoConfig: export, save, load, call; the recipe's
    export_format "dynamo"; the component's program is an ExportedProgram."""
    from ferry import (AutoExportConfig, AutoHfExporter, DynamoConfig, DynamoExporter,
                       ExportedModel, FerryError, OnnxConfig)

    ckpt = ckpts("mistral")
    exported = DynamoExporter().export(str(ckpt), config=DynamoConfig(dynamic=True))
    assert exported.format == "pt2"
    assert isinstance(exported.program, torch.export.ExportedProgram)
    exported.save_pretrained(tmp_path / "saved")
    loaded = ExportedModel.from_pretrained(tmp_path / "saved")
    ids, mask, pos = make_inputs(VOCAB, 3, 7)
    # generate()'s positions are dropped unread: the program computes its own, from 0
    got = loaded(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                 position_ids=torch.from_numpy(pos)).logits
    assert isinstance(got, torch.Tensor)
    assert_logits_close(got.numpy(), reference_logits(ckpt, ids, mask, None), mask)
    # the guide's dynamic_shapes with torch.export.Dim: the program's symbols and ranges
    Dim = torch.export.Dim
    shaped = DynamoExporter().export(str(ckpt), config=DynamoConfig(dynamic_shapes={
        "input_ids": {0: Dim("batch", max=4), 1: Dim("seq", min=2, max=64)}}))
    ranges = sorted((int(r.lower), int(r.upper)) for r in shaped.program.range_constraints.values())
    assert ranges == [(1, 4), (2, 64)], ranges
    config = AutoExportConfig.from_dict({"export_format": "dynamo", "dynamic": True})
    assert isinstance(config, DynamoConfig)
    assert isinstance(AutoHfExporter.from_config(config), DynamoExporter)
    with pytest.raises(FerryError, match="DynamoExporter writes dynamo"):
        DynamoExporter().export(str(ckpt), config=OnnxConfig())
    # the CLI takes the recipe's name too
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"export_format": "dynamo", "dynamic": True}))
    out = ferry_export(ckpt, tmp_path / "cli", "--config", recipe, "--quiet")
    assert (out / "model.pt2").exists()


def test_real_model(smollm2, tmp_path, record_property):
    """SmolLM2-135M (30 layers, tied embeddings) on real text: fp32 logits within the bound the
    other backends hold it to."""
    from test_openvino import REAL_ATOL

    out = ferry_export(smollm2, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    module = load(out).module()
    model = reference_model(smollm2)
    text = "The capital of France is Paris. The capital of Germany is"
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(smollm2))
    enc = tok([text, "Hello"], return_tensors="np", padding=True, padding_side="left")
    ids, mask = enc["input_ids"].astype(np.int64), enc["attention_mask"].astype(np.int64)
    from conftest import generate_position_ids

    pos = generate_position_ids(mask)
    assert model.config.tie_word_embeddings
    record_property("max_abs_error", assert_logits_close(
        run(module, ids, mask), reference_logits(smollm2, ids, mask, None), mask,
        atol=REAL_ATOL))


ERRORS = {
    "model-output-dynamic-cache": (["--dynamic", "--for-generation", "--model-output"],
                                   ["--model-output", "dynamic cache", "DynamicCache",
                                    "--static-cache"], 1),
    "quantized": (["--dynamic", "--quantize", "int4"], ["int4", "pt2", "quantized"], 1),
    "ort-fusions": (["--dynamic", "--ort-fusions", "cpu"], ["ort_fusions", "onnx"], 2),
    "opset": (["--dynamic", "--opset", "21"], ["opset", "ONNX"], 2),
    "compress": (["--dynamic", "--compress-to-fp16"], ["--compress-to-fp16", "OpenVINO"], 2),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_what_it_cannot_write_yet(ckpts, tmp_path, case):
    flags, needles, code = ERRORS[case]
    check_export_error(ckpts("llama"), tmp_path / "out", ["--format", "pt2", *flags],
                       needles, code)


@pytest.mark.parametrize("stage", ["semantic", "lowered"])
def test_graph_refuses_what_export_refuses(ckpts, stage):
    """`ferry graph` shows only what an export with the same options writes
    (its semantic stage printed a dynamic-cache generation graph that export then refused)."""
    flags, needles, code = ERRORS["quantized"]
    rc, stdout, stderr = run_ferry("graph", ckpts("llama"), "--format", "pt2", "--stage", stage,
                                   *flags)
    assert (rc, stdout) == (code, ""), (rc, stderr)
    assert stderr.startswith("ferry: error: ") and all(n in stderr for n in needles), stderr


# ---------------------------------------------------------------------------------------------
# Generation: a static cache written into the caller's tensors

MAX_CACHE_LEN = 96
NEW_TOKENS = 32


def torch_greedy(out, rows, new_tokens=NEW_TOKENS, suppressed=()):
    """The guide's static-cache loop over export.json: one zero tensor per cache input, handed
    to every call; the prompt through "prefill" (or "decode" alone when it takes prompts),
    then a token a call. Checks that each call writes into those same tensors (their identity
    kept, their data changed) and that every layer's position ends at the tokens fed.
    -> (ids, mask, tokens, calls)."""
    manifest = json.loads((out / "export.json").read_text())
    modules = {n: torch.export.load(str(out / c["file"])).module()
               for n, c in manifest["components"].items()}
    decode = manifest["components"]["decode"]["metadata"]
    assert decode["outputs"] == [o for o in decode["outputs"] if o["name"] == "logits"]
    max_len = decode["cache"]["max_cache_len"]
    ids, mask = left_pad(rows)
    batch, width = ids.shape
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    pads = (mask == 0).sum(-1)
    dtypes = {"float32": torch.float32, "int64": torch.int64}
    cache = {i["name"]: torch.zeros([batch if d == "batch" else max_len if d == "max_cache_len"
                                     else d for d in i["shape"]], dtype=dtypes[i["dtype"]])
             for i in decode["inputs"] if i["name"] not in ("input_ids", "attention_mask",
                                                            "position_ids")}
    pairs = decode["cache"]["pairs"]
    assert {p["input"] for p in pairs} == set(cache) and \
        all(p["in_place"] and p["written_into_input"] for p in pairs)
    objects = {n: id(t) for n, t in cache.items()}
    slots, calls = np.arange(max_len), []

    def call(component, tokens, first, positions):
        before = {n: t.clone() for n, t in cache.items()}
        query = first + np.arange(tokens.shape[1])
        visible = (slots[None, None, :] <= query[None, :, None]) & \
            (slots[None, None, :] >= pads[:, None, None])
        with torch.no_grad():
            logits = modules[component](
                input_ids=torch.from_numpy(tokens), attention_mask=torch.from_numpy(visible[:, None]),
                position_ids=torch.from_numpy(np.ascontiguousarray(positions)), **cache)["logits"]
        assert {n: id(t) for n, t in cache.items()} == objects
        assert all(not torch.equal(before[n], t) for n, t in cache.items()), "a cache not written"
        calls.append((first, logits.float().numpy()))

    call("prefill" if "prefill" in modules else "decode", ids, 0, pos)
    tokens = []
    for k in range(new_tokens):
        tokens.append(pick(calls[-1][1], list(suppressed)))
        if k < new_tokens - 1:
            call("decode", tokens[-1][:, None], width + k, pos[:, -1:] + k + 1)
    counters = {int(t[0]) for n, t in cache.items() if n.endswith("cumulative_length")}
    assert counters == {width + new_tokens - 1}, counters
    return ids, mask, np.stack(tokens, 1), calls


def module_classes(program):
    """{module fqn: class} over every node's nn_module_stack."""
    return {fqn: cls for n in program.graph.nodes
            for fqn, cls in (n.meta.get("nn_module_stack") or {}).values()}


def test_module_stack_matches_torch_export(family):
    """Each node records the transformers modules it came from, as torch.export records them
    for the same checkpoint: the same module paths with the same classes (the family's
    attention, MLP, RMSNorm, rotary embedding and activation, Gemma's scaled embedding), and
    each aten.linear in the Linear whose weight it reads."""
    arch, ckpt, _, program, _ = family
    model = reference_model(ckpt)
    ids, mask, pos = (torch.from_numpy(a) for a in make_inputs(VOCAB, 2, 5))
    traced = torch.export.export(model, (), dict(input_ids=ids, attention_mask=mask,
                                                 position_ids=pos, use_cache=False))
    # Phi-3's residual dropouts: torch records their aten.dropout (train=False), an identity
    # ferry does not write
    want = {fqn: cls for fqn, cls in module_classes(traced).items()
            if cls != "torch.nn.modules.dropout.Dropout"}
    assert module_classes(program) == want
    signature = program.graph_signature.inputs_to_parameters
    embed = "transformer.wte.weight" if arch == "gpt2" else "model.embed_tokens.weight"
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target in (torch.ops.aten.linear.default,
                                                          torch.ops.aten.matmul.default):
            # GPT-2's Conv1D multiplies by its weight as stored, [in, out]
            conv1d = node.target == torch.ops.aten.matmul.default
            if conv1d and node.args[1].name not in signature:
                continue   # attention's matmuls
            fqn, cls = list(node.meta["nn_module_stack"].values())[-1]
            weight = signature[node.args[1].name]
            # a mixture's router is its own module, whose forward calls F.linear
            router = cls.endswith("TopKRouter")
            assert router or cls == ("transformers.pytorch_utils.Conv1D" if conv1d else
                                     "torch.nn.modules.linear.Linear"), node.name
            assert weight == f"{fqn}.weight" or (fqn, weight) == ("lm_head", embed), (
                node.name, fqn, weight)
    calls = [e.fqn for e in program.module_call_graph]
    layers = "transformer.h" if arch == "gpt2" else "model.layers"
    assert calls[0] == "" and set(calls[1:]) == set(want) - {""} | {layers}


def test_unflatten(family):
    """torch.export.unflatten rebuilds the module tree (model.layers.0.self_attn.q_proj, ...),
    which runs to ep.module()'s logits exactly."""
    arch, ckpt, _, program, module = family
    tree = torch.export.unflatten(program)
    layers, attn = (tree.transformer.h, "attn") if arch == "gpt2" else (tree.model.layers,
                                                                        "self_attn")
    layer = getattr(layers, "0")
    first = layer_linears(arch)[0]
    assert isinstance(getattr(getattr(layer, attn), first), torch.nn.Module)
    # Phi3MLP's and GPT2MLP's names for it
    act = {"phi3": "activation_fn", "gpt2": "act"}.get(arch, "act_fn")
    mlp = layer.mlp.experts if arch in MOE_ARCHS else layer.mlp
    assert hasattr(mlp, act) and hasattr(tree, "lm_head")
    for batch, seq in [(1, 1), (3, 7)]:
        ids, mask, pos = make_inputs(VOCAB, batch, seq)
        assert np.array_equal(run(tree, ids, mask), run(module, ids, mask))


@pytest.fixture(scope="module", params=list(ARCHS))
def generation(request, ckpts, tmp_path_factory):
    """The guide's single-graph generation: a static cache and a multi-token decode."""
    ckpt = ckpts(request.param)
    out = ferry_export(ckpt, tmp_path_factory.mktemp("pt2-gen") / "pt2", "--format", "pt2",
                       "--dynamic", "--for-generation", "--static-cache", "--max-cache-len",
                       str(MAX_CACHE_LEN), "--multi-token-decode", "--quiet")
    return ckpt, out


@pytest.mark.parametrize("rows", [[1], [5], [40], [7, 3]], ids=["p1", "p5", "p40", "b2"])
def test_static_greedy_equals_generate(generation, rows, record_property):
    ckpt, out = generation
    assert sorted(p.name for p in out.glob("*.pt2")) == ["decode.pt2"]
    ids, mask, tokens, calls = torch_greedy(out, prompts(rows), suppressed=eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, NEW_TOKENS))
    record_property("max_abs_error", check_calls(ckpt, ids, mask, tokens, calls))


def test_prefill_decode_pair(ckpts, tmp_path):
    """The static cache's default components, prefill and decode, in the loop and through
    ferry's generate() (one set of weights for both modules)."""
    from ferry import ExportedModel

    ckpt = ckpts("qwen2")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "64", "--quiet")
    assert sorted(p.name for p in out.glob("*.pt2")) == ["decode.pt2", "prefill.pt2"]
    ids, mask, tokens, calls = torch_greedy(out, prompts([7, 3]), 16, eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, 16))
    check_calls(ckpt, ids, mask, tokens, calls)
    exported = ExportedModel.from_pretrained(out)
    got = exported.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                            max_new_tokens=16, min_new_tokens=16)
    np.testing.assert_array_equal(got[:, ids.shape[1]:].numpy(), tokens)


@pytest.mark.parametrize("arch", ["llama", "gemma3", "gpt2", "qwen3_moe"])
def test_dynamic_cache_generation(ckpts, tmp_path, arch):
    """export_for_generation's default cache (dynamic, the guide's DynamoExporter default):
    prefill returns the cache (present_<l>_key), decode takes it back
    (past_key_values_<l>_key) and returns it one row longer; ferry's generate() over the
    loaded programs equals transformers' for a left-padded batch (Gemma 3's prompt past its
    sliding window)."""
    from ferry import ExportedModel

    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic",
                       "--for-generation", "--quiet")
    assert sorted(p.name for p in out.glob("*.pt2")) == ["decode.pt2", "prefill.pt2"]
    decode = load(out, "decode").graph_signature
    assert "past_key_values_0_key" in decode.user_inputs
    assert decode.user_outputs[:3] == ("logits", "present_0_key", "present_0_value")
    assert not decode.buffers_to_mutate and not decode.user_inputs_to_mutate
    meta = json.loads((out / "export.json").read_text())["components"]["decode"]["metadata"]
    assert meta["cache"]["implementation"] == "dynamic"
    ids, mask = left_pad(prompts([11, 4]))
    got = ExportedModel.from_pretrained(out).generate(
        torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
        min_new_tokens=12)
    np.testing.assert_array_equal(got[:, ids.shape[1]:].numpy(), hf_greedy(ckpt, ids, mask, 12))


def test_example_inputs(ckpts, tmp_path):
    """The example inputs torch.export.load gives: a static export's are its example shape
    (the program runs on them to eager's logits); a generation component that takes its cache
    has none (the example would be as large as the cache). torch reads them with its
    weights_only unpickler, without falling back to full unpickling."""
    ckpt = ckpts("gemma")
    out = ferry_export(ckpt, tmp_path / "static", "--format", "pt2", "--example-shape",
                       "input_ids=3x5", "--quiet")
    with zipfile.ZipFile(out / "model.pt2") as z:
        sample = z.read("model/data/sample_inputs/model.pt")
    args, kwargs = torch.load(io.BytesIO(sample), weights_only=True)
    assert args == () and {n: tuple(t.shape) for n, t in kwargs.items()} == {
        "input_ids": (3, 5), "attention_mask": (3, 5)}
    program = load(out)
    assert all(torch.equal(kwargs[n], program.example_inputs[1][n]) for n in kwargs)
    ids, mask = (kwargs[n].numpy() for n in ("input_ids", "attention_mask"))
    assert_logits_close(run(program.module(), ids, mask),
                        reference_logits(ckpt, ids, mask, None), mask)
    gen = ferry_export(ckpt, tmp_path / "gen", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "32", "--quiet")
    assert load(gen, "decode").example_inputs is None
    assert load(gen, "prefill").example_inputs is None
    rc, text, err = run_ferry("inspect", gen)
    assert rc == 0 and "example inputs: none (it takes its cache)" in text, (text, err)
    rc, text, err = run_ferry("inspect", out)
    assert rc == 0 and "example inputs: in the archive" in text, (text, err)
    # 65536 tokens an input at most: a larger traced shape gets none, and inspect says why
    big = ferry_export(ckpt, tmp_path / "big", "--format", "pt2", "--example-shape",
                       "input_ids=2x32769", "--quiet")
    assert load(big).example_inputs is None
    rc, text, err = run_ferry("inspect", big)
    assert rc == 0 and "example inputs: none (its traced shape is over 65536" in text, text


EVIL = """
import io, json, os, sys, zipfile, torch
src, dst, marker, entry = sys.argv[1:5]
class Payload:
    def __reduce__(self):
        return (os.system, ("touch " + marker,))
buf = io.BytesIO()
torch.save(((), {"x": Payload()}) if entry == "sample" else Payload(), buf)
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
    root = zin.namelist()[0].split("/")[0]
    if entry == "nul":  # torch reads path_name as a C string: the NUL ends it at weight_1
        zout.writestr(root + "/data/weights/weight_1", buf.getvalue())
    if entry == "aoti":  # only refused: a live one needs a compiled library
        zout.writestr(root + "/data/aotinductor/model/model.so", b"\\x7fELF")
    if entry == "subfolder":  # a program models/sub/x reads the legacy data/weights/sub/x.pt
        zout.writestr(root + "/models/sub/x.json", zin.read(root + "/models/model.json"))
        zout.writestr(root + "/data/sample_inputs/sub/x.pt",
                      zin.read(root + "/data/sample_inputs/model.pt"))
        zout.writestr(root + "/data/weights/sub/x.pt", buf.getvalue())
        zout.writestr(root + "/data/constants/sub/x.pt", buf.getvalue())
    for info in zin.infolist():
        data = zin.read(info)
        if entry == "sympy" and info.filename.endswith("models/model.json"):
            # torch parses each expr_str with sympy.sympify, which evaluates Python
            expr = "s0+0*__import__('os').system('touch " + marker + "')"
            data = data.replace(b'"expr_str": "s0"', b'"expr_str": ' + json.dumps(expr).encode(), 1)
        if entry in ("input_name", "guard") and info.filename.endswith("models/model.json"):
            program = json.loads(data)
            run = "__import__('os').system('touch " + marker + "')"
            if entry == "input_name":  # FX writes it into the forward it executes
                name = "zz=" + run
                graph = program["graph_module"]["graph"]
                graph["inputs"].append({"as_tensor": {"name": name}})
                graph["tensor_values"][name] = graph["tensor_values"]["input_ids"]
                program["graph_module"]["signature"]["input_specs"].append(
                    {"user_input": {"arg": {"as_tensor": {"name": name}}}})
            else:  # .module() executes each guard
                program["guards_code"] = [run + " == 0"]
            data = json.dumps(program).encode()
        if entry in ("spec_exec", "spec_enum") and info.filename.endswith("models/model.json"):
            program = json.loads(data)
            signature = program["graph_module"]["module_call_graph"][0]["signature"]
            leaf = {"type": None, "context": None, "children_spec": []}
            if entry == "spec_exec":  # transformers calls the class path of a "seq" record
                context = {"_t": "seq", "p": "builtins.exec",
                           "v": ["import os; os.system('touch " + marker + "')"]}
                extra = {"type": "transformers.cache_utils:DynamicCache",
                         "context": json.dumps(context), "children_spec": []}
                key = "z"
            else:  # torch's object hook imports what an __enum__ names: ctypes.cdll[so]
                key = {"__enum__": True, "fqn": "ctypes:cdll", "name": os.environ["EVIL_SO"]}
                extra = {"type": "builtins.tuple", "context": "null", "children_spec": []}
            signature["out_spec"] = json.dumps([1, {
                "type": "builtins.dict", "context": json.dumps(["logits", key]),
                "children_spec": [leaf, extra]}])
            data = json.dumps(program).encode()
        if entry == "spec_key" and info.filename.endswith("models/model.json"):
            # FX writes each key of the inputs' dict into the forward it executes
            program = json.loads(data)
            signature = program["graph_module"]["module_call_graph"][0]["signature"]
            spec = json.loads(signature["in_spec"])
            kwargs = spec[1]["children_spec"][1]
            keys = json.loads(kwargs["context"])
            keys[0] = ("input_ids':input_ids}), 0)\\nimport os; os.system('touch " + marker +
                       "')\\ndef z():\\n    return (({'input_ids")
            kwargs["context"] = json.dumps(keys)
            signature["in_spec"] = json.dumps(spec)
            data = json.dumps(program).encode()
        if entry == "nul" and info.filename.endswith("model_weights_config.json"):
            config = json.loads(data)
            first = config["config"][next(iter(config["config"]))]
            first.update(path_name="weight_1\\u0000", use_pickle=True)
            data = json.dumps(config).encode()
        if entry == "sample" and info.filename.endswith("data/sample_inputs/model.pt"):
            data = buf.getvalue()
        if entry == "example_key" and info.filename.endswith("data/sample_inputs/model.pt"):
            # .module() writes each example input's path into a guard's message it executes
            args, kwargs = torch.load(io.BytesIO(data), weights_only=True)
            key = "+str(__import__('os').system('touch " + marker + "'))+"
            kwargs["attention_mask"] = {key: kwargs["attention_mask"]}
            example = io.BytesIO()
            torch.save((args, kwargs), example)
            data = example.getvalue()
        if entry in ("duplicate", "case") and info.filename.endswith("data/sample_inputs/model.pt"):
            # torch's reader looks names up ignoring case, and takes the first of two copies
            # where Python's zipfile takes the last
            name = info.filename.replace("sample_inputs", "SAMPLE_INPUTS") if entry == "case" \
                else info.filename
            zout.writestr(name, buf.getvalue())
            if entry == "case":
                continue
        if entry == "constant" and info.filename.endswith("data/constants/tensor_0"):
            data = buf.getvalue()
        if entry == "constant" and info.filename.endswith("model_constants_config.json"):
            data = data.replace(b'"use_pickle": false', b'"use_pickle": true', 1)
        zout.writestr(info.filename, data)
"""


HOSTILE_ENTRIES = ["sample", "constant", "duplicate", "case", "sympy", "nul", "subfolder",
                   "input_name", "guard", "spec_exec", "spec_enum", "spec_key", "example_key"]

# every hostile archive written by one Python (each run of EVIL as its own argv)
EVIL_EACH = """
import json, sys
for job in json.loads(sys.argv[1]):
    sys.argv = [sys.argv[0]] + job
    exec(EVIL, {"__name__": "evil"})
"""

# torch alone, as a transformers user loads a program (its cache registered): load, unlift and
# call each archive (a guard runs at the call, and the output spec's classes rebuild the
# output); what torch raises afterwards does not matter, what it ran does
TORCH_LOADS_EACH = """
import json, sys, torch
from transformers.exporters.metadata import register_treespec_types
register_treespec_types(json.dumps({'type': 'transformers.cache_utils:DynamicCache'}))
for path in sys.argv[1:]:
    try:
        m = torch.export.load(path).module(); ids = torch.zeros(1, 4).long()
        m(input_ids=ids, attention_mask=ids + 1)
    except Exception:
        pass
"""


@pytest.fixture(scope="module")
def hostile_pt2(ckpts, tmp_path_factory):
    """{entry: (export folder holding the hostile model.pt2, its marker)}: each archive runs
    code in torch; torch has loaded every one once, so each marker it left is there."""
    import shutil
    import subprocess
    import sys

    work = tmp_path_factory.mktemp("hostile")
    out = ferry_export(ckpts("llama"), work / "clean", "--format", "pt2", "--dynamic", "--quiet")
    env = dict(os.environ)
    # a library whose constructor leaves the spec_enum marker
    source = work / "payload.c"
    source.write_text('#include <stdio.h>\n__attribute__((constructor)) static void ran(void)'
                      f'{{ FILE *f = fopen("{work / "ran-spec_enum"}", "w"); if (f) fclose(f); }}\n')
    env["EVIL_SO"] = str(work / "payload.so")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", env["EVIL_SO"], str(source)], check=True,
                   timeout=120)
    jobs = [[str(out / "model.pt2"), str(work / f"{entry}.pt2"), str(work / f"ran-{entry}"),
             entry] for entry in HOSTILE_ENTRIES]
    subprocess.run([sys.executable, "-c", f"EVIL = {EVIL!r}\n" + EVIL_EACH, json.dumps(jobs)],
                   check=True, timeout=300, env=env)
    subprocess.run([sys.executable, "-c", TORCH_LOADS_EACH] + [job[1] for job in jobs],
                   capture_output=True, timeout=900)
    archives = {}
    for entry in HOSTILE_ENTRIES:
        folder = work / entry
        shutil.copytree(out, folder)
        (work / f"{entry}.pt2").replace(folder / "model.pt2")
        record_sizes(folder)
        archives[entry] = (folder, work / f"ran-{entry}")
    return archives


@pytest.mark.parametrize("entry", HOSTILE_ENTRIES)
def test_loading_never_runs_code(hostile_pt2, entry):
    """Torch.export.load unpickles in full what its weights_only reader
    refuses (the example inputs) and what an archive marks use_pickle, running the code a
    pickle names. ferry's ExportedModel, its .program and `ferry validate` refuse such an
    archive first; torch alone runs it (shown here, so the archive is a live one). Found by a
    later review: a second copy of an entry, or one named in other case, which torch's zip
    reader finds and Python's zipfile does not, hid the pickle from that check; a third: an
    expression torch evaluates as Python (sympify), and a path_name whose NUL torch's C reader
    stops at, ran code past it; a fourth: a second program in a subfolder (whose legacy pickles
    torch reads), a graph input whose name FX writes into code, and (found while fixing those)
    a guard .module() executes; a fifth: a pytree spec whose context torch's JSON hook imports
    from (__enum__: ctypes.cdll loads a library) or transformers calls a class path of (seq:
    builtins.exec); a sixth: a key of the inputs' spec, which FX writes into code; a seventh:
    a key in the example inputs, which .module() writes into a guard's message."""
    from ferry import ExportedModel, FerryError
    from test_validate import validate

    out, marker = hostile_pt2[entry]
    assert marker.exists(), "the archive does not run code in torch: the test proves nothing"
    marker.unlink()
    exported = ExportedModel.from_pretrained(out)
    ids, mask, pos = make_inputs(VOCAB, 1, 4)
    why = {"duplicate": "is in the archive twice",
           "nul": "is not a weight_N or tensor_N entry", "sympy": "not plain arithmetic",
           "subfolder": "is not an entry of a pt2 in the layout",
           "input_name": "not an identifier", "guard": "does more than compare input sizes",
           "spec_exec": "a seq record", "spec_enum": "keys that are not identifiers",
           "spec_key": "keys that are not identifiers",
           "example_key": "holds example inputs other than",
           }.get(entry, "is a pickle the weights_only loader refuses")
    with pytest.raises(FerryError, match=why):
        exported(input_ids=ids, attention_mask=mask, position_ids=pos)
    with pytest.raises(FerryError, match=why):
        exported.components["model"].program
    rc, text, err = validate(out)  # 1, a file ferry will not read (3)
    assert rc == 1 and why in err, (rc, text, err)
    assert not marker.exists()


@pytest.mark.parametrize("expr,plain", [
    ("s0", True), ("64*(s0)", True), ("(s0)*(s0)", True), ("FloorDiv(s0, 2) + 1", True),
    ("(s0 < 3) & (s1 > 2)", True), ("Mul(Integer(64), Symbol('s1'))", True),  # torch's srepr
    ("Symbol('s0', integer=True, positive=True)", True), ("Float('1.5', precision=53)", True),
    ("s0+0*__import__('os').system('id')", False), ("s0.func", False), ("s0[0]", False),
    ("lambda: 1", False), ("open(1)", False), ("Symbol('s0', evil=1)", False),
    # sympy sympifies a function's string arguments: only symbol names and numbers pass
    ("Max(1, 'open(1)')", False), ("Mod('s0 + 1', 2)", False), ("Symbol('os')", False),
])
def test_expressions_torch_evaluates(expr, plain):
    """torch.export.load parses each expr_str with sympy.sympify, which evaluates Python:
    ferry's check takes what torch and ferry write, arithmetic over symbols, and nothing that
    could name or call anything else."""
    from ferry.pt2_safety import is_plain_expression

    assert is_plain_expression(expr) is plain


@pytest.mark.parametrize("guard,plain", [
    ("L['input_ids'].size()[1] <= L['attention_mask'].size()[1]", True),  # transformers' own
    ("L['cache'][0].size()[0] == L['position_ids'].size()[0] and L['cache'][0].size()[3] == 16",
     True), ("L['input_ids'].size()[1] + ((-1)*L['attention_mask'].size()[1]) <= 0", True),
    ("__import__('os').system('id') == 0", False), ("L['x'].size.__class__", False),
    ("L['x'].numpy()", False), ("open('f')", False), ('L["x"].size()[0] == 1', False),
    ("L['a\\'].size()[0]", False), ("(lambda: 1)()", False), ("[1][0]", False),
])
def test_guards_torch_executes(guard, plain):
    """.module() compiles each guards_code entry into a function it runs at every call (and
    pastes it, unescaped, into a string literal of its message): only size comparisons pass."""
    from ferry.pt2_safety import is_plain_guard

    assert is_plain_guard(guard) is plain


def test_graph_input_kinds_refused():
    """A string graph input (a constant_input spec) is pasted unescaped into a
    guard .module() executes; only the inputs and roles ferry, transformers and torch.export.save
    write pass."""
    from ferry.pt2_safety import _program_problem

    graph = {"inputs": [{"as_tensor": {"name": "x"}}], "nodes": [], "outputs": []}
    ok = {"graph_module": {"graph": graph, "signature": {
        "input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
        "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "x"}}}}]}}}
    assert _program_problem(ok) is None
    string_input = json.loads(json.dumps(ok))
    string_input["graph_module"]["graph"]["inputs"].append({"as_string": "x'\nimport os"})
    assert "a graph input of kind" in _program_problem(string_input)
    constant = json.loads(json.dumps(ok))
    constant["graph_module"]["signature"]["input_specs"].append(
        {"constant_input": {"name": "s", "value": {"as_string": "hi"}}})
    assert "an input_spec of kind" in _program_problem(constant)
    newline = json.loads(json.dumps(ok))
    newline["graph_module"]["graph"]["nodes"].append({"target": "torch.ops.aten.add.Tensor",
                                                      "inputs": [{"arg": {"as_string": "a\nb"}}]})
    assert "control character" in _program_problem(newline)
    # a higher-order op (inline_asm_elementwise compiles the GPU code it is
    # handed) or a graph, operator or script object argument; and ops that touch files
    for target, argument in (("torch.ops.higher_order.inline_asm_elementwise", {"as_none": None}),
                             ("torch.ops.aten.from_file.default", {"as_string": "/etc/passwd"}),
                             ("torch.ops.aten.add.Tensor", {"as_operator": "torch.os.system"}),
                             ("torch.ops.aten.add.Tensor", {"as_graph": {}}),
                             # Python's operators beyond torch's SymInt arithmetic
                             ("_operator.getitem", {"as_none": None}),
                             ("_operator.floordiv.x", {"as_none": None}),
                             ("builtins.eval", {"as_string": "1"})):
        node = json.loads(json.dumps(ok))
        node["graph_module"]["graph"]["nodes"].append(
            {"target": target, "inputs": [{"name": "x", "arg": argument}], "outputs": []})
        problem = _program_problem(node)
        assert problem and ("not an aten operator" in problem or
                            "an argument of kind" in problem), (target, argument, problem)
    # what torch.export writes for a derived dim (sym_size // 4) loads
    for target in ("_operator.floordiv", "_operator.mul", "_operator.add", "_operator.sub"):
        node = json.loads(json.dumps(ok))
        node["graph_module"]["graph"]["nodes"].append(
            {"target": target, "inputs": [{"name": "a", "arg": {"as_int": 4}}], "outputs": []})
        assert _program_problem(node) is None, target


def test_manifest_spec_refused(ckpts, tmp_path):
    """export.json's out_spec is what ferry has transformers register (import, and make pytree
    nodes of) before torch reads the program: held to the archive's spec rules (found by
    review: it could name any transformers class, with contexts transformers calls paths of)."""
    from ferry import ExportedModel, FerryError

    out = ferry_export(ckpts("llama"), tmp_path / "out", "--format", "pt2", "--dynamic",
                       "--model-output", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    context = {"_t": "seq", "p": "builtins.exec", "v": ["print(1)"]}
    manifest["components"]["model"]["metadata"]["out_spec"] = json.dumps([1, {
        "type": "transformers.cache_utils:DynamicCache", "context": json.dumps(context),
        "children_spec": []}])
    (out / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(FerryError, match="export.json: the out_spec of this pt2 program has a "
                                         "context with a seq record"):
        ExportedModel.from_pretrained(out).components["model"].program


def test_aotinductor_package_refused(ckpts, tmp_path):
    """Torch.export.load loads the compiled library of every model under
    data/aotinductor/ (a native payload would run); ferry's exports never hold one, and an
    archive that does is refused before torch opens it, by ferry validate too (exit 1: a file
    ferry will not read, not a runtime missing here)."""
    import subprocess
    import sys

    from ferry import ExportedModel, FerryError
    from test_validate import validate

    out = ferry_export(ckpts("llama"), tmp_path / "out", "--format", "pt2", "--quiet")
    evil = tmp_path / "evil.pt2"
    subprocess.run([sys.executable, "-c", EVIL, str(out / "model.pt2"), str(evil),
                    str(tmp_path / "ran"), "aoti"], check=True, timeout=120)
    evil.replace(out / "model.pt2")
    record_sizes(out)
    why = "data/aotinductor/model/model.so is not an entry of a pt2 in the layout"
    with pytest.raises(FerryError, match=why):
        ExportedModel.from_pretrained(out).components["model"].program
    rc, text, err = validate(out)
    assert rc == 1 and why in err, (rc, text, err)


def test_archive_two_readers_disagree_on_refused(ckpts, tmp_path):
    """With data before the archive Python's zipfile shifts every
    offset past it and torch's reader (miniz) does not, so each could read its own central
    directory; an entry whose local header names another is read by neither as listed. Both are
    refused before torch opens the file."""
    from ferry import ExportedModel, FerryError

    out = ferry_export(ckpts("llama"), tmp_path / "out", "--format", "pt2", "--quiet")
    archive = out / "model.pt2"
    original = archive.read_bytes()
    archive.write_bytes(b"\0" * 4096 + original)
    record_sizes(out)
    with pytest.raises(FerryError, match="its first bytes are not a zip archive's"):
        ExportedModel.from_pretrained(out)
    # data that opens as a zip's first entry passes that check, and not the archive's
    archive.write_bytes(b"PK\x03\x04" + b"\0" * 4092 + original)
    record_sizes(out)
    with pytest.raises(FerryError, match="central directory elsewhere than its end record"):
        ExportedModel.from_pretrained(out).components["model"].program
    name = b"data/sample_inputs/model.pt"
    at = original.index(name)  # the first copy is the local header's
    archive.write_bytes(original[:at] + name.replace(b"model.pt", b"MODEL.PT") +
                        original[at + len(name):])
    record_sizes(out)
    with pytest.raises(FerryError, match="cannot be read as the archive lists it"):
        ExportedModel.from_pretrained(out).components["model"].program


def test_legacy_layout_refused(ckpts, tmp_path):
    """A root "version" entry is the layout before torch 2.8, which torch.export.load falls
    back to where the program fails to load, and whose program it unpickles in full."""
    from ferry import ExportedModel, FerryError

    out = ferry_export(ckpts("llama"), tmp_path / "out", "--format", "pt2", "--quiet")
    with zipfile.ZipFile(out / "model.pt2", "a") as z:
        z.writestr("version", "8.20")
    record_sizes(out)
    with pytest.raises(FerryError, match="version marks the layout before torch 2.8"):
        ExportedModel.from_pretrained(out).components["model"].program


NO_MEMFD = """
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
int memfd_create(const char *name, unsigned flags)
{
    (void)name; (void)flags;
    const char *seen = getenv("NO_MEMFD_SEEN"); /* proof that the export asked for one */
    if (seen)
        close(open(seen, O_WRONLY | O_CREAT, 0600));
    errno = ENOSYS;
    return -1;
}
"""


def test_example_inputs_without_memfd(ckpts, tmp_path):
    """Where memfd_create is refused (old kernels, seccomp sandboxes) the
    example inputs were an export's failure; they are built in a temporary file instead."""
    import shutil
    import subprocess

    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    (tmp_path / "no_memfd.c").write_text(NO_MEMFD)
    shim = tmp_path / "no_memfd.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(shim), str(tmp_path / "no_memfd.c")],
                   check=True, timeout=120)
    seen = tmp_path / "memfd-refused"
    out = ferry_export(ckpts("qwen3"), tmp_path / "out", "--format", "pt2", "--dynamic",
                       "--quiet", env={"LD_PRELOAD": str(shim), "NO_MEMFD_SEEN": str(seen)})
    assert seen.exists(), "the shim never ran: the fallback went untested"
    args, kwargs = load(out).example_inputs
    assert kwargs["input_ids"].shape == (2, 8)


def test_model_output_generation(ckpts, tmp_path):
    """--model-output on the guide's static-cache generation export: each module returns
    CausalLMOutputWithPast (the cache still written into the caller's tensors), and the loop
    over them, and ferry's generate(), equal generate()."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    from ferry import ExportedModel

    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "64",
                       "--multi-token-decode", "--model-output", "--quiet")
    assert load(out, "decode").call_spec.out_spec.type is CausalLMOutputWithPast
    ids, mask, tokens, calls = torch_greedy(out, prompts([5, 2]), 16, eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, 16))
    check_calls(ckpt, ids, mask, tokens, calls)
    got = ExportedModel.from_pretrained(out).generate(
        torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=16,
        min_new_tokens=16)
    np.testing.assert_array_equal(got[:, ids.shape[1]:].numpy(), tokens)


LOAD_ALONE = """
import sys, torch
try:
    torch.export.load(sys.argv[1])
    print("loaded alone")
except Exception:
    print("refused alone")
import transformers.modeling_outputs
print(type(torch.export.load(sys.argv[1]).module()(
    input_ids=torch.ones(1, 3, dtype=torch.long),
    attention_mask=torch.ones(1, 3, dtype=torch.long))).__name__)
"""


def test_model_output_load_needs_the_class(ckpts, tmp_path):
    """What --model-output costs, as --help says: torch alone cannot read the program back (it
    names a transformers class); once transformers.modeling_outputs is imported it loads and
    returns that class. Without the option torch alone loads it."""
    import subprocess
    import sys

    ckpt = ckpts("qwen3")
    for flags, want in ((["--model-output"], "refused alone\nCausalLMOutputWithPast"),
                        ([], "loaded alone\ndict")):
        out = ferry_export(ckpt, tmp_path / f"pt2{len(flags)}", "--format", "pt2", "--dynamic",
                           *flags, "--quiet")
        proc = subprocess.run([sys.executable, "-c", LOAD_ALONE, str(out / "model.pt2")],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.split() == want.split(), proc.stdout


@pytest.mark.parametrize("flags,needles,code", [
    (["--model-output"], ["--model-output", "--format pt2"], 2),
    (["--format", "openvino", "--model-output"], ["--model-output", "--format pt2"], 2),
    (["--config", "RECIPE"], ["'model_output'", "is a pt2 option", "not onnx"], 1),
], ids=["onnx", "openvino", "onnx-recipe"])
def test_model_output_is_pt2s(ckpts, tmp_path, flags, needles, code):
    """model_output changes only a torch program's return; other formats refuse it."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"export_format": "onnx", "model_output": true}')
    flags = [str(recipe) if f == "RECIPE" else f for f in flags]
    check_export_error(ckpts("llama"), tmp_path / "out", ["--dynamic", *flags], needles, code)


def test_sliding_window_in_place(ckpts, tmp_path):
    """A window shorter than the prompt, on the positions a static cache's slots are."""
    ckpt = ckpts("mistral", sliding_window=8)
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "64",
                       "--multi-token-decode", "--quiet")
    ids, mask, tokens, calls = torch_greedy(out, prompts([20, 11]), 12, eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, 12))
    check_calls(ckpt, ids, mask, tokens, calls)


def test_unflatten_static_cache(generation):
    """The decode with its cache written in place, unflattened: the same logits, and the
    caller's cache tensors written as ep.module() writes them."""
    ckpt, out = generation
    program = load(out, "decode")
    tree = torch.export.unflatten(program)
    feeds = []
    for _ in range(2):
        ids, mask, pos = make_inputs(VOCAB, 1, 5)
        feed = {"input_ids": torch.from_numpy(ids), "position_ids": torch.from_numpy(pos),
                "attention_mask": torch.tril(torch.ones(5, MAX_CACHE_LEN, dtype=torch.bool))
                [None, None]}
        for node in program.graph.nodes:  # every cache tensor empty: batch 1, MAX_CACHE_LEN
            if node.op == "placeholder" and node.name.startswith("past_key_values"):
                meta = node.meta["val"]
                shape = [int(d) if not isinstance(d, torch.SymInt) else
                         1 if axis == 0 else MAX_CACHE_LEN for axis, d in enumerate(meta.shape)]
                feed[node.name] = torch.zeros(shape, dtype=meta.dtype)
        feeds.append(feed)
    with torch.no_grad():
        want = program.module()(**feeds[0])["logits"]
        got = tree(**feeds[1])["logits"]
    assert torch.equal(got, want)
    for name in feeds[0]:
        assert torch.equal(feeds[0][name], feeds[1][name]), name
    assert feeds[1]["past_key_values_0_key"].abs().sum() > 0


# the signature is the cache write's, alike in every family: one with full attention only and
# one with sliding-window layers beside full ones (~45 s each)
@pytest.mark.parametrize("generation", ["llama", "gemma3"], indirect=True)
def test_cache_write_signature_matches_torch(generation):
    """The cache write as torch.export records it for a module that writes its cache argument:
    an in-place op and no mutation spec before decompositions, a USER_INPUT_MUTATION per cache
    tensor after run_decompositions() (which still runs to the same logits)."""
    from torch.export.graph_signature import OutputKind

    class Writes(torch.nn.Module):
        def forward(self, x, cache, position):
            cache.index_copy_(2, position + torch.arange(x.shape[2]), x)
            position.copy_(position + x.shape[2])
            return cache.sum()

    traced = torch.export.export(Writes(), (torch.ones(1, 2, 3, 4), torch.zeros(1, 2, 8, 4),
                                            torch.zeros(1, dtype=torch.int64)))
    ckpt, out = generation
    ours = load(out, "decode")
    for program in (traced, ours):
        assert [s.kind for s in program.graph_signature.output_specs] == [OutputKind.USER_OUTPUT]
    theirs = traced.run_decompositions().graph_signature.output_specs
    assert [s.kind for s in theirs] == [OutputKind.USER_INPUT_MUTATION] * 2 + \
        [OutputKind.USER_OUTPUT]
    decomposed = ours.run_decompositions()
    specs = decomposed.graph_signature.output_specs
    cache_inputs = [i for i in decomposed.graph_signature.user_inputs
                    if i.startswith("past_key_values")]
    assert [s.kind for s in specs] == [OutputKind.USER_INPUT_MUTATION] * len(cache_inputs) + \
        [OutputKind.USER_OUTPUT]
    assert sorted(s.target for s in specs[:-1]) == sorted(cache_inputs)


def test_half_precision_generation(ckpts, tmp_path):
    """A bf16 program's cache is bf16 tensors, written in place like fp32's; the prompt's
    logits within the bf16 bound."""
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--dtype", "bf16",
                       "--for-generation", "--static-cache", "--max-cache-len", "32",
                       "--multi-token-decode", "--quiet")
    module = load(out, "decode").module()
    ids, mask = left_pad(prompts([9]))
    cache = {}
    for l in range(2):
        cache[f"past_key_values_{l}_cumulative_length"] = torch.zeros(1, dtype=torch.int64)
        for kind in ("key", "value"):
            cache[f"past_key_values_{l}_{kind}"] = torch.zeros(1, 2, 32, 16, dtype=torch.bfloat16)
    visible = np.tril(np.ones((9, 32), bool), 0)[None, None]
    with torch.no_grad():
        logits = module(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(visible),
                        position_ids=torch.arange(9)[None], **cache)["logits"]
    assert logits.dtype == torch.bfloat16
    assert cache["past_key_values_0_key"][:, :, :9].abs().sum() > 0
    assert not cache["past_key_values_0_key"][:, :, 9:].any()
    assert [int(cache[f"past_key_values_{l}_cumulative_length"][0]) for l in range(2)] == [9, 9]
    assert_logits_close(logits.float().numpy(), reference_logits(
        ckpt, ids, mask, np.arange(9)[None]), mask, atol=BF16_ATOL)


def test_writer_under_sanitizers(build, ckpts, tmp_path):
    """The pt2 writer in every build make test makes (ASan + UBSan, clang UBSan: a memory error
    or leak exits 86): a plain export with a tied head and a static-cache generation export,
    each loaded and run by torch."""
    ckpt = ckpts("gemma", tie_word_embeddings=True)
    for name, flags in (("plain", ["--dynamic"]),
                        ("gen", ["--dynamic", "--for-generation", "--static-cache",
                                 "--max-cache-len", "32"])):
        rc, _, err = run_ferry("export", ckpt, tmp_path / name, "--format", "pt2", "--quiet",
                               *flags, binary=build)
        assert rc == 0, err
    check_shapes(ckpt, load(tmp_path / "plain").module(), [(3, 7)])
    assert load(tmp_path / "gen", "decode").graph_signature.user_inputs[3:] == \
        ("past_key_values_0_cumulative_length", "past_key_values_0_key",
         "past_key_values_0_value", "past_key_values_1_cumulative_length",
         "past_key_values_1_key", "past_key_values_1_value")


def test_rope_variants(ckpts, tmp_path, record_property):
    """Rope scalings whose lowering uses ops the default one does not (dynamic NTK's pow of two
    tensors, aten names pow's operand "exponent"), beyond
    max_position_embeddings too."""
    worst = 0.0
    for name, rope in (("dynamic", {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}),
                       ("linear", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0})):
        ckpt = make_checkpoint(tmp_path / f"ckpt-{name}", "llama", rope_parameters=rope,
                               max_position_embeddings=32)
        out = ferry_export(ckpt, tmp_path / name, "--format", "pt2", "--dynamic", "--quiet")
        worst = max(worst, check_shapes(ckpt, load(out).module(), [(1, 7), (3, 33), (1, 80)]))
    record_property("max_abs_error", worst)


def test_runs_on_another_device(tmp_path):
    """ferry moves a program to a device with torch's move_to_device_pass (the ops that name
    "cpu", an arange's device, move too; module().to() would leave them): on "meta", which
    stands in for a GPU here, the module runs to logits of the right shape."""
    from ferry.runtime import load_program

    out = ferry_export(FIXTURE, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    module = load_program(out / "model.pt2", torch.device("meta")).module()
    ids = torch.zeros(3, 7, dtype=torch.int64, device="meta")
    logits = module(input_ids=ids, attention_mask=torch.ones_like(ids))["logits"]
    assert logits.device.type == "meta" and tuple(logits.shape) == (3, 7, 512)


def test_dim_hints(ckpts):
    """torch.export.Dim.AUTO and Dim.DYNAMIC name no symbol: axis 0 is batch, axis 1 sequence;
    Dim.STATIC keeps the axis static; another axis needs a named Dim."""
    from ferry import DynamoConfig, DynamoExporter, FerryError

    Dim = torch.export.Dim
    ckpt = ckpts("llama")
    exported = DynamoExporter().export(str(ckpt), config=DynamoConfig(dynamic_shapes={
        "input_ids": {0: Dim.STATIC, 1: Dim.AUTO}}))
    sizes = exported.components["model"].metadata["inputs"][0]["shape"]
    assert sizes == [1, "sequence"], sizes
    with pytest.raises(FerryError, match="Dim.DYNAMIC on axis 2"):
        DynamoConfig(dynamic_shapes={"input_ids": {2: Dim.DYNAMIC}})


def test_validate_fails_a_broken_program(ckpts, tmp_path):
    """A program torch cannot load is the export's fault: ferry validate exits 1 (not 3, which
    says validation cannot run here) and names torch."""
    import os
    import sys

    from conftest import ROOT

    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    archive = out / "model.pt2"
    with zipfile.ZipFile(archive) as z:
        entries = [(i, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for info, data in entries:
            if info.filename.endswith("models/model.json"):
                data = data.replace(b"aten.linear.default", b"aten.no_such_op.default")
            z.writestr(info.filename, data)
    record_sizes(out)
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, _, err = run_ferry("validate", out, "--no-record", env=env)
    assert rc == 1, err
    assert "torch cannot load" in err and "aten.no_such_op.default" in err, err
