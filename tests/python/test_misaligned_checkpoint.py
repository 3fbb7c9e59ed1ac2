"""Checkpoints whose tensors sit at odd byte offsets. safetensors allows any header length and
packs tensors back to back, so a header of odd length, or a 3-byte U8 tensor stored first, puts
every following tensor at an address no wider load may assume aligned. The weight stream must
read such tensors with byte-wise (memcpy) loads: the sanitizer build (UBSan's alignment check)
must export them without a report, both builds must write exactly the bytes they write for the
same tensors stored aligned, and the fp32 exports must match transformers, which reads the same
misaligned file.
"""

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import (check_against_reference, ferry_builds, make_checkpoint, read_safetensors,
                      run_ferry)

# (checkpoint dtype, export flags): each runs a different transpose loop of the weight stream
# (32-bit copy, bf16 -> f32 and f16 -> f32 widening, 16-bit copy) and, for the norms and the
# untransposed embedding, the plain copy and the conversions of util/dtype.c.
CASES = {
    "f32-fp32": (torch.float32, []),
    "bf16-fp32": (torch.bfloat16, []),
    "f16-fp32": (torch.float16, []),
    "bf16-bf16": (torch.bfloat16, ["--dtype", "bf16"]),
    "f32-fp16": (torch.float32, ["--dtype", "fp16"]),
}


def rewrite_misaligned(src, dst, layout):
    """Writes the tensors of safetensors file `src` to `dst`, back to back, so that every tensor
    starts at an odd file offset. layout "odd-header": the header is padded to a length of 4k+1
    bytes; "odd-offset": the header stays 8-aligned and a 3-byte U8 tensor comes first in the
    data area. Returns the absolute file offsets of the tensors."""
    header, data = read_safetensors(src)
    header.pop("__metadata__", None)
    names = sorted(header)
    chunks, new_header, offset = [], {"__metadata__": {"format": "pt"}}, 0
    if layout == "odd-offset":
        new_header["aaa.pad"] = {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]}
        chunks.append(b"\x01\x02\x03")
        offset = 3
    for name in names:
        begin, end = header[name]["data_offsets"]
        new_header[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
        chunks.append(data[begin:end])
        offset += end - begin
    text = json.dumps(new_header, separators=(",", ":")).encode()
    if layout == "odd-header":
        text += b" " * ((1 - len(text)) % 4)
        assert len(text) % 4 == 1
    else:
        text += b" " * (-len(text) % 8)
    Path(dst).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    starts = [8 + len(text) + new_header[n]["data_offsets"][0] for n in names]
    return starts


_BUILT = {}


def checkpoints(case, tmp_path_factory):
    """(aligned checkpoint, {layout: misaligned copy}) for one case, built once per worker."""
    if case in _BUILT:
        return _BUILT[case]
    dtype, _ = CASES[case]
    root = tmp_path_factory.mktemp(f"misaligned-{case}")
    aligned = make_checkpoint(root / "aligned", "qwen2", seed=3, dtype=dtype)
    copies = {}
    for layout in ("odd-header", "odd-offset"):
        copy = root / layout
        copy.mkdir()
        for f in aligned.iterdir():
            if f.name != "model.safetensors":
                (copy / f.name).write_bytes(f.read_bytes())
        starts = rewrite_misaligned(aligned / "model.safetensors", copy / "model.safetensors",
                                    layout)
        assert all(s % 2 == 1 for s in starts), "every tensor must start at an odd offset"
        copies[layout] = copy
    _BUILT[case] = aligned, copies
    return _BUILT[case]


def _data(out):
    return (Path(out) / "model.onnx.data").read_bytes()


@pytest.mark.parametrize("layout", ["odd-header", "odd-offset"])
@pytest.mark.parametrize("label,binary", ferry_builds(), ids=[b[0] for b in ferry_builds()])
@pytest.mark.parametrize("case", list(CASES))
def test_misaligned_tensors_export_exactly(tmp_path_factory, tmp_path, case, layout, label,
                                           binary):
    aligned, copies = checkpoints(case, tmp_path_factory)
    flags = CASES[case][1]
    rc, _, stderr = run_ferry("export", aligned, tmp_path / "aligned", "-q", *flags, binary=binary)
    assert rc == 0, stderr
    rc, _, stderr = run_ferry("export", copies[layout], tmp_path / "odd", "-q", *flags,
                              binary=binary)
    # The sanitizer build exits 86 on a misaligned load (UBSan's alignment check).
    assert rc == 0 and "runtime error" not in stderr, f"{label}: exit {rc}: {stderr[-3000:]}"
    assert _data(tmp_path / "odd") == _data(tmp_path / "aligned"), \
        "the weights read from odd offsets differ from the same weights read aligned"


@pytest.mark.parametrize("layout", ["odd-header", "odd-offset"])
@pytest.mark.parametrize("case", [c for c, (_, flags) in CASES.items() if not flags])
def test_misaligned_export_matches_transformers(tmp_path_factory, tmp_path, case, layout):
    """transformers' safetensors loader accepts the misaligned file; its logits are the oracle
    for the fp32 exports (the others are held to the aligned export's bytes above)."""
    _, copies = checkpoints(case, tmp_path_factory)
    ckpt = copies[layout]
    from transformers import AutoModelForCausalLM
    AutoModelForCausalLM.from_pretrained(ckpt, local_files_only=True)   # accepted as is
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "-q", "--dynamic")
    assert rc == 0, stderr
    worst = check_against_reference(ckpt, tmp_path / "out" / "model.onnx", [(1, 5), (2, 7)])
    assert np.isfinite(worst)
