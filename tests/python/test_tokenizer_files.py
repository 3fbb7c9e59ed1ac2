"""Every export carries the checkpoint's tokenizer and chat-template files (tokenizer.json,
tokenizer_config.json, chat_template.jinja, ...), byte for byte and listed in export.json, so an
export directory is self-contained for runtimes that tokenize; --no-tokenizer skips them. The
files are SmolLM2-135M-Instruct's real ones (the `smollm2` fixture), copied beside a tiny random
checkpoint so the exports stay small. A file that is not a regular file, or too large, is
refused like any other input; a checkpoint without any exports fine and says so."""

import json
import os
import shutil

import pytest

from conftest import check_export_error, ferry_builds, ferry_export, run_ferry

NAMES = ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
LIMIT = 64 << 20


@pytest.fixture
def ckpt(ckpts, smollm2, tmp_path):
    """A tiny llama checkpoint with SmolLM2's tokenizer files beside it."""
    out = tmp_path / "ckpt"
    shutil.copytree(ckpts("llama"), out)
    for name in NAMES:
        shutil.copy(smollm2 / name, out / name)
    return out


def listed(export):
    return json.loads((export / "export.json").read_text())["tokenizer_files"]


def test_files_carried_byte_for_byte(ckpt, smollm2, tmp_path):
    """The files are copied as they are, listed in export.json and shown by inspect, and
    transformers' AutoTokenizer loads the export directory to the same ids and chat prompt."""
    from transformers import AutoTokenizer

    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--dynamic")
    assert rc == 0 and "warning" not in stderr, stderr
    out = tmp_path / "out"
    assert listed(out) == NAMES
    for name in NAMES:
        assert (out / name).read_bytes() == (ckpt / name).read_bytes(), name
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "tokenizer files: tokenizer.json, tokenizer_config.json, " \
        "chat_template.jinja" in stdout, stdout
    ours, theirs = AutoTokenizer.from_pretrained(out), AutoTokenizer.from_pretrained(smollm2)
    text = "The capital of France is"
    assert ours(text)["input_ids"] == theirs(text)["input_ids"]
    chat = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = ours.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert prompt == theirs.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    assert "What is the capital of France?" in prompt and prompt != chat[0]["content"]


def test_generation_export_and_python_api(ckpt, tmp_path):
    """Generation exports carry them too, and so does the Python binding's save_pretrained."""
    from ferry import OnnxConfig, OnnxExporter

    out = ferry_export(ckpt, tmp_path / "gen", "--dynamic", "--for-generation", "--quiet")
    assert listed(out) == NAMES and all((out / n).is_file() for n in NAMES)
    exported = OnnxExporter().export(ckpt, config=OnnxConfig(dynamic=True))
    exported.save_pretrained(tmp_path / "py")
    assert listed(tmp_path / "py") == NAMES
    for name in NAMES:
        assert (tmp_path / "py" / name).read_bytes() == (ckpt / name).read_bytes()


def test_no_tokenizer_flag(ckpt, tmp_path):
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--no-tokenizer")
    assert rc == 0 and "warning" not in stderr, stderr
    assert listed(tmp_path / "out") == []
    assert not any((tmp_path / "out" / n).exists() for n in NAMES)
    rc, stdout, _ = run_ferry("inspect", tmp_path / "out")
    assert "tokenizer files: none" in stdout, stdout


def test_checkpoint_without_tokenizer_says_so(ckpts, tmp_path):
    rc, _, stderr = run_ferry("export", ckpts("llama"), tmp_path / "out")
    assert rc == 0
    lines = [line for line in stderr.splitlines() if "warning" in line]
    assert len(lines) == 1 and lines[0].startswith("ferry: warning: ") and \
        "no tokenizer files" in lines[0], stderr
    assert listed(tmp_path / "out") == []


def test_linked_file_is_followed(ckpt, tmp_path):
    """A hub cache's snapshot holds links to its blobs: a link to a regular file is read."""
    blob = tmp_path / "blob"
    shutil.move(ckpt / "tokenizer.json", blob)
    os.symlink(blob, ckpt / "tokenizer.json")
    out = ferry_export(ckpt, tmp_path / "out", "--quiet")
    assert not (out / "tokenizer.json").is_symlink()
    assert (out / "tokenizer.json").read_bytes() == blob.read_bytes()


def make_oversized(path):
    path.unlink()
    with open(path, "wb") as f:
        f.truncate(LIMIT + 1)   # sparse: no disk used


def make_fifo(path):
    path.unlink()
    os.mkfifo(path)


def make_device_link(path):
    path.unlink()
    os.symlink("/dev/zero", path)


def make_dangling(path):
    path.unlink()
    os.symlink(path.parent / "gone", path)


def make_directory(path):
    path.unlink()
    path.mkdir()


BAD = {"oversized": (make_oversized, ["tokenizer.json", "exceed the limit"]),
       "fifo": (make_fifo, ["tokenizer.json", "not a regular file"]),
       "device-link": (make_device_link, ["tokenizer.json", "not a regular file"]),
       "dangling-link": (make_dangling, ["tokenizer.json", "cannot open"]),
       "directory": (make_directory, ["tokenizer.json", "not a regular file"])}


@pytest.mark.parametrize("build", ferry_builds(), ids=lambda b: b[0])
@pytest.mark.parametrize("case", list(BAD))
def test_bad_tokenizer_file_refused(ckpt, tmp_path, case, build):
    make, needles = BAD[case]
    make(ckpt / "tokenizer.json")
    check_export_error(ckpt, tmp_path / "out", [], needles, 1, build[1])
    # --no-tokenizer does not read them
    assert run_ferry("export", ckpt, tmp_path / "skip", "--no-tokenizer", "--quiet",
                     binary=build[1])[0] == 0


def test_force_replaces_only_listed_files(ckpt, ckpts, tmp_path):
    """--force deletes the tokenizer files an export lists, and nothing else: a tokenizer file
    the export does not list (the user's) stops it, and export.json cannot list other names."""
    out = ferry_export(ckpt, tmp_path / "out", "--quiet")
    ferry_export(ckpts("llama"), out, "--force", "--quiet")      # none this time
    assert not any((out / n).exists() for n in NAMES)
    shutil.copy(ckpt / "tokenizer.json", out / "tokenizer.json")  # the user's own copy
    rc, _, stderr = run_ferry("export", ckpts("llama"), out, "--force", "--quiet")
    assert rc == 1 and "'tokenizer.json'" in stderr, stderr
    assert (out / "tokenizer.json").exists()
    (out / "tokenizer.json").unlink()
    manifest = json.loads((out / "export.json").read_text())
    manifest["tokenizer_files"] = ["model.onnx.data"]             # not a tokenizer file
    (out / "export.json").write_text(json.dumps(manifest))
    rc, _, stderr = run_ferry("inspect", out)
    assert rc == 1 and "'model.onnx.data' is not a tokenizer file name" in stderr, stderr
    rc, _, stderr = run_ferry("export", ckpts("llama"), out, "--force", "--quiet")
    assert rc == 1 and "not replacing" in stderr, stderr
    assert (out / "model.onnx.data").exists()
