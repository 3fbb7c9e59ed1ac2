"""Paths near PATH_MAX are never cut short (issue 8).

Every path ferry builds (a file in the temporary directory, a file of the checkpoint) is checked
against PATH_MAX: a path that does not fit ends the run with exit 1, one line naming the path
and saying "File name too long", and nothing left behind; a path that fits gives the complete
export. The lengths swept cross every boundary: the output directory, its temporary directory,
the lock file, and each file written into it (the longest, generation_config.json, last)."""

import os
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, SANITIZER_ENV, ferry_builds, run_ferry

from conftest import FIXTURE  # noqa: E402
PATH_MAX = os.pathconf("/", "PC_PATH_MAX")
EXPORT_FILES = ["config.json", "export.json", "generation_config.json", "model.onnx",
                "model.onnx.data"]


@pytest.fixture(params=[b[1] for b in ferry_builds()], ids=[b[0] for b in ferry_builds()])
def build(request):
    return request.param


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
