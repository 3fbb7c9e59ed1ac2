"""A checkpoint truncated by another process while ferry exports it: a clear error, not SIGBUS.

ferry reads tensors with pread (and copy_file_range), never through a mapping, so a file that
shrinks under it gives a short read, which is reported as one line naming the file, the tensor
and the bytes it needed; the export then fails like any other (exit 1, nothing left behind).
At 6fe3928 the weights were read through mmap and the export died of SIGBUS (exit -7).

To make the race deterministic the export is stopped (SIGSTOP) as soon as its weight file has
appeared in the temporary directory and holds less than a third of its final size, the checkpoint
is truncated, and the export is continued (SIGCONT): the reader is at most a few 32 MB blocks
ahead of the writer, so tensors remain to be read from the truncated file.
"""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import SANITIZER_ENV, bytes_written, ferry_builds
from test_crash_safety import make_big_checkpoint

# ~155 MB of bf16: 16000 x 1024 embedding and lm_head, four 23 MB layers.
SHAPE = dict(vocab=16000, hidden=1024, inter=2816, layers=4, heads=16, kv=8, head_dim=64)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    return make_big_checkpoint(tmp_path_factory.mktemp("trunc") / "ckpt", seed=5, **SHAPE)


def weight_file(parent):
    """The model.onnx.data of the export's temporary directory in `parent`, if any (the
    export is built in <temp dir>/export, next to the temp dir's lock file)."""
    for entry in os.listdir(parent):
        if ".ferry-tmp-" in entry:
            path = Path(parent) / entry / "export" / "model.onnx.data"
            if path.exists():
                return path
    return None


def export_and_truncate(binary, ckpt, parent, flags, final_size, keep_bytes):
    """Starts the export, stops it early in the weights, truncates the checkpoint to keep_bytes,
    continues it; returns (returncode, stderr). None if the export got past the window."""
    env = dict(SANITIZER_ENV) if binary != ferry_builds()[0][1] else dict(os.environ)
    proc = subprocess.Popen([str(binary), "export", str(ckpt), str(parent / "out"), "-q",
                             *flags], stderr=subprocess.PIPE, text=True, env=env)
    stopped = False
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            # the weights file is there and under a third of it written
            size = bytes_written(proc.pid) if weight_file(parent) else 0
            if 0 < size < final_size // 3:
                proc.send_signal(signal.SIGSTOP)
                stopped = True
                break
            time.sleep(0.0005)
        if not stopped:
            proc.wait(timeout=600)
            return None
        os.truncate(ckpt / "model.safetensors", keep_bytes)
        proc.send_signal(signal.SIGCONT)
        _, stderr = proc.communicate(timeout=600)
        return proc.returncode, stderr
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("flags", [[], ["--dtype", "bf16"]], ids=["bf16-to-fp32", "bf16-copy"])
@pytest.mark.parametrize("label,binary", ferry_builds(), ids=[b[0] for b in ferry_builds()])
@pytest.mark.parametrize("keep", ["header", "half"])
def test_truncated_while_exporting(big, tmp_path, label, binary, flags, keep):
    original = (big / "model.safetensors").read_bytes()
    data_start = 8 + int.from_bytes(original[:8], "little")
    keep_bytes = data_start + 1000 if keep == "header" else len(original) // 2
    # fp32 doubles the bytes; bf16 keeps them (both store every tensor once, 4096-aligned).
    final_size = (len(original) - data_start) * (2 if not flags else 1)
    result = None
    for attempt in range(5):   # the export may outrun the poll: try again on a fresh copy
        parent = tmp_path / f"outs-{attempt}"
        ckpt = shutil.copytree(big, tmp_path / f"ckpt-{attempt}")
        parent.mkdir()
        result = export_and_truncate(binary, ckpt, parent, flags, final_size, keep_bytes)
        if result is not None:
            break
        shutil.rmtree(parent)
        shutil.rmtree(ckpt)
    assert result is not None, "the export never stopped inside the weight window"
    rc, stderr = result
    assert rc != -signal.SIGBUS, "killed by SIGBUS"
    assert rc == 1, f"{label}: exit {rc}: {stderr[-3000:]}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    line = lines[0]
    assert str(ckpt / "model.safetensors") in line, line
    assert "truncated while exporting" in line and "tensor '" in line, line
    assert f"the file now has {keep_bytes}" in line, line
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"
