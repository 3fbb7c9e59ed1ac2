"""--force replaces an earlier export and nothing else (issue 8).

`ferry export SRC OUT --force` (and ExportedModel.save_pretrained(force=True)) must refuse, with
exit 1, one line, and every byte, name, link and directory under OUT as it was, unless OUT is a
directory holding a valid export.json (ferry's, or transformers' ExportedModel.save_pretrained's)
and nothing but the files it names, config.json and generation_config.json; and always when OUT
is the model directory, contains it, or lies inside it. Each refusal test hashes the whole tree
before and after. The CLI cases run through the release and the sanitizer build."""

import hashlib
import json
import os
import shutil
import stat
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, SANITIZER_ENV, ferry_export, run_ferry
from stall import StalledExport

from conftest import FIXTURE  # noqa: E402
EXPORT_FILES = ["config.json", "export.json", "generation_config.json", "model.onnx",
                "model.onnx.data"]


def tree(root):
    """Everything under root (root included), not following links: {relative path: (kind,
    mode, content hash or link target)}."""
    root = Path(root)
    found = {}
    for path in [root, *sorted(root.rglob("*"))]:
        st = path.lstat()
        rel = str(path.relative_to(root))
        if stat.S_ISLNK(st.st_mode):
            found[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(st.st_mode):
            found[rel] = ("dir", stat.S_IMODE(st.st_mode))
        else:
            found[rel] = ("file", stat.S_IMODE(st.st_mode),
                          hashlib.sha256(path.read_bytes()).hexdigest())
    return found


def expect_refusal(src, out, *words, build=None, watch=None):
    """`ferry export src out --force` exits 1 with one line holding `words`, and nothing under
    `watch` (default: out's parent) changes, not even a temporary directory left."""
    watch = Path(watch or Path(out).parent)
    before = tree(watch)
    env = SANITIZER_ENV if build and Path(build) != FERRY_BIN else None
    rc, stdout, stderr = run_ferry("export", src, out, "--force", binary=build, env=env)
    assert rc == 1, f"exit {rc}: {stderr}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    assert tree(watch) == before, "a refused --force changed the directory"
    return lines[0]


@pytest.fixture
def src(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "t" / "src"))


@pytest.fixture(scope="module")
def previous(tmp_path_factory):
    """A real earlier ferry export (dynamic) of the fixture, to copy."""
    return ferry_export(FIXTURE, tmp_path_factory.mktemp("prev") / "out", "--dynamic", "-q")


# ---------------------------------------------------------------------------------------------
# The reproducers


def test_plain_directory_is_not_replaced(tmp_path, build):
    docs = tmp_path / "t" / "docs"
    docs.mkdir(parents=True)
    (docs / "thesis.txt").write_text("precious\n")
    expect_refusal(FIXTURE, docs, "not replacing", "no export.json", build=build)
    assert (docs / "thesis.txt").read_text() == "precious\n"


@pytest.mark.parametrize("spelling", ["src", "src/", "src//", "../t/src", "./src/../src"])
def test_source_itself_is_not_replaced(src, build, spelling, monkeypatch):
    monkeypatch.chdir(src.parent)
    expect_refusal(src, spelling, "is the model being exported", build=build, watch=src.parent)


def test_parent_of_source_is_not_replaced(tmp_path, build):
    par = tmp_path / "t" / "par"
    model = Path(shutil.copytree(FIXTURE, par / "model"))
    expect_refusal(model, par, "contains the model being exported", build=build)


def test_export_inside_source_is_not_replaced(src, build):
    """Even a valid export, when it lies inside the model directory (SRC/out)."""
    ferry_export(FIXTURE, src / "out", "-q")
    expect_refusal(src, src / "out", "inside the model being exported", build=build,
                   watch=src.parent)


def test_symlink_to_source_is_not_replaced(src, build):
    link = src.parent / "link"
    link.symlink_to("src")
    for out in (str(link), str(link) + "/"):
        expect_refusal(src, out, "symbolic link", build=build, watch=src.parent)
    # The model named through the link, OUT the real directory: still the same directory.
    expect_refusal(link, src, "is the model being exported", build=build, watch=src.parent)


def test_source_linking_into_export_is_not_replaced(tmp_path, previous, build):
    """A model directory whose config.json is a link into OUT: replacing OUT would break it."""
    out = Path(shutil.copytree(previous, tmp_path / "out"))
    model = Path(shutil.copytree(FIXTURE, tmp_path / "model"))
    (model / "config.json").unlink()
    (model / "config.json").symlink_to(out / "config.json")
    expect_refusal(model, out, "links 'config.json' to its file 'config.json'", build=build)


# ---------------------------------------------------------------------------------------------
# What counts as an export


def _extra_file(out):
    (out / "notes.txt").write_text("mine\n")
    return "'notes.txt'"


def _hidden_file(out):
    (out / ".keep").write_text("")
    return "'.keep'"


def _subdirectory(out):
    (out / "onnx").mkdir()
    (out / "onnx" / "model.onnx").write_bytes(b"x")
    return "'onnx'"


def _link_entry(out):
    (out.parent / "shared-config.json").write_bytes((out / "config.json").read_bytes())
    (out / "config.json").unlink()
    (out / "config.json").symlink_to(out.parent / "shared-config.json")
    return "'config.json' is a symbolic link"


def _invalid_json(out):
    (out / "export.json").write_text('{"schema_version": 1, ')
    return "export.json"


def _wrong_schema(out):
    m = json.loads((out / "export.json").read_text())
    m["schema_version"] = 2
    (out / "export.json").write_text(json.dumps(m))
    return "schema_version"


def _missing_file(out):
    (out / "model.onnx").unlink()
    return "model.onnx"


def _escaping_file(out):
    m = json.loads((out / "export.json").read_text())
    m["components"]["model"]["data_files"] = ["../elsewhere.data"]
    (out / "export.json").write_text(json.dumps(m))
    return "elsewhere.data"


def _export_json_is_a_link(out):
    (out.parent / "real.json").write_bytes((out / "export.json").read_bytes())
    (out / "export.json").unlink()
    (out / "export.json").symlink_to(out.parent / "real.json")
    return "no export.json"


DAMAGE = [_extra_file, _hidden_file, _subdirectory, _link_entry, _invalid_json, _wrong_schema,
          _missing_file, _escaping_file, _export_json_is_a_link]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_not_quite_an_export_is_not_replaced(tmp_path, previous, build, damage):
    out = Path(shutil.copytree(previous, tmp_path / "out", symlinks=True))
    word = damage(out)
    expect_refusal(FIXTURE, out, "not replacing", word, build=build)


@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_empty_directory_is_the_destination(tmp_path, build, force):
    """`mkdir out; ferry export M out` said "already exists (pass --force ...)", and --force then
    refused the empty directory. An empty directory holds nothing to lose: it is the destination
    either way (replaced by rename(2), which refuses it once it is not empty), keeping its
    permissions (a shared directory's setgid bit and group access)."""
    (tmp_path / "out").mkdir()
    os.chmod(tmp_path / "out", 0o2751)
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    flags = ("--force",) if force else ()
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", *flags, binary=build,
                              env=env)
    assert rc == 0, stderr
    assert sorted(os.listdir(tmp_path / "out")) == EXPORT_FILES
    assert os.listdir(tmp_path) == ["out"]
    assert oct((tmp_path / "out").stat().st_mode & 0o7777) == oct(0o2751)
    # Not empty any more: an existing export, replaced only with --force.
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", binary=build, env=env)
    assert rc == 1 and "already exists" in stderr, stderr


@pytest.mark.parametrize("what", ["file", "user_files", "link", "export"])
def test_without_force_the_hint_is_true(tmp_path, previous, build, what):
    """Without --force, "already exists" suggests --force only where it would replace what is
    there (a file and a directory of the user's own were told to pass --force,
    which then refused them); elsewhere the refusal says why --force would not help."""
    out = tmp_path / "out"
    if what == "file":
        out.write_text("mine")
    elif what == "user_files":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif what == "link":
        (tmp_path / "there").mkdir()
        (tmp_path / "there" / "notes.txt").write_text("mine")
        out.symlink_to("there")
    else:
        shutil.copytree(previous, out)
    before = tree(tmp_path)
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    rc, _, stderr = run_ferry("export", FIXTURE, out, "-q", binary=build, env=env)
    lines = stderr.strip("\n").split("\n")
    assert rc == 1 and len(lines) == 1, stderr
    assert ("--force" in lines[0] and "replaces an earlier export" in lines[0]) == \
        (what == "export"), lines[0]
    assert {"file": "not a directory", "user_files": "no export.json",
            "link": "symbolic link", "export": "already exists"}[what] in lines[0], lines[0]
    assert tree(tmp_path) == before


def test_empty_directory_link_is_not_followed(tmp_path, build):
    """A link to an empty directory is not an empty directory: refused as before."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "out").symlink_to("empty")
    expect_refusal(FIXTURE, tmp_path / "out", "symbolic link", build=build)


def test_subfolder_layout_parent_is_not_replaced(tmp_path, previous, build):
    """An export kept in subfolders (out/onnx, out/other) is replaced one subfolder at a time;
    the parent is not an export."""
    out = tmp_path / "out"
    shutil.copytree(previous, out / "onnx")
    shutil.copytree(previous, out / "other")
    expect_refusal(FIXTURE, out, "no export.json", build=build)
    shutil.copy(previous / "export.json", out / "export.json")
    expect_refusal(FIXTURE, out, "not replacing", build=build)
    ferry_export(FIXTURE, out / "onnx", "--force", "-q")
    assert tree(out / "other") == tree(previous)


# ---------------------------------------------------------------------------------------------
# What --force does replace


def test_previous_ferry_export_is_replaced(tmp_path, previous, build):
    out = Path(shutil.copytree(previous, tmp_path / "out"))
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    rc, _, stderr = run_ferry("export", FIXTURE, out, "--force", "-q", binary=build, env=env)
    assert rc == 0, stderr
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == [1, 8], "still the old (dynamic) export"
    assert sorted(os.listdir(out)) == EXPORT_FILES
    assert os.listdir(tmp_path) == ["out"], "temporary directory left behind"


def test_generation_export_is_replaced_by_a_plain_one(tmp_path):
    """Files of the old export that the new one lacks (prefill.onnx, decode.onnx) go too."""
    out = ferry_export(FIXTURE, tmp_path / "out", "--for-generation", "--dynamic", "-q")
    assert "decode.onnx" in os.listdir(out)
    ferry_export(FIXTURE, out, "--force", "-q")
    assert sorted(os.listdir(out)) == EXPORT_FILES
    assert os.listdir(tmp_path) == ["out"]


def _transformers_export(previous, path, components=("model",)):
    """An export written by transformers' own ExportedModel.save_pretrained (5.24): its
    programs are ferry's graph read back with onnx_ir, so no torch tracing is needed, while the
    files, names and export.json are exactly what transformers writes."""
    import onnx_ir
    import transformers
    from transformers.exporters.base import ExportedComponent, ExportedModel
    from transformers.exporters.metadata import ExportMetadata

    parts = {name: ExportedComponent(onnx_ir.load(str(previous / "model.onnx")),
                                     ExportMetadata(architecture="LlamaForCausalLM"))
             for name in components}
    config = transformers.AutoConfig.from_pretrained(FIXTURE)
    generation = transformers.GenerationConfig.from_pretrained(FIXTURE)
    ExportedModel(parts, "onnx", config=config, generation_config=generation).save_pretrained(path)
    return Path(path)


def test_transformers_export_is_replaced(tmp_path, previous, build):
    out = _transformers_export(previous, tmp_path / "out", ("prefill", "decode"))
    assert sorted(os.listdir(out)) == ["config.json", "decode.onnx", "decode.onnx.data",
                                       "export.json", "generation_config.json", "prefill.onnx",
                                       "prefill.onnx.data"]
    env = SANITIZER_ENV if Path(build) != FERRY_BIN else None
    rc, _, stderr = run_ferry("export", FIXTURE, out, "--force", "-q", binary=build, env=env)
    assert rc == 0, stderr
    assert sorted(os.listdir(out)) == EXPORT_FILES
    assert os.listdir(tmp_path) == ["out"]


def test_transformers_export_with_extra_file_is_not_replaced(tmp_path, previous, build):
    out = _transformers_export(previous, tmp_path / "out")
    (out / "README.md").write_text("my notes\n")
    expect_refusal(FIXTURE, out, "'README.md'", build=build)


def test_transformers_manifest_must_match_its_files(tmp_path, previous, build):
    """A file name transformers would not have written for the component is refused, and so is
    an unknown export_format."""
    out = _transformers_export(previous, tmp_path / "out")
    manifest = json.loads((out / "export.json").read_text())
    manifest["components"]["model"]["file"] = "other.onnx"
    (out / "export.json").write_text(json.dumps(manifest))
    (out / "other.onnx").write_bytes((out / "model.onnx").read_bytes())
    expect_refusal(FIXTURE, out, "component 'model'", build=build)
    manifest["components"]["model"]["file"] = "model.onnx"
    manifest["export_format"] = "tflite"
    (out / "export.json").write_text(json.dumps(manifest))
    (out / "other.onnx").unlink()
    expect_refusal(FIXTURE, out, "export_format", build=build)


@pytest.mark.parametrize("key", ["schema_version", "components", "file", "export_format"])
def test_transformers_manifest_with_a_repeated_key(tmp_path, previous, build, key):
    """cJSON checks the first copy of a repeated key and Python's json (transformers) uses the
    last: a transformers-schema export.json repeating one is refused, as ferry's own are."""
    out = _transformers_export(previous, tmp_path / "out")
    text = (out / "export.json").read_text()
    if key == "file":
        text = text.replace('"file": "model.onnx"', '"file": "model.onnx", "file": "x.onnx"', 1)
    else:
        dup = {"schema_version": '"schema_version": 2', "components": '"components": {}',
               "export_format": '"export_format": "dynamo"'}[key]
        text = text.replace("{", "{" + dup + ", ", 1)
    assert text.count(f'"{key}"') == 2, text[:300]
    (out / "export.json").write_text(text)
    expect_refusal(FIXTURE, out, "not replacing", f"key '{key}' appears more than once",
                   build=build)


def test_openvino_shaped_export_is_replaced(tmp_path):
    """OpenVINOExporter writes openvino_<name>.xml and its .bin (program_files): accepted."""
    out = tmp_path / "out"
    out.mkdir()
    manifest = {"schema_version": 1, "export_format": "openvino",
                "components": {"model": {"file": "openvino_model.xml", "metadata": {}}}}
    (out / "export.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (out / "openvino_model.xml").write_text("<net/>")
    (out / "openvino_model.bin").write_bytes(b"\0" * 64)
    shutil.copy(FIXTURE / "config.json", out / "config.json")
    ferry_export(FIXTURE, out, "--force", "-q")
    assert sorted(os.listdir(out)) == EXPORT_FILES


# ---------------------------------------------------------------------------------------------
# The directory changes while the new export is being written


def file_added_while_weights_written(tmp_path, out, args):
    """Runs `ferry export FIXTURE out *args`, stalled once its weights file exists; writes
    out/thesis.txt meanwhile and lets it finish. Returns (exit code, output, tree of out just
    after the file was added)."""
    run = StalledExport([FERRY_BIN, "export", FIXTURE, out, *args])
    try:
        run.wait_until(lambda: list(tmp_path.glob(".out.ferry-tmp-*/**/model.onnx.data")),
                       "the weights file")
        (out / "thesis.txt").write_text("written meanwhile\n")
        before = tree(out)
    except BaseException:
        run.kill()
        raise
    rc, text = run.release()
    return rc, text, before


def test_checked_again_just_before_the_swap(tmp_path, previous):
    """OUT is a valid export when the run starts; a file appears in it while the weights are
    written. The check just before the swap refuses, and OUT keeps every byte, the new file
    included."""
    out = Path(shutil.copytree(previous, tmp_path / "out"))
    rc, text, before = file_added_while_weights_written(tmp_path, out, ["--force"])
    assert rc == 1, text[-400:]
    assert "'thesis.txt'" in text and "not replacing" in text, text[-400:]
    assert tree(out) == before
    assert os.listdir(tmp_path) == ["out"], "temporary directory left behind"


def test_empty_directory_filled_meanwhile(tmp_path):
    """OUT is empty when the run starts and a file appears in it while the weights are written:
    rename(2) refuses a directory that is not empty, so the run fails saying so, and the file
    (and OUT) stay as they are."""
    out = tmp_path / "out"
    out.mkdir()
    rc, text, before = file_added_while_weights_written(tmp_path, out, [])
    assert rc == 1, text[-400:]
    assert "it was empty when the export started, but something was put in it since" in text, \
        text[-400:]
    assert tree(out) == before
    assert os.listdir(tmp_path) == ["out"], "temporary directory left behind"


# ---------------------------------------------------------------------------------------------
# The Python binding


def test_python_save_pretrained_into_an_empty_directory(tmp_path):
    from ferry import OnnxExporter

    (tmp_path / "out").mkdir()
    OnnxExporter().export(FIXTURE).save_pretrained(tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out")) == EXPORT_FILES


def test_python_save_pretrained_force_refuses_a_plain_directory(tmp_path):
    from ferry import FerryError, OnnxExporter

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "thesis.txt").write_text("precious\n")
    before = tree(tmp_path)
    with pytest.raises(FerryError, match="not replacing .*no export.json") as info:
        OnnxExporter().export(FIXTURE).save_pretrained(docs, force=True)
    assert info.value.status == 6  # FERRY_ERR_EXISTS
    assert tree(tmp_path) == before


def test_python_save_pretrained_force_refuses_the_source(tmp_path):
    from ferry import FerryError, OnnxExporter

    src = Path(shutil.copytree(FIXTURE, tmp_path / "src"))
    before = tree(tmp_path)
    with pytest.raises(FerryError, match="is the model being exported"):
        OnnxExporter().export(src).save_pretrained(src, force=True)
    assert tree(tmp_path) == before


def test_python_save_pretrained_force_replaces_an_export(tmp_path, previous):
    from ferry import OnnxExporter

    out = Path(shutil.copytree(previous, tmp_path / "out"))
    exported = OnnxExporter().export(FIXTURE)
    exported.save_pretrained(out, force=True)
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == [1, 8]
    assert sorted(os.listdir(out)) == EXPORT_FILES
    assert exported.directory == str(out)
