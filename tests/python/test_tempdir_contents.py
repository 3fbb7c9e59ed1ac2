"""The stale temp-dir cleaner removes a directory named like ferry's temporary directory only if
it holds nothing but what ferry writes there: a regular file `lock` (which the cleaner can lock:
no live writer) and optionally a directory `export` of regular files named as ferry names them
(*.onnx, *.onnx.data, export.json, config.json, generation_config.json). Before, a lockable
`lock` was enough, and the directory went whole with whatever a user had put in it."""

import hashlib
import os
from pathlib import Path

import pytest

from conftest import FIXTURE, ferry_export

FERRY_FILES = ["model.onnx", "model.onnx.data", "prefill.onnx", "decode.onnx", "export.json",
               "config.json", "generation_config.json"]


def tree_digest(path):
    h = hashlib.sha256()
    for root, dirs, files in os.walk(path, followlinks=False):
        dirs.sort()
        for name in sorted(dirs + files):
            p = Path(root) / name
            h.update(os.fsencode(str(p.relative_to(path))))
            if p.is_symlink():
                h.update(b"link:" + os.fsencode(os.readlink(p)))
            elif p.is_file():
                h.update(p.read_bytes())
    return h.hexdigest()


def abandoned(parent, suffix, export_files=FERRY_FILES):
    """A temp dir as a killed run leaves it: lock (unlocked) and export/ with ferry's files."""
    d = parent / f".model.ferry-tmp-4242-{suffix}"
    d.mkdir()
    (d / "lock").write_bytes(b"")
    if export_files is not None:
        (d / "export").mkdir()
        for name in export_files:
            (d / "export" / name).write_bytes(b"x" * 100)
    return d


def test_user_data_survives(tmp_path):
    parent = tmp_path / "outs"
    parent.mkdir()
    removed = [abandoned(parent, "gen000"), abandoned(parent, "lock00", None),
               abandoned(parent, "empty0", [])]
    kept = []
    d = abandoned(parent, "thesis")                       # a user's file beside export/
    (d / "thesis.txt").write_text("precious")
    kept.append(d)
    d = abandoned(parent, "inside")                       # a user's file inside export/
    (d / "export" / "thesis.txt").write_text("precious")
    kept.append(d)
    d = abandoned(parent, "subdir")                       # a subdirectory inside export/
    (d / "export" / "notes").mkdir()
    (d / "export" / "notes" / "a.txt").write_text("precious")
    kept.append(d)
    d = abandoned(parent, "notesd")                       # a directory beside export/
    (d / "notes").mkdir()
    kept.append(d)
    d = abandoned(parent, "linked")                       # a link with a ferry name
    (parent / "precious.onnx").write_text("precious")
    (d / "export" / "model.onnx").unlink()
    (d / "export" / "model.onnx").symlink_to(parent / "precious.onnx")
    kept.append(d)
    d = abandoned(parent, "fifo00")                       # a FIFO with a ferry name
    (d / "export" / "model.onnx").unlink()
    os.mkfifo(d / "export" / "model.onnx")
    kept.append(d)
    d = abandoned(parent, "filexp", None)                 # export is a file, not a directory
    (d / "export").write_text("precious")
    kept.append(d)
    d = abandoned(parent, "sufx00", [".onnx", "model.onnx.bak"])   # near-miss names
    kept.append(d)
    before = {p.name: tree_digest(p) for p in kept}
    ferry_export(FIXTURE, parent / "model", "-q")
    assert not [p for p in removed if p.exists()], "abandoned ferry temp dirs were left"
    assert {p.name: tree_digest(p) for p in kept if p.exists()} == before
    assert sorted(os.listdir(parent)) == sorted([p.name for p in kept] +
                                                ["model", "precious.onnx"])
    assert (parent / "precious.onnx").read_text() == "precious"
