"""A .pt2 over 4 GiB: its zip needs zip64 sizes and offsets (src/io/zip.c), which torch's zip
reader (miniz) must find where ferry put them. The checkpoint is the shipped tiny Llama with a
tied embedding of 16.8 M rows (the largest vocab_size ferry takes), stored bf16 (2 GiB) and
exported fp32: 4 GiB, one entry too large for a plain zip size field, every entry after it past
the 4 GiB mark. It is written a MiB at a time from one random block, so neither building nor exporting it holds more than a
few MiB; loading it holds the archive and the program's tensors, as a load of any program
does. Every parameter torch loads is compared with the checkpoint's tensor it came from, and
the loaded module runs."""

import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURE, ROOT, ferry_export, read_safetensors

MiB = 1 << 20
ROWS = 1 << 24  # the most vocab_size ferry takes: 16.8 M rows of 64 floats, 4 GiB in fp32
HIDDEN = 64

CHECK = r"""
import sys

import numpy as np
import torch
from safetensors import safe_open

from ferry import ExportedModel

out, ckpt = sys.argv[1], sys.argv[2]
exported = ExportedModel.from_pretrained(out)
program = exported.components["model"].program
state = program.state_dict
with safe_open(ckpt + "/model.safetensors", "pt") as f:
    names = set(f.keys())
    for name, value in state.items():
        source = "model.embed_tokens.weight" if name == "lm_head.weight" else name
        assert source in names, name
        expected = f.get_tensor(source).float()  # bf16 to fp32 is exact
        assert value.shape == expected.shape, (name, value.shape, expected.shape)
        # the embedding a chunk at a time: its rows past 4 GiB are the last chunks
        for begin in range(0, value.shape[0], 1 << 21):
            assert torch.equal(value[begin:begin + (1 << 21)], expected[begin:begin + (1 << 21)]), name
ids = torch.tensor([[1, 5000, (1 << 23) + 7, %d]])
feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
         "position_ids": torch.arange(4)[None]}
takes = [s.arg.name for s in program.graph_signature.input_specs
         if s.kind == torch.export.graph_signature.InputKind.USER_INPUT]
with torch.no_grad():
    logits = program.module()(**{k: feeds[k] for k in takes})["logits"]
assert logits.shape == (1, 4, %d), logits.shape
assert torch.isfinite(logits).all()
print("checked", len(state), "tensors")
""" % (ROWS - 1, ROWS)


def big_checkpoint(dst):
    """The fixture with a tied embedding of ROWS rows stored first (so that every other tensor
    lies past 4 GiB in the checkpoint too), written from one repeated random MiB."""
    ckpt = shutil.copytree(FIXTURE, dst)
    header, data = read_safetensors(ckpt / "model.safetensors")
    header.pop("__metadata__", None)
    header.pop("lm_head.weight")
    header.pop("model.embed_tokens.weight")
    big = ROWS * HIDDEN * 2
    new = {"model.embed_tokens.weight": {"dtype": "BF16", "shape": [ROWS, HIDDEN],
                                         "data_offsets": [0, big]}}
    chunks, offset = [], big
    for name in sorted(header):
        begin, end = header[name]["data_offsets"]
        new[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
        chunks.append(data[begin:end])
        offset += end - begin
    text = json.dumps(new, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    floats = (np.random.default_rng(3).standard_normal(MiB // 2) * 0.02).astype("<f4")
    block = (floats.view("<u4") >> 16).astype("<u2").tobytes()  # bf16: the high halves
    with open(ckpt / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for _ in range(big // MiB):
            f.write(block)
        f.write(b"".join(chunks))
    config = json.loads((ckpt / "config.json").read_text())
    config.update(vocab_size=ROWS, tie_word_embeddings=True)
    (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


def test_pt2_over_4_gib_loads_in_torch(tmp_path, disk_heavy):
    if shutil.disk_usage(tmp_path).free < 10 * (1 << 30):
        pytest.skip("needs 10 GiB of free disk for a 2 GiB checkpoint and its 4 GiB export")
    try:
        ckpt = big_checkpoint(tmp_path / "ckpt")
        out = ferry_export(ckpt, tmp_path / "out", "--format", "pt2", "--dynamic", "--quiet")
        archive = out / "model.pt2"
        assert archive.stat().st_size > 1 << 32
        tail = _tail(archive)
        assert b"PK\x06\x06" in tail and b"PK\x06\x07" in tail, "no zip64 end records"
        result = subprocess.run([sys.executable, "-c", CHECK, str(out), str(ckpt)],
                                capture_output=True, text=True, timeout=900,
                                env=dict(os.environ, PYTHONPATH=str(ROOT / "python")))
        assert result.returncode == 0, result.stderr[-3000:]
        assert "checked" in result.stdout
    finally:  # 6 GiB, gone before the next test that needs much disk
        shutil.rmtree(tmp_path, ignore_errors=True)


def _tail(path):
    with open(path, "rb") as f:
        f.seek(-(1 << 16), 2)
        return f.read()
