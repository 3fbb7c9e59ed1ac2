"""--ort-fusions cpu|cuda|webgpu|dml: the ONNX graph with onnxruntime's fused kernels
(RMSNormalization, SkipSimplifiedLayerNormalization, GroupQueryAttention, MultiHeadAttention,
RotaryEmbedding, packed projections, MatMulNBits, GatherBlockQuantized), emitted from ferry's
semantic ops, per provider as the guide's table says. onnxruntime has a CPU kernel for every op
these graphs use except GroupQueryAttention with q/k norms (cuda's Qwen3 decode), so every other
graph is run here, not only inspected; that one is checked structurally.

Fused graphs must compute what the standard graph computes: fp32 logits within 1e-4 of the eager
model for every family, and through every generation layout (dynamic cache, multi-token decode,
static cache, static cache in place) greedy tokens equal to generate(). Quantized fused graphs
are held to the dequantized reference (quant_ref.py) with accuracy_level 0 (fp32 compute); the
default accuracy_level 4 (int8 activations) against a measured bound."""

import json
from collections import Counter
from functools import partial

import onnx

import pytest

from conftest import (ARCHS, check_against_reference, check_export_error, check_model_full,
                      ferry_builds, ferry_export, fused_norm_names, fused_norm_ops, rotating_layers,
                      softcapped, sparse_layers)
from quant_ref import dequantized_checkpoint

FUSED = ["--ort-fusions", "cpu"]
SHAPES = [(1, 1), (1, 7), (3, 33)]


def op_types(path):
    model = onnx.load(str(path), load_external_data=False)
    return Counter((n.domain or "ai.onnx", n.op_type) for n in model.graph.node), model


def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


PROVIDERS = ["cpu", "cuda", "webgpu", "dml"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("arch", list(ARCHS))
def test_plain_export_fused_norms(ckpts, tmp_path, arch, provider, record_property):
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--ort-fusions", provider, "--quiet")
    check_model_full(out / "model.onnx")
    ops, _ = op_types(out / "model.onnx")
    layers = 2
    # Gemma's tanh GELU, and GPT-2's (gelu_new)
    tanh_gelu = arch.startswith("gemma") or arch == "gpt2"
    assert ops["com.microsoft", "FastGelu"] == (layers if tanh_gelu else 0)
    # no GELU's tanh left: only the soft-caps' (Gemma 2's, per layer's scores and the logits')
    cfg = json.loads((ckpt / "config.json").read_text())
    caps = layers * bool(cfg.get("attn_logit_softcapping")) + \
        bool(cfg.get("final_logit_softcapping"))
    assert sum(n for (_, op), n in ops.items() if op == "Tanh") == caps
    # standard RMSNormalization at opset 23 (LayerNormalization: GPT-2's): the first layer's
    # input norm (the others fuse with the residual add), q/k norms, and the norms after each
    # block (Gemma 2/3, OLMo 2)
    plain, skip = fused_norm_ops(arch, layers)
    plain_op, skip_op = fused_norm_names(arch)
    if skip_op[1] == "SkipLayerNormalization" and provider == "cpu":
        plain, skip = plain + skip, 0   # its CPU kernel is slower than the add and the norm
    assert ops[plain_op] == plain and ops[skip_op] == skip, ops
    assert not any(op == "ReduceMean" for _, op in ops)      # no decomposed norm left
    assert ops["com.microsoft", "GroupQueryAttention"] == 0
    # no cache: plain ops on cpu, MultiHeadAttention after RotaryEmbedding elsewhere (the table)
    mha = provider != "cpu" and not softcapped(arch)   # MultiHeadAttention takes no cap
    assert ops["com.microsoft", "MultiHeadAttention"] == (layers if mha else 0)
    # with a soft-cap too (the scores stay plain ops); not LongRoPE (Phi-3's), whose table
    # changes with the length: it rotates in plain ops
    rotary = provider != "cpu" and arch != "phi3"
    assert ops["com.microsoft", "RotaryEmbedding"] == (2 * rotating_layers(ckpt) if rotary else 0)
    # q/k/v and gate/up each one MatMul over joined weights (stored so by Phi-3); then o,
    # down and the head
    _, model = op_types(out / "model.onnx")
    if arch == "gpt2":   # Conv1Ds: already one c_attn, and no gate
        packed = [n.name for n in model.graph.node if n.op_type == "MatMul" and "/c_" in n.name]
        assert sorted(p.split("/")[-2] for p in packed) == sorted(
            ["c_attn", "c_proj", "c_fc", "c_proj"] * layers), packed
    else:
        packed = [n.name for n in model.graph.node
                  if n.op_type == "MatMul" and "_proj" in n.name]
        joined = "qkv_proj" if arch == "phi3" else "q_k_v_proj"
        # a sparse layer's experts are one MoE or batched MatMuls; Qwen2-MoE's shared expert
        # reads the router's input: the router, its gate and up and its own gate are one
        # MatMul ("gate_shared_expert/gate_proj_shared_expert/up_proj_shared_expert_gate")
        sparse = len(sparse_layers(ckpt))
        shared = sparse if arch == "qwen2_moe" else 0
        assert sorted(p.split("/")[-2] for p in packed) == sorted(
            [joined, "o_proj"] * layers + ["gate_up_proj", "down_proj"] * (layers - sparse) +
            ["up_proj_shared_expert_gate", "down_proj"] * shared), packed
    worst = check_against_reference(ckpt, out / "model.onnx", SHAPES)
    record_property("fused_logits_max_abs_err", worst)


@pytest.mark.parametrize("act", ["gelu", "gelu_pytorch_tanh"])
def test_gelu_fused(ckpts, tmp_path, act):
    """The erf GELU as Gelu and the tanh one as FastGelu, against transformers."""
    ckpt = ckpts("llama", hidden_act=act)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *FUSED, "--quiet")
    ops, _ = op_types(out / "model.onnx")
    assert ops["com.microsoft", "Gelu" if act == "gelu" else "FastGelu"] == 2
    check_against_reference(ckpt, out / "model.onnx", SHAPES)


# ---------------------------------------------------------------------------------------------
# generation, every layout


@pytest.fixture(scope="module")
def fused_families(tmp_path_factory):
    from test_generation import Family
    made = {}

    def get(arch, extra=(), reference=None, tag="", provider="cpu"):
        key = (arch, tuple(extra), tag, provider)
        if key not in made:
            made[key] = Family(tmp_path_factory.mktemp(f"fgen-{arch}{tag}-{provider}"), arch,
                               ["--ort-fusions", provider, *extra], reference)
        return made[key]
    return get


LOOPS = ["dynamic", "mtd_chunks3", "static_mtd", "static", "static_in_place"]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("arch", list(ARCHS))
def test_fused_generation_equals_generate(fused_families, arch, loop, provider):
    from test_generation import check_loop
    fam = fused_families(arch, provider=provider)
    if loop == "dynamic" and arch == "llama":   # the structure, once per provider
        check_attention_layout(fam, provider)
    if provider == "webgpu" and loop == "mtd_chunks3":
        # without query_seqlens (webgpu must reject it) onnxruntime's GroupQueryAttention takes
        # several tokens after the first call only at batch 1: --help and docs/formats.md say so
        check_loop(fam, loop, batches=[1])
        with pytest.raises(Exception, match="batch_size must be 1 when sequence_length > 1"):
            fam.run(loop, 2, 5)
        return
    check_loop(fam, loop)


@pytest.fixture(scope="module")
def odd_heads(tmp_path_factory):
    """Families whose head_dim onnxruntime's GroupQueryAttention takes only in part."""
    from test_generation import Family
    made = {}

    def get(head_dim, provider, extra=()):
        key = (head_dim, provider, tuple(extra))
        if key not in made:
            made[key] = Family(tmp_path_factory.mktemp(f"heads{head_dim}-{provider}"), "llama",
                               ["--ort-fusions", provider, *extra], head_dim=head_dim,
                               hidden_size=4 * head_dim)
        return made[key]
    return get


@pytest.mark.parametrize("provider", ["cpu", "cuda", "webgpu"])
@pytest.mark.parametrize("head_dim", [24, 8, 6])
def test_heads_onnxruntime_fuses_only_in_part(odd_heads, head_dim, provider):
    """onnxruntime refuses GroupQueryAttention over heads of no multiple of 8, and its rotary
    over heads of no multiple of 16 ("head_size shall be a multiple of 16": the
    export said onnxruntime-genai runs it and every call failed). Such heads rotate before the
    attention (RotaryEmbedding, plain ops on cpu), or keep attention without
    GroupQueryAttention; the loops still equal generate()."""
    from test_generation import check_loop
    if provider == "cuda":  # GroupQueryAttention at fp16 only: the structure (no CUDA here)
        fp16 = odd_heads(head_dim, provider, ("--dtype", "fp16"))
        ops, model = op_types(fp16.export("dynamic") / "decode.onnx")
        gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
        assert len(gqa) == (2 if head_dim % 8 == 0 else 0)
        assert all(attrs(n)["do_rotary"] == 0 for n in gqa)
        assert ops["com.microsoft", "RotaryEmbedding"] == 4
    fam = odd_heads(head_dim, provider)
    ops, model = op_types(fam.export("dynamic") / "decode.onnx")
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    assert len(gqa) == (2 if head_dim % 8 == 0 and provider != "cuda" else 0)
    assert all(attrs(n)["do_rotary"] == 0 for n in gqa)
    rotary_apart = provider != "cpu"
    assert ops["com.microsoft", "RotaryEmbedding"] == (4 if rotary_apart else 0)
    if not gqa:
        assert ops["com.microsoft", "MultiHeadAttention"] == (0 if provider == "cpu" else 2)
    for loop in ("dynamic", "static_in_place"):
        if provider == "webgpu" and loop == "static_in_place" and gqa:
            check_loop(fam, loop, batches=[1])
        else:
            check_loop(fam, loop)


def gqa_inputs(node):
    names = ["query", "key", "value", "past_key", "past_value", "seqlens_k",
             "total_sequence_length", "cos_cache", "sin_cache", "position_ids", "attention_bias",
             "head_sink", "k_scale", "v_scale", "q_norm_weight", "k_norm_weight", "query_seqlens"]
    return {n for n, v in zip(names, node.input) if v}


def check_attention_layout(fam, provider):
    """The guide's table for a 2-layer model: which attention kernel each component gets."""
    ops, model = op_types(fam.export("dynamic") / "decode.onnx")
    prefill_ops, _ = op_types(fam.export("dynamic") / "prefill.onnx")
    gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
    half = "fp16" in fam.extra_flags
    # MultiHeadAttention everywhere, rotary apart: dml, and cuda at fp32, where onnxruntime's
    # CUDA GroupQueryAttention has no kernel
    if provider == "dml" or provider == "cuda" and not half:
        assert not gqa and ops["com.microsoft", "MultiHeadAttention"] == 2
        assert prefill_ops["com.microsoft", "MultiHeadAttention"] == 2
        assert ops["com.microsoft", "RotaryEmbedding"] == 4
        return
    assert len(gqa) == 2
    assert {attrs(n)["do_rotary"] for n in gqa} == {int(provider != "webgpu")}
    # where it rotates inside, it takes q, k and v packed: the joined projection whole, no key
    # or value input (webgpu's are rotated before it, so three inputs)
    packed = provider != "webgpu"
    assert all((n.input[1] == n.input[2] == "") == packed for n in gqa), [n.input for n in gqa]
    producers = {o: n for n in model.graph.node for o in n.output}
    assert all(producers[n.input[0]].op_type == "MatMul" for n in gqa) == packed
    assert ops["com.microsoft", "RotaryEmbedding"] == (4 if provider == "webgpu" else 0)
    # query_seqlens only where onnxruntime honours it (other providers reject the node)
    chunked = provider in ("cpu", "cuda")
    assert all(("query_seqlens" in gqa_inputs(n)) == chunked for n in gqa)
    if provider == "cuda":    # the prefill keeps MultiHeadAttention, after RotaryEmbedding
        assert prefill_ops["com.microsoft", "GroupQueryAttention"] == 0
        assert prefill_ops["com.microsoft", "MultiHeadAttention"] == 2
        assert prefill_ops["com.microsoft", "RotaryEmbedding"] == 4
    else:
        assert prefill_ops["com.microsoft", "GroupQueryAttention"] == 2


def test_cuda_qk_norms_inside_attention(fused_families):
    """cuda at fp16 (onnxruntime's CUDA GroupQueryAttention has fp16 and bf16 kernels only):
    GroupQueryAttention after the first call, MultiHeadAttention in the prefill, and Qwen3's
    per-head q/k RMS norms inside GroupQueryAttention (q_norm_weight, k_norm_weight, their
    epsilons), before its rotary; the graphs pass onnx.checker. No CPU kernel runs the norms
    inside, and this machine has no CUDA: the structure only. The same layout at fp32 runs on
    the CPU provider in test_fused_generation_equals_generate."""
    fam = fused_families("qwen3", ("--dtype", "fp16"), provider="cuda")
    check_attention_layout(fused_families("llama", ("--dtype", "fp16"), provider="cuda"), "cuda")
    for mode in ("dynamic", "mtd", "static_mtd"):
        decode = fam.export(mode) / "decode.onnx"
        check_model_full(decode)
        ops, model = op_types(decode)
        gqa = [n for n in model.graph.node if n.op_type == "GroupQueryAttention"]
        assert len(gqa) == 2, mode
        inits = {t.name: t for t in model.graph.initializer}
        for layer, node in enumerate(gqa):
            assert {"q_norm_weight", "k_norm_weight", "cos_cache", "query_seqlens"} <= \
                gqa_inputs(node), node.input
            a = attrs(node)
            assert a["do_rotary"] == 1 and a["rotary_interleaved"] == 0
            assert a["q_norm_epsilon"] == pytest.approx(1e-6) == a["k_norm_epsilon"]
            q_norm, k_norm = node.input[14], node.input[15]
            assert q_norm == f"model.layers.{layer}.self_attn.q_norm.weight", q_norm
            assert k_norm == f"model.layers.{layer}.self_attn.k_norm.weight", k_norm
            assert list(inits[q_norm].dims) == [16]            # head_dim of the tiny model
            # q and k reach it straight from their projections: no norm or rotation between
            producers = {o: n for n in model.graph.node for o in n.output}
            for i in (0, 1):
                chain, v = [], node.input[i]
                while v in producers and producers[v].op_type in ("Reshape", "Slice"):
                    chain.append(producers[v].op_type)
                    v = producers[v].input[0]
                assert producers[v].op_type == "MatMul", (mode, i, chain, producers[v].op_type)
        # the per-head norms left no node behind; the first layer's input norm remains
        assert ops["ai.onnx", "RMSNormalization"] == 1, mode
        assert ops["com.microsoft", "RotaryEmbedding"] == 0, mode
    prefill_ops, _ = op_types(fam.export("dynamic") / "prefill.onnx")
    assert prefill_ops["com.microsoft", "MultiHeadAttention"] == 2
    assert prefill_ops["ai.onnx", "RMSNormalization"] == 1 + 4   # q/k norms stay outside MHA


# ---------------------------------------------------------------------------------------------
# quantized: MatMulNBits and GatherBlockQuantized


QSCHEMES = {
    "int4-sym-b32": (4, 32, True),       # intermediate 96: an odd number of blocks a row
    "int4-asym-b16": (4, 16, False),
    "int8-sym-b32": (8, 32, True),
    "int8-asym-b16": (8, 16, False),
    "int4-asym-b64": (4, 64, False),     # intermediate 96: a short last block, padded in B
}


def qflags(bits, block, symmetric, *extra):
    return ["--quantize", f"int{bits}", "--block-size", str(block), *extra] + \
        ([] if symmetric else ["--asymmetric"])


@pytest.mark.parametrize("scheme", list(QSCHEMES))
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma"])
def test_matmulnbits_matches_dequantized_reference(ckpts, tmp_path, arch, scheme,
                                                   record_property):
    """accuracy_level 0: MatMulNBits computes in fp32 on the dequantized weights."""
    bits, block, sym = QSCHEMES[scheme]
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *FUSED,
                       *qflags(bits, block, sym, "--accuracy-level", "0"), "--quiet")
    ops, model = op_types(out / "model.onnx")
    # per layer: q/k/v packed into one, o, gate/up packed into one, down; and the lm_head
    assert ops["com.microsoft", "MatMulNBits"] == 2 * 4 + 1
    assert ops["ai.onnx", "DequantizeLinear"] == 0
    inits = {t.name: t for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            a = attrs(node)
            assert (a["bits"], a["block_size"], a["accuracy_level"]) == (bits, block, 0)
            codes, scales = inits[node.input[1]], inits[node.input[2]]
            n, k = a["N"], a["K"]
            k_blocks = -(-k // block)                  # a short last block is padded in B
            assert list(codes.dims) == [n, k_blocks, block * bits // 8]
            assert list(scales.dims) == [n, k_blocks]
            zp = node.input[3] if len(node.input) > 3 else ""
            assert (zp == "") == sym
            if zp:
                assert list(inits[zp].dims) == [n, (k_blocks * bits + 7) // 8]
            bias = node.input[5] if len(node.input) > 5 else ""
            assert bool(bias) == (arch == "qwen2" and "q_k_v_proj" in node.name)
    names = {n.name.rsplit("/", 1)[0].rsplit("/", 1)[-1]
             for n in model.graph.node if n.op_type == "MatMulNBits"}
    assert names == {"q_k_v_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head"}, names
    assert "model.layers.1.self_attn.q_k_v_proj.weight" in inits
    assert "model.layers.1.mlp.gate_up_proj.weight_scales" in inits
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", bits, block, sym)
    worst = check_against_reference(ref, out / "model.onnx", SHAPES)
    record_property("matmulnbits_logits_max_abs_err", worst)


@pytest.mark.parametrize("opset", ["17", "20"])
@pytest.mark.parametrize("provider", PROVIDERS)
def test_fused_quantized_at_older_opsets(ckpts, tmp_path, opset, provider):
    """Fused graphs hold quantized weights in onnxruntime's own ops over uint8 codes, which
    need no opset 21 (refused for standard ONNX's reason); the norms become
    SimplifiedLayerNormalization there. Tied, with the table quantized too."""
    ckpt = ckpts("llama", tie_word_embeddings=True)
    flags = qflags(4, 16, False, "--quantize-embeddings", "--accuracy-level", "0")
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--ort-fusions", provider,
                       "--opset", opset, *flags, "--quiet")
    ops, model = op_types(out / "model.onnx")
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [int(opset)]
    assert ops["ai.onnx", "DequantizeLinear"] == 0 and ops["ai.onnx", "RMSNormalization"] == 0
    assert ops["com.microsoft", "GatherBlockQuantized"] == 1
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 16, False, embeddings=True)
    check_against_reference(ref, out / "model.onnx", SHAPES)


# accuracy_level 4 quantizes activations to int8 per block inside MatMulNBits; measured on
# these tiny models (logits up to ~6): int4 block 16, 0.075 (llama) and 0.095 (qwen3) max abs
# from the dequantized reference; 0.25 leaves 2.6x (a wrong weight or scale is off by whole units)
ACCURACY4_ATOL = 0.25


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_default_accuracy_level_4(ckpts, tmp_path, arch, record_property):
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *FUSED, *qflags(4, 16, True),
                       "--quiet")
    _, model = op_types(out / "model.onnx")
    levels = {attrs(n)["accuracy_level"] for n in model.graph.node if n.op_type == "MatMulNBits"}
    assert levels == {4}
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 16, True)
    worst = check_against_reference(ref, out / "model.onnx", SHAPES, atol=ACCURACY4_ATOL)
    record_property("accuracy4_logits_max_abs_err", worst)


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_tied_embeddings_share_one_quantized_table(ckpts, tmp_path, symmetric):
    """--quantize-embeddings on a tied model: GatherBlockQuantized and the lm_head's
    MatMulNBits read the same codes and scales (one copy in the data file)."""
    ckpt = ckpts("llama", tie_word_embeddings=True)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *FUSED,
                       *qflags(4, 16, symmetric, "--quantize-embeddings", "--accuracy-level",
                               "0"), "--quiet")
    ops, model = op_types(out / "model.onnx")
    assert ops["com.microsoft", "GatherBlockQuantized"] == 1
    gbq = next(n for n in model.graph.node if n.op_type == "GatherBlockQuantized")
    head = next(n for n in model.graph.node if n.op_type == "MatMulNBits" and "lm_head" in n.name)
    inits = {t.name for t in model.graph.initializer}
    # GatherBlockQuantized reads the codes through a Reshape to [vocab, hidden/2]
    reshape = next(n for n in model.graph.node if n.output[0] == gbq.input[0])
    assert reshape.op_type == "Reshape" and reshape.input[0] == head.input[1] in inits
    assert gbq.input[2] == head.input[2] in inits
    if not symmetric:
        assert gbq.input[3] == head.input[3] in inits
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 16, symmetric, embeddings=True)
    check_against_reference(ref, out / "model.onnx", SHAPES)


@pytest.mark.parametrize("scheme", [(4, True), (4, False), (8, False)],
                         ids=["int4-sym", "int4-asym", "int8-asym"])
@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_quantized_embeddings_short_block(ckpts, tmp_path, scheme, provider, tied):
    """Block 128 over hidden 64 (one short block a row) with the embedding quantized: the head's
    MatMulNBits reads its own padded codes, GatherBlockQuantized the unpadded ones."""
    bits, sym = scheme
    ckpt = ckpts("llama", tie_word_embeddings=tied)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--ort-fusions", provider,
                       *qflags(bits, 128, sym, "--quantize-embeddings", "--accuracy-level", "0"),
                       "--quiet")
    ops, model = op_types(out / "model.onnx")
    assert ops["com.microsoft", "GatherBlockQuantized"] == 1
    if tied:
        assert "model.embed_tokens.weight_padded" in {t.name for t in model.graph.initializer}
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", bits, 128, sym, embeddings=True)
    check_against_reference(ref, out / "model.onnx", SHAPES)


@pytest.mark.parametrize("loop", ["dynamic", "static_in_place"])
def test_quantized_fused_generation(fused_families, loop):
    from test_generation import check_loop
    check_loop(fused_families("qwen3", qflags(4, 16, False, "--accuracy-level", "0"),
                              partial(dequantized_checkpoint, bits=4, block=16, symmetric=False),
                              tag="-q4"), loop)


def test_webgpu_static_shapes(ckpts, tmp_path):
    """A static export whose query is one token (a review finding: the mask and k/v reshapes
    lost their dims)."""
    ckpt = ckpts("llama")
    for shape in ("3x1", "1x1", "2x5"):
        out = ferry_export(ckpt, tmp_path / shape, "--ort-fusions", "webgpu", "--example-shape",
                           f"input_ids={shape}", "--quiet")
        b, s = map(int, shape.split("x"))
        check_against_reference(ckpt, out / "model.onnx", [(b, s)])


def test_webgpu_static_cache_prompt_needs_batch_1(tmp_path_factory):
    """Without query_seqlens (webgpu must reject it) onnxruntime's GroupQueryAttention refuses
    several tokens at batch > 1 when the cache it is given is longer than the call, as a static
    cache's buffer always is: its prefill runs at batch 1 (the guide's static loop,
    test_fused_generation_equals_generate) and is refused at batch 2, as --help and docs/formats.md
    say."""
    import numpy as np
    import onnxruntime as ort
    from test_generation import Family
    fam = Family(tmp_path_factory.mktemp("wg-static"), "llama", ["--ort-fusions", "webgpu"])
    length = fam.manifest("static")["generation"]["max_cache_len"]
    session = ort.InferenceSession(str(fam.export("static") / "prefill.onnx"),
                                   providers=["CPUExecutionProvider"])

    def feeds(batch, seq=5):
        out = {"input_ids": np.ones((batch, seq), np.int64),
               "position_ids": np.tile(np.arange(seq), (batch, 1)),
               "attention_mask": np.tril(np.ones((seq, length), bool))[None, None]
               .repeat(batch, 0)}
        for i in session.get_inputs():
            if i.name.startswith("input."):
                shape = [batch if isinstance(d, str) and "batch" in d else
                         length if isinstance(d, str) else d for d in i.shape]
                out[i.name] = np.zeros(shape, np.int64 if "int64" in i.type else np.float32)
        return out
    session.run(None, feeds(1))
    with pytest.raises(Exception, match="batch_size must be 1 when sequence_length > 1"):
        session.run(None, feeds(2))


def test_rotary_tables_stored_once(tmp_path):
    """The cos/sin tables GroupQueryAttention reads are constants the export computes: they live
    in the shared model.onnx.data once, at the same place for prefill and decode, not inside
    each .onnx (each is max_position_embeddings x head_dim/2: 4096 x 8 fp32 = 128 KiB here;
    smaller constants stay inline)."""
    from test_generation import Family
    fam = Family(tmp_path, "llama", ["--ort-fusions", "cpu"], max_position_embeddings=4096)
    out = fam.export("dynamic")
    places = {}
    for comp in ("prefill", "decode"):
        model = onnx.load(str(out / f"{comp}.onnx"), load_external_data=False)
        gqa = next(n for n in model.graph.node if n.op_type == "GroupQueryAttention")
        inits = {t.name: t for t in model.graph.initializer}
        for name in gqa.input[7:9]:
            t = inits[name]
            assert t.data_location == onnx.TensorProto.EXTERNAL and not t.raw_data, name
            ext = {e.key: e.value for e in t.external_data}
            assert ext["location"] == "model.onnx.data"
            places.setdefault(comp, []).append((ext["offset"], ext["length"]))
    assert places["prefill"] == places["decode"], places
    assert (out / "decode.onnx").stat().st_size < 64 << 10


def test_static_cache_longer_than_trained_positions(tmp_path_factory):
    """A static cache longer than max_position_embeddings (80 > 48): the fused rotary tables
    cover the whole buffer (GroupQueryAttention checks them against it on every call)."""
    from test_generation import Family, check_loop
    for provider in PROVIDERS:
        check_loop(Family(tmp_path_factory.mktemp(f"mpe-{provider}"), "llama",
                          ["--ort-fusions", provider], max_position_embeddings=48), "static_mtd")


def test_generate_refuses_to_run_past_the_rotary_tables(tmp_path):
    """generate() on a fused export says up front that the prompt and max_new_tokens need more
    positions than its rotary tables hold (onnxruntime's raw cos_cache error
    mid-generation); up to the last row it runs, and equals transformers."""
    import numpy as np

    from conftest import make_checkpoint, reference_model
    from ferry import ExportedModel, FerryError

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", seed=3, max_position_embeddings=16)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--for-generation", *FUSED, "--quiet")
    model = ExportedModel.from_pretrained(out)
    prompt = np.array([[5, 9, 17, 33, 2]])
    got = model.generate(prompt, max_new_tokens=12, eos_token_id=None)
    import torch
    want = reference_model(ckpt).generate(torch.from_numpy(prompt), max_new_tokens=12,
                                          do_sample=False, eos_token_id=None, pad_token_id=0)
    assert got.tolist() == want.tolist()
    with pytest.raises(FerryError, match="need 17 positions, past the 16 of this fused export's "
                                         "rotary tables"):
        model.generate(prompt, max_new_tokens=13, eos_token_id=None)
    # heads of 8 rotate with plain ops on cpu: no table to run past (refused)
    ckpt = make_checkpoint(tmp_path / "ckpt8", "llama", seed=3, max_position_embeddings=16,
                           head_dim=8, hidden_size=32)
    out = ferry_export(ckpt, tmp_path / "out8", "--dynamic", "--for-generation", *FUSED,
                       "--quiet")
    got = ExportedModel.from_pretrained(out).generate(prompt, max_new_tokens=14,
                                                      eos_token_id=None)
    want = reference_model(ckpt).generate(torch.from_numpy(prompt), max_new_tokens=14,
                                          do_sample=False, eos_token_id=None, pad_token_id=0)
    assert got.tolist() == want.tolist()


# ---------------------------------------------------------------------------------------------
# errors


FUSION_ERRORS = {
    "unknown-provider": (["--ort-fusions", "tpu"], ["--ort-fusions tpu"]),
    "accuracy-without-quantize": (["--ort-fusions", "cpu", "--accuracy-level", "4"],
                                  ["--accuracy-level", "--quantize"]),
    "bf16": (["--ort-fusions", "cpu", "--dtype", "bf16"], ["bf16", "fp32 or fp16"]),
    "bf16-dml": (["--ort-fusions", "dml", "--dtype", "bf16"], ["ort_fusions 'dml'", "bf16"]),
    "table-too-long": (["--ort-fusions", "cpu", "--dynamic", "--for-generation", "--static-cache",
                        "--max-cache-len", "2000000"], ["--max-cache-len 2000000"]),
}


@pytest.mark.parametrize("build", ferry_builds(), ids=lambda b: b[0])
@pytest.mark.parametrize("case", list(FUSION_ERRORS))
def test_fusion_errors(ckpts, tmp_path, case, build):
    args, needles = FUSION_ERRORS[case]
    out = tmp_path / "out"
    usage = case in ("accuracy-without-quantize", "unknown-provider")   # command-line errors
    check_export_error(ckpts("llama"), out, args, needles, 2 if usage else 1, build[1])
