"""The ONNX export against the oracle: transformers' eager model on the same checkpoint, and
onnxruntime (CPU) running the file ferry wrote. fp32 logits must agree within 1e-4 absolute at
every real (non-padded) position."""

import json

import numpy as np
import onnx
import pytest
import torch

from conftest import (ARCHS, ARCH_CLASS, FP32_ATOL, assert_logits_close, check_against_reference,
                      check_model_full, ferry_builds, ferry_export, make_checkpoint, make_inputs,
                      read_safetensors, reference_logits, run_ferry, run_onnx, ort_session,
                      takes_positions)

SHAPES = [(1, 1), (1, 7), (1, 33), (3, 1), (3, 7), (3, 33)]

# Measured on the four tiny families (logits up to ~6): fp16 max abs error 5e-3 .. 7e-3 (torch's
# own fp16 eager is 9e-3 .. 1.1e-2 on the same models), so 2e-2 leaves ~3x margin.
FP16_ATOL = 2e-2
# bf16 keeps 8 bits of mantissa: measured 0.05 .. 0.08 (torch bf16 eager: 0.09 .. 0.10); 0.25.
BF16_ATOL = 0.25


def graph_io(onnx_path):
    """-> ({input name: (elem_type, dims)}, {output name: (elem_type, dims)}), dims as ints or
    symbol strings."""
    model = onnx.load(str(onnx_path), load_external_data=False)

    def dims(vi):
        return [d.dim_param if d.HasField("dim_param") else d.dim_value
                for d in vi.type.tensor_type.shape.dim]

    ins = {i.name: (i.type.tensor_type.elem_type, dims(i)) for i in model.graph.input}
    outs = {o.name: (o.type.tensor_type.elem_type, dims(o)) for o in model.graph.output}
    return ins, outs


def weight_initializer_types(onnx_path):
    """elem_type of every matrix-shaped initializer (the checkpoint's weights)."""
    model = onnx.load(str(onnx_path), load_external_data=False)
    return {t.name: t.data_type for t in model.graph.initializer if len(t.dims) >= 2}


# ---------------------------------------------------------------------------------------------
# The four families, dynamic export, batch 1 and 3 x sequence 1, 7, 33 (left padding in batch 3)


@pytest.fixture(scope="module", params=list(ARCHS))
def family_export(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"oracle-{arch}")
    ckpt = make_checkpoint(base / "ckpt", arch)
    out = ferry_export(ckpt, base / "onnx", "--format", "onnx", "--dynamic")
    return arch, ckpt, out, ort_session(out / "model.onnx")


def test_family_check_model(family_export):
    _, _, out, _ = family_export
    check_model_full(out / "model.onnx")


def test_family_graph_interface(family_export):
    arch, ckpt, out, session = family_export
    ins, outs = graph_io(out / "model.onnx")
    sym = ["batch", "sequence"]
    # a tokenizer's output, as transformers' exports take it; the positions are computed inside
    assert ins == {"input_ids": (onnx.TensorProto.INT64, sym),
                   "attention_mask": (onnx.TensorProto.INT64, sym)}
    assert outs == {"logits": (onnx.TensorProto.FLOAT, ["batch", "sequence", 160])}
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["architecture"] == ARCH_CLASS[arch]


def test_family_position_ids_input(family_export, tmp_path):
    """--inputs with position_ids: the graph takes them, and matches eager given generate()'s
    positions (batch 3 left-padded) and positions of stride 2, which positions from 0 do not
    give: the graph reads them."""
    arch, ckpt, _, _ = family_export
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--inputs",
                       "input_ids,attention_mask,position_ids")
    ins, _ = graph_io(out / "model.onnx")
    assert ins["position_ids"] == (onnx.TensorProto.INT64, ["batch", "sequence"])
    session = ort_session(out / "model.onnx")
    check_against_reference(ckpt, out / "model.onnx", [(1, 7), (3, 33)], session=session)
    ids, mask, pos = make_inputs(160, 3, 7)
    stride = np.where(mask == 1, 2 * pos, 1)
    want = reference_logits(ckpt, ids, mask, stride)
    assert_logits_close(run_onnx(session, ids, mask, stride), want, mask, FP32_ATOL,
                        f"{arch} stride-2 positions")
    real = mask == 1
    assert np.abs(want[real] - reference_logits(ckpt, ids, mask, pos)[real]).max() > 1e-2


@pytest.mark.parametrize("batch,seq", SHAPES, ids=[f"{b}x{s}" for b, s in SHAPES])
def test_family_logits_match_eager(family_export, batch, seq):
    _, ckpt, out, session = family_export
    check_against_reference(ckpt, out / "model.onnx", [(batch, seq)], session=session)


def test_left_padding_is_masked(family_export):
    """The padded row's real positions must equal the same tokens run alone: a direct check of
    the attention mask (the padding holds random tokens, so leaking it changes the numbers)."""
    arch, ckpt, out, session = family_export
    if arch == "gpt2":
        pytest.skip("GPT-2's positions are absolute: a plain export numbers the padded row's "
                    "tokens from 0 as transformers does, so alone they sit elsewhere "
                    "(test_family_position_ids_input gives generate's positions)")
    ids, mask, pos = make_inputs(160, 3, 33)
    batched = run_onnx(session, ids, mask, pos)
    pad = int((mask[2] == 0).sum())
    alone_ids = ids[2:3, pad:]
    alone_mask = np.ones_like(alone_ids)
    alone = run_onnx(session, alone_ids, alone_mask, np.arange(33 - pad, dtype=np.int64)[None])
    np.testing.assert_allclose(batched[2, pad:], alone[0], atol=FP32_ATOL, rtol=0)
    # ... and the padding must matter to the unmasked computation (else this checks nothing)
    unmasked = run_onnx(session, ids[2:3], np.ones_like(ids[2:3]),
                        np.arange(33, dtype=np.int64)[None])
    assert np.abs(unmasked[0, pad:] - alone[0]).max() > 1e-2


# ---------------------------------------------------------------------------------------------
# Variants: checkpoint layout, embeddings, rope types, head geometry, attention window

ROPE_THETA = 10000.0

VARIANTS = {
    # bf16 weights on disk, exported to fp32; the oracle upcasts the same bf16 values.
    "bf16-checkpoint": ("llama", dict(dtype=torch.bfloat16)),
    # fp16 weights on disk, exported to fp32 (the widening is fused into the transpose).
    "fp16-checkpoint": ("qwen3", dict(dtype=torch.float16)),
    "sharded": ("qwen2", dict(max_shard_size="40KB")),
    "tied-llama": ("llama", dict(tie_word_embeddings=True)),
    "tied-qwen3": ("qwen3", dict(tie_word_embeddings=True)),
    "rope-linear": ("llama", dict(rope_parameters={
        "rope_type": "linear", "factor": 2.0, "rope_theta": ROPE_THETA})),
    # dynamic NTK rescales when max(position_ids) + 1 > max_position_embeddings (16 here).
    "rope-dynamic": ("llama", dict(max_position_embeddings=16, rope_parameters={
        "rope_type": "dynamic", "factor": 2.0, "rope_theta": ROPE_THETA})),
    # wavelengths 2*pi*500000^(i/8) vs [16/4, 16/1]: the smooth and low-frequency bands.
    "rope-llama3": ("llama", dict(rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 16, "rope_theta": 500000.0})),
    # wavelengths 6.3, 20, 63, 199, ... vs [64/4, 64/1]: all three bands (kept, smooth, scaled).
    "rope-llama3-three-bands": ("llama", dict(rope_parameters={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64, "rope_theta": ROPE_THETA})),
    # yarn: ramped interpolation plus attention factor 0.1 ln(4) + 1 on cos/sin.
    "rope-yarn": ("qwen3", dict(max_position_embeddings=128, rope_parameters={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32,
        "rope_theta": ROPE_THETA})),
    # longrope: the long factors once max(position_ids) + 1 > 16 (the trained length), the
    # short ones up to it; cos/sin times sqrt(1 + ln(64/16) / ln(16))
    "rope-longrope": ("llama", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "longrope", "original_max_position_embeddings": 16,
        "short_factor": [1.0, 1.1, 1.2, 1.4, 1.6, 2.0, 2.5, 3.0],
        "long_factor": [1.0, 2.0, 4.0, 8.0, 12.0, 16.0, 24.0, 32.0], "rope_theta": ROPE_THETA})),
    "head-dim-override-llama": ("llama", dict(head_dim=24)),     # 4 x 24 != hidden 64
    "head-dim-override-qwen3": ("qwen3", dict(head_dim=32)),
    "mqa": ("mistral", dict(num_key_value_heads=1)),
    "mistral-window-5": ("mistral", dict(sliding_window=5)),      # window < sequence 7, 33
    "llama-attention-and-mlp-bias": ("llama", dict(attention_bias=True, mlp_bias=True)),
    # Gemma's q/k/v/o biases were dropped with a warning
    "gemma-attention-bias": ("gemma", dict(attention_bias=True)),
    # rope computed from position_ids, not gathered from a table cut at max_position_embeddings
    "positions-past-max-position-embeddings": ("qwen3", dict(max_position_embeddings=16)),
    "mistral-window-null": ("mistral", dict(sliding_window=None)),
    # per-layer pattern: layers >= max_window_layers slide (here layer 1 only)
    "qwen2-window-from-layer-1": ("qwen2", dict(use_sliding_window=True, sliding_window=5,
                                                max_window_layers=1)),
    "qwen3-window-from-layer-1": ("qwen3", dict(use_sliding_window=True, sliding_window=5,
                                                max_window_layers=1)),
    # the gated MLP with the other activations transformers' ACT2FN gives these families
    "llama-gelu": ("llama", dict(hidden_act="gelu")),
    "qwen2-gelu-tanh": ("qwen2", dict(hidden_act="gelu_pytorch_tanh")),
    "mistral-gelu-new": ("mistral", dict(hidden_act="gelu_new")),
}

# Config spellings found on the hub, applied to config.json after saving (the eager model reads
# the edited file too): a key transformers 5 always writes may be missing, or present but off.
CONFIG_EDITS = {
    # older Llama checkpoints have no head_dim key: it is hidden_size / num_attention_heads
    "llama-no-head-dim-key": ("llama", {}, lambda cfg: cfg.pop("head_dim")),
    # Qwen2.5 ships "sliding_window": 32768 with "use_sliding_window": false: no window at all
    "qwen2-window-present-but-off": ("qwen2", {}, lambda cfg: cfg.update(
        sliding_window=5, max_window_layers=1, use_sliding_window=False)),
    "qwen3-window-present-but-off": ("qwen3", {}, lambda cfg: cfg.update(
        sliding_window=5, max_window_layers=1, use_sliding_window=False)),
    # transformers-4 Qwen configs have no layer_types: layers >= max_window_layers slide
    "qwen2-window-without-layer-types": ("qwen2", {}, lambda cfg: (cfg.pop("layer_types"),
        cfg.update(sliding_window=5, max_window_layers=1, use_sliding_window=True))),
    "qwen3-window-without-layer-types": ("qwen3", {}, lambda cfg: (cfg.pop("layer_types"),
        cfg.update(sliding_window=5, max_window_layers=1, use_sliding_window=True))),
    # ... and use_sliding_window absent means false for them
    "qwen2-window-key-absent": ("qwen2", {}, lambda cfg: (cfg.pop("layer_types"),
        cfg.pop("use_sliding_window"), cfg.update(sliding_window=5, max_window_layers=1))),
    # transformers' Llama has no sliding window: a config that names one changes nothing
    "llama-ignores-layer-types-window": ("llama", {}, lambda cfg: cfg.update(
        sliding_window=5, layer_types=["sliding_attention", "full_attention"])),
}

# rope types whose tables depend on the positions beyond their distances (dynamic NTK rescales by
# the largest) or that reach past max_position_embeddings: also checked with position_ids given
POSITION_VARIANTS = {"rope-dynamic", "rope-yarn", "rope-llama3", "rope-longrope",
                     "positions-past-max-position-embeddings"}

VARIANT_SHAPES = {
    "rope-dynamic": [(1, 7), (1, 16), (1, 17), (3, 33)],         # below, at, over the threshold
    "rope-longrope": [(1, 7), (1, 16), (1, 17), (3, 33)],
    "mistral-window-5": [(1, 5), (1, 6), (3, 7), (3, 33)],
}


def _legacy_rope_keys(ckpt):
    """Rewrites config.json the way most hub checkpoints still spell rope: top-level rope_theta
    plus rope_scaling {"type": ...} instead of rope_parameters."""
    path = ckpt / "config.json"
    cfg = json.loads(path.read_text())
    rope = cfg.pop("rope_parameters")
    cfg["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    cfg["rope_scaling"] = rope
    path.write_text(json.dumps(cfg, indent=2))


def _guard_variant(name, ckpt):
    """Checks that the checkpoint really is the variant the test claims to exercise."""
    files = sorted(p.name for p in ckpt.glob("*.safetensors"))
    names, dtypes = set(), set()
    for f in files:
        header, _ = read_safetensors(ckpt / f)
        header.pop("__metadata__", None)
        names |= set(header)
        dtypes |= {v["dtype"] for v in header.values()}
    if name == "bf16-checkpoint":
        assert dtypes == {"BF16"}
    elif name == "fp16-checkpoint":
        assert dtypes == {"F16"}
    else:
        assert dtypes == {"F32"}
    if name.endswith("attention-bias"):
        assert {f"model.layers.0.self_attn.{p}_proj.bias" for p in "qkvo"} <= names
    if name == "sharded":
        assert len(files) > 2 and (ckpt / "model.safetensors.index.json").exists()
    if name.startswith("tied"):
        assert "lm_head.weight" not in names
    else:
        assert "lm_head.weight" in names


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_matches_eager(variant, tmp_path):
    arch, overrides = VARIANTS[variant]
    ckpt = make_checkpoint(tmp_path / "ckpt", arch, **overrides)
    _guard_variant(variant, ckpt)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic")
    check_model_full(out / "model.onnx")
    _, outs = graph_io(out / "model.onnx")
    assert outs["logits"][0] == onnx.TensorProto.FLOAT
    shapes = VARIANT_SHAPES.get(variant, [(1, 1), (3, 7), (3, 33)])
    check_against_reference(ckpt, out / "model.onnx", shapes)
    if variant in POSITION_VARIANTS:
        given = ferry_export(ckpt, tmp_path / "positions", "--dynamic", "--inputs",
                             "input_ids,attention_mask,position_ids")
        check_against_reference(ckpt, given / "model.onnx", shapes)


def test_gemma_bidirectional_attention_is_refused(tmp_path):
    """transformers' Gemma attends both ways with use_bidirectional_attention (its sdpa model;
    ferry exported it causal without a word). Refused, naming the key."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "gemma", use_bidirectional_attention=True)
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out")
    assert rc == 1 and "use_bidirectional_attention true is not supported" in err, err
    assert "config.json" in err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("variant", list(CONFIG_EDITS))
def test_config_spelling_matches_eager(variant, tmp_path):
    arch, overrides, edit = CONFIG_EDITS[variant]
    ckpt = make_checkpoint(tmp_path / "ckpt", arch, **overrides)
    cfg = json.loads((ckpt / "config.json").read_text())
    edit(cfg)
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2))
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic")
    check_against_reference(ckpt, out / "model.onnx", [(1, 1), (3, 33)])


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0, "rope_theta": ROPE_THETA},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64, "rope_theta": ROPE_THETA},
], ids=["linear", "llama3"])
def test_legacy_rope_scaling_keys(rope, tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", rope_parameters=dict(rope))
    _legacy_rope_keys(ckpt)
    assert "rope_scaling" in json.loads((ckpt / "config.json").read_text())
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic")
    check_against_reference(ckpt, out / "model.onnx", [(3, 33)])


def test_rope_variants_differ(tmp_path):
    """The rope variants must change the numbers on this model, else their tests prove nothing."""
    ids, mask, pos = make_inputs(160, 1, 33)
    plain = reference_logits(make_checkpoint(tmp_path / "plain", "llama"), ids, mask, pos)
    for name in ("rope-linear", "rope-dynamic", "rope-llama3", "rope-llama3-three-bands",
                 "rope-longrope"):
        ckpt = make_checkpoint(tmp_path / name, "llama", **VARIANTS[name][1])
        assert np.abs(reference_logits(ckpt, ids, mask, pos) - plain).max() > 1e-2, name


def test_mistral_window_changes_the_numbers(tmp_path):
    ids, mask, pos = make_inputs(160, 1, 33)
    full = reference_logits(make_checkpoint(tmp_path / "full", "mistral"), ids, mask, pos)
    win = make_checkpoint(tmp_path / "win", "mistral", sliding_window=5)
    assert np.abs(reference_logits(win, ids, mask, pos) - full).max() > 1e-2


# ---------------------------------------------------------------------------------------------
# Reduced precision


@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_fp16_export_within_bound(arch, tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", arch)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--dtype", "fp16")
    check_model_full(out / "model.onnx")
    ins, outs = graph_io(out / "model.onnx")
    assert outs["logits"][0] == onnx.TensorProto.FLOAT16
    assert ins["input_ids"][0] == onnx.TensorProto.INT64
    types = weight_initializer_types(out / "model.onnx")
    assert types and set(types.values()) == {onnx.TensorProto.FLOAT16}, types
    session = ort_session(out / "model.onnx")
    worst = 0.0
    for batch, seq in [(1, 7), (3, 33)]:
        ids, mask, pos = make_inputs(160, batch, seq)
        got = run_onnx(session, ids, mask, pos)
        assert got.dtype == np.float16
        want = reference_logits(ckpt, ids, mask, pos if takes_positions(session) else None)
        worst = max(worst, assert_logits_close(got, want, mask, FP16_ATOL, f"fp16 {batch}x{seq}"))
    # the bound is not vacuous: fp16 really is less exact than fp32
    assert worst > FP32_ATOL / 10


def test_bf16_export(tmp_path):
    """onnxruntime's CPU provider has no bf16 kernels for MatMul and friends, so a bf16 export
    cannot run there: the test states that explicitly, checks the types in the file, and runs
    the graph in onnx's numpy ReferenceEvaluator instead, against the fp32 eager model."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", dtype=torch.bfloat16)
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--dtype", "bf16")
    check_model_full(out / "model.onnx")
    ins, outs = graph_io(out / "model.onnx")
    assert outs["logits"][0] == onnx.TensorProto.BFLOAT16
    assert ins["input_ids"][0] == onnx.TensorProto.INT64
    types = weight_initializer_types(out / "model.onnx")
    assert types and set(types.values()) == {onnx.TensorProto.BFLOAT16}, types

    with pytest.raises(Exception, match="NOT_IMPLEMENTED|not implemented|Could not find an impl"):
        ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])

    evaluator = ReferenceEvaluator(str(out / "model.onnx"))
    ids, mask, pos = make_inputs(160, 3, 7)
    (got,) = evaluator.run(["logits"], {"input_ids": ids, "attention_mask": mask})
    want = reference_logits(ckpt, ids, mask, None)
    assert_logits_close(np.asarray(got, dtype=np.float32), want, mask, BF16_ATOL, "bf16")


# ---------------------------------------------------------------------------------------------
# Static shapes and explicit symbolic axes


def test_static_export_runs_only_at_traced_shape(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen3")
    out = ferry_export(ckpt, tmp_path / "onnx")
    ins, outs = graph_io(out / "model.onnx")
    assert set(ins) == {"input_ids", "attention_mask"}
    for name in ins:
        assert ins[name] == (onnx.TensorProto.INT64, [1, 8]), name
    assert outs["logits"] == (onnx.TensorProto.FLOAT, [1, 8, 160])
    check_model_full(out / "model.onnx")
    session = ort_session(out / "model.onnx")
    ids, mask, pos = make_inputs(160, 1, 8, pads=[3])
    assert_logits_close(run_onnx(session, ids, mask, pos), reference_logits(ckpt, ids, mask, None),
                        mask, what="static 1x8")
    for batch, seq in [(1, 9), (2, 8), (1, 7)]:
        ids, mask, pos = make_inputs(160, batch, seq)
        with pytest.raises(Exception, match="(?i)dimension|shape"):
            run_onnx(session, ids, mask, pos)


def test_static_export_example_shape(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "onnx", "--example-shape", "input_ids=2x5")
    ins, outs = graph_io(out / "model.onnx")
    assert ins["attention_mask"] == (onnx.TensorProto.INT64, [2, 5])
    assert outs["logits"][1] == [2, 5, 160]
    check_against_reference(ckpt, out / "model.onnx", [(2, 5)])
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == [2, 5] and meta["inputs"][0]["traced_shape"] == [2, 5]


def _dims_for_all_inputs(axis, spec):
    return [arg for name in ("input_ids", "attention_mask")
            for arg in ("--dim", f"{name}:{axis}={spec}")]


def test_explicit_dims_with_ranges(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "mistral")
    out = ferry_export(ckpt, tmp_path / "onnx", *_dims_for_all_inputs(0, "batch:1:8"),
                       *_dims_for_all_inputs(1, "sequence:1:64"))
    ins, _ = graph_io(out / "model.onnx")
    assert ins["input_ids"] == (onnx.TensorProto.INT64, ["batch", "sequence"])
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["symbols"]["batch"]["min"] == 1 and meta["symbols"]["batch"]["max"] == 8
    assert meta["symbols"]["sequence"]["min"] == 1 and meta["symbols"]["sequence"]["max"] == 64
    assert meta["inputs"][0]["shape"] == ["batch", "sequence"]
    check_against_reference(ckpt, out / "model.onnx", [(3, 33)])


def test_only_sequence_dynamic(tmp_path):
    """A --dim on input_ids alone: the axis it names is shared by every input."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "onnx", "--dim", "input_ids:1=sequence", "--inputs",
                       "input_ids,attention_mask,position_ids")
    ins, outs = graph_io(out / "model.onnx")
    for name in ("input_ids", "attention_mask", "position_ids"):
        assert ins[name] == (onnx.TensorProto.INT64, [1, "sequence"]), name
    assert outs["logits"][1] == [1, "sequence", 160]
    session = ort_session(out / "model.onnx")
    check_against_reference(ckpt, out / "model.onnx", [(1, 7), (1, 33)], session=session)
    ids, mask, pos = make_inputs(160, 2, 7)
    with pytest.raises(Exception, match="(?i)dimension|shape"):
        run_onnx(session, ids, mask, pos)


def test_demo_fixture(tmp_path):
    """fixtures/tiny-llama (what `make demo` exports) against transformers."""
    from conftest import ROOT

    ckpt = ROOT / "fixtures" / "tiny-llama"
    out = ferry_export(ckpt, tmp_path / "onnx", "--format", "onnx", "--dynamic")
    check_model_full(out / "model.onnx")
    check_against_reference(ckpt, out / "model.onnx", [(1, 1), (3, 33)])


@pytest.mark.parametrize("opset", [17, 23])
def test_opset(opset, tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen3")
    out = ferry_export(ckpt, tmp_path / "onnx", "--dynamic", "--opset", str(opset))
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [opset]
    check_model_full(out / "model.onnx")
    check_against_reference(ckpt, out / "model.onnx", [(3, 7)])


def test_hub_cache_id_and_revision(tmp_path):
    """MODEL as a hub id resolves offline under $HF_HOME/hub, by refs/main or --revision. The
    main snapshot is laid out as huggingface_hub does it: symlinks into blobs/."""
    import hashlib
    import os

    hub = tmp_path / "hf" / "hub" / "models--acme--tiny"
    ckpt = make_checkpoint(hub / "snapshots" / "0123abcd", "mistral")
    other = make_checkpoint(hub / "snapshots" / "feedbeef", "mistral", seed=7)
    (hub / "blobs").mkdir()
    for f in list(ckpt.iterdir()):
        blob = hub / "blobs" / hashlib.sha256(f.read_bytes()).hexdigest()
        f.rename(blob)
        os.symlink(os.path.relpath(blob, ckpt), f)
    (hub / "refs").mkdir()
    (hub / "refs" / "main").write_text("0123abcd")
    env = {"HF_HOME": str(tmp_path / "hf")}
    out = ferry_export("acme/tiny", tmp_path / "main", "--dynamic", env=env)
    check_against_reference(ckpt, out / "model.onnx", [(3, 7)])
    out = ferry_export("acme/tiny", tmp_path / "rev", "--dynamic", "--revision", "feedbeef",
                       env=env)
    check_against_reference(other, out / "model.onnx", [(3, 7)])
    rc, _, err = run_ferry("export", "acme/tiny", tmp_path / "nope", "--revision", "v9", env=env)
    assert rc == 1 and "v9" in err and not (tmp_path / "nope").exists()


@pytest.mark.parametrize("binary", [b[1] for b in ferry_builds()], ids=[b[0] for b in ferry_builds()])
def test_exports_under_each_build(binary, tmp_path):
    """The main export paths once per build: under the ASan/UBSan build (FERRY_BUILD_SAN) any
    memory error or leak exits 86 and fails here; outputs must still match the oracle."""
    jobs = [("llama", {}, ["--dynamic"]), ("mistral", dict(sliding_window=5), ["--dynamic"]),
            ("qwen2", dict(max_shard_size="40KB"), ["--dynamic"]),
            ("qwen3", dict(dtype=torch.bfloat16, tie_word_embeddings=True), ["--dynamic"]),
            ("qwen3", {}, ["--dtype", "fp16"]), ("llama", {}, ["--dtype", "bf16"])]
    for n, (arch, overrides, flags) in enumerate(jobs):
        ckpt = make_checkpoint(tmp_path / f"ckpt{n}", arch, **overrides)
        out = tmp_path / f"out{n}"
        rc, _, err = run_ferry("export", ckpt, out, "--quiet", *flags, binary=binary)
        assert rc == 0 and err == "", f"{arch} {flags}: exit {rc}: {err[-3000:]}"
        if "--dtype" not in flags:
            check_against_reference(ckpt, out / "model.onnx", [(3, 7)])
        else:
            check_model_full(out / "model.onnx")
