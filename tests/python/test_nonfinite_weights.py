"""A checkpoint whose weights hold NaN or inf makes transformers' logits non-finite; ferry's
exports must too, and say why. Every export (ONNX plain, fp16 and each quantized variant,
OpenVINO, pt2) warns once, naming the first tensor and the count, and its runtime gives
non-finite logits where eager's are: a quantized block holding NaN or inf gets a NaN scale
instead of finite codes. A finite value whose int4 block's fp16 scale overflows counts as the
one value beyond fp16's range it is (not its whole block), and the advice is fp32, which ferry
accepts when quantizing (bf16 it refuses)."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_checkpoint, make_inputs, reference_logits, run_ferry

POKED = "model.layers.0.mlp.up_proj.weight"  # gate+up are joined by the fused graphs: source 2


# Runtimes that round activations to int8 next to quantized weights make a NaN finite there:
# the warning says so and names the setting that keeps it, which the test then runs with.
ORT_INT8_ACTIVATIONS = ("; MatMulNBits at accuracy_level 4 rounds activations to int8, which makes "
                        "NaN finite in onnxruntime: accuracy_level 0 keeps it")
OPENVINO_INT8_ACTIVATIONS = ("; OpenVINO's CPU plugin rounds activations to int8 next to "
                             "quantized weights, which makes NaN finite, unless compiled with "
                             "DYNAMIC_QUANTIZATION_GROUP_SIZE 0")


def nonfinite_line(count, note=""):
    return (f"ferry: warning: {count} checkpoint weight value{' is' if count == 1 else 's are'} "
            f"NaN or infinite, the first in tensor '{POKED}': the model's outputs may be NaN or "
            f"infinite, as transformers' are{note}")


def runtime_note(flags):
    if "--quantize" not in flags:
        return ""
    if "openvino" in flags:
        return OPENVINO_INT8_ACTIVATIONS
    if "--ort-fusions" in flags and "--accuracy-level" not in flags:
        return ORT_INT8_ACTIVATIONS
    return ""


def _poked(root, name, values):
    from safetensors.torch import load_file, save_file

    path = make_checkpoint(root / name)
    weights = load_file(path / "model.safetensors")
    for index, value in values:
        weights[POKED][index] = value
    save_file(weights, path / "model.safetensors", metadata={"format": "pt"})
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    nan = float("nan")
    return {"nan": _poked(root, "nan", [((3, 5), nan)]),
            # two in one block, one in another row: three values, two blocks
            "inf": _poked(root, "inf", [((3, 5), float("inf")), ((3, 6), -float("inf")),
                                        ((7, 40), nan)]),
            "big": _poked(root, "big", [((3, 5), 1e6)])}


def export(ckpt, out, *flags):
    rc, _, err = run_ferry("export", ckpt, out, *flags)
    assert rc == 0, err
    return Path(out), err


def inputs(ckpt):
    vocab = json.loads((Path(ckpt) / "config.json").read_text())["vocab_size"]
    ids, mask, _ = make_inputs(vocab, 2, 6)
    return ids, mask


def assert_nonfinite_where_eager_is(ckpt, got, mask):
    want = reference_logits(ckpt, *inputs(ckpt), None)
    real = mask == 1
    bad = ~np.isfinite(want[real])
    assert bad.any(), "eager's logits are finite: the checkpoint tests nothing"
    assert (~np.isfinite(np.asarray(got, dtype=np.float32)[real]))[bad].all(), \
        "finite logits where eager's are not"


def onnx_logits(path, ids, mask, accuracy_level=None):
    import onnx
    import onnxruntime as ort

    model = onnx.load(str(path))
    if accuracy_level is not None:  # the setting the warning names, on the exported weights
        for node in model.graph.node:
            for attr in node.attribute:
                if node.op_type == "MatMulNBits" and attr.name == "accuracy_level":
                    attr.i = accuracy_level

    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), opts,
                                   providers=["CPUExecutionProvider"])
    feeds = {}
    for i in session.get_inputs():
        if i.name in ("input_ids", "attention_mask"):
            feeds[i.name] = {"input_ids": ids, "attention_mask": mask}[i.name]
        elif i.name == "position_ids":
            feeds[i.name] = np.broadcast_to(np.arange(ids.shape[1]), ids.shape).copy()
        else:  # an empty cache: batch rows, no past positions
            shape = [ids.shape[0] if k == 0 else (0 if isinstance(d, str) or d is None else d)
                     for k, d in enumerate(i.shape)]
            dtype = np.float16 if "float16" in i.type else np.float32
            feeds[i.name] = np.zeros(shape, dtype)
    return session.run(["logits"], feeds)[0]


def openvino_logits(out, ids, mask, config=None):
    import openvino as ov

    model = ov.Core().compile_model(str(sorted(out.glob("*.xml"))[0]), "CPU", config or {})
    feeds = {p.get_any_name(): {"input_ids": ids, "attention_mask": mask}[p.get_any_name()]
             for p in model.inputs}
    return model(feeds)[model.output("logits")]


def pt2_logits(out, ids, mask):
    module = torch.export.load(str(out / "model.pt2")).module()
    with torch.no_grad():
        got = module(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    return (got["logits"] if isinstance(got, dict) else got).float().numpy()


CASES = {
    "onnx": ["--dynamic"],
    "onnx-fp16": ["--dynamic", "--dtype", "fp16"],
    "int8": ["--dynamic", "--quantize", "int8"],
    "int4": ["--dynamic", "--quantize", "int4"],
    "int4-fp16-scales": ["--dynamic", "--quantize", "int4", "--dtype", "fp16"],
    "int4-asymmetric": ["--dynamic", "--quantize", "int4", "--asymmetric"],
    "int4-mse": ["--dynamic", "--quantize", "int4", "--quant-method", "mse"],
    "fused-int4-generation": ["--ort-fusions", "cpu", "--quantize", "int4", "--for-generation",
                              "--dynamic"],
    "fused-int8-level0": ["--ort-fusions", "cpu", "--quantize", "int8", "--accuracy-level", "0",
                          "--dynamic"],
    "openvino": ["--format", "openvino", "--dynamic"],
    "openvino-int4": ["--format", "openvino", "--dynamic", "--quantize", "int4"],
    "openvino-generation": ["--format", "openvino", "--dynamic", "--for-generation",
                            "--disable-stateful"],
    "pt2": ["--format", "pt2", "--dynamic"],
}


@pytest.mark.parametrize("case", list(CASES))
def test_nan_is_said_once_and_reaches_the_logits(ckpts, tmp_path, case):
    ckpt = ckpts["nan"]
    out, err = export(ckpt, tmp_path / "out", *CASES[case])
    said = [line for line in err.splitlines() if "NaN or infinite" in line]
    note = runtime_note(CASES[case])
    assert said == [nonfinite_line(1, note)], err
    assert "beyond" not in err, err  # NaN is not an overflow
    if case == "openvino-generation":
        return  # prefill and decode files: counted once above; plain OpenVINO runs below
    ids, mask = inputs(ckpt)
    if case == "pt2":
        got = pt2_logits(out, ids, mask)
    elif case.startswith("openvino"):
        got = openvino_logits(out, ids, mask,
                              {"DYNAMIC_QUANTIZATION_GROUP_SIZE": "0"} if note else None)
    else:
        model = out / ("prefill.onnx" if "generation" in case else "model.onnx")
        got = onnx_logits(model, ids, mask, 0 if note else None)
    assert_nonfinite_where_eager_is(ckpt, got, mask)


@pytest.mark.parametrize("case", ["int4", "int4-fp16-scales", "fused-int4-generation"])
def test_inf_under_int4_gives_what_eager_gives(ckpts, tmp_path, case):
    """The fused int4 export turned an inf weight into finite logits, where standard int4 and
    eager give inf or NaN; under fp16 scales the inf's block was counted whole (31 values) as
    an overflow."""
    ckpt = ckpts["inf"]
    out, err = export(ckpt, tmp_path / "out", *CASES[case])
    said = [line for line in err.splitlines() if "NaN or infinite" in line]
    note = runtime_note(CASES[case])
    assert said == [nonfinite_line(3, note)], err
    assert "beyond" not in err, err
    ids, mask = inputs(ckpt)
    model = out / ("prefill.onnx" if "generation" in case else "model.onnx")
    assert_nonfinite_where_eager_is(ckpt, onnx_logits(model, ids, mask, 0 if note else None),
                                    mask)


def test_int4_fp16_scale_overflow_counts_the_value_and_advises_fp32(ckpts, tmp_path):
    """1e6 is finite: no NaN warning. Its block's fp16 scale (1e6 / 8) overflows, which makes
    the whole block NaN; the count is the one value beyond fp16's range, not the block's 32,
    and the advice is fp32 (bf16, the plain fp16 export's advice, is refused when quantizing)."""
    ckpt = ckpts["big"]
    _, err = export(ckpt, tmp_path / "out", "--quantize", "int4", "--dtype", "fp16")
    lines = [line for line in err.splitlines() if "range" in line]
    assert len(lines) == 1 and "NaN or infinite" not in err, err
    assert lines[0] == (
        "ferry: warning: 1 exported weight value is beyond fp16's range (+-65504), where it "
        f"holds only inf, the first from checkpoint tensor '{POKED}'; its block's fp16 scale "
        "overflows, which makes the whole block inf or NaN: the export's outputs may be inf or "
        "NaN; export in fp32 instead"), lines[0]
    # the advice is one ferry takes
    _, err = export(ckpt, tmp_path / "fp32", "--quantize", "int4", "--dtype", "fp32")
    assert "range" not in err and "NaN or infinite" not in err, err


@pytest.mark.parametrize("level", [None, "0"], ids=["default-4", "0"])
def test_fused_int4_fp16_scale_overflow_says_what_onnxruntime_gives(ckpts, tmp_path, level):
    """The fused export's default, accuracy_level 4, rounds activations to int8 next to the
    block whose fp16 scale overflowed: onnxruntime's logits come out finite (and far from
    eager's fp32 ones), where the warning said only inf or NaN. It now says so, and names the
    level that keeps them non-finite; at accuracy_level 0 they are."""
    ckpt = ckpts["big"]
    flags = ["--dynamic", "--quantize", "int4", "--dtype", "fp16", "--ort-fusions", "cpu"]
    flags += ["--accuracy-level", level] if level else []
    out, err = export(ckpt, tmp_path / "out", *flags)
    (line,) = [line for line in err.splitlines() if "range" in line]
    assert ("fp16 scale overflows" in line) and (ORT_INT8_ACTIVATIONS in line) == (not level), line
    ids, mask = inputs(ckpt)
    got = onnx_logits(out / "model.onnx", ids, mask, None)[mask.astype(bool)]
    assert np.isfinite(got).all() == (not level)
