"""Numbers in --dim, --example-shape and a recipe's dynamic_shapes: sscanf's %lld saturated
10^20 to 2^63 - 1 silently, and a dim's min then became the traced example extent past the
2^24 cap on examples (`--dim input_ids:1=s:99999999999999999999:99999999999999999999` made
the release build record "traced": 9.2e18 and clang's UBSan stop on a signed overflow in
src/ir/shape.c). Now a number outside 64 bits is a usage error naming it, a dim's min and max lie
in [0, 2^40], and the example is moved into the dim's range before the cap is applied."""

import json

import pytest

from conftest import FIXTURE, ferry_builds, run_ferry

BUILDS = ferry_builds()
IDS = [b[0] for b in BUILDS]
GEN = ("--for-generation", "--multi-token-decode", "--dynamic")


def refused(rc, stderr, code, *needles):
    lines = stderr.strip("\n").split("\n")
    assert rc == code, f"exit {rc}, expected {code}: {stderr[-3000:]}"
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
@pytest.mark.parametrize("args,code,needles", [
    (("--dim", "input_ids:1=s:99999999999999999999:99999999999999999999") + GEN, 2,
     ("MIN 99999999999999999999 is out of range",)),
    (("--dim", "input_ids:1=s:1:99999999999999999999") + GEN, 2, ("MAX 99999999999999999999",)),
    (("--dim", "input_ids:1=s:1099511627777:0") + GEN, 2, ("must be at most 1099511627776",)),
    (("--example-shape", "input_ids=1x99999999999999999999"), 2,
     ("99999999999999999999 is out of range",)),
    (("--example-shape", "input_ids=99999999999999999999x1"), 2,
     ("99999999999999999999 is out of range",)),
    # Within the bound, above the example cap: no example can be traced in the range (options
    # the library refuses as contradicting each other: a bad command line too).
    (("--dim", "input_ids:1=s:16777217:0") + GEN, 2, ("min 16777217 is above 16777216",)),
    (("--dim", "input_ids:1=s:1099511627776:1099511627776") + GEN, 2, ("min 1099511627776",)),
], ids=["dim-min-2^66", "dim-max-2^66", "dim-min-2^40+1", "example-seq-2^66",
        "example-batch-2^66", "min-above-example-cap", "min-2^40"])
def test_refused(tmp_path, label, binary, args, code, needles):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", *args, binary=binary)
    refused(rc, stderr, code, *needles)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_recipe_bounds(tmp_path, label, binary):
    """The recipe reader took any integer below 2^53 as a min: the same overflow by a file."""
    recipe = tmp_path / "recipe.json"
    big = 2**52 - 1
    recipe.write_text(json.dumps({"for_generation": True, "multi_token_decode": True,
                                  "dynamic": True, "dynamic_shapes": {"input_ids": {
                                      "1": {"name": "s", "min": big, "max": big}}}}))
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--config", recipe,
                              binary=binary)
    refused(rc, stderr, 1, "recipe.json", "must be at most 1099511627776")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_example_moved_into_range(tmp_path, label, binary):
    """An example below an unbounded dim's min is traced at the min (it was traced at 8, outside
    the range the export declares), up to the cap itself."""
    for spec, traced in [("input_ids:1=s:100:0", 100), ("input_ids:1=s:16777216:0", 16777216),
                         ("input_ids:1=s:2:64", 8)]:
        out = tmp_path / spec.replace(":", "_")
        rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", "--dim", spec, binary=binary)
        assert rc == 0, stderr[-3000:]
        meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
        assert meta["symbols"]["s"]["traced"] == traced, meta["symbols"]
        assert meta["inputs"][0]["traced_shape"] == [1, traced]
        # the recorded recipe says what was traced, so it reads back as the same export
        assert meta["export_config"]["example_shapes"] == {"input_ids": [1, traced]}


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_example_given_outside_range(tmp_path, label, binary):
    """An example shape the caller gave outside a dim's range was traced at
    the min without a word. Only the default moves now; a given one is refused, by the command
    line (exit 2), a recipe (1) and Python (FerryError), and nothing is written."""
    for args in (["--dim", "input_ids:1=s:4:64", "--example-shape", "input_ids=1x2"],
                 ["--dim", "input_ids:0=b:2:8", "--example-shape", "input_ids=9x8"],
                 ["--format", "pt2", "--dim", "input_ids:1=s:4:0", "--example-shape",
                  "input_ids=1x3"]):
        rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", *args,
                                  binary=binary)
        refused(rc, stderr, 2, "example shape: ", "is outside dynamic dim input_ids:")
        assert not (tmp_path / "out").exists()
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"dynamic_shapes": {"input_ids": {"1": {
        "name": "s", "min": 4, "max": 64}}}, "example_shapes": {"input_ids": [1, 65]}}))
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--config", recipe,
                              binary=binary)
    refused(rc, stderr, 1, "sequence 65 is outside dynamic dim input_ids:1's range (min 4, "
            "max 64)")
    assert not (tmp_path / "out").exists()


def test_example_given_outside_range_python():
    import torch

    from ferry import DynamoConfig, DynamoExporter, FerryError

    config = DynamoConfig(dynamic_shapes={"input_ids": {1: {"name": "s", "min": 4, "max": 64}}})
    with pytest.raises(FerryError, match="sequence 2 is outside dynamic dim input_ids:1"):
        DynamoExporter().export(FIXTURE, {"input_ids": torch.ones(1, 2, dtype=torch.long)},
                                config=config)


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_default_example_fits_a_short_static_cache(tmp_path, label, binary):
    """A static cache shorter than the default 8-token example was refused as
    "smaller than the example prompt", an example the caller never gave; the default prompt is
    the cache's length then. A given example still has to fit."""
    out = tmp_path / "out"
    rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", "--for-generation", "--dynamic",
                              "--static-cache", "--max-cache-len", "4", binary=binary)
    assert rc == 0, stderr[-3000:]
    meta = json.loads((out / "export.json").read_text())["components"]["prefill"]["metadata"]
    assert meta["inputs"][0]["traced_shape"] == [1, 4]
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "given", "-q", "--for-generation",
                              "--dynamic", "--static-cache", "--max-cache-len", "4",
                              "--example-shape", "input_ids=1x5", binary=binary)
    refused(rc, stderr, 2, "max_cache_len 4 is smaller than the example prompt (5 tokens)")


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_static_shapes_leave_decode_a_slot(tmp_path, label, binary):
    """With static shapes the traced prompt is the only one the export takes,
    and one that filled the static cache made an export whose every decode call failed. The
    default prompt now stops a slot short of max_cache_len; a given one that fills it, or a
    cache of one slot, is refused."""
    import numpy as np

    from ferry import ExportedModel

    out = tmp_path / "out"
    rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", "--for-generation",
                              "--static-cache", "--max-cache-len", "4", binary=binary)
    assert rc == 0, stderr[-3000:]
    meta = json.loads((out / "export.json").read_text())["components"]["prefill"]["metadata"]
    assert meta["inputs"][0]["shape"] == [1, 3]
    if label == "release":  # and decode takes the slot left
        tokens = ExportedModel.from_pretrained(out).generate(np.array([[5, 6, 7]]),
                                                             max_new_tokens=2)
        assert np.asarray(tokens).shape == (1, 5)
    for flags, words in ((["--max-cache-len", "8", "--example-shape", "input_ids=1x8"],
                          "max_cache_len 8: the prompt of a static-shape export (8 tokens"),
                         (["--max-cache-len", "1"], "max_cache_len 1: the prompt")):
        rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "refused", "-q",
                                  "--for-generation", "--static-cache", *flags, binary=binary)
        refused(rc, stderr, 2, words)
        assert not (tmp_path / "refused").exists()

