"""Weight-only quantization (--quantize int4|int8) in the standard ONNX graph: DequantizeLinear
(opset 21, uint4/uint8 codes in blocks along the input axis) feeding the float ops.

The oracle is transformers' eager model on a copy of the checkpoint whose quantized weights are
replaced by what onnxruntime's own quantizer (quantize_matmul_4bits/_8bits) makes of them,
dequantized in numpy (quant_ref.py): the exported graph must compute those logits within the fp32
bound, for every family, int4 and int8, symmetric and asymmetric, and through generation.
Quantization quality on real weights is test_quantize_quality.py's."""

import json
from functools import partial

import onnx
import pytest

from conftest import (ARCHS, MOE_ARCHS, check_against_reference, check_export_error, ferry_builds,
                      ferry_export, run_ferry)
from quant_ref import checkpoint_with, dequantized_checkpoint, exported_weights

SCHEMES = {
    "int4-sym-b16": (4, 16, True),
    "int4-asym-b16": (4, 16, False),
    # intermediate 96: 3 blocks a row, whose zero points DequantizeLinear reads packed across
    # rows (refused until a review: ferry wrote them only a byte a row); hidden 64: 1 block
    "int4-asym-b32": (4, 32, False),
    "int4-asym-b64": (4, 64, False),
    "int4-sym-b32": (4, 32, True),      # intermediate 96: 3 blocks a row, odd
    "int8-sym-b32": (8, 32, True),
    "int8-asym-b32": (8, 32, False),
    "int4-sym-b64": (4, 64, True),      # intermediate 96: a short last block (32 of 64)
    "int8-asym-b64": (8, 64, False),
}
SHAPES = [(1, 7), (3, 33)]


def flags(bits, block, symmetric):
    return ["--quantize", f"int{bits}", "--block-size", str(block)] + \
        ([] if symmetric else ["--asymmetric"])


# the mixtures' quantized experts have their own tests, in each runtime's form
# (test_moe.py::test_quantized_experts_match_dequantized_reference)
DENSE = [arch for arch in ARCHS if arch not in MOE_ARCHS]


@pytest.mark.parametrize("scheme", list(SCHEMES))
@pytest.mark.parametrize("arch", DENSE)
def test_logits_match_dequantized_reference(ckpts, tmp_path, arch, scheme, record_property):
    bits, block, sym = SCHEMES[scheme]
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *flags(bits, block, sym), "--quiet")
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", bits, block, sym)
    worst = check_against_reference(ref, out / "model.onnx", SHAPES)
    record_property("quantized_logits_max_abs_err", worst)


@pytest.mark.parametrize("case", ["tied-head-only", "tied-embeddings-too", "float-head",
                                  "untied-embeddings-too"])
def test_embeddings_and_head(ckpts, tmp_path, case):
    tied = case.startswith("tied")
    ckpt = ckpts("llama", tie_word_embeddings=tied)
    embeddings = case.endswith("too")
    lm_head = case != "float-head"
    extra = (["--quantize-embeddings"] if embeddings else []) + \
        ([] if lm_head else ["--float-lm-head"])
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", *flags(4, 16, True), *extra,
                       "--quiet")
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 16, True, embeddings=embeddings,
                                 lm_head=lm_head)
    check_against_reference(ref, out / "model.onnx", SHAPES)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    embed = "model.embed_tokens.weight"
    float_embed = inits[embed].data_type == onnx.TensorProto.FLOAT
    assert float_embed == (not embeddings)
    assert (embed + "_scales" in inits) == embeddings
    if tied and lm_head and not embeddings:
        # the table is read twice: float by the embedding, quantized by the head
        assert embed + "_q4" in inits and embed + "_q4_scales" in inits
    if not lm_head:
        head = embed if tied else "lm_head.weight"
        assert inits[head].data_type == onnx.TensorProto.FLOAT and head + "_scales" not in inits


def test_graph_structure_and_manifest(ckpts, tmp_path):
    """uint4 codes, scales and zero points as DequantizeLinear's inputs (axis 1, block_size),
    onnx.checker's full check, export.json recording the quantizer, and a data file near the
    size int4 implies."""
    ckpt = ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "q", *flags(4, 16, True), "--quiet")
    onnx.checker.check_model(str(out / "model.onnx"), full_check=True)
    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    inits = {t.name: t for t in model.graph.initializer}
    dq = [n for n in model.graph.node if n.op_type == "DequantizeLinear"]
    n_linear = 2 * 7 + 1
    assert len(dq) == n_linear
    for n in dq:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs == {"axis": 1, "block_size": 16}
        codes, scales, zeros = (inits[i] for i in n.input)
        assert codes.data_type == onnx.TensorProto.UINT4
        assert zeros.data_type == onnx.TensorProto.UINT4
        assert scales.data_type == onnx.TensorProto.FLOAT
        assert list(scales.dims) == [codes.dims[0], codes.dims[1] // 16] == list(zeros.dims)
    q = json.loads((out / "export.json").read_text())
    cfg = q["components"]["model"]["metadata"]["export_config"]
    assert cfg["quantizer"] == {"bits": 4, "block_size": 16, "symmetric": True,
                                "quantize_embeddings": False, "quantize_lm_head": True,
                                "method": "rtn"}
    # each quantized linear: 4 bits + an fp32 scale and a 4-bit zero point per 16 inputs =
    # 6.25 bits where fp32 had 32 (the data file itself pads every tensor to 4 KiB)
    def stored(t):
        return int({e.key: e.value for e in t.external_data}["length"])
    for n in dq:
        codes, scales, zeros = (inits[i] for i in n.input)
        rows, cols = codes.dims
        assert sum(stored(t) for t in (codes, scales, zeros)) == rows * cols * 6.25 / 8


@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
def test_mse_searched_scales(ckpts, tmp_path, symmetric):
    """--quant-method mse: every tensor's error (squared, weighted by each weight's square,
    the search's measure) at most RTN's and lower for some; the graph computes with what it
    stores (transformers on the export's own dequantized weights gives its logits);
    export.json and inspect say so. Quality on real weights: test_quantize_quality.py."""
    from quant_ref import _read_f32
    ckpt = ckpts("llama")
    outs = {m: ferry_export(ckpt, tmp_path / m, "--dynamic", *flags(4, 16, symmetric),
                            "--quant-method", m, "--quiet") for m in ("rtn", "mse")}
    original = _read_f32(ckpt / "model.safetensors")
    got = {m: exported_weights(out / "model.onnx") for m, out in outs.items()}
    assert got["rtn"].keys() == got["mse"].keys() and len(got["rtn"]) == 2 * 7 + 1
    lower = 0
    for name, w in got["rtn"].items():
        x = original[name]
        err = {m: float((((x - got[m][name]) * x) ** 2).sum()) for m in got}
        assert err["mse"] <= err["rtn"] * (1 + 1e-5), (name, err)
        lower += err["mse"] < err["rtn"] * 0.999
    assert lower >= 5, lower
    ref = checkpoint_with(ckpt, tmp_path / "ref", got["mse"])
    check_against_reference(ref, outs["mse"] / "model.onnx", SHAPES)
    manifest = json.loads((outs["mse"] / "export.json").read_text())
    assert manifest["components"]["model"]["metadata"]["export_config"]["quantizer"][
        "method"] == "mse"
    rc, stdout, _ = run_ferry("inspect", outs["mse"])
    assert rc == 0 and "mse-searched scales" in stdout, stdout


# ---------------------------------------------------------------------------------------------
# generation: the same cache layouts as test_generation.py, quantized


GEN_SCHEMES = {"int4-sym-b16": (4, 16, True), "int8-asym-b32": (8, 32, False)}


@pytest.fixture(scope="module")
def quant_families(tmp_path_factory):
    from test_generation import Family
    made = {}

    def get(arch, scheme):
        if (arch, scheme) not in made:
            bits, block, sym = GEN_SCHEMES[scheme]
            made[arch, scheme] = Family(
                tmp_path_factory.mktemp(f"qgen-{arch}-{scheme}"), arch, flags(bits, block, sym),
                partial(dequantized_checkpoint, bits=bits, block=block, symmetric=sym))
        return made[arch, scheme]
    return get


@pytest.mark.parametrize("loop", ["dynamic", "mtd_chunks3", "static_mtd", "static"])
@pytest.mark.parametrize("scheme", list(GEN_SCHEMES))
@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_generation_matches_dequantized_generate(quant_families, arch, scheme, loop):
    from test_generation import check_loop
    check_loop(quant_families(arch, scheme), loop)


# ---------------------------------------------------------------------------------------------
# errors: one line naming the option or tensor, exit 1 (2 for usage), nothing written


ERRORS = {
    "block-size-without-quantize": (["--block-size", "32"], ["--block-size", "--quantize"]),
    "float-head-without-quantize": (["--float-lm-head"], ["--float-lm-head", "--quantize"]),
    "accuracy-level-standard": (["--quantize", "int4", "--accuracy-level", "4"],
                                ["--accuracy-level", "MatMulNBits", "--ort-fusions"]),
    "bf16-scales": (["--quantize", "int8", "--dtype", "bf16"], ["fp32 or fp16", "bf16"]),
    "old-opset": (["--quantize", "int8", "--opset", "20"], ["opset 21", "20"]),
    "bad-bits": (["--quantize", "int3"], ["--quantize", "int3"]),
    "bad-block": (["--quantize", "int4", "--block-size", "48"], ["--block-size 48"]),
    "method-without-quantize": (["--quant-method", "mse"], ["--quant-method", "--quantize"]),
    "bad-method": (["--quantize", "int4", "--quant-method", "gptq"], ["--quant-method gptq"]),
    "mse-int8": (["--quantize", "int8", "--quant-method", "mse"], ["--quant-method mse", "int4"]),
}
# command-line conflicts are usage errors (2); what the export finds wrong, 1
USAGE = {"block-size-without-quantize", "float-head-without-quantize", "accuracy-level-standard",
         "bad-bits", "bad-block", "method-without-quantize", "bad-method", "mse-int8"}


@pytest.mark.parametrize("build", ferry_builds(), ids=lambda b: b[0])
@pytest.mark.parametrize("case", list(ERRORS))
def test_errors(ckpts, tmp_path, case, build):
    args, needles = ERRORS[case]
    out = tmp_path / "out"
    check_export_error(ckpts("llama"), out, args, needles, 2 if case in USAGE else 1, build[1])


def test_rows_no_block_divides_stay_float(tmp_path):
    """Where a format's quantized rows hold whole blocks only (OpenVINO: of 16 or more;
    ExecuTorch's XNNPACK: 32), a weight whose rows are no whole number of them (Qwen2.5-VL's
    tower MLP is 3420 wide) stays float, with one warning line naming it, and the rest is
    quantized as ever; both refused the whole export. ONNX keeps a short last block."""
    import torch
    from test_openvino import check_shapes, compile_ov
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=64, intermediate_size=40, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    ckpt = tmp_path / "ckpt"
    LlamaForCausalLM(config).eval().save_pretrained(ckpt)
    for fmt, title, smallest in (("openvino", "OpenVINO", 16), ("executorch", "ExecuTorch", 32)):
        rc, _, err = run_ferry("export", ckpt, tmp_path / fmt, "--format", fmt, "--dynamic",
                               "--quantize", "int4")
        assert rc == 0 and (f"--quantize: some weights stay float: their rows are no whole "
                            f"number of blocks of {smallest}, the smallest block {title} "
                            "quantizes (the first: 'model.layers.0.mlp.down_proj.weight', 40 "
                            "inputs)") in err, (fmt, rc, err)
    # nothing quantizable at all (every row 40 or 48 wide, XNNPACK's blocks 32): refused,
    # not an fp32 export labelled int4
    narrow = tmp_path / "narrow"
    LlamaForCausalLM(LlamaConfig(hidden_size=48, intermediate_size=40, num_hidden_layers=1,
                                 num_attention_heads=4, num_key_value_heads=2, vocab_size=256,
                                 max_position_embeddings=128)).save_pretrained(narrow)
    check_export_error(narrow, tmp_path / "none", ["--format", "executorch", "--quantize",
                                                   "int4"],
                       ["--quantize int4: no weight can be quantized", "ExecuTorch",
                        "export without --quantize"], 1)
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 4, 32, True, whole_block_min=16)
    check_shapes(ref, compile_ov(tmp_path / "openvino")[1], SHAPES)
    rc, _, err = run_ferry("export", ckpt, tmp_path / "onnx", "--dynamic", "--quantize", "int4")
    assert rc == 0 and "stay float" not in err, err
    graph = onnx.load(tmp_path / "onnx" / "model.onnx", load_external_data=False).graph
    assert any("down_proj" in i for n in graph.node if n.op_type == "DequantizeLinear"
               for i in n.input)


def test_already_quantized_checkpoint_refused(ckpts, tmp_path):
    """A checkpoint whose config.json says it is quantized (GPTQ, AWQ, fp8, ...) is refused,
    quantizing or not: its tensors read as float weights would give wrong numbers."""
    import shutil
    ckpt = tmp_path / "gptq"
    shutil.copytree(ckpts("llama"), ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "gptq", "bits": 4}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    for args in ([], ["--quantize", "int4"]):
        rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", *args)
        assert rc == 1
        assert "quantized already" in stderr and "gptq" in stderr, stderr
        assert not (tmp_path / "out").exists()


def test_int_tensor_refused(ckpts, tmp_path):
    """A weight stored as integers (a quantized checkpoint without quantization_config) is
    refused by name, not quantized as if it were float."""
    import shutil
    from conftest import read_safetensors, write_safetensors
    ckpt = tmp_path / "ints"
    shutil.copytree(ckpts("llama"), ckpt)
    header, data = read_safetensors(ckpt / "model.safetensors")
    name = "model.layers.1.mlp.up_proj.weight"
    header[name]["dtype"] = "I32"
    write_safetensors(ckpt / "model.safetensors", header, data)
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--quantize", "int4",
                              "--block-size", "16")
    assert rc == 1
    assert name in stderr and "I32" in stderr, stderr


# ---------------------------------------------------------------------------------------------
# the recipe's "quantizer" and the Python binding's OnnxConfig(quantizer=...)


def test_python_quantizer_and_recipe(ckpts, tmp_path):
    """OnnxConfig(quantizer={...}) exports what --quantize does: the same logits as the
    dequantized reference, and the recipe's keys round-trip through export.json."""
    from ferry import AutoExportConfig, FerryError, OnnxConfig, OnnxExporter

    ckpt = ckpts("qwen2")
    config = OnnxConfig(dynamic=True, quantizer={"bits": 8, "block_size": 32,
                                                 "symmetric": False})
    exported = OnnxExporter().export(ckpt, config=config)
    exported.save_pretrained(tmp_path / "out")
    ref = dequantized_checkpoint(ckpt, tmp_path / "ref", 8, 32, False)
    check_against_reference(ref, tmp_path / "out" / "model.onnx", SHAPES)
    recorded = exported.manifest["components"]["model"]["metadata"]["export_config"]
    assert recorded["quantizer"] == {"bits": 8, "block_size": 32, "symmetric": False,
                                     "quantize_embeddings": False, "quantize_lm_head": True,
                                     "method": "rtn"}
    again = AutoExportConfig.from_dict(recorded)
    assert again.to_dict()["quantizer"] == recorded["quantizer"]
    assert OnnxConfig(quantizer="int4").to_dict()["quantizer"] == "int4"
    with pytest.raises(FerryError, match="blocksize"):
        OnnxConfig(quantizer={"bits": 4, "blocksize": 32})
    with pytest.raises(FerryError, match="int2"):
        OnnxConfig(quantizer="int2")
    with pytest.raises(FerryError, match="method"):
        OnnxConfig(quantizer={"bits": 4, "method": "hqq"})
    with pytest.raises(FerryError, match="unknown quantizer key 'weights'"):
        OnnxConfig(quantizer={"weights": "int4"})
    with pytest.raises(FerryError, match="mse applies to int4"):
        OnnxExporter().export(ckpt, config=OnnxConfig(quantizer={"bits": 8, "method": "mse"}))
    with pytest.raises(FerryError, match="ort_fusions"):
        OnnxConfig(ort_fusions="tpu")
    # the recipe's quantizer object must say how many bits (a block size alone quantizes nothing)
    with pytest.raises(FerryError, match="bits"):
        OnnxConfig(quantizer={"block_size": 32})
    # and the library refuses options that would change nothing, as the CLI does
    with pytest.raises(FerryError, match="quantiz"):
        OnnxExporter().export(ckpt, config=AutoExportConfig.from_dict(
            {"export_format": "onnx", "quantizer": {"bits": 0, "block_size": 32}}))
