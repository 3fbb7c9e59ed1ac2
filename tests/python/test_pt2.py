"""The torch.export archive (--format pt2, the guide's DynamoExporter) against the oracle: torch
2.13 loads the model.pt2 ferry wrote with torch.export.load, its .module() runs it, and
transformers' eager model runs the same checkpoint. fp32 logits agree within 1e-4 at every real
position, batch 1 and 3 (left-padded) x sequence 1, 7, 33, dynamic and static, for every
family; fp16 and bf16 exports within the ONNX oracle's bounds. run_decompositions() lowers the
program to core aten and gives the same logits, and AOTInductor compiles it into a package
that runs to the same logits. The archive holds what torch's own exporter puts there:
parameters named by the checkpoint's state_dict keys, holding its values; one symbol per
dynamic axis with its range, which the loaded module enforces. What the format cannot hold yet
(generation components, quantized weights) and other formats' options fail with one line and
write nothing."""

import json
import zipfile

import numpy as np
import pytest
import torch

from conftest import (ARCHS, FP32_ATOL, assert_logits_close, check_export_error, ferry_export,
                      make_inputs, reference_logits, reference_model,
                      run_ferry)
from test_oracle_onnx import BF16_ATOL, FP16_ATOL

SHAPES = [(1, 1), (1, 7), (1, 33), (3, 1), (3, 7), (3, 33)]
VOCAB = 160


def load(out):
    return torch.export.load(str(out / "model.pt2"))


def run(module, ids, mask, pos):
    with torch.no_grad():
        out = module(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                     position_ids=torch.from_numpy(pos))
    return out["logits"].float().numpy()


def check_shapes(ckpt, module, shapes, atol=FP32_ATOL, seed=0):
    worst = 0.0
    for batch, seq in shapes:
        ids, mask, pos = make_inputs(VOCAB, batch, seq, seed=seed)
        worst = max(worst, assert_logits_close(run(module, ids, mask, pos),
                                               reference_logits(ckpt, ids, mask, pos), mask,
                                               atol=atol, what=f"{batch}x{seq}") or 0.0)
    return worst


@pytest.fixture(scope="module", params=list(ARCHS))
def family(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"pt2-{arch}")
    from conftest import make_checkpoint

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
    assert set(state) == set(weights), set(state) ^ set(weights)
    for name, value in state.items():
        assert isinstance(value, torch.nn.Parameter), name
        assert torch.equal(value.detach(), weights[name]), name
    sig = program.graph_signature
    assert list(sig.user_inputs) == ["input_ids", "attention_mask", "position_ids"]
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
    with pytest.raises(Exception, match="equal to 7"):
        run(program.module(), ids, mask, pos)


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
        run(program.module(), ids, mask, pos)


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
                                  attention_mask=torch.from_numpy(mask),
                                  position_ids=torch.from_numpy(pos))["logits"]
    assert logits.dtype == want
    record_property("max_abs_error",
                    check_shapes(ckpt, program.module(), [(1, 7), (3, 33)], atol=atol))


def test_tied_embeddings(ckpts, tmp_path):
    """A tied lm_head reads the embedding table itself: one parameter, one copy on disk."""
    ckpt = ckpts("llama", tie_word_embeddings=True)
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    program = load(out)
    assert "model.embed_tokens.weight" in program.state_dict
    table = program.state_dict["model.embed_tokens.weight"]
    assert (out / "model.pt2").stat().st_size < 2 * table.numel() * 4 + \
        sum(p.numel() * 4 for n, p in program.state_dict.items() if "embed" not in n) + 200_000
    check_shapes(ckpt, program.module(), [(3, 7)])


def test_aot_compile(ckpts, tmp_path, record_property):
    """AOTInductor compiles the loaded program (given example inputs: the archive has none)
    into a package that runs, at other shapes too, to eager's logits."""
    ckpt = ckpts("qwen2")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    program = load(out)
    assert program.example_inputs is None
    ids, mask, pos = make_inputs(VOCAB, 2, 7)
    program.example_inputs = ((), {"input_ids": torch.from_numpy(ids),
                                   "attention_mask": torch.from_numpy(mask),
                                   "position_ids": torch.from_numpy(pos)})
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
    got = loaded(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                 position_ids=torch.from_numpy(pos)).logits
    assert isinstance(got, torch.Tensor)
    assert_logits_close(got.numpy(), reference_logits(ckpt, ids, mask, pos), mask)
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
        run(module, ids, mask, pos), reference_logits(smollm2, ids, mask, pos), mask,
        atol=REAL_ATOL))


ERRORS = {
    "generation": (["--dynamic", "--for-generation"],
                   ["for_generation", "pt2", "not written yet"], 1),
    "quantized": (["--dynamic", "--quantize", "int4"], ["int4", "pt2", "quantized"], 1),
    "ort-fusions": (["--dynamic", "--ort-fusions", "cpu"], ["ort_fusions", "onnx"], 1),
    "opset": (["--dynamic", "--opset", "21"], ["opset", "ONNX"], 1),
    "compress": (["--dynamic", "--compress-to-fp16"], ["--compress-to-fp16", "OpenVINO"], 2),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_what_it_cannot_write_yet(ckpts, tmp_path, case):
    flags, needles, code = ERRORS[case]
    check_export_error(ckpts("llama"), tmp_path / "out", ["--format", "pt2", *flags],
                       needles, code)
