"""The CLI's failure contract: exit 1, exactly one line on stderr ("ferry: error: ...") naming
the file, tensor or key at fault, and no output directory left behind (an existing one is left
untouched). Usage errors exit 2; --help exits 0."""

import json
import os
import struct
from pathlib import Path

import pytest

from conftest import (ARCH_CLASS, assert_logits_close, copy_checkpoint, ferry_export,
                      make_checkpoint, make_inputs, ort_session, read_safetensors,
                      reference_logits, run_ferry, run_onnx, write_safetensors)

VICTIM = "model.layers.1.self_attn.k_proj.weight"


@pytest.fixture(scope="module")
def good_ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("good") / "ckpt", "llama")


@pytest.fixture
def ckpt(good_ckpt, tmp_path):
    """A private copy of the good checkpoint, to be damaged by the test."""
    return copy_checkpoint(good_ckpt, tmp_path / "ckpt")


def snapshot(root):
    """{relative path: bytes} of every file under root, to prove a directory is untouched."""
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def expect_failure(model, tmp_path, *culprits, extra=(), binary=None):
    """Runs an export of `model` into an empty parent dir and checks the failure contract.
    Each of `culprits` is a string, or a tuple of strings of which one must appear."""
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "out"
    rc, stdout, stderr = run_ferry("export", model, out, "--dynamic", *extra, binary=binary)
    assert rc == 1, f"exit {rc}, expected 1; stderr: {stderr!r}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    for culprit in culprits:
        options = culprit if isinstance(culprit, tuple) else (culprit,)
        assert any(c in lines[0] for c in options), f"{options} not named in: {lines[0]}"
    assert not out.exists(), "a failed export left its output directory"
    assert list(parent.iterdir()) == [], f"a failed export left {list(parent.iterdir())}"
    return lines[0]


# ---------------------------------------------------------------------------------------------
# Broken checkpoints


def test_model_dir_missing(tmp_path, build):
    expect_failure(tmp_path / "nowhere", tmp_path, "nowhere", binary=build)


def test_missing_config(ckpt, tmp_path, build):
    (ckpt / "config.json").unlink()
    expect_failure(ckpt, tmp_path, "config.json", binary=build)


def test_config_not_json(ckpt, tmp_path, build):
    (ckpt / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], ')
    expect_failure(ckpt, tmp_path, "config.json", binary=build)


def test_config_missing_key(ckpt, tmp_path, build):
    cfg = json.loads((ckpt / "config.json").read_text())
    del cfg["num_hidden_layers"]
    (ckpt / "config.json").write_text(json.dumps(cfg))
    expect_failure(ckpt, tmp_path, "num_hidden_layers", binary=build)


def test_unknown_architecture_lists_supported(ckpt, tmp_path, build):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["architectures"] = ["FalconForCausalLM"]
    cfg["model_type"] = "falcon"
    (ckpt / "config.json").write_text(json.dumps(cfg))
    msg = expect_failure(ckpt, tmp_path, "FalconForCausalLM", binary=build)
    for name in ARCH_CLASS.values():
        assert name in msg, f"supported architecture {name} not listed: {msg}"


def test_no_safetensors(ckpt, tmp_path, build):
    (ckpt / "model.safetensors").unlink()
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_truncated_safetensors(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_truncated_inside_header(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    path.write_bytes(path.read_bytes()[:40])
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_header_length_past_end(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", len(data) + 100)
    path.write_bytes(bytes(data))
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_header_length_huge(ckpt, tmp_path, build):
    """A length that overflows when 8 is added must not wrap around a bounds check."""
    path = ckpt / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[:8] = struct.pack("<Q", 2**64 - 4)
    path.write_bytes(bytes(data))
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_header_not_json(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    header, body = read_safetensors(path)
    text = json.dumps(header).encode()
    bad = text.replace(b'"dtype"', b'"dtype" ,,', 1)
    path.write_bytes(struct.pack("<Q", len(bad)) + bad + body)
    expect_failure(ckpt, tmp_path, "model.safetensors", binary=build)


def test_tensor_offsets_out_of_range(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    header, body = read_safetensors(path)
    begin, end = header[VICTIM]["data_offsets"]
    header[VICTIM]["data_offsets"] = [len(body) - (end - begin) + 64, len(body) + 64]
    write_safetensors(path, header, body)
    expect_failure(ckpt, tmp_path, VICTIM, binary=build)


def test_tensor_offsets_overlap(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    header, body = read_safetensors(path)
    other = "model.layers.1.self_attn.v_proj.weight"   # same shape as the k projection
    assert header[other]["shape"] == header[VICTIM]["shape"]
    begin, end = header[other]["data_offsets"]
    header[VICTIM]["data_offsets"] = [begin + 4, end + 4]
    write_safetensors(path, header, body)
    expect_failure(ckpt, tmp_path, (VICTIM, other), binary=build)


def test_tensor_size_contradicts_shape(ckpt, tmp_path, build):
    path = ckpt / "model.safetensors"
    header, body = read_safetensors(path)
    header[VICTIM]["shape"] = [header[VICTIM]["shape"][0] + 1, header[VICTIM]["shape"][1]]
    write_safetensors(path, header, body)
    expect_failure(ckpt, tmp_path, VICTIM, binary=build)


def test_weight_missing(ckpt, tmp_path, build):
    from safetensors.numpy import load_file, save_file

    tensors = load_file(str(ckpt / "model.safetensors"))
    del tensors[VICTIM]
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    expect_failure(ckpt, tmp_path, VICTIM, binary=build)


def test_weight_shape_contradicts_config(ckpt, tmp_path, build):
    import numpy as np
    from safetensors.numpy import load_file, save_file

    name = "model.layers.0.self_attn.q_proj.weight"
    tensors = load_file(str(ckpt / "model.safetensors"))
    assert tensors[name].shape == (64, 64)
    tensors[name] = np.zeros((64, 60), dtype=np.float32)
    save_file(tensors, str(ckpt / "model.safetensors"), metadata={"format": "pt"})
    expect_failure(ckpt, tmp_path, name, binary=build)


def test_sharded_index_names_missing_shard(tmp_path, build):
    ckpt = make_checkpoint(tmp_path / "sharded", "llama", max_shard_size="40KB")
    shards = sorted(ckpt.glob("model-*.safetensors"))
    assert len(shards) > 1
    shards[-1].unlink()
    expect_failure(ckpt, tmp_path, shards[-1].name, binary=build)


def test_good_export_is_quiet_and_right(good_ckpt, tmp_path, build):
    rc, stdout, stderr = run_ferry("export", good_ckpt, tmp_path / "out", "--dynamic", "--quiet",
                                   binary=build)
    assert rc == 0 and stderr == "", stderr
    ids, mask, pos = make_inputs(160, 3, 7)
    got = run_onnx(ort_session(tmp_path / "out" / "model.onnx"), ids, mask, pos)
    assert_logits_close(got, reference_logits(good_ckpt, ids, mask, pos), mask)


# ---------------------------------------------------------------------------------------------
# Output directory


def test_unwritable_output(good_ckpt, tmp_path):
    """OUT under a regular file fails even for root (chmod does not stop root)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    out = blocker / "out"
    rc, _, stderr = run_ferry("export", good_ckpt, out, "--dynamic")
    assert rc == 1
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: ") and "a-file" in lines[0]
    assert blocker.read_text() == "not a directory\n"


def test_existing_output_refused_without_force(good_ckpt, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine\n")
    before = snapshot(out)
    rc, _, stderr = run_ferry("export", good_ckpt, out, "--dynamic")
    assert rc == 1
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: ") and str(out) in lines[0]
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_force_replaces_only_an_export(good_ckpt, tmp_path):
    """A directory that is not an export is refused, even with --force (test_force_safety.py
    holds the rest of that contract)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("old\n")
    rc, _, stderr = run_ferry("export", good_ckpt, out, "--dynamic", "--force")
    assert rc == 1 and "not replacing" in stderr, stderr
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"], "temporary files left behind"


def test_force_replaces_previous_export(good_ckpt, tmp_path):
    out = ferry_export(good_ckpt, tmp_path / "out", "--dynamic")
    ferry_export(good_ckpt, out, "--force")        # static this time
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == [1, 8]


def test_failed_forced_export_keeps_existing(ckpt, good_ckpt, tmp_path):
    out = ferry_export(good_ckpt, tmp_path / "out", "--dynamic")
    before = snapshot(out)
    (ckpt / "config.json").unlink()
    rc, _, stderr = run_ferry("export", ckpt, out, "--dynamic", "--force")
    assert rc == 1 and "config.json" in stderr and len(stderr.strip().split("\n")) == 1
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "out"]


# ---------------------------------------------------------------------------------------------
# Options and recipes


def test_unknown_recipe_key(good_ckpt, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"export_format": "onnx", "dynamc": True}))
    expect_failure(good_ckpt, tmp_path, "dynamc", extra=("--config", recipe))


def test_recipe_not_json(good_ckpt, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text("{dynamic: true}")
    expect_failure(good_ckpt, tmp_path, "recipe.json", extra=("--config", recipe))


def test_opset_out_of_range(good_ckpt, tmp_path):
    """A bad option value: a usage error (2) or a refused export (1), either way named."""
    rc, _, stderr = run_ferry("export", good_ckpt, tmp_path / "out", "--opset", "3")
    assert rc in (1, 2) and "opset" in stderr, (rc, stderr)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("flags,needle", [
    (["--dynamic", "--dim", "input_ids:0=sequence"], "cannot share the symbol 'sequence'"),
    (["--dim", "input_ids:1=max_cache_len:1:4096", "--for-generation", "--static-cache",
      "--max-cache-len", "64", "--multi-token-decode"], "'max_cache_len' is ferry's own"),
    (["--dynamic", "--dim", "input_ids:0=past_sequence", "--for-generation"],
     "'past_sequence' is ferry's own"),
], ids=["batch-named-sequence", "query-named-cache-length", "batch-named-past"])
def test_symbol_names_do_not_merge_axes(good_ckpt, tmp_path, flags, needle):
    """Two axes that share a symbol would be one dim: refused, never merged (a bad command
    line, exit 2)."""
    rc, _, stderr = run_ferry("export", good_ckpt, tmp_path / "out", *flags)
    assert rc == 2 and needle in stderr, (rc, stderr)
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# Usage


@pytest.mark.parametrize("args", [["--help"], ["export", "--help"], ["inspect", "--help"],
                                  ["graph", "--help"]],
                         ids=["ferry", "export", "inspect", "graph"])
def test_help(args):
    rc, stdout, stderr = run_ferry(*args)
    assert rc == 0, stderr
    assert "usage" in stdout.lower()
    if args[0] == "export":
        for flag in ("--dynamic", "--dim", "--dtype", "--opset", "--config", "--example-shape",
                     "--force", "--revision", "--format"):
            assert flag in stdout, f"{flag} missing from export --help"
    if args[0] == "inspect":
        assert "--json" in stdout
    if args[0] == "graph":
        for flag in ("--stage", "--component", "--dynamic", "--for-generation"):
            assert flag in stdout, f"{flag} missing from graph --help"


def test_format_options_in_help_and_flags():
    """Each format's own options come from its table (ferry_format_option_describe): --help
    lists them under their format, with their recipe keys and defaults, and each flag sets the
    option its table names, checked as the recipe's key is."""
    rc, stdout, _ = run_ferry("export", "--help")
    assert rc == 0
    for section, entries in [("onnx", ["--opset N", "recipe key: opset (or opset_version)",
                                       "takes an integer in [17, 23]; default 21",
                                       "--ort-fusions EP", "recipe key: ort_fusions",
                                       "takes none, cpu, cuda, webgpu or dml; default none"]),
                             ("openvino", ["--disable-stateful", "recipe key: stateful",
                                           "takes true or false; default true",
                                           "--compress-to-fp16"]),
                             ("pt2", ["--model-output", "recipe key: model_output"])]:
        start = stdout.index(f"{section} options:")
        for entry in entries:
            assert entry in stdout[start:], (section, entry)
    rc, _, stderr = run_ferry("export", "x", "y", "--ort-fusions", "tpu")
    assert rc == 2 and "--ort-fusions tpu: expected none, cpu, cuda, webgpu or dml" in stderr


def test_version():
    from conftest import ferry_header_version

    rc, stdout, _ = run_ferry("--version")
    assert rc == 0 and ferry_header_version() in stdout


@pytest.mark.parametrize("args", [
    ["export", "--bogus"],
    ["export", "a", "b", "--bogus"],
    ["inspect", "x", "--bogus"],
    ["frobnicate"],
    [],
    ["export", "only-one-arg"],
    ["graph"],
    ["graph", "m", "--stage", "raw"],
    ["graph", "m", "--force"],
], ids=["export-flag", "export-flag-late", "inspect-flag", "unknown-command", "no-args",
        "missing-out", "graph-no-model", "graph-bad-stage", "graph-export-only-flag"])
def test_usage_errors_exit_2(args, tmp_path):
    rc, stdout, stderr = run_ferry(*args)
    assert rc == 2, (rc, stderr)
    assert stderr.strip(), "a usage error must say something on stderr"
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("flags,has", [([], "model"), (["--for-generation"], "prefill, decode")],
                         ids=["plain", "generation"])
def test_graph_component_it_has_not(good_ckpt, flags, has):
    """A component the options' export has not is the command line's fault: exit 2, every name
    it has, nothing printed (exit 1, naming only the first)."""
    rc, stdout, stderr = run_ferry("graph", good_ckpt, *flags, "--component", "lm_head")
    assert rc == 2 and stdout == "", (rc, stdout, stderr)
    assert stderr == ("ferry: error: graph: no component named 'lm_head' (with these options "
                      f"the export has: {has})\n"), stderr


# ---------------------------------------------------------------------------------------------
# inspect


@pytest.fixture(scope="module")
def exported(good_ckpt, tmp_path_factory):
    return ferry_export(good_ckpt, tmp_path_factory.mktemp("exp") / "out", "--dynamic")


def _human_sizes(n):
    """Ways a byte count may reasonably be printed."""
    forms = {str(n), f"{n:,}"}
    for unit, div in (("KiB", 1024), ("MiB", 1024**2), ("KB", 1000), ("MB", 1000**2)):
        forms |= {f"{n / div:.1f} {unit}", f"{n / div:.2f} {unit}", f"{n / div:.1f}{unit}"}
    return forms


def test_inspect_text(exported):
    rc, stdout, stderr = run_ferry("inspect", exported)
    assert rc == 0, stderr
    for word in ("model", "model.onnx", "input_ids", "attention_mask", "logits", "int64",
                 "float32", "batch", "sequence"):
        assert word in stdout, f"{word!r} missing from inspect output:\n{stdout}"
    size = os.path.getsize(exported / "model.onnx.data")
    assert any(f in stdout for f in _human_sizes(size)), f"size {size} not shown:\n{stdout}"


def test_inspect_json(exported):
    """--json prints the manifest as loaded (validated), i.e. export.json's content."""
    rc, stdout, stderr = run_ferry("inspect", exported, "--json")
    assert rc == 0, stderr
    assert json.loads(stdout) == json.loads((exported / "export.json").read_text())


def test_inspect_subfolder(exported, tmp_path):
    import shutil

    shutil.copytree(exported, tmp_path / "repo" / "onnx")
    rc, stdout, stderr = run_ferry("inspect", tmp_path / "repo", "--subfolder", "onnx")
    assert rc == 0 and "input_ids" in stdout, stderr


def test_inspect_missing_dir(tmp_path):
    rc, _, stderr = run_ferry("inspect", tmp_path / "nope")
    assert rc == 1 and "nope" in stderr and len(stderr.strip().split("\n")) == 1


def test_inspect_bad_manifest(exported, tmp_path):
    import shutil

    copy = Path(shutil.copytree(exported, tmp_path / "copy"))
    (copy / "export.json").write_text("{")
    rc, _, stderr = run_ferry("inspect", copy)
    assert rc == 1 and "export.json" in stderr and len(stderr.strip().split("\n")) == 1


def test_inspect_refuses_escaping_path(exported, tmp_path):
    import shutil

    copy = Path(shutil.copytree(exported, tmp_path / "copy"))
    m = json.loads((copy / "export.json").read_text())
    m["components"]["model"]["data_files"] = ["../../secret.data"]
    (copy / "export.json").write_text(json.dumps(m))
    rc, _, stderr = run_ferry("inspect", copy)
    assert rc == 1 and "../../secret.data" in stderr and len(stderr.strip().split("\n")) == 1
