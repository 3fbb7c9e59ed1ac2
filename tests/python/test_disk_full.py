"""Exports into a place that runs out of space end with one clear line ("ferry: error: cannot
write OUT: <file>: no space left ...") naming the destination and the file, exit status 1, no
partial output, the temporary directory removed, and an existing export (under --force) left
byte for byte as it was.

Two mechanisms:
- RLIMIT_FSIZE (a file-size limit, set in the child with SIGXFSZ ignored so that write() fails
  with EFBIG instead of killing the process). Works for any user, so these tests always run.
- A small tmpfs mounted for the test (ENOSPC, and ENOSPC for inodes), sized so the disk fills
  while each file of the export in turn is being written. Mounting needs root (CAP_SYS_ADMIN);
  without it these tests are skipped with that reason, the RLIMIT_FSIZE ones still cover the
  write-error path."""

import os
import resource
import shutil
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, SANITIZER_ENV, ferry_export

from conftest import FIXTURE  # noqa: E402
# The order in which save writes an export's files (see src/export/save.c).
WRITE_ORDER = ["model.onnx.data", "model.onnx", "export.json", "config.json",
               "generation_config.json"]
PAGE = 4096


def snapshot(root):
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def run_export(binary, out, *flags, fsize=None, sigxfsz=signal.SIG_IGN):
    """`ferry export FIXTURE OUT FLAGS`; with `fsize`, under RLIMIT_FSIZE = fsize bytes, SIGXFSZ
    handled as `sigxfsz` (SIG_DFL: a shell's `ulimit -f`, which ferry must survive too).
    Returns (returncode, stderr)."""
    def limit():
        signal.signal(signal.SIGXFSZ, sigxfsz)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    env = SANITIZER_ENV if Path(binary) != FERRY_BIN else os.environ
    proc = subprocess.run([str(binary), "export", str(FIXTURE), str(out), *flags],
                          capture_output=True, text=True, timeout=300, env=env,
                          preexec_fn=limit if fsize is not None else None,
                          restore_signals=False)
    return proc.returncode, proc.stderr


def assert_no_space(rc, stderr, out, culprit):
    """The failure contract for a full disk: exit 1, one line, "no space", the destination and
    the file being written named."""
    assert rc == 1, f"exit {rc}, expected 1; stderr: {stderr!r}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    line = lines[0]
    assert "no space" in line.lower(), line
    assert f"cannot write {out}" in line, line
    assert culprit in line, f"{culprit} not named: {line}"
    return line


# ---------------------------------------------------------------------------------------------
# RLIMIT_FSIZE: always available


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A complete export of the fixture: the sizes the limits are chosen from."""
    out = ferry_export(FIXTURE, tmp_path_factory.mktemp("ref") / "out", "--dynamic", "-q")
    return {name: (out / name).stat().st_size for name in WRITE_ORDER}


@pytest.mark.parametrize("limit", ["1", "4096", "half", "one-short"])
def test_file_size_limit(reference, tmp_path, build, limit):
    data = reference["model.onnx.data"]
    fsize = {"1": 1, "4096": 4096, "half": data // 2, "one-short": data - 1}[limit]
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "out"
    rc, stderr = run_export(build, out, "--dynamic", fsize=fsize)
    assert_no_space(rc, stderr, out, "model.onnx.data")
    assert "File too large" in stderr      # the system's reason, after ferry's words
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"


def test_file_size_limit_with_sigxfsz_default(reference, tmp_path, build):
    """Under a shell's `ulimit -f` SIGXFSZ kills a process at its first write past the limit,
    leaving the temporary directory behind; ferry ignores the signal, so the
    write fails with EFBIG and the export ends as on a full disk."""
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "out"
    rc, stderr = run_export(build, out, "--dynamic", fsize=reference["model.onnx.data"] // 2,
                            sigxfsz=signal.SIG_DFL)
    assert_no_space(rc, stderr, out, "model.onnx.data")
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"


def test_file_size_limit_exactly_enough(reference, tmp_path):
    """The limit is what makes the others fail: at the largest file's size, all succeed."""
    out = tmp_path / "out"
    rc, stderr = run_export(FERRY_BIN, out, "--dynamic", fsize=max(reference.values()))
    assert rc == 0, stderr
    assert sorted(os.listdir(out)) == sorted(WRITE_ORDER)


def test_file_size_limit_keeps_existing_export(reference, tmp_path, build):
    parent = tmp_path / "outs"
    parent.mkdir()
    out = ferry_export(FIXTURE, parent / "out", "--dtype", "fp16", "-q")
    before = snapshot(out)
    rc, stderr = run_export(build, out, "--dynamic", "--force",
                            fsize=reference["model.onnx.data"] // 3)
    assert_no_space(rc, stderr, out, "model.onnx.data")
    assert snapshot(out) == before, "the existing export changed"
    assert os.listdir(parent) == ["out"], os.listdir(parent)


def test_file_size_limit_generation_export(tmp_path, build):
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "out"
    rc, stderr = run_export(build, out, "--for-generation", "--static-cache", "--max-cache-len",
                            "32", fsize=100_000)
    assert_no_space(rc, stderr, out, "model.onnx.data")
    assert os.listdir(parent) == []


# ---------------------------------------------------------------------------------------------
# A small tmpfs: needs root


def _can_mount():
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    probe = Path("/tmp") / f"ferry-mount-probe-{uuid.uuid4().hex}"
    probe.mkdir()
    try:
        ok = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)],
                            capture_output=True).returncode == 0
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    finally:
        probe.rmdir()


CAN_MOUNT = _can_mount()
needs_mount = pytest.mark.skipif(
    not CAN_MOUNT, reason="mounting a tmpfs needs root with CAP_SYS_ADMIN, which this run lacks; "
    "the RLIMIT_FSIZE tests cover the write-error path without it")


@pytest.fixture
def small_fs(tmp_path):
    """mount(options) -> a fresh tmpfs directory; unmounted after the test."""
    mounts = []

    def mount(options):
        where = tmp_path / f"fs{len(mounts)}"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], check=True)
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", str(where)], check=True)


def pages(n):
    return (n + PAGE - 1) // PAGE


@needs_mount
@pytest.mark.parametrize("stage", WRITE_ORDER)
def test_disk_fills_while_writing(reference, small_fs, build, stage):
    """The disk holds every file written before `stage` and all but one page of `stage`: the
    export fails while writing that file, and gives all the space back."""
    k = WRITE_ORDER.index(stage)
    size = sum(pages(reference[f]) for f in WRITE_ORDER[:k]) + pages(reference[stage]) - 1
    fs = small_fs(f"size={size * PAGE}")
    out = fs / "out"
    rc, stderr = run_export(build, out, "--dynamic")
    assert_no_space(rc, stderr, out, stage)
    assert os.listdir(fs) == [], f"left behind: {os.listdir(fs)}"
    used = os.statvfs(fs)
    assert used.f_bfree == used.f_blocks, "space not given back"


@needs_mount
def test_disk_large_enough(reference, small_fs):
    fs = small_fs(f"size={sum(pages(n) for n in reference.values()) * PAGE + 64 * PAGE}")
    rc, stderr = run_export(FERRY_BIN, fs / "out", "--dynamic")
    assert rc == 0, stderr


@needs_mount
@pytest.mark.parametrize("inodes, culprit", [(2, "lock"), (3, "/export"), (4, "model.onnx.data")])
def test_out_of_inodes(small_fs, build, inodes, culprit):
    """The root, the temporary directory, its lock file, the directory the export is built in,
    then the first file of the export: each in turn is the one that cannot be created."""
    fs = small_fs(f"nr_inodes={inodes}")
    out = fs / "out"
    rc, stderr = run_export(build, out, "--dynamic")
    assert_no_space(rc, stderr, out, culprit)
    assert os.listdir(fs) == []


@needs_mount
def test_full_disk_keeps_existing_export(reference, small_fs, build):
    """An fp16 export fills most of the disk; replacing it with an fp32 one cannot fit."""
    total = sum(pages(n) for n in reference.values())
    fs = small_fs(f"size={(total + total // 2) * PAGE}")
    out = ferry_export(FIXTURE, fs / "out", "--dtype", "fp16", "-q")
    before = snapshot(out)
    rc, stderr = run_export(build, out, "--dynamic", "--force")
    assert_no_space(rc, stderr, out, "model.onnx")    # the data or the graph: whichever fills it
    assert snapshot(out) == before, "the existing export changed"
    assert os.listdir(fs) == ["out"], os.listdir(fs)
