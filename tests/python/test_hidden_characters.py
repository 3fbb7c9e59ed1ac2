"""C1 controls (U+009B is CSI), bidi overrides and isolates, invisible format characters (zero
width joiner, tag characters) and invalid UTF-8 in the names config.json gives (architectures,
model_type, hidden_act) and in any key or string of export.json are refused outright, naming
the key and the byte offset with the text escaped (docs/security.md: "refused outright"); only
C0 and DEL were, so the others reached export.json, `ferry inspect` and the Python binding's
messages. The binding escapes what it echoes from an export (ferry_escape)."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import FIXTURE, ferry_builds, run_ferry

BUILDS = ferry_builds()
IDS = [b[0] for b in BUILDS]
CHARS = {"c1-csi": ("\u009b", "\\u009b"), "rlo": ("\u202e", "\\u202e"),
         "zwj": ("\u200d", "\\u200d"), "tag": ("\U000e0041", "\\udb40\\udc41"),
         "lri": ("\u2066", "\\u2066")}
REFUSAL = "holds a control, format or invalid character at byte"


def one_line(rc, stderr, *needles):
    lines = stderr.strip("\n").split("\n")
    assert rc == 1, f"exit {rc}: {stderr[-2000:]}"
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr[-2000:]
    assert lines[0].isascii(), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
@pytest.mark.parametrize("char", list(CHARS))
@pytest.mark.parametrize("key", ["architectures", "model_type", "hidden_act"])
def test_config_names(tmp_path, label, binary, char, key):
    raw, escaped = CHARS[char]
    ckpt = Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))
    cfg = json.loads((ckpt / "config.json").read_text())
    value = {"architectures": "Llama" + raw + "ForCausalLM", "model_type": "lla" + raw + "ma",
             "hidden_act": "si" + raw + "lu"}[key]
    cfg[key] = [value] if key == "architectures" else value
    (ckpt / "config.json").write_text(json.dumps(cfg))
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", binary=binary)
    at = {"architectures": 5, "model_type": 3, "hidden_act": 2}[key]
    one_line(rc, stderr, "config.json", f"key '{key}' {REFUSAL} {at}",
             value.replace(raw, escaped).encode().decode("ascii", "replace"))
    assert not (tmp_path / "out").exists()


def planted(exported, dst, where, raw):
    dst = Path(shutil.copytree(exported, dst))
    m = json.loads((dst / "export.json").read_text())
    comp = m["components"]["model"]
    if where == "input-name":
        comp["metadata"]["inputs"][0]["name"] = "input" + raw + "_ids"
    elif where == "metadata-key":
        comp["metadata"]["ex" + raw + "tra"] = 1
    elif where == "component-name":
        m["components"] = {"mo" + raw + "del": comp}
    elif where == "role":
        comp["role"] = "mo" + raw + "del"
    (dst / "export.json").write_text(json.dumps(m, ensure_ascii=False))
    return dst


@pytest.mark.parametrize("label,binary", BUILDS, ids=IDS)
@pytest.mark.parametrize("char", list(CHARS))
@pytest.mark.parametrize("where", ["input-name", "metadata-key", "component-name", "role"])
def test_manifest_strings(exported, tmp_path, label, binary, char, where):
    raw, escaped = CHARS[char]
    dst = planted(exported, tmp_path / "exp", where, raw)
    for args in (("inspect", dst), ("inspect", dst, "--json")):
        rc, stdout, stderr = run_ferry(*args, binary=binary)
        one_line(rc, stderr, "export.json", REFUSAL, escaped)
        assert stdout == ""


@pytest.mark.parametrize("where", ["input-name", "component-name"])
def test_binding_refuses_hidden_in_manifest(exported, tmp_path, where):
    from ferry import ExportedModel, FerryError

    dst = planted(exported, tmp_path / "exp", where, "\u009b")
    with pytest.raises(FerryError) as info:
        ExportedModel.from_pretrained(dst)
    assert REFUSAL in str(info.value) and "\\u009b" in str(info.value)
    assert str(info.value).isascii()


def test_binding_escapes_what_it_echoes(tmp_path):
    """Calling a generation export names its components and its directory; a directory whose
    name holds a CSI and a bidi override is shown escaped."""
    import numpy as np

    from ferry import ExportedModel, FerryError, OnnxConfig, OnnxExporter

    exported = OnnxExporter().export_for_generation(FIXTURE, config=OnnxConfig(dynamic=True))
    out = tmp_path / "gen\u009b31m\u202eevil"
    exported.save_pretrained(out)
    exported = ExportedModel.from_pretrained(out)
    with pytest.raises(FerryError) as info:
        exported(input_ids=np.array([[1, 2, 3]]))
    message = str(info.value)
    assert "\u009b" not in message and "\u202e" not in message, repr(message)
    assert "gen\\u009b31m\\u202eevil" in message, message


def test_every_format_character_is_escaped():
    """Every format (Cf) character of Python's Unicode database (14.0 here; text_hidden's table
    follows 15) comes out of ferry_escape escaped, never raw: the Arabic number signs
    U+0600-0605 and the other prepended concatenation marks, Egyptian hieroglyph and shorthand
    format controls printed raw before."""
    import unicodedata

    from ferry._lib import _escape

    raw = [chr(cp) for cp in range(0x110000) if unicodedata.category(chr(cp)) == "Cf"]
    assert len(raw) > 150
    left = [f"U+{ord(c):04X}" for c in raw if c in _escape("x" + c + "y")]
    assert not left, f"printed raw: {left}"
    for c in raw:
        escaped = _escape(c)
        assert escaped.isascii() and escaped.startswith("\\u"), (hex(ord(c)), escaped)
