"""tie_word_embeddings against what the checkpoint stores, decided as transformers 5.x decides it
when loading (PreTrainedModel.tie_weights in from_pretrained):

| config.json         | checkpoint                   | transformers, ferry                      |
|---------------------|------------------------------|------------------------------------------|
| tie true            | no lm_head.weight            | tie to the embedding                     |
| tie true            | lm_head.weight, same bytes   | tie (stored copy consumed)               |
| tie true            | lm_head.weight, other bytes  | warn, do NOT tie: both used              |
| tie true            | lm_head.weight, no embedding | tie to lm_head.weight                    |
| tie false or absent | no lm_head.weight            | transformers: random head; ferry refuses |

Each exported model is compared with transformers' eager logits on the same checkpoint (1e-4).
At 6fe3928 ferry tied whenever the config said so, ignoring a different stored lm_head (logits
off by far more than 1e-4) with a "not used" warning, and refused a checkpoint that stores the
tied weight only as lm_head.weight.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import (check_against_reference, make_checkpoint, read_safetensors, run_ferry,
                      write_safetensors)

EMBED, HEAD = "model.embed_tokens.weight", "lm_head.weight"
SHAPES = [(1, 5), (2, 7)]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    root = tmp_path_factory.mktemp("tied-src")
    tied = make_checkpoint(root / "tied", "llama", seed=11, tie_word_embeddings=True)
    untied = make_checkpoint(root / "untied", "llama", seed=12, tie_word_embeddings=False)
    header, _ = read_safetensors(tied / "model.safetensors")
    assert HEAD not in header, "transformers saves a tied checkpoint without lm_head.weight"
    return tied, untied


def edit_tensors(ckpt, edit):
    """Rewrites model.safetensors with edit({name: bytes}, header) applied."""
    header, data = read_safetensors(ckpt / "model.safetensors")
    meta = header.pop("__metadata__", None)
    blobs = {n: data[h["data_offsets"][0]:h["data_offsets"][1]] for n, h in header.items()}
    edit(blobs, header)
    new, chunks, offset = ({"__metadata__": meta} if meta else {}), [], 0
    for name in sorted(blobs):
        new[name] = dict(header[name], data_offsets=[offset, offset + len(blobs[name])])
        chunks.append(blobs[name])
        offset += len(blobs[name])
    write_safetensors(ckpt / "model.safetensors", new, b"".join(chunks))


def set_config(ckpt, **changes):
    cfg = json.loads((ckpt / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (ckpt / "config.json").write_text(json.dumps(cfg, indent=2))


def add_head_copy(blobs, header):
    blobs[HEAD] = blobs[EMBED]
    header[HEAD] = dict(header[EMBED])


def add_head_one_ulp_off(blobs, header):
    head = np.frombuffer(blobs[EMBED], dtype=np.float32).copy()
    head.view(np.uint32)[37] += 1        # one element, one unit in the last place
    blobs[HEAD] = head.tobytes()
    header[HEAD] = dict(header[EMBED])


def keep_only_head(blobs, header):
    blobs[HEAD] = blobs.pop(EMBED)
    header[HEAD] = header.pop(EMBED)


def drop_head(blobs, header):
    del blobs[HEAD], header[HEAD]


# case: (source, tensor edit, config changes, ties?)
CASES = {
    "tied-absent": ("tied", None, {}, True),
    "tied-equal": ("tied", add_head_copy, {}, True),
    "tied-different": ("untied", None, {"tie_word_embeddings": True}, False),
    "tied-one-ulp": ("tied", add_head_one_ulp_off, {}, False),
    "tied-head-only": ("tied", keep_only_head, {}, True),
}


def build_case(sources, tmp_path, case):
    source, edit, config, _ = CASES[case]
    ckpt = Path(shutil.copytree(sources[0] if source == "tied" else sources[1], tmp_path / "ckpt"))
    if edit:
        edit_tensors(ckpt, edit)
    if config:
        set_config(ckpt, **config)
    return ckpt


@pytest.mark.parametrize("case", list(CASES))
def test_tying_matches_transformers(sources, tmp_path, case):
    ckpt = build_case(sources, tmp_path, case)
    ties = CASES[case][3]
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--dynamic")
    assert rc == 0, stderr
    check_against_reference(ckpt, tmp_path / "out" / "model.onnx", SHAPES)
    # Nothing the export reads goes unmentioned, and nothing it consumes is called unused.
    assert "is not used" not in stderr, stderr
    assert ("not byte-identical" in stderr) == (not ties), stderr
    # Tied, the matrix is written once (read by Gather and Gemm); untied, the head is a second
    # matrix: the weight file has the size of the plain tied or untied checkpoint's export.
    like = tmp_path / "like"
    rc, _, stderr = run_ferry("export", sources[0 if ties else 1], like, "--dynamic", "-q")
    assert rc == 0, stderr
    assert (tmp_path / "out" / "model.onnx.data").stat().st_size == \
        (like / "model.onnx.data").stat().st_size


def test_tied_equal_is_the_plain_tied_export(sources, tmp_path):
    """A stored copy equal to the embedding changes nothing: the export is the one of the same
    checkpoint without it, byte for byte."""
    ckpt = build_case(sources, tmp_path, "tied-equal")
    for name, src in (("with-copy", ckpt), ("without", sources[0])):
        rc, _, stderr = run_ferry("export", src, tmp_path / name, "-q")
        assert rc == 0, stderr
    for f in ("model.onnx", "model.onnx.data"):
        assert (tmp_path / "with-copy" / f).read_bytes() == (tmp_path / "without" / f).read_bytes()


def test_untied_warning_once_for_generation(sources, tmp_path):
    """The decision is made once per export, however many components read the head."""
    ckpt = build_case(sources, tmp_path, "tied-different")
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--for-generation", "--dynamic")
    assert rc == 0, stderr
    assert stderr.count("not byte-identical") == 1, stderr


@pytest.mark.parametrize("tie", [False, None], ids=["tie-false", "tie-absent"])
def test_untied_without_head_is_refused(sources, tmp_path, tie):
    """No lm_head and no tie: transformers would load a randomly initialised head (its logits
    are noise), so there is nothing to match; ferry refuses, naming the tensor and the key."""
    ckpt = Path(shutil.copytree(sources[1], tmp_path / "ckpt"))
    edit_tensors(ckpt, drop_head)
    set_config(ckpt, tie_word_embeddings=tie)
    parent = tmp_path / "outs"
    parent.mkdir()
    rc, _, stderr = run_ferry("export", ckpt, parent / "out")
    assert rc == 1, stderr
    lines = stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    assert "'lm_head.weight' is missing" in lines[0] and "tie_word_embeddings" in lines[0], stderr
    assert list(parent.iterdir()) == []
