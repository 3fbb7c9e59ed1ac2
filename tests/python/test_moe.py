"""Mixtures of experts beyond the tests every family of conftest's ARCHS gets (Qwen3-MoE with a
dense layer beside a sparse one, Qwen2-MoE's shared expert, Mixtral's fp32 routing weights,
on every backend and generation layout): top-k 1, 2 and 4 over 8 experts with sparse layers
picked by decoder_sparse_step, onnxruntime's fused MoE (its CPU kernel run, its CUDA form
checked by structure), OpenVINO running only the chosen experts, ties between router logits,
int4/int8 experts in each runtime's form against a dequantized reference, and what is
refused."""
import json

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper

from conftest import (FP32_ATOL, check_against_reference, check_export_error, ferry_export,
                      make_inputs, reference_model, run_ferry, sparse_layers)

SHAPES = [(1, 1), (3, 7), (3, 33)]


@pytest.fixture(scope="module")
def routed(ckpts):
    """routed(top_k): Qwen3-MoE of 8 experts choosing top_k, 4 layers of which 1 and 3 are
    sparse (decoder_sparse_step 2) but layer 3 is kept dense (mlp_only_layers)."""
    return lambda top_k: ckpts("qwen3_moe", num_experts=8, num_experts_per_tok=top_k,
                               num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3],
                               norm_topk_prob=top_k != 2)


@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("fusions", [[], ["--ort-fusions", "cpu"]], ids=["standard", "cpu"])
def test_top_k_and_sparse_layers(routed, tmp_path, top_k, fusions, record_property):
    """fp32 logits within 1e-4 of eager, batch 1 and 3 left-padded, sequences 1/7/33. The
    standard form runs each expert over the tokens that chose it (a NonZero per expert, no
    gather over every expert's outputs)."""
    ckpt = routed(top_k)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", *fusions, "--quiet")
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MoE") == (1 if fusions else 0), ops
    assert ops.count("NonZero") == (0 if fusions else 8) and "GatherElements" not in ops
    worst = check_against_reference(ckpt, out / "model.onnx", SHAPES)
    record_property("max_abs_diff", worst)


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe", "mixtral"])
def test_cuda_moe_form(ckpts, tmp_path, arch):
    """--ort-fusions cuda writes one com.microsoft.MoE per sparse layer (no CUDA here: checked
    by structure): the router's logits flattened to [tokens, E], fc1 each expert's gate and up
    rows interleaved (the checkpoint's own tensors, row 2i gate i, row 2i+1 up i), fc2 the
    down stack, k and the renormalisation as the config says."""
    ckpt = ckpts(arch)
    cfg = json.loads((ckpt / "config.json").read_text())
    out = ferry_export(ckpt, tmp_path / "cuda", "--dynamic", "--ort-fusions", "cuda", "--quiet")
    model = onnx.load(str(out / "model.onnx"))
    moes = [n for n in model.graph.node if n.op_type == "MoE"]
    assert moes and all(n.domain == "com.microsoft" for n in moes)
    attrs = _attrs(moes[0])
    assert attrs["k"] == cfg["num_experts_per_tok"]
    assert attrs["activation_type"] == b"swiglu" and attrs["swiglu_fusion"] == 1
    assert attrs["normalize_routing_weights"] == (1 if arch == "mixtral" else
                                                  int(cfg["norm_topk_prob"]))
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    fc1, fc2 = weights[moes[0].input[2]], weights[moes[0].input[4]]
    state = reference_model(ckpt).state_dict()
    gate_up = state["model.layers.0.mlp.experts.gate_up_proj"].numpy()
    ff = gate_up.shape[1] // 2
    assert np.array_equal(fc1[:, 0::2], gate_up[:, :ff])
    assert np.array_equal(fc1[:, 1::2], gate_up[:, ff:])
    assert np.array_equal(fc2, state["model.layers.0.mlp.experts.down_proj"].numpy())


def test_fp16_cpu_keeps_the_generic_form(ckpts, tmp_path):
    """onnxruntime's CPU MoE kernel is fp32 only (an fp16 graph's would run it behind casts):
    an fp16 export for cpu is unfused, one for cuda fused."""
    ckpt = ckpts("qwen3_moe")
    for provider, want in (("cpu", 0), ("cuda", 1)):
        out = ferry_export(ckpt, tmp_path / provider, "--dtype", "fp16", "--ort-fusions",
                           provider, "--quiet")
        model = onnx.load(str(out / "model.onnx"), load_external_data=False)
        assert sum(n.op_type == "MoE" for n in model.graph.node) == want


def _tie_checkpoint(ckpts):
    """Qwen3-MoE whose layer-0 router is all zeros: every expert equally likely for every
    token, so top-2 picks between exact ties."""
    ckpt = ckpts("qwen3_moe", norm_topk_prob=True)
    from safetensors.torch import load_file, save_file

    path = ckpt.parent / "ties"
    if not path.exists():
        import shutil

        shutil.copytree(ckpt, path)
        tensors = load_file(path / "model.safetensors")
        tensors["model.layers.0.mlp.gate.weight"].zero_()
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    return path


def test_router_ties(ckpts, tmp_path, monkeypatch):
    """Between experts of exactly equal router logits, ONNX's TopK (and OpenVINO's) takes the
    lower-numbered expert first; torch.topk on CPU picks an order of its own (of 6 equal
    probabilities it returns experts 3 and 5). ferry's ONNX export therefore equals transformers'
    model with a topk that breaks ties by index, and not its eager model."""
    ckpt = _tie_checkpoint(ckpts)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    ties = torch.topk(torch.full((1, 6), 1 / 6), 2).indices.tolist()[0]
    assert ties != [0, 1], "torch now breaks ties by index: ferry can match it exactly"

    real_topk = torch.topk

    def by_index(x, k, dim=-1, largest=True, sorted=True):
        values, order = torch.sort(x, dim=dim, descending=largest, stable=True)
        return torch.return_types.topk((values.narrow(dim, 0, k), order.narrow(dim, 0, k)))

    vocab = json.loads((ckpt / "config.json").read_text())["vocab_size"]
    ids, mask, _ = make_inputs(vocab, 2, 5)
    import onnxruntime as ort

    got = ort.InferenceSession(str(out / "model.onnx")).run(
        None, {"input_ids": ids, "attention_mask": mask})[0]
    model = reference_model(ckpt)
    with torch.no_grad():
        eager = model(input_ids=torch.from_numpy(ids),
                      attention_mask=torch.from_numpy(mask)).logits.numpy()
        monkeypatch.setattr(torch, "topk", by_index)
        stable = model(input_ids=torch.from_numpy(ids),
                       attention_mask=torch.from_numpy(mask)).logits.numpy()
        monkeypatch.setattr(torch, "topk", real_topk)
    real = mask == 1
    assert np.abs(got - stable)[real].max() <= FP32_ATOL
    assert np.abs(got - eager)[real].max() > 1e-2


# experts whose sizes are whole blocks of 16 and 32 (onnxruntime's QMoE and OpenVINO's
# compressed weights need them; conftest's 40 and 72 are not)
WHOLE_BLOCKS = {"qwen3_moe": dict(moe_intermediate_size=64),
                "qwen2_moe": dict(moe_intermediate_size=64, shared_expert_intermediate_size=64),
                "mixtral": dict(intermediate_size=64)}
# (arch, target, bits, block, symmetric, the experts' form)
QUANTIZED = [
    ("qwen3_moe", "standard", 4, 16, True, "DequantizeLinear"),  # ff 40: a short last block
    ("qwen2_moe", "standard", 8, 32, False, "DequantizeLinear"),
    ("qwen3_moe", "cpu", 4, 16, True, "QMoE"),
    ("qwen2_moe", "cpu", 4, 32, False, "QMoE"),   # unrenormalised: router_weights
    ("mixtral", "cpu", 4, 16, False, "QMoE"),
    ("mixtral", "cpu", 8, 32, True, "DequantizeLinear"),  # its int8 kernel quantizes x
    # cuda's QMoE is fp16's: an fp32 graph dequantizes whole stacks (run here on the CPU)
    ("qwen2_moe", "cuda", 4, 16, False, "stacks"),
    ("qwen3_moe", "openvino", 4, 16, True, "u4"),
    ("qwen2_moe", "openvino", 8, 32, False, "u8"),
    ("mixtral", "openvino", 4, 32, False, "u4"),
]


def _quant_flags(bits, block, symmetric):
    return ["--quantize", f"int{bits}", "--block-size", str(block)] + \
        ([] if symmetric else ["--asymmetric"])


@pytest.mark.parametrize("arch,target,bits,block,symmetric,form", QUANTIZED,
                         ids=[f"{a}-{t}-int{b}-b{k}-{'sym' if s else 'asym'}"
                              for a, t, b, k, s, _ in QUANTIZED])
def test_quantized_experts_match_dequantized_reference(ckpts, tmp_path, arch, target, bits,
                                                       block, symmetric, form, record_property):
    """int4/int8 experts, each expert's rows blocked as a linear's are, against transformers
    running onnxruntime's own quantizer's dequantized weights (quant_ref: every expert's
    tensors, not the routers, which stay float) in the form each runtime has: DequantizeLinear
    of each expert's tensors before it runs over its own tokens (onnx-standard; cpu where no
    kernel fits), of [E, out, in] stacks before the generic lowering (the other providers),
    QMoE (onnxruntime's cpu kernel at int4, accuracy level 0: fp32 activations), OpenVINO's
    GatherMatmul reading the compressed stacks."""
    from quant_ref import dequantized_checkpoint

    ckpt = ckpts(arch, **({} if form == "DequantizeLinear" and target == "standard"
                          else WHOLE_BLOCKS[arch]))
    flags = _quant_flags(bits, block, symmetric)
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", bits, block, symmetric)
    if target == "openvino":
        from test_openvino import check_shapes, compile_ov, runtime_layers

        out = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic", *flags,
                           "--quiet")
        _, compiled = compile_ov(out)
        gm = [op for op in compiled.get_runtime_model().get_ordered_ops()
              if op.get_rt_info()["layerType"].astype(str) == "GatherMatmul"]
        kinds = [k for k, _, _ in runtime_layers(compiled)]
        assert len(gm) == kinds.count("GatherMatmul") == 3 * len(sparse_layers(ckpt))
        # each reads its stack compressed (with its scales and zero point)
        assert {op.input(1).get_element_type().get_type_name() for op in gm} == {form}
        worst = check_shapes(ref, compiled, SHAPES)
    else:
        fusions = [] if target == "standard" else ["--ort-fusions", target,
                                                   "--accuracy-level", "0"]
        out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", *flags, *fusions, "--quiet")
        model = onnx.load(str(out / "model.onnx"), load_external_data=False)
        ops = [n.op_type for n in model.graph.node]
        expert_dq = [n for n in model.graph.node
                     if n.op_type == "DequantizeLinear" and ".experts." in n.input[0]]
        cfg = json.loads((ckpt / "config.json").read_text())
        experts = cfg.get("num_experts", cfg.get("num_local_experts"))
        sparse = len(sparse_layers(ckpt))
        if form == "QMoE":
            assert ops.count("QMoE") == sparse and not expert_dq
        elif form == "stacks":
            assert "QMoE" not in ops and "MoE" not in ops and "NonZero" not in ops
            assert len(expert_dq) == 2 * sparse
            assert all(_attrs(n)["axis"] == 2 for n in expert_dq)
        else:
            assert "QMoE" not in ops and "MoE" not in ops
            assert ops.count("NonZero") == experts * sparse
            assert len(expert_dq) == 3 * experts * sparse
            assert all(_attrs(n)["axis"] == 1 for n in expert_dq)
        worst = check_against_reference(ref, out / "model.onnx", SHAPES)
    record_property("max_abs_diff", worst)


@pytest.mark.parametrize("arch,symmetric", [("qwen3_moe", False), ("qwen2_moe", True)])
def test_cuda_qmoe_form(ckpts, tmp_path, arch, symmetric):
    """--ort-fusions cuda at fp16 writes QMoE (no CUDA here: checked by structure): fc1's
    codes and scales, dequantized by numpy, are each expert's gate and up rows interleaved as
    onnxruntime's quantizer dequantizes the checkpoint's tensors; fc2 the down stack; without
    norm_topk_prob the router's softmax as router_weights."""
    from quant_ref import ort_dequantized

    ckpt = ckpts(arch, **WHOLE_BLOCKS[arch])
    cfg = json.loads((ckpt / "config.json").read_text())
    out = ferry_export(ckpt, tmp_path / "cuda", "--dtype", "fp16", "--ort-fusions", "cuda",
                       *_quant_flags(4, 32, symmetric), "--quiet")
    model = onnx.load(str(out / "model.onnx"))
    (q, *_) = [n for n in model.graph.node if n.op_type == "QMoE"]
    attrs = _attrs(q)
    assert q.domain == "com.microsoft"
    assert (attrs["k"], attrs["expert_weight_bits"], attrs["block_size"],
            attrs["weights_prepacked"], attrs["swiglu_fusion"]) == \
        (cfg["num_experts_per_tok"], 4, 32, 0, 1)
    assert attrs["normalize_routing_weights"] == int(cfg["norm_topk_prob"])
    assert (len(q.input) == 15 and bool(q.input[14])) == (not cfg["norm_topk_prob"])
    weights = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def dequantized(codes_at, scales_at, zeros_at):
        """(values, each value's step) of QMoE input codes_at."""
        codes = weights[q.input[codes_at]]
        e, n, packed = codes.shape
        unpacked = np.stack([codes & 15, codes >> 4], -1).reshape(e, n, packed * 2)
        scales = weights[q.input[scales_at]].astype(np.float32)
        if symmetric:
            zeros = np.full(scales.shape, 8.0, np.float32)
            assert len(q.input) <= zeros_at or not q.input[zeros_at]
        else:
            z = weights[q.input[zeros_at]]
            zeros = np.stack([z & 15, z >> 4], -1).reshape(e, n, -1)[..., :scales.shape[2]]
        values = (unpacked.reshape(e, n, -1, 32).astype(np.float32) -
                  zeros[..., None].astype(np.float32)) * scales[..., None]
        steps = np.broadcast_to(np.abs(scales[..., None]), values.shape)
        return values.reshape(e, n, -1), steps.reshape(e, n, -1)

    def close(got, step, want):
        # scales stored in fp16 move a code by one step where the fp32 one is near a half
        diff = np.abs(got - want)
        assert (diff <= step * 1.01 + 1e-6).all()
        assert (diff <= 1e-3).mean() >= 0.97

    state = reference_model(ckpt).state_dict()
    gate_up = state["model.layers.0.mlp.experts.gate_up_proj"].numpy()
    down = state["model.layers.0.mlp.experts.down_proj"].numpy()
    ff = gate_up.shape[1] // 2
    want1 = np.stack([ort_dequantized(w, 4, 32, symmetric) for w in gate_up])
    want2 = np.stack([ort_dequantized(w, 4, 32, symmetric) for w in down])
    (fc1, step1), (fc2, step2) = dequantized(2, 3, 11), dequantized(5, 6, 12)
    close(fc1[:, 0::2], step1[:, 0::2], want1[:, :ff])
    close(fc1[:, 1::2], step1[:, 1::2], want1[:, ff:])
    close(fc2, step2, want2)


def test_quantized_experts_refused_where_not_written(ckpts, tmp_path):
    """ExecuTorch has no form for quantized experts in ferry yet: one line naming the stack,
    nothing written. OpenVINO's compressed stacks hold whole blocks of 16 or more: a stack of
    40-wide rows stays float, with a warning naming it, and one of whole blocks that the
    chosen block does not divide is refused naming a block size. The router is never
    quantized."""
    ckpt = ckpts("mixtral", **WHOLE_BLOCKS["mixtral"])
    check_export_error(ckpt, tmp_path / "pte", ["--format", "executorch", "--quantize", "int4"],
                       ["4-bit quantized experts", "model.layers.0.mlp.experts.gate_up_proj",
                        "moe"], 1)
    rc, _, err = run_ferry("export", ckpts("qwen3_moe"), tmp_path / "ov", "--format",
                           "openvino", "--quantize", "int4", "--block-size", "16")
    assert rc == 0 and "float: its rows of 40 inputs" in err and "experts.0.down_proj" in err, \
        (rc, err)
    check_export_error(ckpts("qwen3_moe", **WHOLE_BLOCKS["qwen3_moe"]), tmp_path / "ov-64",
                       ["--format", "openvino", "--quantize", "int4", "--block-size", "256"],
                       ["blocks of 256", "choose a block size"], 1)


@pytest.mark.parametrize("key,value,needle", [
    ("num_experts_per_tok", 9, "more than the 5 experts"),
    ("num_experts", 4, "name the experts' count twice and disagree"),
])
def test_bad_moe_config(ckpts, tmp_path, key, value, needle):
    """A config whose routing cannot be what its tensors hold: one line naming the key."""
    src = ckpts("mixtral")
    import shutil

    bad = tmp_path / "ckpt"
    shutil.copytree(src, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg[key] = value
    (bad / "config.json").write_text(json.dumps(cfg))
    check_export_error(bad, tmp_path / "out", [], [needle, "config.json"], 1)


def test_exported_model_runs_a_mixture(ckpts, tmp_path):
    """ExportedModel runs a mixture as a causal LM: position_ids (a graph input here) derived
    from the mask as generate() derives them, the logits in transformers'
    MoeCausalLMOutputWithPast."""
    from transformers.modeling_outputs import MoeCausalLMOutputWithPast

    from ferry import ExportedModel

    ckpt = ckpts("qwen2_moe")
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--inputs",
                       "input_ids,attention_mask,position_ids", "--quiet")
    ids, mask, pos = make_inputs(160, 3, 7)
    got = ExportedModel.from_pretrained(out)(input_ids=ids, attention_mask=mask)
    assert isinstance(got, MoeCausalLMOutputWithPast)
    with torch.no_grad():
        want = reference_model(ckpt)(input_ids=torch.from_numpy(ids),
                                     attention_mask=torch.from_numpy(mask),
                                     position_ids=torch.from_numpy(pos)).logits.numpy()
    real = mask == 1
    assert np.abs(np.asarray(got.logits)[real] - want[real]).max() <= FP32_ATOL


@pytest.mark.parametrize("arch", ["qwen3_moe", "mixtral"])
def test_checkpoint_saved_as_held_in_memory(ckpts, tmp_path, arch):
    """A checkpoint of transformers 5's in-memory names (experts.gate_up_proj [E, 2*ff, h] and
    down_proj stacks, Mixtral's router as mlp.gate), which transformers loads as the per-expert
    one: the same logits; quantizing its stacks is refused in one line."""
    from safetensors.torch import save_file

    src = ckpts(arch)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    for f in ("config.json", "generation_config.json"):
        (ckpt / f).write_bytes((src / f).read_bytes())
    state = {k: v.contiguous() for k, v in reference_model(src).state_dict().items()}
    save_file(state, ckpt / "model.safetensors", metadata={"format": "pt"})
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--quiet")
    check_against_reference(src, out / "model.onnx", [(3, 7)])
    check_export_error(ckpt, tmp_path / "q", ["--quantize", "int4"],
                       ["stored as one [E, out, in] tensor", "experts.gate_up_proj"], 1)

