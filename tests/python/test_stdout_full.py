"""A write to standard output that fails is an error: `ferry inspect out > /dev/full` (and
--json, --help, --version, `ferry graph`) exited 0 with nothing written, so a script saving the
output on a full disk took an empty file for success. Now one line, "cannot write to standard
output: ...", and exit 1; a command that fails anyway keeps its own single error line."""

import os
import subprocess

import pytest

from conftest import FIXTURE, SANITIZER_ENV, ferry_builds

BUILDS = ferry_builds()
IDS = [b[0] for b in BUILDS]

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")


def run_to_full(binary, *args):
    env = SANITIZER_ENV if binary != BUILDS[0][1] else os.environ
    with open("/dev/full", "w") as full:
        proc = subprocess.run([str(binary), *map(str, args)], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=300, env=env)
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
@pytest.mark.parametrize("args", [("inspect", "EXPORT"), ("inspect", "EXPORT", "--json"),
                                  ("--help",), ("--version",), ("export", "--help"),
                                  ("inspect", "--help"), ("graph", FIXTURE)],
                         ids=["inspect", "inspect-json", "help", "version", "export-help",
                              "inspect-help", "graph"])
def test_output_to_dev_full(exported, label, binary, args):
    args = [exported if a == "EXPORT" else a for a in args]
    rc, stderr = run_to_full(binary, *args)
    lines = stderr.strip("\n").split("\n")
    assert rc == 1, f"exit {rc}: {stderr[-2000:]}"
    assert lines == [lines[0]] and lines[0].startswith(
        "ferry: error: cannot write to standard output: "), stderr[-2000:]


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
def test_failure_keeps_its_message(tmp_path, label, binary):
    rc, stderr = run_to_full(binary, "inspect", tmp_path / "missing")
    lines = stderr.strip("\n").split("\n")
    assert rc == 1 and len(lines) == 1 and "missing" in lines[0], stderr
    assert "standard output" not in stderr
