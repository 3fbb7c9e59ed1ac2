"""Per-op conformance: every semantic op exported alone through the ONNX backend and compared
with an independent reference.

tests/c/op_graph.c (the test-only binary ferry-op-graph) builds a graph of one op over the
weights written here, lowers it for the onnx-standard target and writes it as an export does.
onnxruntime runs it; the reference is transformers' or torch's own function for that op
(LlamaRMSNorm, GemmaRMSNorm, the rotary embeddings with transformers' rope init functions and
apply_rotary_pos_emb, Phi-3's rotary embedding for longrope, Qwen2-VL's for M-RoPE and its vision
tower's 2-D rope, transformers' attention masks with torch's scaled_dot_product_attention (and
sdpa with no mask at all), Gemma 2's eager attention for softcapping, Qwen3-MoE's and Mixtral's
sparse MoE blocks run in the case's dtype, ...), never ferry compared with itself.

Bounds, on max |onnx - reference| / max(1, |reference|) (absolute for values up to 1, relative
above): fp32 1e-5 (measured at most 2.7e-6, rope_dynamic; the others under 6e-7). fp16 2e-3,
two fp16 ulps at 1 (measured at most 1.5e-3, moe_mixtral_fp16 on onnxruntime): the graph rounds
inputs, weights and intermediates to fp16, while the reference computes in fp32 from the same
fp16-rounded inputs and weights (the MoE blocks run in fp16 themselves, as their routing weights'
cast and sums in the hidden dtype are part of what they compute). conftest.py prints the worst
measured values after a run.

The case table mirrors op_graph.c's (names, options, shapes); test_cases_match_op_graph holds
the two together.
"""

import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file

from conftest import FERRY_BUILD, FERRY_BUILD_SAN, SANITIZER_ENV, check_model_full, ort_session

OP_GRAPH = FERRY_BUILD / "ferry-op-graph"
OP_GRAPH_SAN = Path(FERRY_BUILD_SAN).resolve() / "ferry-op-graph" if FERRY_BUILD_SAN else None

# op_graph.c's shapes: batch, sequence, past; cache rows; activation width; rope and attention
# head geometry.
B, S, P, CACHE_LEN = 2, 5, 3, 8
HIDDEN, ROPE_HEADS, ROPE_HEAD_DIM, ATTN_HEAD_DIM = 24, 3, 16, 8
LINEAR_OUT, VOCAB, PICKS = 40, 50, 4
MOE_FF = 16  # each expert's intermediate size (hidden: HIDDEN)
# (batch, sequence, past) a dynamic graph is run at besides the example: one token, a long one.
DYNAMIC_SHAPES = [(B, S, P), (1, 1, 6), (3, 7, 1)]

TOL = {"fp32": 1e-5, "fp16": 2e-3}
# ExecuTorch's portable kernels on fp16, measured: 2.1e-3 (grouped conv) and 2.2e-3 (GQA
# attention) where onnxruntime, OpenVINO and torch stay under 2e-3
TARGET_TOL = {("executorch", "fp16"): 3e-3}


def _rope(rope_type="default", rotary=ROPE_HEAD_DIM, max_pos=256, **params):
    return dict(rope_type=rope_type, rotary=rotary, max_pos=max_pos,
                params=dict(rope_theta=10000.0, **params))


# op_graph.c's longrope factor sets (rotary_dim 16 and 8), trained length 64 of 256
LONGROPE_SHORT = [1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0]
LONGROPE_LONG = [1.0, 1.5, 2.5, 4.0, 6.0, 9.0, 12.0, 16.0]


def _longrope(rotary=ROPE_HEAD_DIM, short=LONGROPE_SHORT, long=LONGROPE_LONG):
    params = dict(short_factor=short, long_factor=long, original_max_position_embeddings=64)
    if rotary < ROPE_HEAD_DIM:
        params["partial_rotary_factor"] = rotary / ROPE_HEAD_DIM
    return _rope("longrope", rotary=rotary, **params)


def _attn(heads, kv_heads, mask, cache=None, window=0, scale=None, softcap=0.0):
    return dict(heads=heads, kv_heads=kv_heads, mask=mask, cache=cache, window=window,
                scale=scale if scale is not None else ATTN_HEAD_DIM ** -0.5, softcap=softcap)


def _conv(x, w, stride, begin, end, dilation, groups=1, bias=False, stored=False):
    """x's extents after the batch (channels, then spatial: a constant, "s" the sequence or
    "2s" twice it), the weight's, and the options per spatial axis; `stored`: the weight and
    bias are read from the checkpoint by N-D weight recipes (a model's), not graph inputs."""
    return dict(x=x, w=w, stride=stride, begin=begin, end=end, dilation=dilation, groups=groups,
                bias=bias, stored=stored)


def _moe(family, experts, top_k, norm=True, stacked=True, idle=False):
    """A mixture-of-experts block as transformers builds it: `family` "qwen3" (Qwen3MoeSparse-
    MoeBlock: norm_topk_prob as given, routing weights cast to the hidden dtype) or "mixtral"
    (MixtralSparseMoeBlock: always renormalised, fp32 routing weights); the experts' weights per
    expert in the checkpoint (`stacked` by weight recipes: Qwen's gate_proj/up_proj/down_proj,
    Mixtral's w1/w3/w2) or transformers' fused experts.gate_up_proj and experts.down_proj.
    `idle`: expert 0 overflows fp16 (inf and NaN in its outputs), and no token routes to it."""
    assert family == "qwen3" or norm
    return dict(family=family, experts=experts, top_k=top_k, norm=norm, stacked=stacked,
                idle=idle)


_CONV1D = _conv((4, "s"), (6, 4, 3), (1,), (1,), (1,), (1,), bias=True, stored=True)
_CONV2D_GROUPED = _conv((4, 7, 9), (6, 2, 3, 2), (2, 1), (1, 0), (0, 2), (1, 2), groups=2)


CASES = {
    "rms_norm": dict(kind="rms_norm", eps=1e-6),
    "rms_norm_offset": dict(kind="rms_norm", eps=1e-6, offset=1.0),
    "rms_norm_fp16": dict(kind="rms_norm", eps=1e-6, dtype="fp16"),
    "rms_norm_f32_weight_fp16": dict(kind="rms_norm", eps=1e-6, dtype="fp16", f32_weight=True),
    "skip_rms_norm": dict(kind="skip_rms_norm", eps=1e-5),
    "skip_rms_norm_fp16": dict(kind="skip_rms_norm", eps=1e-5, dtype="fp16"),
    "layer_norm": dict(kind="layer_norm", eps=1e-5, bias=True),
    "layer_norm_nobias": dict(kind="layer_norm", eps=1e-5, bias=False),
    "layer_norm_fp16": dict(kind="layer_norm", eps=1e-5, bias=True, dtype="fp16"),
    "skip_layer_norm": dict(kind="skip_layer_norm", eps=1e-12, bias=True),
    "skip_layer_norm_nobias": dict(kind="skip_layer_norm", eps=1e-5, bias=False),
    "skip_layer_norm_fp16": dict(kind="skip_layer_norm", eps=1e-5, bias=True, dtype="fp16"),
    "linear": dict(kind="linear"),
    "linear_fp16": dict(kind="linear", dtype="fp16"),
    # GPT-2's Conv1D stores [in, out]; a patch embedding's [out, c, kh, kw] read as [out, in]
    "linear_in_out": dict(kind="linear", in_out=True),
    "linear_in_out_fp16": dict(kind="linear", in_out=True, dtype="fp16"),
    "linear_flatten": dict(kind="linear", flatten=True),
    "linear_tied": dict(kind="tied"),
    "embedding": dict(kind="embedding"),
    "silu": dict(kind="unary", fn=F.silu),
    "silu_fp16": dict(kind="unary", fn=F.silu, dtype="fp16"),
    "gelu": dict(kind="unary", fn=F.gelu),
    "gelu_fp16": dict(kind="unary", fn=F.gelu, dtype="fp16"),
    "gelu_tanh": dict(kind="unary", fn=lambda x: F.gelu(x, approximate="tanh")),
    "gelu_tanh_fp16": dict(kind="unary", fn=lambda x: F.gelu(x, approximate="tanh"),
                           dtype="fp16"),
    "softcap": dict(kind="unary", fn=lambda x: torch.tanh(x / 5.0) * 5.0, scale=8.0),
    "abs": dict(kind="unary", fn=torch.abs),
    "abs_fp16": dict(kind="unary", fn=torch.abs, dtype="fp16"),
    "log": dict(kind="unary", fn=torch.log, positive=True),
    "floor": dict(kind="unary", fn=torch.floor),
    "reduce_sum": dict(kind="reduce", fn=lambda x: x.sum(-1, keepdim=True)),
    "reduce_sum_axis1": dict(kind="reduce", fn=lambda x: x.sum(1)),
    "reduce_mean": dict(kind="reduce", fn=lambda x: x.mean(-1, keepdim=True)),
    "reduce_max_axis1": dict(kind="reduce", fn=lambda x: x.amax(1)),
    "gather_elements": dict(kind="gather_elements"),
    "gather_elements_fp16": dict(kind="gather_elements", dtype="fp16"),
    "scatter_add": dict(kind="scatter_add"),
    "scatter_add_fp16": dict(kind="scatter_add", dtype="fp16"),
    "topk": dict(kind="topk"),
    "topk_fp16": dict(kind="topk", dtype="fp16"),
    "softcap_fp16": dict(kind="unary", fn=lambda x: torch.tanh(x / 5.0) * 5.0, scale=8.0,
                         dtype="fp16"),
    "clip": dict(kind="clip", lo=-1.5, hi=2.0),
    "clip_min": dict(kind="clip", lo=-1.0, hi=None),
    "clip_max": dict(kind="clip", lo=None, hi=0.5),
    "clip_fp16": dict(kind="clip", lo=-2.0, hi=1.5, dtype="fp16"),
    "clip_max_fp16": dict(kind="clip", lo=None, hi=0.75, dtype="fp16"),
    "pad": dict(kind="pad", begin=(0, 1, 2), end=(0, 2, 3), value=0.5),
    "pad_leading": dict(kind="pad", begin=(1, 0, 0), end=(2, 0, 0), value=0.0),
    "pad_fp16": dict(kind="pad", begin=(0, 1, 2), end=(0, 2, 3), value=-1.25, dtype="fp16"),
    "conv1d": dict(kind="conv", conv=_CONV1D),
    "conv1d_fp16": dict(kind="conv", conv=_CONV1D, dtype="fp16"),
    "conv1d_strided": dict(kind="conv", conv=_conv((4, "2s"), (6, 4, 3), (2,), (1,), (1,), (1,),
                                                   bias=True)),
    "conv2d_patch": dict(kind="conv", conv=_conv((3, 8, 12), (8, 3, 4, 4), (4, 4), (0, 0),
                                                 (0, 0), (1, 1), bias=True, stored=True)),
    "conv2d_grouped": dict(kind="conv", conv=_CONV2D_GROUPED),
    "conv2d_grouped_fp16": dict(kind="conv", conv=_CONV2D_GROUPED, dtype="fp16"),
    "conv3d": dict(kind="conv", conv=_conv((2, 4, 5, 6), (4, 2, 2, 3, 2), (1, 2, 1), (1, 0, 1),
                                           (1, 0, 0), (1, 1, 1), bias=True, stored=True)),
    "rope": dict(kind="rope", rope=_rope()),
    "rope_fp16": dict(kind="rope", rope=_rope(), dtype="fp16"),
    "rope_partial": dict(kind="rope", rope=_rope(rotary=8, partial_rotary_factor=0.5)),
    "rope_linear": dict(kind="rope", rope=_rope("linear", factor=2.0)),
    "rope_dynamic": dict(kind="rope", rope=_rope("dynamic", max_pos=32, factor=2.0)),
    "rope_llama3": dict(kind="rope", rope=_rope("llama3", factor=8.0, low_freq_factor=1.0,
                                                high_freq_factor=4.0,
                                                original_max_position_embeddings=64)),
    "rope_yarn": dict(kind="rope", rope=_rope("yarn", factor=4.0,
                                              original_max_position_embeddings=64)),
    "two_ropes": dict(kind="rope", rope=_rope(), theta_2=1e6),
    # longrope: max(position_ids) + 1 = 64 (the trained length) keeps the short factors, 65
    # takes the long ones for every position of the call; `top` is the largest position fed
    "rope_longrope_short": dict(kind="rope", rope=_longrope(), positions=(64, 63)),
    "rope_longrope_long": dict(kind="rope", rope=_longrope(), positions=(64, 64)),
    "rope_longrope_long_fp16": dict(kind="rope", rope=_longrope(), positions=(64, 64),
                                    dtype="fp16"),
    "rope_longrope_partial": dict(kind="rope", rope=_longrope(8, [1.0, 1.2, 1.5, 2.0],
                                                              [1.0, 3.0, 7.0, 11.0]),
                                  positions=(100, 99)),
    "two_longropes": dict(kind="rope", rope=_longrope(), long_2=True, positions=(100, 99)),
    "rope_mrope": dict(kind="rope", rope=_rope("mrope", mrope_section=[2, 3, 3])),
    "rope_mrope_fp16": dict(kind="rope", rope=_rope("mrope", mrope_section=[2, 3, 3]),
                            dtype="fp16"),
    "rope_vision": dict(kind="rope", rope=_rope("vision")),
    "rope_vision_fp16": dict(kind="rope", rope=_rope("vision"), dtype="fp16"),
    "attn_causal": dict(kind="attention", attn=_attn(4, 4, "causal")),
    "attn_nomask": dict(kind="attention", attn=_attn(4, 4, "none")),
    "attn_nomask_fp16": dict(kind="attention", attn=_attn(4, 4, "none"), dtype="fp16"),
    "attn_nomask_gqa": dict(kind="attention", attn=_attn(4, 2, "none")),
    "attn_padding": dict(kind="attention", attn=_attn(4, 4, "padding")),
    "attn_given": dict(kind="attention", attn=_attn(4, 4, "given")),
    "attn_given_window": dict(kind="attention", attn=_attn(4, 4, "given", window=3)),
    "attn_window": dict(kind="attention", attn=_attn(4, 4, "causal", window=3)),
    "attn_softcap": dict(kind="attention", attn=_attn(4, 4, "causal", scale=0.25, softcap=2.0)),
    "attn_gqa": dict(kind="attention", attn=_attn(4, 2, "causal")),
    "attn_mqa": dict(kind="attention", attn=_attn(4, 1, "causal")),
    "attn_gqa_fp16": dict(kind="attention", attn=_attn(4, 2, "causal"), dtype="fp16"),
    "attn_append": dict(kind="attention", attn=_attn(4, 2, "causal", cache="append")),
    "attn_append_window": dict(kind="attention",
                               attn=_attn(4, 2, "causal", cache="append", window=3)),
    "attn_static": dict(kind="attention", attn=_attn(4, 2, "given", cache="static")),
    "attn_static_window": dict(kind="attention",
                               attn=_attn(4, 2, "given", cache="static", window=3)),
    "moe_qwen3": dict(kind="moe", moe=_moe("qwen3", 8, 2, norm=False)),
    "moe_qwen3_norm": dict(kind="moe", moe=_moe("qwen3", 8, 2)),
    "moe_qwen3_fp16": dict(kind="moe", moe=_moe("qwen3", 8, 2), dtype="fp16"),
    "moe_qwen3_fused": dict(kind="moe", moe=_moe("qwen3", 6, 2, stacked=False)),
    "moe_qwen3_fused_fp16": dict(kind="moe", moe=_moe("qwen3", 6, 2, norm=False, stacked=False),
                                 dtype="fp16"),
    "moe_qwen3_top1": dict(kind="moe", moe=_moe("qwen3", 4, 1, norm=False)),
    "moe_qwen3_top1_fp16": dict(kind="moe", moe=_moe("qwen3", 4, 1, norm=False, stacked=False),
                                dtype="fp16"),
    # expert 0 overflows fp16 and is never chosen: its inf and NaN must not reach y
    "moe_qwen3_idle_inf_fp16": dict(kind="moe", moe=_moe("qwen3", 4, 2, norm=False, idle=True),
                                    dtype="fp16"),
    "moe_mixtral": dict(kind="moe", moe=_moe("mixtral", 8, 2)),
    "moe_mixtral_fp16": dict(kind="moe", moe=_moe("mixtral", 8, 2), dtype="fp16"),
    "moe_mixtral_fused_fp16": dict(kind="moe", moe=_moe("mixtral", 4, 2, stacked=False),
                                   dtype="fp16"),
}


# ---------------------------------------------------------------------------------------------
# Weights and inputs. Weights are written in fp32; an fp16 graph converts them while exporting,
# so the reference uses them rounded to fp16 (`rounded`), like the inputs.


def rounded(t, dtype):
    return t.half().float() if dtype == "fp16" else t


def cache_names(cache):
    """(past key, past value, present key, present value) as the ONNX backend names a cache: an
    appended one past_key_values.* -> present.*, one updated in place input.* -> output.*."""
    kv = ("past_key_values.0.key", "past_key_values.0.value")
    if cache == "static":
        return tuple(f"{io}.{n}" for io in ("input", "output") for n in kv)
    return kv + ("present.0.key", "present.0.value")


def make_weights(spec, gen):
    kind = spec["kind"]
    if kind in ("rms_norm", "skip_rms_norm", "layer_norm", "skip_layer_norm"):
        w = {"weight": torch.rand(HIDDEN, generator=gen) + 0.5}
        if spec.get("bias"):
            w["bias"] = torch.randn(HIDDEN, generator=gen) * 0.5
        return w
    if kind == "linear" and spec.get("flatten"):  # HIDDEN = 3 * 2 * 4
        return {"weight": torch.randn(LINEAR_OUT, 3, 2, 4, generator=gen) / HIDDEN ** 0.5}
    if kind == "linear":
        w = torch.randn(LINEAR_OUT, HIDDEN, generator=gen) / HIDDEN ** 0.5
        return {"weight": w.T.contiguous() if spec.get("in_out") else w,
                "bias": torch.randn(LINEAR_OUT, generator=gen) * 0.2}
    if kind == "conv" and spec["conv"]["stored"]:
        w = spec["conv"]["w"]
        fan_in = int(np.prod(w[1:]))
        weights = {"weight": torch.randn(*w, generator=gen) * fan_in ** -0.5}
        if spec["conv"]["bias"]:
            weights["bias"] = torch.randn(w[0], generator=gen) * 0.5
        return weights
    if kind in ("tied", "embedding"):
        return {"table": torch.randn(VOCAB, HIDDEN, generator=gen)}
    if kind == "moe":
        return moe_weights(spec["moe"], gen)
    return {}


def moe_weights(m, gen):
    """The router (gate.weight [E, h]) and the experts' weights, laid out as the case reads
    them: per expert as a checkpoint holds them (save_pretrained writes expert e's gate_up_proj
    rows [:ff] as its gate_proj / w1 and [ff:] as its up_proj / w3), or fused."""
    e = m["experts"]
    gate_up = torch.randn(e, 2 * MOE_FF, HIDDEN, generator=gen) * HIDDEN ** -0.5
    down = torch.randn(e, HIDDEN, MOE_FF, generator=gen) * 0.5 * MOE_FF ** -0.5
    if m["idle"]:  # gate and up near 1000 a token: their product is past fp16's 65504
        gate_up[0] *= 1000.0
    w = {"gate.weight": torch.randn(e, HIDDEN, generator=gen) * HIDDEN ** -0.5}
    if not m["stacked"]:
        w["experts.gate_up_proj"], w["experts.down_proj"] = gate_up, down
        return w
    names = ("w1", "w3", "w2") if m["family"] == "mixtral" else \
        ("gate_proj", "up_proj", "down_proj")
    for i in range(e):
        parts = (gate_up[i, :MOE_FF], gate_up[i, MOE_FF:], down[i])
        for name, t in zip(names, parts):
            w[f"experts.{i}.{name}.weight"] = t.contiguous()
    return w


def moe_block(m, weights, dtype):
    """transformers' own block (Qwen3MoeSparseMoeBlock or MixtralSparseMoeBlock, its eager
    experts loop) holding the case's weights, in the case's dtype."""
    from transformers import MixtralConfig, Qwen3MoeConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    e, k = m["experts"], m["top_k"]
    if m["family"] == "mixtral":
        config = MixtralConfig(hidden_size=HIDDEN, intermediate_size=MOE_FF, num_local_experts=e,
                               num_experts_per_tok=k, hidden_act="silu")
        block_class = MixtralSparseMoeBlock
    else:
        config = Qwen3MoeConfig(hidden_size=HIDDEN, moe_intermediate_size=MOE_FF, num_experts=e,
                                num_experts_per_tok=k, norm_topk_prob=m["norm"],
                                hidden_act="silu")
        block_class = Qwen3MoeSparseMoeBlock
    # the loop over experts with index_add_ in the hidden dtype (modeling_*.py's forward);
    # from_pretrained's default grouped_mm sums the k outputs in fp32 instead
    config._experts_implementation = "eager"
    block = block_class(config).eval()
    if "experts.gate_up_proj" in weights:
        gate_up, down = weights["experts.gate_up_proj"], weights["experts.down_proj"]
    else:
        names = ("w1", "w3", "w2") if m["family"] == "mixtral" else \
            ("gate_proj", "up_proj", "down_proj")
        per = [[weights[f"experts.{i}.{n}.weight"] for n in names] for i in range(e)]
        gate_up = torch.stack([torch.cat([g, u]) for g, u, _ in per])
        down = torch.stack([d for _, _, d in per])
    block.gate.weight.data.copy_(weights["gate.weight"])
    block.experts.gate_up_proj.data.copy_(gate_up)
    block.experts.down_proj.data.copy_(down)
    return block.half() if dtype == "fp16" else block


def moe_inputs(m, weights, b, s, rng, fdt):
    """x [b, s, HIDDEN] whose router logits (x @ gate.weight.T) are chosen: per token a random
    order of levels 0.6 apart from -2, so that no two experts tie anywhere near the k-th place
    (topk's order of ties is each runtime's own) whatever the rounding to fp16. x is the least-
    squares solution for them plus a random part the router does not see."""
    e = m["experts"]
    router = weights["gate.weight"].double().numpy()
    levels = -2.0 + 0.6 * np.arange(e)
    want = np.stack([rng.permutation(levels) for _ in range(b * s)])       # [b*s, E]
    if m["idle"]:  # expert 0 always last
        want = np.concatenate([np.full((b * s, 1), levels[0] - 0.6),
                               np.stack([rng.permutation(levels[1:]) for _ in range(b * s)])], 1)
    pinv = np.linalg.pinv(router)                                          # [h, E]
    free = rng.standard_normal((b * s, HIDDEN))
    free -= free @ router.T @ pinv.T                                       # router's null space
    x = want @ pinv.T + free
    return {"x": x.reshape(b, s, HIDDEN).astype(fdt)}


def make_inputs(spec, shape, rng, weights):
    """Graph inputs by name (numpy) for (batch, sequence, past)."""
    b, s, past = shape
    fdt = np.float16 if spec.get("dtype") == "fp16" else np.float32

    def normal(*dims, scale=1.0, shift=0.0):
        return (rng.standard_normal(dims) * scale + shift).astype(fdt)

    kind = spec["kind"]
    if kind == "moe":
        return moe_inputs(spec["moe"], weights, b, s, rng, fdt)
    if kind in ("rms_norm", "layer_norm"):
        return {"x": normal(b, s, HIDDEN, scale=2.0, shift=0.5)}
    if kind in ("skip_rms_norm", "skip_layer_norm"):
        return {"x": normal(b, s, HIDDEN, scale=2.0), "skip": normal(b, s, HIDDEN, shift=0.5)}
    if kind == "linear":
        return {"x": normal(b, s, HIDDEN)}
    if kind == "tied":
        return {"input_ids": rng.integers(0, VOCAB, (b, s)), "x": normal(b, s, HIDDEN)}
    if kind == "embedding":
        return {"input_ids": rng.integers(0, VOCAB, (b, s))}
    if kind in ("gather_elements", "scatter_add"):
        # indices into the last axis, repeats among them (scatter_add adds those up)
        feeds = {"x": normal(b, s, HIDDEN), "indices": rng.integers(0, HIDDEN, (b, s, PICKS))}
        feeds["indices"][..., 1] = feeds["indices"][..., 0]
        if kind == "scatter_add":
            feeds["updates"] = normal(b, s, PICKS)
        return feeds
    if kind == "conv":
        c = spec["conv"]
        extent = {"s": s, "2s": 2 * s}
        w = c["w"]
        fan_in = int(np.prod(w[1:]))
        feeds = {"x": normal(b, *(extent.get(e, e) for e in c["x"]))}
        if not c["stored"]:
            feeds["weight"] = normal(*w, scale=fan_in ** -0.5)
            if c["bias"]:
                feeds["bias"] = normal(w[0], scale=0.5)
        return feeds
    if kind in ("unary", "reduce", "topk", "clip", "pad"):
        x = normal(b, s, HIDDEN, scale=spec.get("scale", 3.0))
        return {"x": np.abs(x) + fdt(0.1) if spec.get("positive") else x}
    if kind == "rope":
        x = normal(b, s, ROPE_HEADS, ROPE_HEAD_DIM)
        layout = spec["rope"]["rope_type"]
        if layout == "mrope":  # [3, b, s]: temporal, height and width rows, each its own
            return {"x": x, "position_ids": rng.integers(0, 100, (3, b, s))}
        if layout == "vision":  # [b, s, 2]: a patch's (h, w)
            return {"x": x, "position_ids": rng.integers(0, 32, (b, s, 2))}
        # up to 100: past max_position_embeddings of the dynamic case (32); a case's `positions`
        # (end, top) draws below `end` and puts its largest, `top`, in the first row
        end, top = spec.get("positions", (100, None))
        pos = rng.integers(0, end, (b, s))
        if top is not None:
            pos = np.minimum(pos, top)
            pos[0, -1] = top
        return {"x": x, "position_ids": pos}
    a = spec["attn"]
    h, kvh, d = a["heads"], a["kv_heads"], ATTN_HEAD_DIM
    feeds = {"q": normal(b, s, h, d, scale=1.5), "k": normal(b, s, kvh, d, scale=1.5),
             "v": normal(b, s, kvh, d)}
    keys = {"append": past + s, "static": CACHE_LEN}.get(a["cache"], s)
    if a["mask"] == "none":  # every key visible: no mask input
        return feeds
    if a["cache"] is not None:
        rows = past if a["cache"] == "append" else CACHE_LEN
        past_k, past_v, _, _ = cache_names(a["cache"])
        feeds[past_k] = normal(b, kvh, rows, d, scale=1.5)
        feeds[past_v] = normal(b, kvh, rows, d)
    if a["mask"] == "given":
        # static: queries sit after the `past` rows already written; otherwise an offset of 1
        # places the window
        pos = past if a["cache"] == "static" else 1
        feeds["cache_position"] = np.array([pos], dtype=np.int64)
        given = rng.random((b, 1, s, keys)) > 0.25
        if a["cache"] == "static":  # what a static cache's mask holds: causal over the slots
            given &= np.arange(keys)[None, None, None, :] <= pos + np.arange(s)[None, None, :, None]
        feeds["attention_mask"] = given
    else:
        # left padding, rows padded more and more; every row keeps its last key real
        pads = [0, min(2, keys - 1), keys - 1][:b] + [1] * max(0, b - 3)
        mask = np.ones((b, keys), dtype=np.int64)
        for row, pad in enumerate(pads):
            mask[row, :pad] = 0
        feeds["attention_mask"] = mask
    return feeds


# ---------------------------------------------------------------------------------------------
# References


def vision_rotary_reference(rope, x, positions):
    """x [b, s, h, d] rotated at (h, w) `positions` [b, s, 2] as Qwen2-VL's vision tower does:
    Qwen2VLVisionRotaryEmbedding over the patches as one packed sequence, then
    apply_rotary_pos_emb_vision (fp32)."""
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (
        Qwen2VLVisionRotaryEmbedding, apply_rotary_pos_emb_vision)

    config = Qwen2VLVisionConfig(embed_dim=ROPE_HEADS * ROPE_HEAD_DIM, num_heads=ROPE_HEADS,
                                 rope_parameters=dict(rope["params"], rope_type="axial"))
    b, s, h, d = x.shape
    q = x.reshape(b * s, h, d)
    cos, sin = Qwen2VLVisionRotaryEmbedding(config)(q, positions.reshape(b * s, 2))
    out, _ = apply_rotary_pos_emb_vision(q, q, cos, sin)
    return out.reshape(b, s, h, d)


def mrope_reference(rope, x, positions):
    """x [b, s, h, d] rotated at [3, b, s] `positions` as Qwen2-VL's language model does:
    Qwen2VLRotaryEmbedding (its bands of mrope_section from the three rows), then its
    apply_rotary_pos_emb."""
    from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
    from transformers.models.qwen2_vl.modeling_qwen2_vl import (Qwen2VLRotaryEmbedding,
                                                                apply_rotary_pos_emb)

    config = Qwen2VLTextConfig(hidden_size=ROPE_HEADS * ROPE_HEAD_DIM,
                               num_attention_heads=ROPE_HEADS, num_key_value_heads=ROPE_HEADS,
                               max_position_embeddings=rope["max_pos"],
                               rope_parameters=dict(rope["params"], rope_type="mrope"))
    cos, sin = Qwen2VLRotaryEmbedding(config)(x, positions)
    out, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=2)
    return out


def longrope_reference(rope, x, positions):
    """x [b, s, h, d] rotated as Phi-3 does: Phi3RotaryEmbedding (its longrope update picks the
    factor set from max(position_ids) + 1), then Phi-3's apply_rotary_pos_emb (partial rotary:
    the rest of the head passes)."""
    from transformers import Phi3Config
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding, apply_rotary_pos_emb

    params = dict(rope["params"], rope_type="longrope")
    # Phi-3 keeps its trained length at the top level, where transformers reads it first
    original = params.pop("original_max_position_embeddings")
    config = Phi3Config(hidden_size=ROPE_HEADS * ROPE_HEAD_DIM, num_attention_heads=ROPE_HEADS,
                        max_position_embeddings=rope["max_pos"],
                        original_max_position_embeddings=original, rope_parameters=params)
    cos, sin = Phi3RotaryEmbedding(config)(x, positions)
    out, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=2)
    return out


def rotary_reference(rope, x, positions, theta=None):
    """x [b, s, h, d] rotated at `positions` the way transformers' models do it: the rotary
    embedding module of a config with these rope parameters (Phi's for a partial rotary, whose
    attention rotates x[..., :r] and passes the rest), then apply_rotary_pos_emb."""
    from transformers import LlamaConfig, PhiConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb
    from transformers.models.phi.modeling_phi import PhiRotaryEmbedding

    kind = rope["rope_type"]
    if kind in ("longrope", "mrope", "vision"):
        fn = {"longrope": longrope_reference, "mrope": mrope_reference,
              "vision": vision_rotary_reference}[kind]
        return fn(rope, x, positions)
    params = dict(rope["params"], rope_type=rope["rope_type"])
    if theta is not None:
        params["rope_theta"] = theta
    r = rope["rotary"]
    common = dict(hidden_size=ROPE_HEADS * ROPE_HEAD_DIM, num_attention_heads=ROPE_HEADS,
                  max_position_embeddings=rope["max_pos"], rope_parameters=params)
    if r < ROPE_HEAD_DIM:
        module = PhiRotaryEmbedding(PhiConfig(**common))
    else:
        module = LlamaRotaryEmbedding(LlamaConfig(head_dim=ROPE_HEAD_DIM, **common))
    cos, sin = module(x, positions)
    rot, _ = apply_rotary_pos_emb(x[..., :r], x[..., :r], cos, sin, unsqueeze_dim=2)
    return torch.cat([rot, x[..., r:]], dim=-1)


def attention_masks(a, feeds, s, keys):
    """bool [b, 1, s, keys] from transformers' mask functions (masking_utils), as its models
    build them: queries of a causal or padding mask sit at keys - s + i; a given mask is used as
    is, with the window placed by cache_position."""
    from transformers import masking_utils as mu

    b = feeds["q"].shape[0]
    if a["mask"] == "none":  # every key visible (a vision tower, Whisper's encoder)
        return torch.ones(b, 1, s, keys, dtype=torch.bool)
    if a["mask"] == "given":
        mask = torch.from_numpy(feeds["attention_mask"])
        if a["window"]:
            pos = int(feeds["cache_position"][0])
            mask = mask & mu.sdpa_mask(batch_size=b, q_length=s, kv_length=keys, q_offset=pos,
                                       mask_function=mu.sliding_window_overlay(a["window"]),
                                       allow_is_causal_skip=False)
        return mask
    if a["mask"] == "padding":
        fn = mu.bidirectional_mask_function
    elif a["window"]:
        fn = mu.sliding_window_causal_mask_function(a["window"])
    else:
        fn = mu.causal_mask_function
    return mu.sdpa_mask(batch_size=b, q_length=s, kv_length=keys, q_offset=keys - s,
                        mask_function=fn,
                        attention_mask=torch.from_numpy(feeds["attention_mask"]).bool(),
                        allow_is_causal_skip=False)


def attention_reference(a, feeds):
    """-> ({output name: expected}, rows with a visible key [b, s])."""
    t = {k: torch.from_numpy(np.asarray(v)) for k, v in feeds.items()}
    q, k, v = (t[n].float().transpose(1, 2) for n in ("q", "k", "v"))  # [b, heads, s, d]
    b, _, s, d = q.shape
    want = {}
    past_k, past_v, present_k, present_v = cache_names(a["cache"])
    if a["cache"] == "append":
        k = torch.cat([t[past_k].float(), k], dim=2)
        v = torch.cat([t[past_v].float(), v], dim=2)
    elif a["cache"] == "static":
        pos = int(feeds["cache_position"][0])
        k_new, v_new = k, v
        k, v = t[past_k].float().clone(), t[past_v].float().clone()
        k[:, :, pos:pos + s], v[:, :, pos:pos + s] = k_new, v_new
    if a["cache"] is not None:
        want[present_k], want[present_v] = k, v
    mask = attention_masks(a, feeds, s, k.shape[2])
    if a["softcap"]:
        from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward

        module = SimpleNamespace(num_key_value_groups=a["heads"] // a["kv_heads"],
                                 training=False, head_dim=d)
        bias = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
        out, _ = eager_attention_forward(module, q, k, v, bias, scaling=a["scale"],
                                         softcap=a["softcap"])
    else:
        # no mask at all where every key is visible: sdpa's own unmasked path
        out = F.scaled_dot_product_attention(q, k, v,
                                             attn_mask=None if a["mask"] == "none" else mask,
                                             scale=a["scale"], enable_gqa=True).transpose(1, 2)
    # A query that sees no key at all (padding) is unspecified in transformers (NaN here);
    # ferry promises a uniform row instead (ir/lower/attention.c): the mean of V per kv head.
    visible = mask[:, 0].any(-1)
    uniform = v.mean(dim=2).repeat_interleave(a["heads"] // a["kv_heads"], dim=1)  # [b, h, d]
    out = torch.where(visible[:, :, None, None], out, uniform[:, None])
    want["y"] = out.reshape(b, s, -1)
    return want


def torch_pads(begin, end):
    """F.pad's list: (begin, end) pairs from the last axis back."""
    return [p for pair in reversed(list(zip(begin, end))) for p in pair]


def conv_reference(c, x):
    """torch's conv1d/2d/3d; unequal pads (which its padding cannot say) as F.pad first."""
    conv = (F.conv1d, F.conv2d, F.conv3d)[len(c["stride"]) - 1]
    inp, padding = x["x"], list(c["begin"])
    if c["begin"] != c["end"]:
        inp = F.pad(inp, torch_pads(c["begin"], c["end"]))
        padding = [0] * len(padding)
    return conv(inp, x["weight"], x.get("bias"), stride=c["stride"], padding=padding,
                dilation=c["dilation"], groups=c["groups"])


def moe_reference(m, weights, feeds, dtype):
    """transformers' block over x in the case's dtype (fp16 on the CPU too: its routing weights'
    cast and its sums in the hidden dtype are what the op follows), as fp32."""
    x = torch.from_numpy(np.asarray(feeds["x"]))
    return {"y": moe_block(m, weights, dtype)(x).float()}


def reference(spec, weights, feeds):
    """{output name: expected float32 tensor} for the case."""
    dt = spec.get("dtype", "fp32")
    if spec["kind"] == "moe":
        return moe_reference(spec["moe"], weights, feeds, dt)
    w = {k: rounded(v, dt) for k, v in weights.items()}
    x = {k: torch.from_numpy(np.asarray(v)) for k, v in feeds.items()}
    x = {k: v.float() if v.is_floating_point() else v for k, v in x.items()}
    kind = spec["kind"]
    if kind in ("rms_norm", "skip_rms_norm"):
        from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
        from transformers.models.olmo2.modeling_olmo2 import Olmo2RMSNorm

        h = x["x"] + x["skip"] if kind == "skip_rms_norm" else x["x"]
        # Gemma's norm stores w and multiplies by 1 + w; ferry adds the offset to the weight
        # OLMo 2's multiplies by w in fp32, then casts
        cls = GemmaRMSNorm if spec.get("offset") else \
            Olmo2RMSNorm if spec.get("f32_weight") else LlamaRMSNorm
        norm = cls(HIDDEN, eps=spec["eps"])
        norm.weight.data.copy_(w["weight"])
        out = {"y": norm(h)}
        if kind == "skip_rms_norm":
            out["sum"] = h
        return out
    if kind == "layer_norm":
        return {"y": F.layer_norm(x["x"], (HIDDEN,), w["weight"], w.get("bias"), spec["eps"])}
    if kind == "skip_layer_norm":  # BertSelfOutput: LayerNorm(hidden + input)
        h = x["x"] + x["skip"]
        return {"y": F.layer_norm(h, (HIDDEN,), w["weight"], w.get("bias"), spec["eps"]),
                "sum": h}
    if kind == "linear":
        weight = w["weight"].T if spec.get("in_out") else w["weight"].reshape(LINEAR_OUT, -1)
        return {"y": F.linear(x["x"], weight, w.get("bias"))}
    if kind == "tied":
        return {"embeds": F.embedding(x["input_ids"], w["table"]),
                "logits": F.linear(x["x"], w["table"])}
    if kind == "embedding":
        return {"y": F.embedding(x["input_ids"], w["table"])}
    if kind in ("unary", "reduce"):
        return {"y": spec["fn"](x["x"])}
    if kind == "gather_elements":
        return {"y": torch.gather(x["x"], -1, x["indices"])}
    if kind == "clip":
        return {"y": torch.clamp(x["x"], min=spec["lo"], max=spec["hi"])}
    if kind == "pad":
        return {"y": F.pad(x["x"], torch_pads(spec["begin"], spec["end"]), value=spec["value"])}
    if kind == "conv":
        return {"y": conv_reference(spec["conv"], {**x, **w})}
    if kind == "topk":  # random values: no ties, so the indices are the one answer
        values, indices = torch.topk(x["x"], PICKS, dim=-1)
        return {"y": values, "indices": indices}
    if kind == "scatter_add":
        return {"y": x["x"].scatter_add(2, x["indices"], x["updates"])}
    if kind == "rope":
        out = {"y": rotary_reference(spec["rope"], x["x"], x["position_ids"])}
        if "theta_2" in spec:
            out["y_2"] = rotary_reference(spec["rope"], x["x"], x["position_ids"],
                                          theta=spec["theta_2"])
        if spec.get("long_2"):
            rope = dict(spec["rope"], params=dict(spec["rope"]["params"]))
            rope["params"]["long_factor"] = [2 * f for f in rope["params"]["long_factor"]]
            out["y_2"] = rotary_reference(rope, x["x"], x["position_ids"])
        return out
    return attention_reference(spec["attn"], feeds)


# ---------------------------------------------------------------------------------------------
# The tests


def run_op_graph(binary, name, out_dir, weights, dynamic, env=None, target_flags=(),
                 file="model.onnx"):
    if not binary.exists():
        pytest.fail(f"{binary} not found (configure with -DFERRY_TESTS=ON and build)")
    out_dir.mkdir(exist_ok=True)
    save_file(weights, str(out_dir / "weights.safetensors"))
    args = [str(binary), name, str(out_dir)] + (["--dynamic"] if dynamic else [])
    args += list(target_flags)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, f"{' '.join(args)} -> exit {proc.returncode}\n{proc.stderr}"
    return out_dir / file


def export_case(name, out_dir, weights, dynamic):
    """Runs ferry-op-graph over `weights` and checks the model; -> onnxruntime session. With
    the sanitizer build configured, its binary must write the same bytes, cleanly."""
    model = run_op_graph(OP_GRAPH, name, out_dir, weights, dynamic)
    if OP_GRAPH_SAN:
        san = run_op_graph(OP_GRAPH_SAN, name, out_dir / "asan", weights, dynamic, SANITIZER_ENV)
        assert san.read_bytes() == model.read_bytes(), f"{name}: the sanitizer build differs"
    check_model_full(model)
    return ort_session(model)


def max_error(got, want, what):
    """max |got - want| / max(1, |want|), with shape and finiteness checked first."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    assert np.isfinite(got).all(), f"{what}: non-finite values"
    assert np.isfinite(want).all(), f"{what}: the reference is not finite"
    return float((np.abs(got - want) / np.maximum(1.0, np.abs(want))).max())


def test_cases_match_op_graph():
    """Both tables name the same cases: a case added on one side only fails here."""
    proc = subprocess.run([str(OP_GRAPH), "--list"], capture_output=True, text=True, check=True)
    assert sorted(proc.stdout.split()) == sorted(CASES)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("name", list(CASES))
def test_op_matches_reference(name, dynamic, tmp_path, record_property):
    spec = CASES[name]
    dtype = spec.get("dtype", "fp32")
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    weights = make_weights(spec, gen)
    session = export_case(name, tmp_path, weights, dynamic)
    first = session.get_inputs()[0]
    assert isinstance(first.shape[0], str) == dynamic, f"input {first.name}: {first.shape}"

    outputs = [o.name for o in session.get_outputs()]
    worst = 0.0
    for shape in DYNAMIC_SHAPES if dynamic else DYNAMIC_SHAPES[:1]:
        rng = np.random.default_rng(sum(shape) * 7919 + len(name))
        feeds = make_inputs(spec, shape, rng, weights)
        assert sorted(i.name for i in session.get_inputs()) == sorted(feeds)
        got = dict(zip(outputs, session.run(outputs, feeds)))
        with torch.no_grad():
            want = reference(spec, weights, feeds)
        assert sorted(got) == sorted(want), f"outputs {sorted(got)}, expected {sorted(want)}"
        for out, value in want.items():
            what = f"{name} {out} at (batch, sequence, past) {shape}"
            if out.startswith(("present", "output")):
                # the cache only moves bytes: it must hold exactly what was written
                np.testing.assert_array_equal(got[out], value.numpy().astype(got[out].dtype),
                                              err_msg=what)
                continue
            want_dtype = value.numpy().dtype if not value.is_floating_point() else \
                (np.float16 if dtype == "fp16" else np.float32)
            assert got[out].dtype == want_dtype, f"{what}: dtype {got[out].dtype}"
            err = max_error(got[out], value.numpy(), what)
            assert err <= TOL[dtype], f"{what}: max error {err:.3g} > {TOL[dtype]:g} ({dtype})"
            worst = max(worst, err)
    record_property("op_conformance_max_err", (name, dtype, worst))


# ---------------------------------------------------------------------------------------------
# Every other target: the same cases written by each backend, run in its own runtime.


class _OpenVINORun:
    """An OpenVINO model behind the calls the test makes of an onnxruntime session."""

    def __init__(self, path):
        import openvino

        core = openvino.Core()
        self._compiled = core.compile_model(core.read_model(str(path)), "CPU",
                                            {"INFERENCE_PRECISION_HINT": "f32"})
        self.inputs = sorted(i.get_any_name() for i in self._compiled.inputs)
        self.outputs = [o for o in self._compiled.outputs]

    def run(self, feeds):
        result = self._compiled(feeds)
        out = {}
        for port in self.outputs:
            names = port.get_names()
            value = np.asarray(result[port])
            for name in names:  # a fused node's output may carry its neighbours' names too
                out[name] = value
        return out


class _TorchRun:
    """A .pt2 program through torch.export.load: keyword inputs, a dict of outputs."""

    def __init__(self, path):
        self._module = torch.export.load(str(path)).module()
        self.inputs = None

    def run(self, feeds):
        with torch.no_grad():
            out = self._module(**{k: torch.from_numpy(np.ascontiguousarray(v))
                                  for k, v in feeds.items()})
        return {k: v.numpy() for k, v in out.items()}


class _ExecutorchRun:
    """A .pte program through executorch.runtime: inputs in the program's order (model.io, which
    ferry-op-graph writes beside it), outputs by their names there."""

    def __init__(self, path):
        from executorch.runtime import Runtime

        lines = [line.split(" ", 1) for line in (path.parent / "model.io").read_text().splitlines()]
        self._inputs = [name for kind, name in lines if kind == "in"]
        self._outputs = [name for kind, name in lines if kind == "out"]
        self.inputs = sorted(self._inputs)
        self._method = Runtime.get().load_program(str(path)).load_method("forward")

    def run(self, feeds):
        result = self._method.execute([torch.from_numpy(np.ascontiguousarray(feeds[name]))
                                       for name in self._inputs])
        return {name: value.numpy() for name, value in zip(self._outputs, result)}


# target: (ferry-op-graph flags, file written, runner)
TARGETS = {
    "ort-cpu": (["--ort-fusions", "cpu"], "model.onnx",
                lambda path: _OnnxRun(ort_session(path))),
    "openvino": (["--format", "openvino"], "openvino_model.xml", _OpenVINORun),
    "torch": (["--format", "pt2"], "model.pt2", _TorchRun),
    "executorch": (["--format", "executorch"], "model.pte", _ExecutorchRun),
}


class _OnnxRun:
    def __init__(self, session):
        self._session = session
        self.inputs = sorted(i.name for i in session.get_inputs())

    def run(self, feeds):
        names = [o.name for o in self._session.get_outputs()]
        return dict(zip(names, self._session.run(names, feeds)))


def _target_skip(target, spec):
    """What a target does not write for a case, as the export refuses it: a torch program
    writes its cache into the caller's tensors, so only a static one, whose new rows the test
    would read back from the inputs (the exports' tests do that: test_pt2.py)."""
    if target == "torch" and spec["kind"] == "attention" and spec["attn"]["cache"]:
        return "a torch program's cache is written into its inputs (test_pt2.py runs it)"
    if target == "executorch" and spec["kind"] == "attention" and spec["attn"]["cache"]:
        return "the executorch format writes no cache yet (generation exports are refused)"
    if target == "executorch" and spec["kind"] == "conv" and len(spec["conv"]["stride"]) == 3:
        return "the ExecuTorch runtime's convolution is 1-D and 2-D (test_executorch.py " \
               "checks the refusal)"
    return None


def visible_rows(spec, feeds):
    """[b, s] bool: the queries of an attention case that see at least one key (None for the
    other ops)."""
    if spec["kind"] != "attention":
        return None
    a = spec["attn"]
    s = feeds["q"].shape[1]
    keys = {"append": feeds["k"].shape[1] + (feeds[cache_names("append")[0]].shape[2]
                                             if a["cache"] == "append" else 0),
            "static": CACHE_LEN}.get(a["cache"], s)
    return attention_masks(a, feeds, s, keys)[:, 0].any(-1).numpy()


@pytest.mark.parametrize("target", list(TARGETS))
@pytest.mark.parametrize("name", list(CASES))
def test_op_in_every_target(name, target, tmp_path, record_property):
    """Every case, written by each backend's own target (onnxruntime's fused kernels,
    OpenVINO, torch), against the same references, at every dynamic shape."""
    spec = CASES[name]
    why = _target_skip(target, spec)
    if why:
        pytest.skip(why)
    flags, file, runner = TARGETS[target]
    dtype = spec.get("dtype", "fp32")
    gen = torch.Generator().manual_seed(sum(map(ord, name)))
    weights = make_weights(spec, gen)
    run = runner(run_op_graph(OP_GRAPH, name, tmp_path, weights, True, target_flags=flags,
                              file=file))
    worst = 0.0
    for shape in DYNAMIC_SHAPES:
        rng = np.random.default_rng(sum(shape) * 7919 + len(name))
        feeds = make_inputs(spec, shape, rng, weights)
        if run.inputs is not None:
            assert run.inputs == sorted(feeds), (run.inputs, sorted(feeds))
        got = run.run(feeds)
        with torch.no_grad():
            want = reference(spec, weights, feeds)
        seen = visible_rows(spec, feeds)
        for out, value in want.items():
            what = f"{name} on {target}: {out} at (batch, sequence, past) {shape}"
            assert out in got, f"{what}: no such output (has {sorted(got)})"
            if out.startswith(("present", "output")):
                have, value = got[out], value.numpy().astype(got[out].dtype)
                if target == "ort-cpu" and out.startswith("output"):
                    # GroupQueryAttention fills a static cache's output up to the last row it
                    # writes; the rows after are the buffer's own when input and output are
                    # bound as one (as the runners bind them), zeros when not
                    end = int(feeds["cache_position"][0]) + feeds["q"].shape[1]
                    have, value = have[:, :, :end], value[:, :, :end]
                np.testing.assert_array_equal(have, value, err_msg=what)
                continue
            value = value.numpy()
            # a backend's output keeps the case's type: its float precision, int64 indices
            want_dtype = value.dtype if not np.issubdtype(value.dtype, np.floating) else \
                (np.float16 if dtype == "fp16" else np.float32)
            assert np.asarray(got[out]).dtype == want_dtype, \
                f"{what}: dtype {np.asarray(got[out]).dtype}, expected {want_dtype}"
            if seen is not None and out == "y":
                # a query that sees no key (a padded one): only finite here, the uniform row
                # being onnx-standard's own promise (test_op_matches_reference holds it)
                assert np.isfinite(got[out]).all(), f"{what}: non-finite values"
                got[out], value = got[out][seen], value[seen]
                if not seen.any():
                    continue
            err = max_error(got[out], value, what)
            tol = TARGET_TOL.get((target, dtype), TOL[dtype])
            assert err <= tol, f"{what}: max error {err:.3g} > {tol:g} ({dtype})"
            worst = max(worst, err)
    record_property("op_conformance_max_err", (f"{name}@{target}", dtype, worst))
