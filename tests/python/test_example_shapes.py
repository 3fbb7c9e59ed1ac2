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
     ("example shape for 'input_ids': 3 extents, but it has 2 axes (0 = batch, 1 = sequence)",)),
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
