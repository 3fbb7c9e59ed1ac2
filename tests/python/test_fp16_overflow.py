"""Weights beyond fp16's range (+-65504) become inf in an fp16 export, as torch's .half()
makes them (and a quantized one's dequantized values, or its scales, do too); ferry says so
instead of writing them silently: one warning after the save, with the count and the first
tensor, from the CLI and as a FerryWarning from save_pretrained, each weight counted once
however many files hold it. The count is checked against the infinities in the written ONNX
weights; bf16, fp32 and OpenVINO's compress_to_fp16 (which saturates, as OpenVINO's own
compression does) keep every value finite and warn of nothing."""

import warnings

import numpy as np
import pytest
import torch

from conftest import make_checkpoint, run_ferry

BIG = "model.layers.1.mlp.down_proj.weight"
LINE = ("3 weight values are beyond fp16's range (+-65504), where it holds only inf, the first "
        f"in checkpoint tensor '{BIG}'")


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


@pytest.mark.parametrize("flags", [["--dtype", "bf16"], [],
                                   ["--format", "openvino", "--compress-to-fp16"]],
                         ids=["bf16", "fp32", "openvino-compress-to-fp16"])
def test_no_warning_where_every_value_fits(ckpt, tmp_path, flags):
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", *flags)
    assert rc == 0, err
    assert overflow_lines(err) == [], err


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


@pytest.mark.parametrize("flags", [["--quantize", "int4"], ["--quantize", "int8"],
                                   ["--format", "openvino", "--for-generation", "--dynamic",
                                    "--disable-stateful"]],
                         ids=["int4", "int8", "openvino-prefill-and-decode"])
def test_quantized_and_repeated_weights_counted_once(ckpt, tmp_path, flags):
    """Found by review: quantized fp16 exports gave NaN logits without a word (a dequantized
    value, or an int4 scale, beyond fp16), and a weight in two files (OpenVINO's prefill and
    decode .bin) was counted twice."""
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "--dtype", "fp16", *flags)
    assert rc == 0, err
    lines = overflow_lines(err)
    assert len(lines) == 1 and lines[0].startswith("ferry: warning: " + LINE), err


def test_one_value_is_singular(tmp_path):
    from safetensors.torch import load_file, save_file

    path = make_checkpoint(tmp_path / "one")
    weights = load_file(path / "model.safetensors")
    weights["model.norm.weight"][0] = 7e4
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    rc, _, err = run_ferry("export", path, tmp_path / "out", "--dtype", "fp16")
    assert rc == 0, err
    assert overflow_lines(err) == [
        "ferry: warning: 1 weight value is beyond fp16's range (+-65504), where it holds only "
        "inf, the first in checkpoint tensor 'model.norm.weight': the export's outputs may be "
        "inf or NaN; export in bf16 or fp32 instead"], err



def test_warning_at_the_callers_line_through_an_implicit_save(ckpt):
    """Calling an export never saved saves it aside first: its warning points at the call
    (found by review: at ferry's own exported.py)."""
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
