"""Every file of an export is the one the export wrote: export.json records each component
file's CRC-32 ("crc32"), taken as the bytes went out, and a loaded ExportedModel (each time a
runtime opens its programs), `ferry inspect --verify` and `ferry validate` read the files
against it.

A hostile review swapped a weight file for another export's of the same size, swapped two
inputs of an ONNX node, moved an OpenVINO Const's offset and edited a .pt2's weights with the
zip's own CRCs updated: each export kept every name, dtype, shape and size, loaded and ran,
and gave other logits without a word. Each is now refused when it is loaded, naming the file.
The recorded CRCs are checked against zlib's, the independent reference, in every layout.
"""

import json
import os
import shutil
import struct
import sys
import zipfile
import zlib

import numpy as np
import pytest

from conftest import ROOT, ferry_export, make_checkpoint, record_sizes, run_ferry

IDS = np.arange(1, 9, dtype=np.int64).reshape(1, 8)
NEEDLE = "its bytes are not the ones the export wrote"

LAYOUTS = {
    "onnx": ["--format", "onnx"],
    "onnx-generation-int4-fused": ["--format", "onnx", "--for-generation", "--quantize", "int4",
                                   "--ort-fusions", "cpu"],
    "onnx-static-cache-fp16": ["--format", "onnx", "--for-generation", "--static-cache",
                               "--max-cache-len", "32", "--dtype", "fp16"],
    "openvino": ["--format", "openvino"],
    "openvino-stateful": ["--format", "openvino", "--for-generation", "--dynamic"],
    "pt2": ["--format", "pt2"],
    "pt2-static-cache": ["--format", "pt2", "--for-generation", "--static-cache",
                         "--max-cache-len", "32"],
}


@pytest.fixture(scope="module")
def twins(ckpts, tmp_path_factory):
    """Two checkpoints of one config with other weights, each exported in every plain format:
    {format: (export, twin export)}."""
    base = tmp_path_factory.mktemp("crc")
    other = make_checkpoint(base / "ckpt-other", "llama", seed=6)
    made = {}
    for fmt in ("onnx", "openvino", "pt2"):
        made[fmt] = (ferry_export(ckpts("llama"), base / fmt, "--format", fmt, "--quiet"),
                     ferry_export(other, base / f"{fmt}-twin", "--format", fmt, "--quiet"))
    return made


def files_of(out):
    manifest = json.loads((out / "export.json").read_text())
    return {f for comp in manifest["components"].values()
            for f in [comp["file"], *comp.get("data_files", [])]}


def copy(src, tmp_path):
    out = tmp_path / "export"
    shutil.copytree(src, out)
    return out


def load_error(out):
    """The error of loading `out` and calling it: the files are read against their CRCs
    when the runtime is about to open them."""
    import ferry

    with pytest.raises(ferry.FerryError) as caught:
        ferry.ExportedModel.from_pretrained(out)(input_ids=IDS, attention_mask=np.ones_like(IDS))
    message = str(caught.value)
    assert "\n" not in message, message
    return message


def assert_refused(out, rel):
    """Loading `out` fails naming `rel`; so does `ferry inspect --verify`, while a plain
    inspect (which reads export.json only) still shows it."""
    message = load_error(out)
    assert NEEDLE in message and f"{out / rel}:" in message, message
    rc, _, err = run_ferry("inspect", out, "--verify")
    assert rc == 1 and NEEDLE in err and rel in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert run_ferry("inspect", out)[0] == 0


def set_sizes_only(out):
    """export.json's "bytes" set to the files as they are now (as the review did), its
    "crc32" left as the export wrote it."""
    manifest = json.loads((out / "export.json").read_text())
    for comp in manifest["components"].values():
        comp["bytes"] = {f: (out / f).stat().st_size
                         for f in [comp["file"], *comp.get("data_files", [])]}
    (out / "export.json").write_text(json.dumps(manifest))


# --- what is recorded ----------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS, ids=list(LAYOUTS))
def test_recorded_crc_is_zlibs(ckpts, tmp_path, layout):
    out = ferry_export(ckpts("llama"), tmp_path / "out", *LAYOUTS[layout], "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    for name, comp in manifest["components"].items():
        files = [comp["file"], *comp.get("data_files", [])]
        assert sorted(comp["crc32"]) == sorted(files), name
        for f in files:
            assert comp["crc32"][f] == f"{zlib.crc32((out / f).read_bytes()):08x}", (name, f)
    import ferry

    loaded = ferry.ExportedModel.from_pretrained(out)
    assert loaded.manifest["components"] == manifest["components"]


# --- a file replaced by another of the same size ---------------------------------------------


@pytest.mark.parametrize("fmt,rel", [("onnx", "model.onnx.data"),
                                     ("openvino", "openvino_model.bin"),
                                     ("pt2", "model.pt2")])
def test_weights_from_another_export_refused(twins, tmp_path, fmt, rel):
    mine, twin = twins[fmt]
    assert (mine / rel).stat().st_size == (twin / rel).stat().st_size
    assert (mine / rel).read_bytes() != (twin / rel).read_bytes()
    out = copy(mine, tmp_path)
    shutil.copyfile(twin / rel, out / rel)
    assert_refused(out, rel)


def test_identical_program_from_another_export_loads(twins, tmp_path):
    """An ONNX program holds no weights: another export's of the same model is byte for byte
    the same file, and is rightly taken."""
    mine, twin = twins["onnx"]
    out = copy(mine, tmp_path)
    shutil.copyfile(twin / "model.onnx", out / "model.onnx")
    import ferry

    logits = ferry.ExportedModel.from_pretrained(out)(
        input_ids=IDS, attention_mask=np.ones_like(IDS)).logits
    assert np.isfinite(logits).all()


# --- programs edited in place, every name, dtype, shape and size kept -------------------------


def swap_onnx_node_inputs(path):
    """Swaps the weight inputs of the first two MatMul nodes whose weights have names of one
    length and one shape (two projections of a layer), keeping the file's size."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    shapes = {t.name: tuple(t.dims) for t in model.graph.initializer}
    by_shape = {}
    for node in model.graph.node:
        if node.op_type == "MatMul" and node.input[1] in shapes:
            key = (shapes[node.input[1]], len(node.input[1]))
            by_shape.setdefault(key, []).append(node)
    a, b = next(nodes[:2] for nodes in by_shape.values() if len(nodes) >= 2)
    a.input[1], b.input[1] = b.input[1], a.input[1]
    size = path.stat().st_size
    onnx.save(model, str(path))
    assert path.stat().st_size == size


def move_openvino_const(path):
    """Points the first two Const layers of one size and element type at each other's bytes."""
    import xml.etree.ElementTree as ET

    text = path.read_text()
    consts = {}
    for layer in ET.fromstring(text).iter("layer"):
        data = layer.find("data")
        if layer.get("type") == "Const" and data is not None and \
                int(data.get("size")) >= 64:
            key = (data.get("size"), data.get("element_type"), data.get("shape"))
            consts.setdefault(key, []).append(data.get("offset"))
    pair = next(offsets[:2] for offsets in consts.values()
                if len(offsets) >= 2 and len(offsets[0]) == len(offsets[1]))
    a, b = (f'offset="{o}"' for o in pair)
    assert text.count(a) == 1 and text.count(b) == 1
    size = path.stat().st_size
    path.write_text(text.replace(a, "\0").replace(b, a).replace("\0", b))
    assert path.stat().st_size == size


def edit_pt2_weights(path):
    """Swaps the two halves of the .pt2's weights blob in place and writes the zip's CRC-32 of
    that entry anew, in its local header and the central directory, so that the archive is a
    valid zip of other weights."""
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if "/data/weights/" in i.filename and
                    not i.filename.endswith(".json") and i.file_size >= 128)
        data = bytearray(z.read(info))
        central_at = z.start_dir
    half = len(data) // 8 * 4
    data[:2 * half] = data[half:2 * half] + data[:half]
    raw = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack_from("<HH", raw, info.header_offset + 26)
    start = info.header_offset + 30 + name_len + extra_len
    raw[start:start + len(data)] = data
    crc = struct.pack("<I", zlib.crc32(data))
    raw[info.header_offset + 14:info.header_offset + 18] = crc
    at = central_at
    while True:
        assert raw[at:at + 4] == b"PK\x01\x02"
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", raw, at + 28)
        if raw[at + 46:at + 46 + name_len].decode() == info.filename:
            raw[at + 16:at + 20] = crc
            break
        at += 46 + name_len + extra_len + comment_len
    size = path.stat().st_size
    path.write_bytes(bytes(raw))
    assert path.stat().st_size == size
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None


@pytest.mark.parametrize("fmt,rel,edit", [
    ("onnx", "model.onnx", swap_onnx_node_inputs),
    ("openvino", "openvino_model.xml", move_openvino_const),
    ("pt2", "model.pt2", edit_pt2_weights),
], ids=["onnx-node-inputs-swapped", "openvino-const-offsets-swapped", "pt2-weights-rewritten"])
def test_program_edited_in_place_refused(twins, tmp_path, fmt, rel, edit):
    out = copy(twins[fmt][0], tmp_path)
    edit(out / rel)
    set_sizes_only(out)
    assert_refused(out, rel)
    # the edit is a working program of other numbers: with export.json's CRCs rewritten too
    # (a writer who means it, which no check in the directory can stop) it loads and runs
    import ferry

    record_sizes(out)
    call = dict(input_ids=IDS, attention_mask=np.ones_like(IDS))
    edited = ferry.ExportedModel.from_pretrained(out)(**call).logits
    original = ferry.ExportedModel.from_pretrained(twins[fmt][0])(**call).logits
    assert edited.shape == original.shape and not np.allclose(edited, original)


def test_validate_refuses_a_swapped_file(twins, ckpts, tmp_path):
    out = copy(twins["onnx"][0], tmp_path)
    shutil.copyfile(twins["onnx"][1] / "model.onnx.data", out / "model.onnx.data")
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, _, err = run_ferry("validate", out, "--model", ckpts("llama"), "--no-record", env=env)
    assert rc == 1 and NEEDLE in err and "model.onnx.data" in err, err


def test_one_flipped_bit_refused(twins, tmp_path):
    out = copy(twins["openvino"][0], tmp_path)
    raw = bytearray((out / "openvino_model.bin").read_bytes())
    raw[len(raw) // 2] ^= 0x10
    (out / "openvino_model.bin").write_bytes(bytes(raw))
    assert_refused(out, "openvino_model.bin")


# --- export.json's own entries ---------------------------------------------------------------


def test_export_without_crc_still_loads(twins, tmp_path):
    """An export by an older ferry has no "crc32": it loads as before (its sizes checked)."""
    out = copy(twins["onnx"][0], tmp_path)
    manifest = json.loads((out / "export.json").read_text())
    for comp in manifest["components"].values():
        del comp["crc32"]
    (out / "export.json").write_text(json.dumps(manifest))
    import ferry

    assert ferry.ExportedModel.from_pretrained(out)(
        input_ids=IDS, attention_mask=np.ones_like(IDS)).logits.shape[:2] == (1, 8)
    assert run_ferry("inspect", out, "--verify")[0] == 0


@pytest.mark.parametrize("crcs", [
    lambda c: {**c, "model.onnx": c["model.onnx"].upper()},
    lambda c: {**c, "model.onnx": c["model.onnx"][:7]},
    lambda c: {**c, "model.onnx": int(c["model.onnx"], 16)},
    lambda c: {"model.onnx": c["model.onnx"]},
    lambda c: {**c, "extra.bin": "00000000"},
    lambda c: [c["model.onnx"], c["model.onnx.data"]],
], ids=["uppercase", "short", "number", "missing-file", "extra-file", "array"])
def test_malformed_crc_entries_refused(twins, tmp_path, crcs):
    out = copy(twins["onnx"][0], tmp_path)
    manifest = json.loads((out / "export.json").read_text())
    comp = manifest["components"]["model"]
    comp["crc32"] = crcs(comp["crc32"])
    (out / "export.json").write_text(json.dumps(manifest))
    message = load_error(out)
    assert "export.json" in message and "'crc32'" in message, message
    assert run_ferry("inspect", out)[0] == 1
