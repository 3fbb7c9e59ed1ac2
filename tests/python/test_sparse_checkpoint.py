"""Sparse checkpoints: a safetensors file extended with truncate (or shipped as a sparse tar or
rsync --sparse copy) holds holes that read as zeros but occupy nothing on disk, so a few hundred
KB could make ferry write gigabytes (at 6fe3928 the "embedding in holes" case below, 560 KB on
disk, exported 256 MB of weights). ferry refuses a checkpoint file over 64 MiB with less than
1/8 of its bytes stored (the holes are counted with SEEK_DATA/SEEK_HOLE, which compression
does not fool), naming the file, its size and what it holds; dense files, small files and
partly sparse files above the ratio are exported as before.
"""

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from conftest import ROOT, ferry_builds, read_safetensors, run_ferry

FIXTURE = ROOT / "fixtures" / "tiny-llama"
MiB = 1 << 20


def build(tmp_path, big_name, big_shape, big_dtype, stored_fraction, config=None):
    """The fixture's tensors, then `big_name` (numel of big_shape, dtype U8 or F32) stored last;
    of the big tensor only the first stored_fraction is written (with non-zero bytes), the rest
    is left a hole by extending the file with truncate."""
    ckpt = Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))
    header, data = read_safetensors(ckpt / "model.safetensors")
    header.pop(big_name, None)
    if big_name == "model.embed_tokens.weight":
        header.pop("lm_head.weight")
    meta = header.pop("__metadata__", None)
    new, chunks, offset = ({"__metadata__": meta} if meta else {}), [], 0
    for name in sorted(header):
        begin, end = header[name]["data_offsets"]
        new[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
        chunks.append(data[begin:end])
        offset += end - begin
    nbytes = (4 if big_dtype == "F32" else 1)
    for extent in big_shape:
        nbytes *= extent
    new[big_name] = {"dtype": big_dtype, "shape": list(big_shape),
                     "data_offsets": [offset, offset + nbytes]}
    text = json.dumps(new, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = ckpt / "model.safetensors"
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
        stored = int(nbytes * stored_fraction)
        block = b"\x3c" * MiB          # non-zero: no filesystem may turn it into a hole
        while stored > 0:
            f.write(block[:min(stored, MiB)])
            stored -= MiB
    os.truncate(path, 8 + len(text) + offset + nbytes)
    if config:
        cfg = json.loads((ckpt / "config.json").read_text())
        cfg.update(config)
        (ckpt / "config.json").write_text(json.dumps(cfg))
    return ckpt


def allocated(path):
    return os.stat(path).st_blocks * 512


CASES = {
    # (big tensor, shape, dtype, stored fraction, config changes, refused?)
    "embedding-in-holes": ("model.embed_tokens.weight", (1 << 20, 64), "F32", 0.0,
                           {"vocab_size": 1 << 20, "tie_word_embeddings": True}, True),
    "extra-tensor-in-holes": ("zz.extra", (200 * MiB,), "U8", 0.0, None, True),
    "one-sixteenth-stored": ("zz.extra", (200 * MiB,), "U8", 1 / 16, None, True),
    "quarter-stored": ("zz.extra", (200 * MiB,), "U8", 1 / 4, None, False),
    "dense": ("zz.extra", (70 * MiB,), "U8", 1.0, None, False),
    "small-and-sparse": ("zz.extra", (60 * MiB,), "U8", 0.0, None, False),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("label,binary", ferry_builds(), ids=[b[0] for b in ferry_builds()])
def test_sparse_checkpoints(tmp_path, case, label, binary):
    name, shape, dtype, fraction, config, refused = CASES[case]
    ckpt = build(tmp_path, name, shape, dtype, fraction, config)
    st = ckpt / "model.safetensors"
    size = st.stat().st_size
    if fraction < 1 / 8:
        assert allocated(st) < size / 8, "the filesystem did not keep the holes"
    parent = tmp_path / "outs"
    parent.mkdir()
    rc, _, stderr = run_ferry("export", ckpt, parent / "out", "-q", binary=binary)
    if not refused:
        assert rc == 0, f"{label}: {stderr[-2000:]}"
        return
    assert rc == 1, f"{label}: exit {rc}: {stderr[-2000:]}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    line = lines[0]
    assert str(st) in line and "sparse" in line and f"{size} bytes long" in line, line
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"


def build_sharded(tmp_path, extra_shards, stored_fraction):
    """The fixture as the first shard of an index, plus `extra_shards` shards of 40 MiB, each
    holding one U8 tensor of which only stored_fraction is written (the rest a hole)."""
    ckpt = Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))
    header, _ = read_safetensors(ckpt / "model.safetensors")
    first = "model-00000.safetensors"
    (ckpt / "model.safetensors").rename(ckpt / first)
    weight_map = {name: first for name in header if name != "__metadata__"}
    for i in range(extra_shards):
        name, shard = f"zz.extra{i}", f"model-{i + 1:05d}.safetensors"
        nbytes = 40 * MiB
        entry = {name: {"dtype": "U8", "shape": [nbytes], "data_offsets": [0, nbytes]}}
        text = json.dumps(entry, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        with open(ckpt / shard, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            f.write(b"\x3c" * int(nbytes * stored_fraction))
        os.truncate(ckpt / shard, 8 + len(text) + nbytes)
        weight_map[name] = shard
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return ckpt


@pytest.mark.parametrize("label,binary", ferry_builds(), ids=[b[0] for b in ferry_builds()])
def test_sparse_shards(tmp_path, label, binary):
    """Each shard under 64 MiB passes the per-file rule; the checkpoint, 4 x 40 MiB of holes,
    is refused as a whole (at the base of this fix it exported 160 MiB of zeros). The same
    shards with a quarter stored export."""
    parent = tmp_path / "outs"
    parent.mkdir()
    ckpt = build_sharded(tmp_path / "holes", 4, 0.0)
    rc, _, stderr = run_ferry("export", ckpt, parent / "out", "-q", binary=binary)
    assert rc == 1, f"{label}: exit {rc}: {stderr[-2000:]}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    assert str(ckpt) in lines[0] and "a sparse checkpoint: its 5 safetensors files" in lines[0]
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"

    ckpt = build_sharded(tmp_path / "quarter", 4, 0.25)
    rc, _, stderr = run_ferry("export", ckpt, parent / "out", "-q", binary=binary)
    assert rc == 0, f"{label}: {stderr[-2000:]}"
    assert (parent / "out" / "export.json").is_file()
