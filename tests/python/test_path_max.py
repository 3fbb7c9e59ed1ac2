"""Paths near PATH_MAX are never cut short (issue 8).

Every path ferry builds (a file in the temporary directory, a file of the checkpoint) is checked
against PATH_MAX: a path that does not fit ends the run with exit 1, one line naming the path
and saying "File name too long", and nothing left behind; a path that fits gives the complete
export. The lengths swept cross every boundary: the output directory, its temporary directory,
the lock file, and each file written into it (the longest, generation_config.json, last)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, SANITIZER_ENV, run_ferry

from conftest import FIXTURE  # noqa: E402
PATH_MAX = os.pathconf("/", "PC_PATH_MAX")
EXPORT_FILES = ["config.json", "export.json", "generation_config.json", "model.onnx",
                "model.onnx.data"]


def deep_dir(base, length):
    """A new directory whose absolute path is exactly `length` bytes."""
    cur = str(Path(base).resolve())
    assert len(cur) < length - 2
    while len(cur) + 201 <= length - 2:
        cur += "/" + "d" * 200
    cur += "/" + "e" * (length - len(cur) - 1)
    assert len(cur) == length
    os.makedirs(cur)
    return Path(cur)


def check_one_line(stderr):
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    assert "File name too long" in lines[0], lines[0][-300:]
    return lines[0]


def test_output_path_near_path_max(tmp_path, build):
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    outcomes = {}
    for length in range(PATH_MAX - 110, PATH_MAX, 4):
        parent = deep_dir(tmp_path / str(length), length - 2)
        out = parent / "o"
        assert len(str(out)) == length
        rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", binary=build, env=env)
        if rc == 0:
            assert sorted(os.listdir(out)) == EXPORT_FILES, f"length {length}: a broken export"
            assert os.listdir(parent) == ["o"]
        else:
            assert rc == 1, stderr
            check_one_line(stderr)
            assert os.listdir(parent) == [], f"length {length}: left {os.listdir(parent)}"
        outcomes[length] = rc
    assert 0 in outcomes.values() and 1 in outcomes.values(), outcomes


def test_checkpoint_path_near_path_max(tmp_path, build):
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    outcomes = {}
    for length in range(PATH_MAX - 40, PATH_MAX, 3):
        ckpt = deep_dir(tmp_path / str(length), length)
        fd = os.open(ckpt, os.O_RDONLY | os.O_DIRECTORY)
        try:  # relative to the directory: some of these paths are too long to spell whole
            for f in FIXTURE.iterdir():
                os.symlink(f, f.name, dir_fd=fd)
        finally:
            os.close(fd)
        out = tmp_path / f"out{length}"
        rc, _, stderr = run_ferry("export", ckpt, out, "-q", binary=build, env=env)
        if rc == 0:
            assert sorted(os.listdir(out)) == EXPORT_FILES
        else:
            assert rc == 1, stderr
            check_one_line(stderr)
            assert not out.exists()
        outcomes[length] = rc
    assert 0 in outcomes.values() and 1 in outcomes.values(), outcomes
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")], "temporary files left"


def deep_cwd(base, depth=24):
    """A directory `depth` levels of 200-byte names below `base` (an absolute path over PATH_MAX
    once depth * 201 passes it), made and opened relative to its parent; returns an fd."""
    fd = os.open(base, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d" * 200, dir_fd=fd)
        inner = os.open("d" * 200, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = inner
    return fd


def run_in(fd, build, *args):
    """ferry run with its working directory the directory `fd` (too deep to name to chdir)."""
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    proc = subprocess.run([str(build), *map(str, args)], capture_output=True, text=True,
                          timeout=600, env=env, pass_fds=(fd,),
                          preexec_fn=lambda: os.fchdir(fd))
    return proc.returncode, proc.stdout, proc.stderr


def listing(fd, name):
    inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    try:
        return sorted(os.listdir(inner))
    finally:
        os.close(inner)


def test_deep_working_directory(tmp_path, build):
    """Under a working directory deeper than PATH_MAX a relative export works, but its real
    path cannot be made: inspect and --force said "file 'model.onnx' is missing or leaves the
    export directory"; they now say the path is too long to resolve, and touch nothing."""
    fd = deep_cwd(tmp_path)
    try:
        rc, _, stderr = run_in(fd, build, "export", FIXTURE, "out", "-q")
        assert rc == 0, stderr
        assert listing(fd, "out") == EXPORT_FILES
        for args in (("inspect", "out"), ("export", FIXTURE, "out", "-q", "--force")):
            rc, _, stderr = run_in(fd, build, *args)
            lines = stderr.strip("\n").split("\n")
            assert rc == 1 and len(lines) == 1, (args, stderr)
            assert "path too long to resolve" in lines[0], (args, lines[0])
            assert "missing or leaves" not in lines[0]
            assert listing(fd, "out") == EXPORT_FILES
        assert listing(fd, ".") == ["out"]
    finally:
        os.close(fd)


def test_deep_working_directory_force_inside_model(tmp_path, build):
    """--force never replaces an export inside the model directory. The check walked up from
    realpath(), which fails under a deep working directory, and then let a transformers export
    at model/onnx be replaced; it now walks up through "..", which needs no path."""
    fd = deep_cwd(tmp_path)
    try:
        model = os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.mkdir("m", dir_fd=fd)
        mfd = os.open("m", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(model)
        for f in FIXTURE.iterdir():
            os.symlink(f, f.name, dir_fd=mfd)
        os.mkdir("onnx", dir_fd=mfd)
        ofd = os.open("onnx", os.O_RDONLY | os.O_DIRECTORY, dir_fd=mfd)
        manifest = {"schema_version": 1, "export_format": "onnx",
                    "components": {"model": {"file": "model.onnx", "metadata": {}}}}
        for name, data in (("export.json", json.dumps(manifest).encode()),
                           ("model.onnx", b"graph")):
            w = os.open(name, os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=ofd)
            os.write(w, data)
            os.close(w)
        before = sorted(os.listdir(ofd))
        rc, _, stderr = run_in(fd, build, "export", "m", "m/onnx", "-q", "--force")
        assert rc == 1 and "inside the model being exported" in stderr, stderr
        assert sorted(os.listdir(ofd)) == before
        with open(os.open("model.onnx", os.O_RDONLY, dir_fd=ofd), "rb") as f:
            assert f.read() == b"graph"
        os.close(ofd)
        os.close(mfd)
    finally:
        os.close(fd)


@pytest.mark.parametrize("length", [226, 227, 240, 255])
def test_output_name_length(tmp_path, build, length):
    """The temporary directory beside OUT is named .<name>.ferry-tmp-<pid>-XXXXXX: a name over
    226 bytes cannot have one within NAME_MAX (255). Such names said "cannot create a directory
    in .: File name too long"; now the name and the limit are named before any work."""
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    out = tmp_path / ("n" * length)
    rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", binary=build, env=env)
    if length <= 226:
        assert rc == 0, stderr
        assert sorted(os.listdir(out)) == EXPORT_FILES
        return
    lines = stderr.strip("\n").split("\n")
    assert rc == 1 and len(lines) == 1, stderr
    assert (f"name too long for ferry's temporary directory beside it "
            f"(.<name>.ferry-tmp-<pid>-XXXXXX): the name is {length} bytes, at most 226 are "
            "allowed") in lines[0], lines[0]
    assert os.listdir(tmp_path) == []
