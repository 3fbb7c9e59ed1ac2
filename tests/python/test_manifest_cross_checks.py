"""What export.json says is checked against what runs, so that an edit to it alone cannot
change the numbers: a hostile review found four ways it did, each without forging a CRC.

- A component's files are the ones its format's writer gives it (an ONNX program reads
  model.onnx.data, an OpenVINO .xml the .bin beside it): a data file dropped from export.json
  escaped the CRC check while its program still read it, and other weights ran.
- The files opened are the directory that was checked: a relative path and a later chdir ran
  another export's files, and a session made long after the load read what was there then.
- "precision" (which OpenVINO compiles with) is the dtype the export_config records, and
  validation takes the export's precision and quantization from its programs: "bf16" on an
  fp32 export made OpenVINO compute in bf16 and validate loosen its bound; an added quantizer
  made it accept other weights.
- A generation component's cache pairs join one layer's same tensor, with the cache's
  geometry: swapped pairs fed a key back as a value, and generate() gave other tokens.
And edits the runners read (roles, "stateful", kv_heads) are one line, not a traceback.
"""

import json
import os
import shutil
import sys
import zlib

import numpy as np
import pytest

from conftest import ROOT, ferry_export, make_checkpoint, run_ferry

IDS = np.array([[5, 6, 7, 8, 9]], dtype=np.int64)


@pytest.fixture(scope="module")
def exports(ckpts, tmp_path_factory):
    base = tmp_path_factory.mktemp("cross")
    other = make_checkpoint(base / "other", "llama", seed=9)
    ckpt = ckpts("llama")
    made = {
        "onnx": ferry_export(ckpt, base / "onnx", "--dynamic", "--quiet"),
        "onnx-twin": ferry_export(other, base / "onnx-twin", "--dynamic", "--quiet"),
        "openvino": ferry_export(ckpt, base / "ov", "--format", "openvino", "--dynamic",
                                 "--quiet"),
        "openvino-twin": ferry_export(other, base / "ov-twin", "--format", "openvino",
                                      "--dynamic", "--quiet"),
        "gen": ferry_export(ckpt, base / "gen", "--for-generation", "--dynamic",
                            "--single-token-decode", "--quiet"),
        "gen-static": ferry_export(ckpt, base / "gen-static", "--for-generation", "--dynamic",
                                   "--static-cache", "--max-cache-len", "24", "--quiet"),
        "gen-openvino": ferry_export(ckpt, base / "gen-ov", "--format", "openvino",
                                     "--for-generation", "--dynamic", "--quiet"),
        "gen-pt2": ferry_export(ckpt, base / "gen-pt2", "--format", "pt2", "--for-generation",
                                "--dynamic", "--static-cache", "--max-cache-len", "24",
                                "--quiet"),
    }
    made["ckpt"] = ckpt
    return made


def copy(exports, name, tmp_path):
    out = tmp_path / name
    shutil.copytree(exports[name], out)
    return out


def edit(out, change):
    manifest = json.loads((out / "export.json").read_text())
    change(manifest)
    (out / "export.json").write_text(json.dumps(manifest))


def refused(out, *needles):
    """Loading `out` (ferry inspect, and Python) fails with one line holding every needle."""
    import ferry

    rc, _, err = run_ferry("inspect", out)
    assert rc == 1 and len(err.strip().splitlines()) == 1, err
    assert all(n in err for n in needles), err
    with pytest.raises(ferry.FerryError) as caught:
        ferry.ExportedModel.from_pretrained(out)
    assert all(n in str(caught.value) for n in needles), caught.value


# --- the files a program reads ----------------------------------------------------------------


def _drop_data_file(manifest):
    comp = manifest["components"]["model"]
    f = comp["data_files"].pop()
    del comp["bytes"][f]
    del comp["crc32"][f]


def _rename_data_file(manifest):
    comp = manifest["components"]["model"]
    f = comp["data_files"][0]
    comp["data_files"][0] = "checked.bin"
    comp["bytes"]["checked.bin"] = comp["bytes"].pop(f)
    comp["crc32"]["checked.bin"] = comp["crc32"].pop(f)


@pytest.mark.parametrize("fmt,data", [("onnx", "model.onnx.data"),
                                      ("openvino", "openvino_model.bin")])
@pytest.mark.parametrize("change", [_drop_data_file, _rename_data_file],
                         ids=["dropped", "renamed"])
def test_data_file_left_out_of_the_check_is_refused(exports, tmp_path, fmt, data, change):
    out = copy(exports, fmt, tmp_path)
    edit(out, change)
    if change is _rename_data_file:
        shutil.copyfile(out / data, out / "checked.bin")
    shutil.copyfile(exports[f"{fmt}-twin"] / data, out / data)  # other weights, same size
    refused(out, "names other files than the", data, "export.json was edited")


def test_files_opened_are_the_directory_checked(exports, tmp_path, monkeypatch):
    """A relative path, then a chdir before the first call: the call runs the export that was
    loaded, not the one now at that name."""
    import ferry

    (tmp_path / "here").mkdir()
    (tmp_path / "there").mkdir()
    shutil.copytree(exports["onnx"], tmp_path / "here" / "export")
    shutil.copytree(exports["onnx-twin"], tmp_path / "there" / "export")
    monkeypatch.chdir(tmp_path / "here")
    loaded = ferry.ExportedModel.from_pretrained("export")
    assert os.path.isabs(loaded.directory)
    want = ferry.ExportedModel.from_pretrained(exports["onnx"])(input_ids=IDS).logits
    monkeypatch.chdir(tmp_path / "there")
    np.testing.assert_array_equal(loaded(input_ids=IDS).logits, want)


def test_files_are_checked_when_the_runtime_opens_them(exports, tmp_path):
    """The CRCs are read when a session is made, not only at load: weights swapped between
    the load and the first call are refused."""
    import ferry

    out = copy(exports, "onnx", tmp_path)
    loaded = ferry.ExportedModel.from_pretrained(out)
    shutil.copyfile(exports["onnx-twin"] / "model.onnx.data", out / "model.onnx.data")
    with pytest.raises(ferry.FerryError, match="its bytes are not the ones the export wrote"):
        loaded(input_ids=IDS)


# --- precision and quantization ---------------------------------------------------------------


def test_precision_other_than_the_export_config_is_refused(exports, tmp_path):
    out = copy(exports, "openvino", tmp_path)
    edit(out, lambda m: m["components"]["model"]["metadata"].update(precision="bf16"))
    refused(out, "'precision' must be fp32, fp16 or bf16, the dtype its export_config records")


def _validate(out, ckpt, *args):
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    return run_ferry("validate", out, "--model", ckpt, "--no-record", *args, env=env)


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
@pytest.mark.parametrize("claim", ["int4", "bf16", "compressed"])
def test_validation_reads_precision_from_the_program(exports, tmp_path, fmt, claim):
    """export.json claiming a looser precision than the program holds (both of its records
    edited alike, so that loading takes it) is refused by validation, which compares the
    program's weights, not export.json's word."""
    if claim == "compressed" and fmt != "openvino":
        pytest.skip("compress_to_fp16 is OpenVINO's")
    out = copy(exports, fmt, tmp_path)

    def change(manifest):
        md = manifest["components"]["model"]["metadata"]
        if claim == "int4":
            md["export_config"]["quantizer"] = {"bits": 4, "block_size": 32, "symmetric": True,
                                                "quantize_embeddings": False,
                                                "quantize_lm_head": True, "method": "rtn"}
        elif claim == "bf16":
            md["precision"] = md["export_config"]["dtype"] = "bf16"
        else:
            md["export_config"]["compress_to_fp16"] = True
    edit(out, change)
    rc, stdout, stderr = _validate(out, exports["ckpt"])
    assert rc == 1 and stdout == "" and len(stderr.strip().splitlines()) == 1, (stdout, stderr)
    # OpenVINO's runner finds a precision claim first: its rt_info says the program's
    assert ("the program holds" in stderr or "is not the program's (its rt_info" in stderr) \
        and "export.json was edited" in stderr, stderr


# --- cache pairs --------------------------------------------------------------------------------


def _swap_outputs(pairs):
    pairs[0]["output"], pairs[1]["output"] = pairs[1]["output"], pairs[0]["output"]


def _rotate_layers(pairs):
    half = len(pairs) // 2
    outs = [p["output"] for p in pairs]
    for p, o in zip(pairs, outs[half:] + outs[:half]):
        p["output"] = o


def _duplicate(pairs):
    pairs[1] = dict(pairs[0])


@pytest.mark.parametrize("name", ["gen", "gen-static", "gen-openvino", "gen-pt2"])
@pytest.mark.parametrize("change", [_swap_outputs, _rotate_layers, _duplicate],
                         ids=["key-value-swapped", "layers-rotated", "duplicated"])
def test_cache_pairs_that_do_not_match_are_refused(exports, tmp_path, name, change):
    out = copy(exports, name, tmp_path)
    edit(out, lambda m: change(m["components"]["decode"]["metadata"]["cache"]["pairs"]))
    refused(out, "component 'decode'", "export.json")


@pytest.mark.parametrize("key,value,needle", [
    ("kv_heads", 1, "the cache's kv_heads, head_dim and dtype"),
    ("head_dim", 3, "the cache's kv_heads, head_dim and dtype"),
    ("dtype", "float16", "the cache's kv_heads, head_dim and dtype"),
    ("kv_heads", None, "'cache' needs"),
    ("layers", 7, "do not hold layer 2's key"),
])
def test_cache_geometry_other_than_the_inputs_is_refused(exports, tmp_path, key, value, needle):
    out = copy(exports, "gen", tmp_path)

    def change(manifest):
        cache = manifest["components"]["decode"]["metadata"]["cache"]
        if value is None:
            del cache[key]
        else:
            cache[key] = value
    edit(out, change)
    refused(out, needle)


def test_roles_and_stateful_edits_are_one_line(exports, tmp_path):
    out = copy(exports, "gen", tmp_path)

    def swap_roles(manifest):
        c = manifest["components"]
        c["prefill"]["role"], c["decode"]["role"] = "decode", "prefill"
    edit(out, swap_roles)
    refused(out, "has role 'decode', where ferry gives it the role 'prefill'")
    ov = copy(exports, "gen-openvino", tmp_path)
    edit(ov, lambda m: m["components"]["decode"]["metadata"].update(stateful=False))
    refused(ov, "'stateful' is false, and its inputs say otherwise")


def test_untouched_exports_still_load_and_generate(exports):
    import ferry

    for name in ("gen", "gen-static", "gen-openvino", "gen-pt2"):
        tokens = ferry.ExportedModel.from_pretrained(exports[name]).generate(
            IDS, max_new_tokens=3)
        assert tokens.shape == (1, IDS.shape[1] + 3), name
    assert run_ferry("inspect", "--verify", exports["gen"])[0] == 0
    # the CRC check itself is zlib's CRC-32 of the files
    manifest = json.loads((exports["onnx"] / "export.json").read_text())
    for f, crc in manifest["components"]["model"]["crc32"].items():
        assert crc == f"{zlib.crc32((exports['onnx'] / f).read_bytes()):08x}"
