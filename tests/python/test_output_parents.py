"""An export's missing parent directories are made, as transformers' save_pretrained and
optimum-cli make them, and removed again when the export fails: a failed export leaves no new
directory behind, and one that something was put in meanwhile is kept."""

import os
import pytest

from conftest import FIXTURE, copy_checkpoint, run_ferry


def test_cli_makes_missing_parents(build, tmp_path):
    out = tmp_path / "new" / "deeper" / "onnx"
    rc, _, err = run_ferry("export", FIXTURE, out, "-q", binary=build)
    assert rc == 0, err
    assert (out / "export.json").is_file() and (out / "model.onnx").is_file()
    rc, stdout, err = run_ferry("inspect", out, binary=build)
    assert rc == 0 and "model.onnx" in stdout, err


def test_a_file_in_the_path_is_one_line_and_nothing_made(build, tmp_path):
    (tmp_path / "made").mkdir()
    (tmp_path / "made" / "a-file").write_text("mine")
    out = tmp_path / "made" / "a-file" / "x" / "onnx"
    rc, _, err = run_ferry("export", FIXTURE, out, binary=build)
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert "cannot create directory" in lines[0] and "a-file" in lines[0], lines[0]
    assert "Not a directory" in lines[0], lines[0]
    assert sorted(os.listdir(tmp_path / "made")) == ["a-file"]
    assert (tmp_path / "made" / "a-file").read_text() == "mine"


@pytest.mark.parametrize("spelling", [".", "./", ".."])
def test_dot_as_the_output_names_the_fix(build, tmp_path, spelling):
    """`ferry export M .` in an empty directory: the export is a directory put in place by
    name, so '.' cannot be it; the one line says what to write instead, and nothing is made."""
    (tmp_path / "here").mkdir()
    rc, _, err = run_ferry("export", FIXTURE, spelling, binary=build, cwd=tmp_path / "here")
    lines = err.strip().splitlines()
    assert rc == 1 and len(lines) == 1, err
    assert f"bad output path '{spelling}'" in lines[0] and "(e.g. ./out)" in lines[0], lines[0]
    assert os.listdir(tmp_path) == ["here"] and not os.listdir(tmp_path / "here")


def failing_save(tmp_path):
    """An export built from a copy of the fixture whose weights are then cut short, so that its
    save fails while streaming them: after its parents were made."""
    from ferry import OnnxExporter

    ckpt = tmp_path / "ckpt"
    copy_checkpoint(FIXTURE, ckpt)
    exported = OnnxExporter().export(ckpt)
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.truncate(4096)
    return exported


def test_a_failed_save_removes_the_parents_it_made(tmp_path):
    from ferry import FerryError

    exported = failing_save(tmp_path)
    (tmp_path / "exports").mkdir()
    with pytest.raises(FerryError) as info:
        exported.save_pretrained(tmp_path / "exports" / "new" / "deeper" / "onnx")
    assert "model.safetensors" in str(info.value)
    # the directories it made are gone; the one that was there stays
    assert os.listdir(tmp_path / "exports") == []


@pytest.mark.parametrize("spelling", ["x/../y/out", "a/b//out", "c/./d/out"])
def test_a_failed_save_removes_what_it_made_however_spelt(tmp_path, spelling):
    """The made directories were found again by walking up the path as
    written, so "x/../y/out" removed the user's empty y (through x/..) and left x, and "//" or
    "." stopped the walk early. Now exactly the directories made are removed."""
    from ferry import FerryError

    exported = failing_save(tmp_path)
    root = tmp_path / "root"
    (root / "y").mkdir(parents=True)  # the user's, empty
    with pytest.raises(FerryError):
        exported.save_pretrained(f"{root}/{spelling}")
    assert sorted(os.listdir(root)) == ["y"] and os.listdir(root / "y") == []


def test_many_missing_parents(build, tmp_path):
    """mkdir -p has no limit on the levels it makes (64 was one)."""
    out = tmp_path / "deep" / ("d/" * 70) / "out"
    rc, _, err = run_ferry("export", FIXTURE, out, "-q", binary=build)
    assert rc == 0, err
    assert (out / "export.json").is_file()
