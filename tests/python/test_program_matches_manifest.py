"""A component's program must be the one export.json describes, in every format.

- Its inputs and outputs (names; element types and sizes where the runtime states them) are
  export.json's: an OpenVINO IR with its Result layer removed loaded and a call returned an
  empty ExportOutput, without an error, although export.json lists logits. Now each such
  program is refused when it is loaded, with one FerryError naming the file and the first
  difference (runtime.check_program_io, which the sessions, the runners and validation share).
- Its file is one of its format's programs: a component "file" naming export.json, config.json
  or bytes of another kind under the right suffix passed the manifest check and `ferry
  inspect`, and the call raised onnxruntime's InvalidProtobuf. libferry now refuses it by
  suffix and first bytes (so inspect, validate and Python all do), and what a runtime raises
  while loading a program that passes those is one FerryError naming the file.
"""

import json
import shutil
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from conftest import ferry_export, record_sizes, run_ferry

FILES = {"onnx": "model.onnx", "openvino": "openvino_model.xml", "pt2": "model.pt2"}
IDS = np.arange(1, 9, dtype=np.int64).reshape(1, 8)


@pytest.fixture(scope="module")
def exports(ckpts, tmp_path_factory):
    """{format: a plain export of one tiny checkpoint} (tests copy before they edit)."""
    ckpt = ckpts("llama")
    base = tmp_path_factory.mktemp("program-matches")
    return {fmt: ferry_export(ckpt, base / fmt, "--format", fmt, "--quiet") for fmt in FILES}


def copy(exports, fmt, tmp_path):
    out = tmp_path / fmt
    shutil.copytree(exports[fmt], out)
    return out


def edit_manifest(out, edit):
    manifest = json.loads((out / "export.json").read_text())
    edit(manifest["components"]["model"])
    (out / "export.json").write_text(json.dumps(manifest))


def call_error(out):
    """The FerryError that loading `out` or calling its model raises (None if neither does)."""
    import ferry

    with pytest.raises(ferry.FerryError) as caught:
        ferry.ExportedModel.from_pretrained(out)(input_ids=IDS,
                                                 attention_mask=np.ones_like(IDS))
    message = str(caught.value)
    assert "\n" not in message, message
    return message


# --- programs whose inputs or outputs are not export.json's -----------------------------------


def _drop_layers(xml, kind, name=None):
    """The IR at `xml` without its `kind` layers (only `name` if given) and their edges."""
    tree = ET.parse(xml)
    layers, edges = tree.getroot().find("layers"), tree.getroot().find("edges")
    gone = [layer for layer in layers
            if layer.get("type") == kind and name in (None, layer.get("name"))]
    assert gone
    for layer in gone:
        layers.remove(layer)
    ids = {layer.get("id") for layer in gone}
    for edge in list(edges):
        if edge.get("from-layer") in ids or edge.get("to-layer") in ids:
            edges.remove(edge)
    tree.write(xml, xml_declaration=True, encoding="utf-8")


def _replace(xml, old, new):
    text = xml.read_text()
    assert old in text
    xml.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("edit,needle", [
    (lambda xml: _drop_layers(xml, "Result"), "the program has no output logits"),
    (lambda xml: _replace(xml, 'names="logits"', 'names="logitz"'),
     "the program has no output logits"),
    (lambda xml: _replace(xml, 'names="attention_mask"', 'names="attention_masz"'),
     "the program has no input attention_mask"),
    # consumers left without their input: OpenVINO's reader refuses it, named as one line
    (lambda xml: _drop_layers(xml, "Parameter", "attention_mask"), ""),
    (lambda xml: xml.write_text('<?xml version="1.0"?>\n<net name="model" version="11">'
                                "<layers></layers><edges></edges></net>\n"), ""),
], ids=["result-removed", "output-renamed", "input-renamed", "parameter-removed", "empty-net"])
def test_openvino_ir_other_than_manifest(exports, tmp_path, edit, needle):
    out = copy(exports, "openvino", tmp_path)
    edit(out / FILES["openvino"])
    record_sizes(out)
    message = call_error(out)
    assert "openvino_model.xml" in message and needle in message, message


def _rename_onnx(path, kind, old, new):
    """Renames graph input or output `old` of the ONNX program at `path` (and every node's use
    of it), its external data left as it is."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    values = model.graph.input if kind == "input" else model.graph.output
    (value,) = [v for v in values if v.name == old]
    value.name = new
    for node in model.graph.node:
        for names in (node.input, node.output):
            for i, name in enumerate(names):
                if name == old:
                    names[i] = new
    onnx.save(model, str(path))


@pytest.mark.parametrize("kind,old", [("input", "attention_mask"), ("output", "logits")])
def test_onnx_program_other_than_manifest(exports, tmp_path, kind, old):
    out = copy(exports, "onnx", tmp_path)
    _rename_onnx(out / "model.onnx", kind, old, old + "_renamed")
    record_sizes(out)
    message = call_error(out)
    assert "model.onnx" in message and f"the program has no {kind} {old}" in message, message
    assert "one of them was edited since the export" in message, message


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize("edit,needle", [
    (lambda c: c["metadata"]["inputs"][1].update(name="mask"),
     "the program has no input mask"),
    (lambda c: c["metadata"]["outputs"][0].update(name="scores"),
     "the program has no output scores"),
    (lambda c: c["metadata"]["inputs"].pop(1), "export.json lists no input attention_mask"),
    (lambda c: c["metadata"]["inputs"][0].update(dtype="int32"),
     "input input_ids is int64 in the program"),
    (lambda c: c["metadata"]["outputs"][0]["shape"].__setitem__(2, 7),
     "the program's output logits is [1, 8, "),
], ids=["input", "output", "input-dropped", "dtype", "size"])
def test_manifest_other_than_program(exports, tmp_path, fmt, edit, needle):
    """export.json edited instead, in each format (pt2: the program's signature and out_spec)."""
    out = copy(exports, fmt, tmp_path)
    edit_manifest(out, edit)
    message = call_error(out)
    assert FILES[fmt] in message and needle in message, message


# --- component files that are not their format's programs -------------------------------------


def _inspect_refuses(out, *needles):
    rc, stdout, stderr = run_ferry("inspect", out)
    lines = stderr.splitlines()
    assert rc != 0 and len(lines) == 1 and lines[0].startswith("ferry: error: "), (rc, stderr)
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize("other", ["export.json", "config.json"])
def test_component_file_of_another_kind(exports, tmp_path, fmt, other):
    out = copy(exports, fmt, tmp_path)

    def point(component):
        component["file"] = other
        component.pop("bytes", None)
        component.pop("crc32", None)
    edit_manifest(out, point)
    needles = ("component 'model'", f"file '{other}'", "program files end in")
    message = call_error(out)
    assert all(n in message for n in needles), message
    _inspect_refuses(out, *needles)


GARBAGE = b"garbage bytes, " * 64


@pytest.mark.parametrize("fmt", list(FILES))
@pytest.mark.parametrize("content", [GARBAGE, b'{"model_type": "llama"}', b""],
                         ids=["garbage", "json", "empty"])
def test_program_bytes_of_another_kind(exports, tmp_path, fmt, content):
    """The right suffix over bytes that cannot be the format's: refused by their first bytes."""
    out = copy(exports, fmt, tmp_path)
    (out / FILES[fmt]).write_bytes(content)
    record_sizes(out)
    needles = ("component 'model'", f"file '{FILES[fmt]}' is not ", "its first bytes")
    message = call_error(out)
    assert all(n in message for n in needles), message
    _inspect_refuses(out, *needles)


@pytest.mark.parametrize("fmt,head", [("onnx", b"\x08"), ("openvino", b"<net "),
                                      ("pt2", b"PK\x03\x04")])
def test_runtime_refusal_is_one_ferry_error(exports, tmp_path, fmt, head):
    """First bytes of the format, the rest not: the runtime's (or pt2_safety's) refusal as one
    FerryError naming the file, nothing of the runtime's own type escaping."""
    out = copy(exports, fmt, tmp_path)
    (out / FILES[fmt]).write_bytes(head + b"\xff" * 200)
    record_sizes(out)
    message = call_error(out)
    assert FILES[fmt] in message, message
    if fmt == "onnx":
        assert message.startswith("onnxruntime cannot load ") and "InvalidProtobuf" in message
    assert len(message) < 1000, message


def test_component_program_errors_are_ferry_errors(exports, tmp_path):
    """ExportedComponent.program reads the file with the format's reader: its refusal too."""
    import ferry

    out = copy(exports, "onnx", tmp_path)
    (out / "model.onnx").write_bytes(b"\x08" + b"\xff" * 200)
    record_sizes(out)
    with pytest.raises(ferry.FerryError, match="model.onnx"):
        ferry.ExportedModel.from_pretrained(out).components["model"].program


def test_openvino_state_other_than_manifest(ckpts, tmp_path):
    """A stateful IR's cache is its variables: one per pair export.json's cache lists. A pair
    naming another layer is refused when export.json is read; one consistent with the cache's
    own layers but not the program's variables, when the program is compiled."""
    import ferry

    out = ferry_export(ckpts("llama"), tmp_path / "gen", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    (component,) = manifest["components"].values()
    assert component["metadata"]["stateful"] is True
    component["metadata"]["cache"]["pairs"][0]["input"] = "past_key_values.9.key"
    (out / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(ferry.FerryError, match=r"cache pair 0 joins 'past_key_values\.9\.key' "
                       r"to 'present\.0\.key'"):
        ferry.ExportedModel.from_pretrained(out)
    cache = component["metadata"]["cache"]
    cache["pairs"][0]["input"] = "past_key_values.0.key"
    cache["layers"] += 1
    for kind in ("key", "value"):
        cache["pairs"].append({"input": f"past_key_values.{cache['layers'] - 1}.{kind}",
                               "output": f"present.{cache['layers'] - 1}.{kind}",
                               "in_place": False})
    (out / "export.json").write_text(json.dumps(manifest))
    with pytest.raises(ferry.FerryError, match=r"openvino_model\.xml: the program's state "
                       r"variables are .*past_key_values\.2\.key"):
        ferry.ExportedModel.from_pretrained(out).generate(IDS[:, :4], max_new_tokens=2)
