"""export.json, the files next to it, and loading an export back (the Python binding over
ferry_exported_load), including the refusal of paths that escape the export directory."""

import json
import os
import shutil
from pathlib import Path

import onnx
import pytest

from conftest import ferry_export, ferry_header_version, make_checkpoint, run_ferry

# a plain export's inputs: a tokenizer's output (positions computed inside)
INPUT_NAMES = ["input_ids", "attention_mask"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("manifest") / "ckpt", "qwen3")


@pytest.fixture(scope="module")
def dynamic_export(ckpt, tmp_path_factory):
    return ferry_export(ckpt, tmp_path_factory.mktemp("dyn") / "out", "--dynamic")


@pytest.fixture(scope="module")
def static_export(ckpt, tmp_path_factory):
    return ferry_export(ckpt, tmp_path_factory.mktemp("static") / "out",
                        "--example-shape", "input_ids=2x6")


def manifest(out):
    return json.loads((Path(out) / "export.json").read_text())


def test_files_in_export_dir(dynamic_export):
    assert sorted(p.name for p in dynamic_export.iterdir()) == [
        "config.json", "export.json", "generation_config.json", "model.onnx", "model.onnx.data"]


def test_top_level(dynamic_export):
    m = manifest(dynamic_export)
    assert m["schema_version"] == 1
    assert m["format"] == "onnx"
    assert m["producer"] == {"name": "ferry", "version": ferry_header_version()}
    assert m["architecture"] == "Qwen3ForCausalLM"
    assert list(m["components"]) == ["model"]


def test_component(dynamic_export):
    comp = manifest(dynamic_export)["components"]["model"]
    assert comp["file"] == "model.onnx"
    assert comp["data_files"] == ["model.onnx.data"]
    assert comp["role"] == "model"
    meta = comp["metadata"]
    assert meta["architecture"] == "Qwen3ForCausalLM"
    assert meta["precision"] == "fp32"
    onnx_model = onnx.load(str(dynamic_export / "model.onnx"), load_external_data=False)
    default_opset = [o.version for o in onnx_model.opset_import if o.domain in ("", "ai.onnx")]
    assert meta["opset"] == default_opset[0]
    assert isinstance(meta["export_config"], dict) and meta["export_config"].get("dynamic") is True


def test_dynamic_inputs_outputs(dynamic_export):
    meta = manifest(dynamic_export)["components"]["model"]["metadata"]
    assert [i["name"] for i in meta["inputs"]] == INPUT_NAMES
    for i in meta["inputs"]:
        assert i["dtype"] == "int64"
        assert i["shape"] == ["batch", "sequence"]
        assert len(i["traced_shape"]) == 2 and all(isinstance(n, int) and n > 0
                                                   for n in i["traced_shape"])
    (out,) = meta["outputs"]
    assert out["name"] == "logits" and out["dtype"] == "float32"
    assert out["shape"] == ["batch", "sequence", 160]
    assert set(meta["symbols"]) == {"batch", "sequence"}


def test_static_inputs_outputs(static_export):
    meta = manifest(static_export)["components"]["model"]["metadata"]
    for i in meta["inputs"]:
        assert i["shape"] == [2, 6] and i["traced_shape"] == [2, 6]
    assert meta["outputs"][0]["shape"] == [2, 6, 160]
    assert not meta["symbols"]
    assert meta["export_config"].get("dynamic") in (False, None)


@pytest.mark.parametrize("fmt", ["onnx", "pt2"])
def test_component_symbols_are_its_own(ckpt, tmp_path, fmt):
    """Each component lists the symbols its inputs and outputs name (a
    single-token decode listed "sequence", which its program does not have)."""
    out = ferry_export(ckpt, tmp_path / "gen", "--format", fmt, "--dynamic", "--for-generation",
                       "--static-cache", "--max-cache-len", "32", "--single-token-decode")
    components = manifest(out)["components"]
    for name, meta in ((n, c["metadata"]) for n, c in components.items()):
        named = {part for io in meta["inputs"] + meta["outputs"] for dim in io["shape"]
                 if isinstance(dim, str) for part in dim.replace("+", " ").split()}
        assert set(meta["symbols"]) == named, (name, meta["symbols"], named)
    # ONNX's static cache is allocated for the example's batch (fb_backend's
    # static_cache_batch_fixed); a pt2 program's takes any
    batch = {"batch"} if fmt == "pt2" else set()
    assert set(components["prefill"]["metadata"]["symbols"]) == {"sequence", "max_cache_len",
                                                                *batch}
    assert set(components["decode"]["metadata"]["symbols"]) == {"max_cache_len", *batch}


def test_manifest_matches_graph(dynamic_export):
    """What export.json says about inputs and outputs is what the ONNX graph declares."""
    model = onnx.load(str(dynamic_export / "model.onnx"), load_external_data=False)
    meta = manifest(dynamic_export)["components"]["model"]["metadata"]
    names = {onnx.TensorProto.INT64: "int64", onnx.TensorProto.FLOAT: "float32"}
    for vis, entries in ((model.graph.input, meta["inputs"]), (model.graph.output, meta["outputs"])):
        assert [v.name for v in vis] == [e["name"] for e in entries]
        for v, e in zip(vis, entries):
            dims = [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            assert dims == e["shape"] and names[v.type.tensor_type.elem_type] == e["dtype"]


def test_fp16_precision_recorded(ckpt, tmp_path):
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--dtype", "fp16")
    meta = manifest(out)["components"]["model"]["metadata"]
    assert meta["precision"] == "fp16"
    assert meta["outputs"][0]["dtype"] == "float16"
    assert meta["inputs"][0]["dtype"] == "int64"


def test_config_copied(ckpt, dynamic_export):
    assert json.loads((dynamic_export / "config.json").read_text()) == \
        json.loads((ckpt / "config.json").read_text())
    assert json.loads((dynamic_export / "generation_config.json").read_text()) == \
        json.loads((ckpt / "generation_config.json").read_text())


def test_no_generation_config_when_checkpoint_has_none(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", generation_config=False)
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic")
    assert not (out / "generation_config.json").exists()
    assert (out / "config.json").exists()


def test_external_data_aligned(dynamic_export):
    """Every weight lives in model.onnx.data at a 4096-aligned offset, inside the file, and the
    tensors do not overlap."""
    model = onnx.load(str(dynamic_export / "model.onnx"), load_external_data=False)
    size = os.path.getsize(dynamic_export / "model.onnx.data")
    spans = []
    for t in model.graph.initializer:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        assert info["location"] == "model.onnx.data", t.name
        offset, length = int(info.get("offset", 0)), int(info["length"])
        assert offset % 4096 == 0, f"{t.name} at offset {offset}"
        assert offset + length <= size, t.name
        spans.append((offset, offset + length, t.name))
    assert len(spans) >= 2 * 9, "the checkpoint's weights should be external"
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:]):
        assert end <= start, f"{a} overlaps {b}"


def test_recipe_config_equivalent_to_flags(ckpt, tmp_path):
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({
        "export_format": "onnx",
        "dynamic_shapes": {name: {"0": {"name": "batch", "min": 1, "max": 32}, "1": "sequence"}
                           for name in INPUT_NAMES},
        "dtype": "fp32",
    }))
    out = ferry_export(ckpt, tmp_path / "out", "--config", recipe)
    meta = manifest(out)["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == ["batch", "sequence"]
    assert meta["symbols"]["batch"]["min"] == 1 and meta["symbols"]["batch"]["max"] == 32
    assert meta["export_config"]["dynamic_shapes"]["input_ids"]["0"]["max"] == 32


@pytest.mark.parametrize("before", [True, False], ids=["option-before", "option-after"])
def test_command_line_wins_over_recipe_wherever_it_stands(ckpt, tmp_path, before):
    """`--dtype fp16 --config r.json` exported the recipe's fp32 silently."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"dtype": "fp32", "dynamic": True, "export_format": "onnx"}))
    flags = [["--dtype", "fp16"], ["--config", recipe]]
    out = ferry_export(ckpt, tmp_path / "out", *sum(flags if before else flags[::-1], []))
    meta = manifest(out)["components"]["model"]["metadata"]
    assert meta["precision"] == "fp16" and meta["inputs"][0]["shape"] == ["batch", "sequence"]


@pytest.mark.parametrize("args,code,line", [
    # a dangling --config takes no operand for its recipe (a word before it
    # became the recipe, which was then never read)
    (["{recipe}", "{ckpt}", "{out}", "--config"], 2,
     "ferry: error: export: unknown or incomplete option '--config' (see ferry export --help)"),
    # the command line's own errors and --help come before a recipe's
    (["{ckpt}", "{out}", "--bogus", "--config", "{bad}"], 2,
     "ferry: error: export: unknown or incomplete option '--bogus' (see ferry export --help)"),
    (["{ckpt}", "{out}", "--dtype", "fp99", "--config", "{bad}"], 2,
     "ferry: error: --dtype fp99: expected fp32, fp16 or bf16"),
    (["{ckpt}", "{out}", "--help", "--config", "{bad}"], 0, None),
    (["{ckpt}", "{out}", "--config", "{bad}"], 1, "ferry: error: {bad}: recipe: invalid JSON"),
    # a short option in a bundle is named by its letter (the next word was)
    (["--dtype", "fp16", "-xq", "{ckpt}", "{out}"], 2,
     "ferry: error: export: unknown or incomplete option '-x' (see ferry export --help)"),
    # what a recipe alone asks for is the recipe's fault: 1, as `ferry --help` says
    (["{ckpt}", "{out}", "--config", "{mse8}"], 1,
     "ferry: error: the recipe's quantizer method mse applies to int4"),
    (["{ckpt}", "{out}", "--config", "{decode}"], 1,
     "ferry: error: the recipe's multi_token_decode and generation_config apply to generation "
     "exports"),
], ids=["dangling-config", "unknown-option", "bad-value", "help", "bad-recipe-alone",
        "short-in-bundle", "recipe-mse-int8", "recipe-decode-plain"])
def test_recipe_and_command_line_errors(ckpt, tmp_path, args, code, line):
    names = {"ckpt": ckpt, "out": tmp_path / "out"}
    for name, text in (("recipe", '{"dtype": "bf16"}'), ("bad", '{"dtype":'),
                       ("mse8", '{"quantizer": {"bits": 8, "method": "mse"}}'),
                       ("decode", '{"multi_token_decode": true}')):
        names[name] = tmp_path / f"{name}.json"
        names[name].write_text(text)
    rc, stdout, stderr = run_ferry("export", *[a.format(**names) for a in args])
    assert rc == code, (rc, stderr)
    if line is None:
        assert stdout.startswith("usage: ferry export") and stderr == ""
    else:
        (got,) = stderr.splitlines()
        assert got.startswith(line.format(**names)), got
    assert not (tmp_path / "out").exists()


def test_dim_replaces_the_recipes_on_its_axis(ckpt, tmp_path):
    """--dim wins over a recipe's dynamic_shapes entry for the same axis
    ("given twice"); twice on the command line is still an error."""
    recipe = tmp_path / "recipe.json"
    recipe.write_text(json.dumps({"dynamic_shapes": {name: {"1": {"name": "s1", "min": 1,
                                                                  "max": 64}}
                                                     for name in INPUT_NAMES}}))
    dims = [f"{name}:1=s2:1:128" for name in INPUT_NAMES]
    out = ferry_export(ckpt, tmp_path / "out", *sum([["--dim", d] for d in dims], []),
                       "--config", recipe)
    meta = manifest(out)["components"]["model"]["metadata"]
    assert meta["symbols"]["s2"]["max"] == 128 and "s1" not in meta["symbols"]
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "twice", "--dim", dims[0], "--dim",
                              dims[0].replace("s2", "s3"))
    assert rc == 2 and "given twice" in stderr
    # one --dim over a recipe that names one symbol on every input: the symbol follows it
    # ("dims ... differ"); a later recipe replaces an earlier one's dims
    out = ferry_export(ckpt, tmp_path / "one", "--config", recipe, "--dim", dims[0])
    assert manifest(out)["components"]["model"]["metadata"]["symbols"]["s2"]["max"] == 128
    later = tmp_path / "later.json"
    later.write_text(recipe.read_text().replace('"s1"', '"s9"').replace("64", "32"))
    out = ferry_export(ckpt, tmp_path / "two", "--config", recipe, "--config", later)
    symbols = manifest(out)["components"]["model"]["metadata"]["symbols"]
    assert list(symbols) == ["s9"] and symbols["s9"]["max"] == 32


# ---------------------------------------------------------------------------------------------
# Loading through the Python binding


def test_load_export(dynamic_export):
    from ferry import ExportedModel

    loaded = ExportedModel.from_pretrained(dynamic_export)
    assert loaded.files == {"model": "model.onnx"}
    assert loaded.manifest == manifest(dynamic_export)
    assert Path(loaded.directory).resolve() == dynamic_export.resolve()


def test_load_subfolder(dynamic_export, tmp_path):
    from ferry import ExportedModel

    shutil.copytree(dynamic_export, tmp_path / "repo" / "onnx")
    loaded = ExportedModel.from_pretrained(tmp_path / "repo", subfolder="onnx")
    assert loaded.files == {"model": "model.onnx"}


@pytest.mark.parametrize("field,value", [
    ("file", "/etc/passwd"),
    ("file", "../model.onnx"),
    ("file", "sub/../../model.onnx"),
    ("data_files", ["/tmp/model.onnx.data"]),
    ("data_files", ["../model.onnx.data"]),
], ids=["abs-file", "dotdot-file", "nested-dotdot-file", "abs-data", "dotdot-data"])
def test_load_refuses_escaping_paths(dynamic_export, tmp_path, field, value):
    from ferry import ExportedModel, FerryError

    copy = Path(shutil.copytree(dynamic_export, tmp_path / "copy"))
    m = manifest(copy)
    m["components"]["model"][field] = value
    (copy / "export.json").write_text(json.dumps(m))
    bad = value if isinstance(value, str) else value[0]
    with pytest.raises(FerryError) as err:
        ExportedModel.from_pretrained(copy)
    assert bad in str(err.value), str(err.value)


@pytest.mark.parametrize("edit", ["schema", "missing-file", "not-json"])
def test_load_refuses_bad_manifest(dynamic_export, tmp_path, edit):
    from ferry import ExportedModel, FerryError

    copy = Path(shutil.copytree(dynamic_export, tmp_path / "copy"))
    if edit == "schema":
        m = manifest(copy)
        m["schema_version"] = 999
        (copy / "export.json").write_text(json.dumps(m))
        needle = "schema_version"
    elif edit == "missing-file":
        (copy / "model.onnx").unlink()
        needle = "model.onnx"
    else:
        (copy / "export.json").write_text("{\"schema_version\": 1,")
        needle = "export.json"
    with pytest.raises(FerryError, match=needle.replace(".", r"\.")):
        ExportedModel.from_pretrained(copy)


# ---------------------------------------------------------------------------------------------
# "bytes": each component's file sizes as written, compared on every load


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_sizes_recorded_and_a_cut_file_refused(ckpt, tmp_path, fmt):
    """A copy cut short (a full disk, an interrupted transfer) loaded before and failed in its
    runtime far from the cause, or read zeros; it is now one line naming the file, and `--force`
    still replaces the damaged export."""
    from ferry import ExportedModel, FerryError

    out = ferry_export(ckpt, tmp_path / "out", "--format", fmt, "--dynamic", "--quiet")
    comp = manifest(out)["components"]["model"]
    files = [comp["file"], *comp["data_files"]]
    assert comp["bytes"] == {f: (out / f).stat().st_size for f in files}
    assert ExportedModel.from_pretrained(out).manifest["components"]["model"]["bytes"] == \
        comp["bytes"]
    weights = files[-1]
    with open(out / weights, "r+b") as f:
        f.truncate(comp["bytes"][weights] - 1)
    rc, stdout, stderr = run_ferry("inspect", out)
    lines = stderr.splitlines()
    assert (rc, stdout, len(lines)) == (1, "", 1), (rc, stderr)
    assert f"{weights}: {comp['bytes'][weights] - 1} bytes, where the export wrote " \
        f"{comp['bytes'][weights]}" in lines[0]
    with pytest.raises(FerryError, match="cut short"):
        ExportedModel.from_pretrained(out)
    ferry_export(ckpt, out, "--format", fmt, "--dynamic", "--quiet", "--force")
    assert ExportedModel.from_pretrained(out).manifest["components"]["model"]["bytes"] == \
        comp["bytes"]


@pytest.mark.parametrize("bytes_value", [
    [], {}, {"model.onnx": 1}, {"model.onnx": -1, "model.onnx.data": 1},
    {"model.onnx": 1.5, "model.onnx.data": 1}, {"model.onnx": 2 ** 53, "model.onnx.data": 1},
    {"model.onnx": "1", "model.onnx.data": 1}, {"other": 1, "model.onnx.data": 1},
    {"model.onnx": 1, "model.onnx.data": 1, "x": 1},
], ids=["list", "empty", "one-missing", "negative", "fraction", "too-large", "string",
        "wrong-name", "extra"])
def test_load_refuses_bad_bytes(dynamic_export, tmp_path, bytes_value):
    from ferry import ExportedModel, FerryError

    copy = Path(shutil.copytree(dynamic_export, tmp_path / "copy"))
    m = manifest(copy)
    m["components"]["model"]["bytes"] = bytes_value
    (copy / "export.json").write_text(json.dumps(m))
    with pytest.raises(FerryError, match="'bytes'"):
        ExportedModel.from_pretrained(copy)


@pytest.mark.parametrize("key,value", [("symbols", ["batch", 3]),
                                       ("runtime_options", ["A", "B"])])
def test_inspect_takes_lists_where_maps_belong(dynamic_export, tmp_path, key, value):
    """An edited export.json the loader accepts (a list where inspect expects a map of names) is
    described without the entries' names, never crashing (a member of a list has no key)."""
    out = tmp_path / "out"
    shutil.copytree(dynamic_export, out)
    manifest = json.loads((out / "export.json").read_text())
    manifest["components"]["model"]["metadata"][key] = value
    (out / "export.json").write_text(json.dumps(manifest))
    rc, stdout, stderr = run_ferry("inspect", out)
    assert rc in (0, 1), (rc, stderr)
    assert rc == 1 or "component model" in stdout, stdout
