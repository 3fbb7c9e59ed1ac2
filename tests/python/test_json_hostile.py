"""JSON that other readers see differently, through the CLI, on every build (release, gcc
ASan/UBSan, clang UBSan with float-cast-overflow):

- a NUL inside a string, escaped (\\u0000) or raw, which cJSON cuts the string at: ferry would
  validate "LlamaForCausalLM" or "model.onnx" where Python reads the whole string. Refused in
  every kind of file (config.json, generation_config.json, the index, export.json, recipes;
  safetensors headers in test_hostile_inputs.py), naming the file and the byte;
- data after a recipe's value (a second object, text, a NUL), which the recipe reader ignored;
- export.json that is not UTF-8;
- numbers far outside an integer's range where integers belong (1e300 as an opset, a shape, a
  layer count): refused, or shown as "?" by `ferry inspect`, never converted (undefined
  behaviour, which the clang build reports and turns into exit 86).

Each refusal is one line naming the file, exit 1, nothing written."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, UBSAN_BIN, read_safetensors, run_ferry

from conftest import FIXTURE  # noqa: E402
ST = "model.safetensors"


@pytest.fixture
def ckpt(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))


def one_line(rc, stderr, *needles):
    assert rc == 1, f"exit {rc}, expected 1; stderr: {stderr[-3000:]!r}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr[-3000:]
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in lines[0]), repr(lines[0])
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in: {lines[0]}"
    return lines[0]


def export_refused(model, tmp_path, build, *needles, extra=()):
    parent = tmp_path / "outs"
    parent.mkdir()
    rc, _, stderr = run_ferry("export", model, parent / "out", "--dynamic", "-q", *extra,
                              binary=build)
    line = one_line(rc, stderr, *needles)
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"
    return line


def edit_text(path, old, new):
    text = Path(path).read_bytes()
    assert text.count(old) == 1, (old, text[:300])
    Path(path).write_bytes(text.replace(old, new))
    return text.index(old)


# ---------------------------------------------------------------------------------------------
# NUL in strings


def test_config_architecture_escaped_nul(ckpt, tmp_path, build):
    """The issue's case: "LlamaForCausalLM\\u0000junk" is "LlamaForCausalLM" to cJSON."""
    at = edit_text(ckpt / "config.json", b'"LlamaForCausalLM"', b'"LlamaForCausalLM\\u0000junk"')
    export_refused(ckpt, tmp_path, build, "config.json",
                   f"escaped NUL (\\u0000) in a string at byte {at + 17}")


def test_config_raw_nul(ckpt, tmp_path, build):
    at = edit_text(ckpt / "config.json", b'"llama"', b'"llama\x00x"')
    export_refused(ckpt, tmp_path, build, "config.json",
                   f"raw control byte 0x00 in a string at byte {at + 6}")


def test_config_key_escaped_nul(ckpt, tmp_path, build):
    """In a key: "vocab_size\\u0000x" would be a second vocab_size to cJSON."""
    text = (ckpt / "config.json").read_bytes()
    (ckpt / "config.json").write_bytes(text[:-1].rstrip() + b', "vocab_size\\u0000x": 7}')
    export_refused(ckpt, tmp_path, build, "config.json", "escaped NUL")


def test_generation_config_escaped_nul(ckpt, tmp_path, build):
    gen = json.loads((ckpt / "generation_config.json").read_text())
    gen["note"] = "a\u0000b"
    (ckpt / "generation_config.json").write_text(json.dumps(gen))
    export_refused(ckpt, tmp_path, build, "generation_config.json", "escaped NUL")


def test_index_shard_escaped_nul(ckpt, tmp_path, build):
    """A shard name that is "model.safetensors" to cJSON and something else to Python."""
    shard = "model-00001-of-00001.safetensors"
    (ckpt / ST).rename(ckpt / shard)
    header, _ = read_safetensors(ckpt / shard)
    weight_map = {n: shard for n in header if n != "__metadata__"}
    text = json.dumps({"weight_map": weight_map})
    first = next(iter(weight_map))
    text = text.replace(f'"{first}": "{shard}"', f'"{first}": "{shard}\\u0000/../../x"')
    (ckpt / "model.safetensors.index.json").write_text(text)
    export_refused(ckpt, tmp_path, build, "model.safetensors.index.json", "escaped NUL")


@pytest.fixture
def export_copy(exported, tmp_path):
    return Path(shutil.copytree(exported, tmp_path / "exp"))


def inspect_refused(copy, build, *needles):
    rc, stdout, stderr = run_ferry("inspect", copy, binary=build)
    one_line(rc, stderr, *needles)
    assert stdout == ""


def test_manifest_file_escaped_nul(export_copy, build):
    """The issue's case: "model.onnx\\u0000/../../x" was validated as "model.onnx"."""
    at = edit_text(export_copy / "export.json", b'"file":\t"model.onnx"',
                   b'"file":\t"model.onnx\\u0000/../../x"')
    inspect_refused(export_copy, build, "export.json",
                    f"escaped NUL (\\u0000) in a string at byte {at + 19}")


def test_manifest_component_name_escaped_nul(export_copy, build):
    # the component's key (an object), not source.model (the checkpoint's name)
    edit_text(export_copy / "export.json", b'"model":\t{', b'"model\\u0000evil":\t{')
    inspect_refused(export_copy, build, "export.json", "escaped NUL")


def test_manifest_raw_nul(export_copy, build):
    at = edit_text(export_copy / "export.json", b'"file":\t"model.onnx"',
                   b'"file":\t"model.onnx\x00/../../x"')
    inspect_refused(export_copy, build, "export.json",
                    f"raw control byte 0x00 in a string at byte {at + 19}")


def test_recipe_escaped_nul(tmp_path, build):
    """A symbol "sequence" to cJSON, "sequence\\0junk" to Python."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text('{"dynamic_shapes": {"input_ids": {"1": "sequence\\u0000junk"}}}')
    export_refused(FIXTURE, tmp_path, build, "recipe.json", "escaped NUL",
                   extra=("--config", recipe))


# ---------------------------------------------------------------------------------------------
# Recipes: nothing after the value


@pytest.mark.parametrize("text,needle", [
    (b'{"dynamic": true} {"dtype": "bf16"}', "unexpected data after the JSON value at byte 18"),
    (b'{"dynamic": true}\ntrailing text\n', "unexpected data after the JSON value at byte 18"),
    (b'{"dynamic": true}\x00{"dtype": "bf16"}', "NUL byte at byte 17"),
    (b'{"dynamic": true}\x00', "NUL byte at byte 17"),
    (b'{"dtype": "fp16\x00junk"}', "NUL byte at byte 15"),
    (b'{"dynamic": true}\x01', "control byte 0x01 at byte 17 is not JSON"),
], ids=["second-object", "text", "nul-then-object", "trailing-nul", "nul-in-string",
        "control-byte"])
def test_recipe_trailing_data(tmp_path, build, text, needle):
    recipe = tmp_path / "recipe.json"
    recipe.write_bytes(text)
    export_refused(FIXTURE, tmp_path, build, "recipe.json", needle, extra=("--config", recipe))


def test_recipe_trailing_whitespace_is_fine(tmp_path, build):
    recipe = tmp_path / "recipe.json"
    recipe.write_bytes(b'{"dynamic": true}\n\t \r\n')
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "-q", "--config", recipe,
                              binary=build)
    assert rc == 0, stderr


# ---------------------------------------------------------------------------------------------
# export.json must be UTF-8


@pytest.mark.parametrize("bad", [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82"],
                         ids=["ff", "overlong", "surrogate", "cut-short"])
def test_manifest_not_utf8(export_copy, build, bad):
    at = edit_text(export_copy / "export.json", b'"role":\t"model"',
                   b'"role":\t"model' + bad + b'"')
    inspect_refused(export_copy, build, "export.json", f"not valid UTF-8 at byte {at + 14}")


def test_manifest_utf8_is_fine(export_copy, build):
    m = json.loads((export_copy / "export.json").read_text())
    m["producer"]["note"] = "café ✓"
    (export_copy / "export.json").write_text(json.dumps(m, ensure_ascii=False))
    rc, stdout, stderr = run_ferry("inspect", export_copy, binary=build)
    assert rc == 0 and "input_ids" in stdout, stderr


# ---------------------------------------------------------------------------------------------
# Out-of-range numbers where integers belong


def test_manifest_huge_numbers_inspect(export_copy, build):
    """Numbers `ferry inspect` prints as integers, at 1e300 and beyond any integer: shown as
    "?", never converted. The clang build reports such a conversion (exit 86); it used to happen
    for the opset (an int), shapes and symbol ranges."""
    m = json.loads((export_copy / "export.json").read_text())
    md = m["components"]["model"]["metadata"]
    md["opset"] = 1e300
    md["inputs"][0]["shape"] = [-1e300, "sequence"]
    md["inputs"][0]["traced_shape"] = [1e300, 2.5]
    md["symbols"]["batch"] = {"min": 1e300, "max": -1e300, "traced": 9.3e18}
    (export_copy / "export.json").write_text(json.dumps(m))
    rc, stdout, stderr = run_ferry("inspect", export_copy, binary=build)
    assert rc == 0, stderr[-3000:]
    assert "runtime error" not in stderr, stderr[-3000:]
    assert "opset ?)" in stdout, stdout
    assert "[?, sequence]" in stdout and "traced [?, ?]" in stdout, stdout
    assert "min ?, max ?, traced ?" in stdout, stdout


@pytest.mark.parametrize("recipe,needle", [
    ({"opset": 1e300}, "'opset' must be an integer"),
    ({"opset": -1e300}, "'opset' must be an integer"),
    ({"generation_config": {"max_cache_len": 1e300}}, "max_cache_len"),
    ({"example_shapes": {"input_ids": [1e300, 8]}}, "example_shapes"),
    ({"dynamic_shapes": {"input_ids": {"1": {"name": "s", "min": 1e300}}}}, "bad min"),
    ({"dynamic_shapes": {"input_ids": {"1": {"name": "s", "max": 1e300}}}}, "bad max"),
    ({"dynamic_shapes": {"input_ids": {"1": {"name": "s", "max": -1e300}}}}, "bad max"),
], ids=["opset", "opset-negative", "max_cache_len", "example", "dim-min", "dim-max",
        "dim-max-negative"])
def test_recipe_huge_numbers(tmp_path, build, recipe, needle):
    path = tmp_path / "recipe.json"
    path.write_text(json.dumps(recipe))
    export_refused(FIXTURE, tmp_path, build, "recipe.json", needle, extra=("--config", path))


@pytest.mark.parametrize("key,value", [
    ("num_hidden_layers", 1e300), ("vocab_size", -1e300), ("hidden_size", 1.8e19),
    ("max_position_embeddings", 1e300), ("sliding_window", -1e300), ("head_dim", 9.3e18),
    ("num_key_value_heads", 1e300),
])
def test_config_huge_numbers(ckpt, tmp_path, build, key, value):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg[key] = value
    (ckpt / "config.json").write_text(json.dumps(cfg))
    export_refused(ckpt, tmp_path, build, "config.json", f"key '{key}' must be an integer")


def test_config_huge_rope_integer(ckpt, tmp_path, build):
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                              "original_max_position_embeddings": 1e300}
    (ckpt / "config.json").write_text(json.dumps(cfg))
    export_refused(ckpt, tmp_path, build, "config.json",
                   "key 'original_max_position_embeddings' must be an integer")


@pytest.mark.parametrize("field,value", [("shape", [1e300, 64]), ("data_offsets", [0, 1e300]),
                                         ("data_offsets", [-1e300, 0])],
                         ids=["shape", "end", "begin"])
def test_header_huge_numbers(ckpt, tmp_path, build, field, value):
    header, data = read_safetensors(ckpt / ST)
    victim = "model.layers.1.self_attn.k_proj.weight"
    header[victim][field] = value
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    (ckpt / ST).write_bytes(len(text).to_bytes(8, "little") + text + data)
    export_refused(ckpt, tmp_path, build, str(ckpt / ST), victim)


@pytest.mark.skipif(UBSAN_BIN is None, reason="needs the clang UBSan build (FERRY_BUILD_UBSAN, "
                    "set by make test-python)")
def test_clang_build_checks_float_casts():
    """The instrument is in place: the clang build's objects for what `ferry inspect` prints
    (describe_text.c, which converts export.json's numbers) and the JSON getters call UBSan's
    float-cast-overflow handler (gcc's UBSan has none). Proved to fire once on the original
    code: `ferry inspect` of an export.json with "opset": 1e300 reported "1e+300 is outside the
    range of representable values of type 'int'"."""
    objects = list(UBSAN_BIN.parent.glob("CMakeFiles/*/src/export/describe_text.c.o")) + \
        list(UBSAN_BIN.parent.glob("CMakeFiles/*/src/util/json.c.o"))
    assert len(objects) >= 2, objects
    for obj in objects:
        symbols = subprocess.run(["nm", "-u", str(obj)], capture_output=True, text=True,
                                 check=True).stdout
        assert "__ubsan_handle_float_cast_overflow" in symbols, f"{obj} is not instrumented"
