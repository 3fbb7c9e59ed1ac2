"""Weights beyond fp16's range (+-65504) become inf in an fp16 export, as torch's .half()
makes them (and a quantized one's dequantized values, or its scales, do too); ferry says so
instead of writing them silently: one warning after the save, with the count and the first
tensor, from the CLI and as a FerryWarning from save_pretrained, each weight counted once
however many files hold it. The count is checked against the infinities in the written ONNX
weights; bf16 and fp32 keep every value and warn of nothing. OpenVINO's compress_to_fp16
saturates, as OpenVINO's own compression does: no inf, but the values changed, which it says
in a warning of its own."""

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_checkpoint, run_ferry

BIG = "model.layers.1.mlp.down_proj.weight"
LINE = ("3 exported weight values are beyond fp16's range (+-65504), where it holds only inf, "
        f"the first from checkpoint tensor '{BIG}'")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from safetensors.torch import load_file, save_file

    path = make_checkpoint(tmp_path_factory.mktemp("overflow") / "ckpt")
    weights = load_file(path / "model.safetensors")
    weights[BIG][0, :2] = 1e5
    weights[BIG][1, 0] = -7e4
    weights[BIG][1, 1] = 65504.0  # fp16's largest: stays finite
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


def overflow_lines(stderr):
    return [line for line in stderr.splitlines() if "range" in line and "only inf" in line]


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_fp16_export_warns_of_each_overflow(ckpt, tmp_path, fmt):
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "--format", fmt, "--dtype", "fp16")
    assert rc == 0, err
    lines = overflow_lines(err)
    assert len(lines) == 1 and lines[0].startswith("ferry: warning: " + LINE), err
    assert "export in bf16 or fp32 instead" in lines[0]
    if fmt == "onnx":
        import onnx
        from onnx import numpy_helper

        model = onnx.load(str(tmp_path / "out" / "model.onnx"))
        infs = sum(int(np.isinf(numpy_helper.to_array(t)).sum()) for t in model.graph.initializer)
        assert infs == 3  # the count said is the count written


@pytest.mark.parametrize("flags", [["--dtype", "bf16"], []], ids=["bf16", "fp32"])
def test_no_warning_where_every_value_fits(ckpt, tmp_path, flags):
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", *flags)
    assert rc == 0, err
    assert overflow_lines(err) == [] and "range" not in err, err


@pytest.mark.parametrize("generation", [[], ["--for-generation", "--disable-stateful"]],
                         ids=["plain", "prefill-decode"])
def test_compress_to_fp16_says_what_it_clamped(ckpt, tmp_path, generation):
    """compress_to_fp16 stored 1e5 as 65504 without a word, where --dtype fp16
    warned of the same weights. Counted once however many files hold the weight; counted as
    --dtype fp16 counts: not 65510 (fp16 rounds it to 65504 anyway), nor the checkpoint's own
    inf."""
    import shutil

    import openvino as ov
    from safetensors.torch import load_file, save_file

    edge = Path(shutil.copytree(ckpt, tmp_path / "edge"))
    weights = load_file(edge / "model.safetensors")
    weights[BIG][2, 0] = 65510.0
    weights[BIG][2, 1] = float("inf")
    save_file(weights, edge / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_ferry("export", edge, tmp_path / "out", "--format", "openvino",
                           "--compress-to-fp16", *generation)
    assert rc == 0, err
    lines = [line for line in err.splitlines() if line.startswith("ferry: warning: ")
             and "compress_to_fp16" in line]
    assert overflow_lines(err) == [] and len(lines) == 1, err
    assert lines[0].startswith(
        "ferry: warning: 3 exported weight values are beyond fp16's range (+-65504), stored as "
        f"+-65504 by compress_to_fp16, the first from checkpoint tensor '{BIG}'"), lines[0]
    xml = sorted((tmp_path / "out").glob("*.xml"))[0]
    model = ov.Core().read_model(xml)
    consts = [op.get_data() for op in model.get_ops() if op.get_type_name() == "Constant"
              and op.get_output_element_type(0) == ov.Type.f16]
    assert all(np.isfinite(c).all() for c in consts)
    # 3 clamped, 65504 as it was, 65510 rounded, inf clamped
    assert sum(int((np.abs(c) == 65504).sum()) for c in consts) == 6


def test_save_pretrained_warns_once_per_save(ckpt, tmp_path):
    from ferry import FerryWarning, OnnxConfig, OnnxExporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = OnnxExporter().export(ckpt, config=OnnxConfig(dtype=torch.float16))
    for out in ("first", "second"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            exported.save_pretrained(tmp_path / out)
        said = [str(w.message) for w in caught if issubclass(w.category, FerryWarning)]
        assert said == [said[0]] and said[0].startswith(LINE), said


# int8 (symmetric, block 32): 65504 beside -7e4 has scale -70000/128 = -546.875, in fp16 -547;
# its code round(65504 / -546.875) + 128 = 8 dequantizes to (8 - 128) * -547 = 65640, past
# 65520: inf in the export too. int4's scale -8750 brings it back to 61250.
@pytest.mark.parametrize("flags, count", [(["--quantize", "int4"], 3),
                                          (["--quantize", "int8"], 4),
                                          (["--format", "openvino", "--for-generation",
                                            "--dynamic", "--disable-stateful"], 3)],
                         ids=["int4", "int8", "openvino-prefill-and-decode"])
def test_quantized_and_repeated_weights_counted_once(ckpt, tmp_path, flags, count):
    """Quantized fp16 exports gave NaN logits without a word (a dequantized
    value, or an int4 scale, beyond fp16), and a weight in two files (OpenVINO's prefill and
    decode .bin) was counted twice."""
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "--dtype", "fp16", *flags)
    assert rc == 0, err
    lines = overflow_lines(err)
    assert len(lines) == 1 and lines[0].startswith(
        "ferry: warning: " + LINE.replace("3 ", f"{count} ", 1)), err


def test_one_value_is_singular(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_checkpoint(tmp_path / "one")
    weights = load_file(path / "model.safetensors")
    weights["model.norm.weight"][0] = 7e4
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_ferry("export", path, tmp_path / "out", "--dtype", "fp16")
    assert rc == 0, err
    assert overflow_lines(err) == [
        "ferry: warning: 1 exported weight value is beyond fp16's range (+-65504), where it "
        "holds only inf, the first from checkpoint tensor 'model.norm.weight': the export's "
        "outputs may be inf or NaN; export in bf16 or fp32 instead"], err



def test_warning_at_the_callers_line_through_an_implicit_save(ckpt):
    """Calling an export never saved saves it aside first: its warning points at the call
    (at ferry's own exported.py)."""
    import numpy as np

    from ferry import FerryWarning, OnnxConfig, OnnxExporter

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exported = OnnxExporter().export(ckpt, config=OnnxConfig(dtype=torch.float16,
                                                                  dynamic=True))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported(input_ids=np.array([[1, 2, 3]]))
    said = [w for w in caught if issubclass(w.category, FerryWarning)]
    assert [w.filename for w in said] == [__file__], [(w.filename, str(w.message)) for w in said]
    assert str(said[0].message).startswith(LINE)


def _with(tmp_path, name, edits, **config):
    from safetensors.torch import load_file, save_file

    path = make_checkpoint(tmp_path / name, **config)
    weights = load_file(path / "model.safetensors")
    for tensor, index, value in edits:
        weights[tensor][index] = value
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


def test_what_a_quantized_weight_dequantizes_to(tmp_path):
    """Counted on the dequantized values, as fp16 holds them: 65500 beside
    -2212 in an asymmetric block dequantizes past 65520 (a zero point's rounding) and is inf,
    though within range in the checkpoint; 65510 alone dequantizes to 65504 and is not."""
    proj = "model.layers.0.self_attn.o_proj.weight"
    over = _with(tmp_path, "over", [(proj, (0, 0), 65500.0), (proj, (0, 1), -2212.0)])
    rc, _, err = run_ferry("export", over, tmp_path / "o1", "--dtype", "fp16", "--quantize",
                           "int4", "--asymmetric")
    assert rc == 0, err
    assert [line[len("ferry: warning: "):].split(":")[0] for line in overflow_lines(err)] == [
        "1 exported weight value is beyond fp16's range (+-65504), where it holds only inf, the "
        f"first from checkpoint tensor '{proj}'"], err
    near = _with(tmp_path, "near", [(proj, (0, 0), 65510.0)])
    for flags in ([], ["--quantize", "int4"]):
        rc, _, err = run_ferry("export", near, tmp_path / f"o2{len(flags)}", "--dtype", "fp16",
                               *flags)
        assert rc == 0 and overflow_lines(err) == [], err


def test_many_weights_in_two_files_counted_once(tmp_path):
    """Past 32 weights, one in two files (OpenVINO's prefill and decode) was
    counted twice."""
    names = [f"model.layers.{layer}.{part}" for layer in range(2) for part in (
        "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight")]
    edits = [(name, (0, k), 7e4) for name in names for k in range(3)]  # 14 tensors, 42 values
    path = _with(tmp_path, "many", edits)
    rc, _, err = run_ferry("export", path, tmp_path / "out", "--dtype", "fp16", "--format",
                           "openvino", "--for-generation", "--dynamic", "--disable-stateful")
    assert rc == 0, err
    lines = overflow_lines(err)
    assert len(lines) == 1 and lines[0].startswith("ferry: warning: 42 exported weight values"), \
        err

