"""What an attention mask may hold. generate() refuses a row whose mask is all zeros, an empty
prompt as much as a row of no tokens is, in every layout: such a row has nothing to continue,
and each layout's attention over no token gave other tokens (none of them transformers'). A
mask holds 0 (padding) and 1 (a token) only, as int, bool or float: a 2 or a -1 changed the
outputs of calls and of generate() without a word, and is refused naming where it is."""

import numpy as np
import pytest

from conftest import ferry_export, make_checkpoint

VOCAB = 160
LAYOUTS = {
    "onnx_dynamic": ["--dynamic", "--for-generation"],
    "onnx_static_one_graph": ["--dynamic", "--for-generation", "--static-cache",
                              "--max-cache-len", "32", "--multi-token-decode", "--dim",
                              "input_ids:0=batch"],
    "openvino_stateful": ["--format", "openvino", "--dynamic", "--for-generation"],
    "pt2_static_one_graph": ["--format", "pt2", "--dynamic", "--for-generation",
                             "--static-cache", "--max-cache-len", "32", "--multi-token-decode"],
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """{layout: loaded ExportedModel}, plus "plain": an ONNX export of the same checkpoint."""
    from ferry import ExportedModel

    root = tmp_path_factory.mktemp("mask-checks")
    ckpt = make_checkpoint(root / "ckpt", "llama", seed=3)
    loaded = {name: ExportedModel.from_pretrained(
        ferry_export(ckpt, root / name, *flags, "--quiet")) for name, flags in LAYOUTS.items()}
    loaded["plain"] = ExportedModel.from_pretrained(
        ferry_export(ckpt, root / "plain", "--dynamic", "--quiet"))
    return loaded


def prompt():
    ids = np.random.default_rng(1).integers(3, VOCAB, (2, 5)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[0, :2] = 0  # row 0 left-padded
    return ids, mask


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_all_zero_mask_row_is_refused(exports, layout):
    from ferry import FerryError

    ids, mask = prompt()
    mask[1] = 0
    with pytest.raises(FerryError, match=r"attention_mask row 1 is all zeros, an empty prompt"):
        exports[layout].generate(ids, attention_mask=mask, max_new_tokens=3)
    mask[1] = 1  # the same call with a token in every row runs
    assert exports[layout].generate(ids, attention_mask=mask, max_new_tokens=3).shape == (2, 8)


@pytest.mark.parametrize("value", [2, -1, 0.5, 2.0])
@pytest.mark.parametrize("layout", ["onnx_dynamic", "openvino_stateful"])
def test_mask_values_other_than_0_and_1_are_refused_in_generate(exports, layout, value):
    from ferry import FerryError

    ids, mask = prompt()
    mask = mask.astype(type(value))
    mask[1, 3] = value
    with pytest.raises(FerryError, match=rf"attention_mask holds {value!r} at row 1, position 3"):
        exports[layout].generate(ids, attention_mask=mask, max_new_tokens=2)


@pytest.mark.parametrize("value", [2, -1, 0.5])
def test_mask_values_other_than_0_and_1_are_refused_in_calls(exports, value):
    from ferry import FerryError

    ids, mask = prompt()
    mask = mask.astype(type(value))
    mask[0, 4] = value
    with pytest.raises(FerryError, match=rf"attention_mask holds {value!r} at row 0, position 4"):
        exports["plain"](input_ids=ids, attention_mask=mask)


@pytest.mark.parametrize("kind", [np.float32, np.bool_])
def test_float_and_bool_masks_of_0_and_1_equal_the_int_mask(exports, kind):
    ids, mask = prompt()
    want = exports["onnx_dynamic"].generate(ids, attention_mask=mask, max_new_tokens=4)
    got = exports["onnx_dynamic"].generate(ids, attention_mask=mask.astype(kind),
                                           max_new_tokens=4)
    np.testing.assert_array_equal(got, want)
    plain = exports["plain"](input_ids=ids, attention_mask=mask).logits
    np.testing.assert_array_equal(
        exports["plain"](input_ids=ids, attention_mask=mask.astype(kind)).logits, plain)
