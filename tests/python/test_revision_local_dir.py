"""A revision names a commit of a hub repository; a local directory has none. At 6fe3928
`ferry export DIR OUT --revision X` exported DIR as it is and ignored X, so the caller got
something other than what they named without a word. The library refuses the pair
(FERRY_ERR_INVALID_ARG, "... is a local directory, and a revision ... applies only to a hub
id"): the pair is the command line's, so `ferry export`, `ferry graph` and `ferry validate
--model DIR --revision X` exit 2 (a bad command line; at ee087fa export and graph exited 1, as
for an export that failed), and the Python binding raises FerryError with that message.
Without --revision the directory exports as before.
"""

import os

import pytest

from conftest import ROOT, ferry_builds, run_ferry

FIXTURE = ROOT / "fixtures" / "tiny-llama"


@pytest.mark.parametrize("revision", ["main", "v1.0", "0123456789abcdef0123456789abcdef01234567"])
@pytest.mark.parametrize("label,binary", ferry_builds(), ids=[b[0] for b in ferry_builds()])
def test_cli_refuses_revision_with_directory(tmp_path, label, binary, revision):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "--revision", revision,
                              binary=binary)
    assert rc == 2, f"{label}: exit {rc}: {stderr}"
    lines = stderr.strip().split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    assert f"{FIXTURE} is a local directory" in lines[0], lines[0]
    assert f"revision ('{revision}') applies only to a hub id" in lines[0], lines[0]
    assert os.listdir(tmp_path) == [], "nothing may be written"


def test_cli_directory_without_revision_exports(tmp_path):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q")
    assert rc == 0, stderr


def test_python_binding_refuses_revision_with_directory():
    import ferry

    with pytest.raises(ferry.FerryError, match="is a local directory, and a revision"):
        ferry.OnnxExporter().export(FIXTURE, revision="main")


def test_graph_refuses_revision_with_directory():
    rc, _, stderr = run_ferry("graph", FIXTURE, "--revision", "main")
    assert rc == 2, f"exit {rc}: {stderr}"
    assert "is a local directory, and a revision ('main') applies only to a hub id" in stderr


def test_validate_refuses_revision_with_model_directory(tmp_path):
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q")
    assert rc == 0, stderr
    from test_validate import validate

    rc, _, stderr = validate(tmp_path / "out", "--model", FIXTURE, "--revision", "main")
    assert rc == 2, f"exit {rc}: {stderr}"
    lines = stderr.strip().split("\n")
    assert len(lines) == 1 and "is a local directory, and a revision ('main') applies only to " \
        "a hub id" in lines[0], stderr
