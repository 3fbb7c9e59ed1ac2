"""Example shapes by input name (--example-shape NAME=D0xD1..., the recipe's example_shapes, the
guide's example inputs): each extent is the example of the logical axis the model says that
axis of the input follows, so any input the export takes can give it, several may, and they
must agree; export.json records the traced shapes. What the model lacks or the export does
not take, and a shape of the wrong rank, is one line naming it, exit 2."""

import json

import pytest

from conftest import FIXTURE, run_ferry
from test_dim_bounds import refused
from test_encoders import build as build_encoder


def traced(out, name="input_ids"):
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    return {i["name"]: i.get("traced") or i.get("shape") for i in meta["inputs"]}[name], meta


def test_any_taken_input_gives_the_example(tmp_path):
    """The attention mask's shape is the example of batch and sequence too; export.json says
    what was traced as input_ids' shape (the input naming every axis)."""
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--example-shape",
                           "attention_mask=3x5")
    assert rc == 0, err
    shape, meta = traced(tmp_path / "out")
    assert shape == [3, 5], shape
    assert meta["export_config"]["example_shapes"] == {"input_ids": [3, 5]}
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "both", "-q", "--example-shape",
                           "input_ids=2x6", "--example-shape", "attention_mask=2x6")
    assert rc == 0, err
    assert traced(tmp_path / "both")[0] == [2, 6]


def test_recipe_example_shapes_by_input(tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"example_shapes": {"attention_mask": [2, 4],
                                                     "input_ids": [2, 4]}}))
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--config", recipe)
    assert rc == 0, err
    assert traced(tmp_path / "out")[0] == [2, 4]


@pytest.mark.parametrize("args,needles", [
    (["--example-shape", "input_ids=2x7", "--example-shape", "attention_mask=2x6"],
     ("example shapes disagree on the sequence axis: 7 (input_ids) and 6 (attention_mask)",)),
    (["--example-shape", "token_type_ids=1x4"],
     ("example shape for 'token_type_ids': the model has no such input",)),
    (["--example-shape", "position_ids=1x4"],
     ("example shape for 'position_ids': this export takes no position_ids",)),
    (["--example-shape", "input_ids=1x8x2"],
     ("example shape for 'input_ids': 3 extents, but it takes 2, one for each axis that can be "
      "symbolic (0 = batch, 1 = sequence)",)),
    (["--example-shape", "input_ids=1x8y"], ("expected NAME=D0xD1",)),
], ids=["disagree", "no-such-input", "not-taken", "rank", "malformed"])
def test_refused(tmp_path, args, needles):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", *args)
    refused(rc, stderr, 2, *needles)
    assert not (tmp_path / "out").exists()


def test_encoder_token_types_give_the_example(tmp_path):
    """BERT takes token_type_ids [batch, sequence]: its shape is an example like input_ids'."""
    ckpt = build_encoder(tmp_path / "bert", "bert")
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "-q", "--example-shape",
                           "token_type_ids=2x9")
    assert rc == 0, err
    assert traced(tmp_path / "out")[0] == [2, 9]
    assert traced(tmp_path / "out", "token_type_ids")[0] == [2, 9]


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_traced_extents_too_large_together(tmp_path, fmt):
    """Each axis is capped at 2^24, and all of them together at 2^31 elements: shape inference
    multiplies them (a mask is batch x sequence x sequence), which must not overflow in any
    format (OpenVINO's attention read past an array on the overflow)."""
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--format", fmt,
                              "--example-shape", "input_ids=65536x65536")
    refused(rc, stderr, 2, "example shapes: batch 65536 x sequence 65536 is more than the "
            "2147483648 elements")
    assert not (tmp_path / "out").exists()


def test_command_line_examples_replace_the_recipes(tmp_path):
    """--help: the command line wins over a recipe. A recipe's example on the mask and one on
    the ids from the command line would contradict; the command line's replace the recipe's."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"example_shapes": {"attention_mask": [2, 8]}}))
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--config", recipe,
                           "--example-shape", "input_ids=3x8")
    assert rc == 0, err
    assert traced(tmp_path / "out")[0] == [3, 8]


def test_command_line_messages_name_the_flag(tmp_path):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--example-shape",
                              "input_ids=0x8")
    refused(rc, stderr, 2, "ferry: error: --example-shape: example shape 'input_ids=0x8': "
            "expected NAME=D0xD1")


def test_python_example_shapes_are_checked(tmp_path):
    """OnnxConfig(example_shapes=...) takes lists of ints only (1.9, True and "18" became 1, 1
    and [1, 8]); the example inputs' shapes are all passed, so a mask of another length than
    the ids is refused by libferry."""
    import numpy as np
    import ferry

    for bad in ({"input_ids": [1.9, 8]}, {"input_ids": "18"}, {"input_ids": [True, 8]},
                [("input_ids", [1, 8])]):
        with pytest.raises(ferry.FerryError, match="example_shapes"):
            ferry.OnnxConfig(example_shapes=bad)
    ids = np.zeros((2, 5), np.int64)
    with pytest.raises(ferry.FerryError, match="disagree on the (batch|sequence) axis"):
        ferry.OnnxExporter().export(str(FIXTURE), {"input_ids": ids,
                                                   "attention_mask": np.ones((3, 7), np.int64)})
    exported = ferry.OnnxExporter().export(str(FIXTURE), {"input_ids": ids,
                                                          "attention_mask": np.ones_like(ids)})
    exported.save_pretrained(tmp_path / "out")
    assert traced(tmp_path / "out")[0] == [2, 5]


def test_an_encoder_shorter_than_the_default_example(tmp_path):
    """max_position_embeddings 6: the default example (8 tokens) is traced at 6 instead of
    being refused as an example the caller never gave."""
    ckpt = build_encoder(tmp_path / "bert", "bert", max_position_embeddings=6)
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out", "-q")
    assert rc == 0, err
    assert traced(tmp_path / "out")[0] == [1, 6]


def test_a_static_cache_bounds_the_prompt(tmp_path):
    """A cache of a fixed 24 slots holds no longer prompt: a dim whose max is past it is
    refused; an unbounded one stops there (export.json's symbol max), so a longer call is
    refused by name rather than written past the cache."""
    gen = ["--for-generation", "--static-cache", "--max-cache-len", "24"]
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", *gen, "--dim",
                              "input_ids:1=seq:1:30")
    refused(rc, stderr, 2, "dynamic dim input_ids:1: max 30 is past max_cache_len 24")
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "ok", "-q", *gen, "--dim",
                           "input_ids:1=seq:1:0")
    assert rc == 0, err
    meta = json.loads((tmp_path / "ok" / "export.json").read_text())
    # the prefill takes the prompt (decode takes one token: no sequence symbol)
    assert meta["components"]["prefill"]["metadata"]["symbols"]["seq"]["max"] == 24
