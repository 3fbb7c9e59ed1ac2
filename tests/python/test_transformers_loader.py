"""transformers' own loader called the guide's way: `ExportedModel.from_pretrained(dir)(**tokens)`
with a tokenizer's output, input_ids and attention_mask, and nothing else.

transformers' exports take the inputs they were traced with, and compute the positions inside
(its forward, given no position_ids and no cache, uses arange(sequence) in every row). A plain
ferry export does the same by default, in every format: transformers' runners (onnxruntime,
OpenVINO, torch) and ferry's ExportedModel, called with input_ids and attention_mask, equal the
eager model called the same way (1e-4 at fp32), batch 1 and a left-padded batch 2.
`--inputs` makes position_ids an input again (then read: positions of stride 2 change the
logits as they change eager's), or leaves the mask out (every token real); generation
components keep all three; a bad `--inputs` is a bad command line (exit 2, one line).
"""

import json

import numpy as np
import pytest
import torch

from conftest import (FP32_ATOL, assert_logits_close, ferry_export, make_checkpoint,
                      make_inputs, reference_model, run_ferry)

from transformers.exporters import ExportedModel as HfExportedModel  # noqa: E402
from transformers.modeling_outputs import CausalLMOutputWithPast  # noqa: E402

VOCAB = 160
TOKENIZER_INPUTS = ["input_ids", "attention_mask"]
ALL_INPUTS = ["input_ids", "attention_mask", "position_ids"]
# batch 1, and batch 2 with row 1 left-padded by a third
SHAPES = [(1, 9), (2, 9)]
# how each format's export is made, and what transformers' loader needs to run it: OpenVINO's
# compute hint (a CPU with bf16 would otherwise compute in bf16), torch's consent to unpickle
FORMATS = {
    "onnx": (["--format", "onnx"], {}),
    "openvino": (["--format", "openvino"], {"config": {"INFERENCE_PRECISION_HINT": "f32"}}),
    "pt2": (["--format", "pt2", "--model-output"], {"trust_remote_code": True}),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("loader") / "ckpt", "llama")


@pytest.fixture(scope="module")
def exports(ckpt, tmp_path_factory):
    """{format: the plain --dynamic export with the default inputs}"""
    root = tmp_path_factory.mktemp("loader-exports")
    return {fmt: ferry_export(ckpt, root / fmt, "--dynamic", *flags, "--quiet")
            for fmt, (flags, _) in FORMATS.items()}


def eager(ckpt, **inputs):
    """transformers' eager logits (fp32, numpy) for the model called with `inputs` alone."""
    with torch.no_grad():
        out = reference_model(ckpt)(**{k: torch.from_numpy(v) for k, v in inputs.items()},
                                    use_cache=False)
    return out.logits.float().numpy()


def tokens(batch, seq):
    """A tokenizer's output: input_ids and a left-padded attention_mask, int64 numpy."""
    ids, mask, _ = make_inputs(VOCAB, batch, seq)
    return {"input_ids": ids, "attention_mask": mask}


def hf_loaded(out, fmt):
    return HfExportedModel.from_pretrained(out, device="cpu", **FORMATS[fmt][1])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_transformers_loader_runs_the_tokenizer_output(ckpt, exports, fmt):
    """The guide's call: transformers' loader, then the tokenizer's output as keywords. The
    logits are eager's for the same call (no position_ids either side)."""
    exported = hf_loaded(exports[fmt], fmt)
    for batch, seq in SHAPES:
        feed = tokens(batch, seq)
        out = exported(**{k: torch.from_numpy(v) for k, v in feed.items()})
        assert isinstance(out, CausalLMOutputWithPast), type(out)
        assert_logits_close(out.logits.numpy(), eager(ckpt, **feed), feed["attention_mask"],
                            FP32_ATOL, f"{fmt} {batch}x{seq} in transformers")


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_ferry_loader_runs_the_tokenizer_output(ckpt, exports, fmt):
    """ferry's ExportedModel, called the same way (numpy in, numpy out), gives the same logits;
    position_ids passed besides, as generate() makes them, are dropped unread and change
    nothing (a row's positions shifted by its padding: rotary embeddings see distances)."""
    import warnings

    import ferry

    mine = ferry.ExportedModel.from_pretrained(exports[fmt])
    for batch, seq in SHAPES:
        feed = tokens(batch, seq)
        want = eager(ckpt, **feed)
        assert_logits_close(np.asarray(mine(**feed).logits), want, feed["attention_mask"],
                            FP32_ATOL, f"{fmt} {batch}x{seq} in ferry")
        _, _, pos = make_inputs(VOCAB, batch, seq)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # generate()'s positions need no warning
            got = mine(**feed, position_ids=pos).logits
        assert_logits_close(np.asarray(got), want, feed["attention_mask"], FP32_ATOL,
                            f"{fmt} {batch}x{seq} with generate()'s position_ids")


def test_positions_the_export_ignores_are_warned_of(exports):
    """Positions that are no shift of 0, 1, ... would give other logits: dropping them warns."""
    import ferry

    mine = ferry.ExportedModel.from_pretrained(exports["onnx"])
    feed = tokens(2, 9)
    with pytest.warns(ferry.FerryWarning, match="takes no position_ids"):
        mine(**feed, position_ids=np.zeros_like(feed["input_ids"]))


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_export_json_lists_the_tokenizer_inputs(exports, fmt):
    """export.json's inputs (read off the graph), the kwargs and in_spec transformers' runners
    pass, and the program's own inputs are input_ids and attention_mask."""
    out = exports[fmt]
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert [i["name"] for i in meta["inputs"]] == TOKENIZER_INPUTS
    assert list(meta["kwargs"]) == TOKENIZER_INPUTS
    assert "position_ids" not in meta["in_spec"]
    if fmt == "pt2":
        import ferry

        program = ferry.ExportedModel.from_pretrained(out).program
        assert list(program.graph_signature.user_inputs) == TOKENIZER_INPUTS
        # the example inputs AOTInductor compiles against follow the graph's inputs
        args, kwargs = program.example_inputs
        assert args == () and list(kwargs) == TOKENIZER_INPUTS


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_inputs_position_ids_makes_them_an_input(ckpt, tmp_path, fmt):
    """--inputs input_ids,attention_mask,position_ids: the graph takes position_ids and reads
    them. Positions of stride 2 give eager's logits for those positions, in transformers'
    loader and in ferry's, and differ from the positions from 0 the default graph uses."""
    import ferry

    out = ferry_export(ckpt, tmp_path / "pos", "--dynamic", *FORMATS[fmt][0], "--inputs",
                       ",".join(ALL_INPUTS), "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert [i["name"] for i in meta["inputs"]] == ALL_INPUTS and list(meta["kwargs"]) == ALL_INPUTS
    assert meta["export_config"]["input_names"] == ALL_INPUTS  # the recipe reproduces it
    feed = tokens(2, 9)
    mask = feed["attention_mask"]
    pos = np.where(mask == 1, 2 * (np.cumsum(mask, -1) - 1), 1).astype(np.int64)
    want = eager(ckpt, **feed, position_ids=pos)
    got = hf_loaded(out, fmt)(**{k: torch.from_numpy(v) for k, v in feed.items()},
                              position_ids=torch.from_numpy(pos)).logits.numpy()
    assert_logits_close(got, want, mask, FP32_ATOL, f"{fmt} in transformers, stride-2 positions")
    mine = ferry.ExportedModel.from_pretrained(out)
    assert_logits_close(np.asarray(mine(**feed, position_ids=pos).logits), want, mask, FP32_ATOL,
                        f"{fmt} in ferry, stride-2 positions")
    real = mask == 1
    assert np.abs(want[real] - eager(ckpt, **feed)[real]).max() > 1e-2  # the positions count


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_inputs_input_ids_alone(ckpt, tmp_path, fmt):
    """--inputs input_ids: no mask either, every token real, as eager called with input_ids
    alone; a mask with padding given to ferry's call is dropped with a warning."""
    import ferry

    out = ferry_export(ckpt, tmp_path / "ids", "--dynamic", *FORMATS[fmt][0], "--inputs",
                       "input_ids", "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert [i["name"] for i in meta["inputs"]] == ["input_ids"]
    feed = tokens(2, 9)
    ids = feed["input_ids"]
    want = eager(ckpt, input_ids=ids)
    ones = np.ones_like(ids)
    got = hf_loaded(out, fmt)(input_ids=torch.from_numpy(ids)).logits.numpy()
    assert_logits_close(got, want, ones, FP32_ATOL, f"{fmt} in transformers, input_ids alone")
    mine = ferry.ExportedModel.from_pretrained(out)
    assert_logits_close(np.asarray(mine(input_ids=ids).logits), want, ones, FP32_ATOL,
                        f"{fmt} in ferry, input_ids alone")
    with pytest.warns(ferry.FerryWarning, match="takes no attention_mask"):
        mine(**feed)


@pytest.mark.filterwarnings("ignore:the checkpoint has no tokenizer files")
def test_python_inputs_name_the_graph_inputs(ckpt):
    """exporter.export(model, inputs): the graph takes the inputs the example holds, as
    transformers' exports take those they were traced with; the recipe's input_names says the
    same, and the two must agree."""
    import ferry

    feed = tokens(1, 6)
    _, _, pos = make_inputs(VOCAB, 1, 6)
    with_pos = ferry.OnnxExporter().export(ckpt, {**feed, "position_ids": pos})
    assert [i["name"] for i in with_pos.manifest["components"]["model"]["metadata"]["inputs"]] \
        == ALL_INPUTS
    plain = ferry.OnnxExporter().export(ckpt, feed)
    assert [i["name"] for i in plain.manifest["components"]["model"]["metadata"]["inputs"]] \
        == TOKENIZER_INPUTS
    config = ferry.AutoExportConfig.from_dict({"export_format": "onnx",
                                               "input_names": ALL_INPUTS})
    named = ferry.OnnxExporter().export(ckpt, config=config)
    assert [i["name"] for i in named.manifest["components"]["model"]["metadata"]["inputs"]] \
        == ALL_INPUTS
    with pytest.raises(ferry.FerryError, match="input_names .* and the example inputs .* differ"):
        ferry.OnnxExporter().export(ckpt, feed, config)
    # a tokenizer's token_type_ids are no input of these models: not the graph's either
    typed = ferry.OnnxExporter().export(ckpt, {**feed, "token_type_ids": feed["input_ids"] * 0})
    assert [i["name"] for i in typed.manifest["components"]["model"]["metadata"]["inputs"]] \
        == TOKENIZER_INPUTS
    with pytest.raises(ferry.FerryError, match="input_names: 'positions' is not an input"):
        ferry.AutoExportConfig.from_dict({"input_names": ["input_ids", "positions"]})


@pytest.mark.parametrize("value,needle", [
    ("input_ids,positions", "'positions' is not an input ferry's graphs take (input_ids, "
                            "attention_mask, position_ids, token_type_ids)"),
    ("attention_mask,position_ids", "input_ids is missing"),
    ("input_ids,input_ids", "'input_ids' is given twice"),
    ("input_ids,", "an empty input name"),
    ("", "an empty input name"),
])
def test_bad_inputs_are_a_bad_command_line(ckpt, tmp_path, value, needle):
    rc, out, err = run_ferry("export", ckpt, tmp_path / "out", "--inputs", value)
    assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists() and not out


def test_dim_on_an_input_the_export_does_not_take(ckpt, tmp_path):
    """A dim would say nothing of an input the graph does not take: refused, naming --inputs;
    with position_ids among the inputs it is taken."""
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "--dim", "position_ids:1=seq")
    assert rc == 2 and "this export takes no position_ids" in err and "--inputs" in err, err
    out = ferry_export(ckpt, tmp_path / "pos", "--dim", "input_ids:1=seq", "--dim",
                       "position_ids:1=seq", "--inputs", ",".join(ALL_INPUTS), "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["inputs"][2]["shape"] == [1, "seq"]


def test_generation_keeps_position_ids(ckpt, tmp_path):
    """Generation components take all three inputs, as generate() feeds them: --inputs there is
    a bad command line, and without it prefill and decode take position_ids."""
    rc, _, err = run_ferry("export", ckpt, tmp_path / "bad", "--dynamic", "--for-generation",
                           "--inputs", "input_ids,attention_mask")
    assert rc == 2 and "--inputs applies to plain exports" in err, (rc, err)
    rc, out, err = run_ferry("graph", ckpt, "--dynamic", "--for-generation")
    assert rc == 0, err
    assert out.count("input position_ids i64 [batch, sequence]") == 2, out[:2000]
