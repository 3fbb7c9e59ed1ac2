"""What ferry prints never carries a terminal control from a file or an argument.

C1 controls (U+0080-U+009F; U+009B is CSI, bytes C2 9B), bidirectional overrides and isolates
(U+202E, U+2066, ...), invisible tag characters (U+E0041) and invalid UTF-8 (a lone 0x9B byte
is CSI to an 8-bit terminal) are planted in tensor names, config.json's architecture, shard
names, the model and output paths, command-line arguments, and in export.json (component names,
files, metadata). Every case runs through both builds and checks the same thing: stdout and
stderr are printable ASCII (none of the planted bytes, no byte above 0x7F, no control byte but
newline and tab), and the planted characters are there in escaped form (\\u009b, \\u202e,
\\udb40\\udc41, \\xff) so that the user still sees what the file holds. `ferry inspect --json`
stays valid JSON and decodes to the manifest's strings. At 6fe3928 the raw bytes came out in
every case but the invalid tensor name (already quoted there).
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT, SANITIZER_ENV, ferry_builds, read_safetensors, write_safetensors

FIXTURE = ROOT / "fixtures" / "tiny-llama"
CSI = "\u009b"          # C1 control sequence introducer
RLO = "\u202e"          # right-to-left override
LRI = "\u2066"          # left-to-right isolate
TAG = "\U000e0041"      # invisible TAG LATIN CAPITAL LETTER A
BAD = b"\xff\x9b"       # invalid UTF-8; 0x9B alone is CSI in 8-bit mode
HOSTILE = (CSI + "31m" + RLO + "evil" + LRI + TAG).encode()
ESCAPED = ["\\u009b31m", "\\u202eevil\\u2066", "\\udb40\\udc41"]
ESCAPED_BAD = ["\\xff\\x9b"]


def run(binary, *args, cwd=None):
    """ferry with bytes arguments; (returncode, stdout bytes, stderr bytes)."""
    env = dict(SANITIZER_ENV) if binary != ferry_builds()[0][1] else dict(os.environ)
    proc = subprocess.run([os.fsencode(str(binary)), *[a if isinstance(a, bytes) else
                                                       os.fsencode(str(a)) for a in args]],
                          capture_output=True, timeout=300, env=env, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def assert_safe(out, err, escaped):
    for name, stream in (("stdout", out), ("stderr", err)):
        bad = [b for b in stream if b >= 0x80 or (b < 0x20 and b not in (0x09, 0x0A))]
        assert not bad, f"{name} holds raw bytes {bytes(bad[:16])!r}: {stream[-2000:]!r}"
    text = (out + err).decode("ascii")
    for form in escaped:
        assert form in text, f"{form!r} not in output: {text[-2000:]}"


def copy_fixture(dst):
    return Path(shutil.copytree(FIXTURE, dst))


def with_extra_tensor(ckpt, name):
    header, data = read_safetensors(ckpt / "model.safetensors")
    header[name.decode("utf-8", "surrogateescape")] = {
        "dtype": "U8", "shape": [1], "data_offsets": [len(data), len(data) + 1]}
    write_safetensors(ckpt / "model.safetensors", header, data + b"\x01")


def set_architecture(ckpt, raw):
    text = (ckpt / "config.json").read_bytes()
    text = text.replace(b'"LlamaForCausalLM"', b'"' + raw + b'"', 1)
    (ckpt / "config.json").write_bytes(text)


builds = pytest.mark.parametrize("label,binary", ferry_builds(),
                                 ids=[b[0] for b in ferry_builds()])


@builds
def test_unused_tensor_name_warning(tmp_path, label, binary):
    ckpt = copy_fixture(tmp_path / "ckpt")
    with_extra_tensor(ckpt, b"zz." + HOSTILE)
    rc, out, err = run(binary, "export", ckpt, tmp_path / "out")
    assert rc == 0, err
    assert b"is not used by the export" in err
    assert_safe(out, err, ESCAPED)


@builds
def test_invalid_utf8_tensor_name(tmp_path, label, binary):
    ckpt = copy_fixture(tmp_path / "ckpt")
    header, data = read_safetensors(ckpt / "model.safetensors")
    text = json.dumps(header, separators=(",", ":")).encode().replace(
        b'"model.norm.weight"', b'"model.norm' + BAD + b'"', 1)
    text += b" " * (-len(text) % 8)
    (ckpt / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data)
    rc, out, err = run(binary, "export", ckpt, tmp_path / "out")
    assert rc == 1, err
    assert_safe(out, err, ESCAPED_BAD)


# Invalid UTF-8 in a JSON file is refused when the file is read (tests/python/test_json_hostile.py),
# before any name from it is printed: the refusal names the byte and echoes none of them.
REFUSED_UTF8 = ["not valid UTF-8 at byte"]


@builds
@pytest.mark.parametrize("raw,escaped", [(HOSTILE, ESCAPED), (b"Llama" + BAD, REFUSED_UTF8)],
                         ids=["c1-bidi-tag", "invalid-utf8"])
def test_unsupported_architecture(tmp_path, label, binary, raw, escaped):
    ckpt = copy_fixture(tmp_path / "ckpt")
    set_architecture(ckpt, raw)
    rc, out, err = run(binary, "export", ckpt, tmp_path / "out")
    assert rc == 1, err
    assert_safe(out, err, escaped)


@builds
def test_missing_shard_name(tmp_path, label, binary):
    ckpt = copy_fixture(tmp_path / "ckpt")
    header, _ = read_safetensors(ckpt / "model.safetensors")
    shard = b"model-" + HOSTILE + b".safetensors"
    index = {"metadata": {}, "weight_map": {name: "X" for name in header if name != "__metadata__"}}
    text = json.dumps(index).encode().replace(b'"X"', b'"' + shard + b'"')
    (ckpt / "model.safetensors").rename(ckpt / "elsewhere.bin")
    (ckpt / "model.safetensors.index.json").write_bytes(text)
    rc, out, err = run(binary, "export", ckpt, tmp_path / "out")
    assert rc == 1, err
    assert_safe(out, err, ESCAPED)


@builds
def test_paths_echoed(tmp_path, label, binary):
    """A model directory and an output directory whose names hold the bytes: the success line,
    an "already exists" refusal, and inspect's header line all echo them."""
    root = os.fsencode(str(tmp_path))
    model = root + b"/ck-" + HOSTILE + BAD
    shutil.copytree(FIXTURE, os.fsdecode(model))
    out = root + b"/out-" + HOSTILE + BAD
    rc, o, e = run(binary, "export", model, out)
    assert rc == 0, e
    assert_safe(o, e, ESCAPED + ESCAPED_BAD)
    rc, o, e = run(binary, "export", model, out)
    assert rc == 1 and b"already exists" in e, e
    assert_safe(o, e, ESCAPED + ESCAPED_BAD)
    rc, o, e = run(binary, "inspect", out)
    assert rc == 0, e
    assert_safe(o, e, ESCAPED + ESCAPED_BAD)
    rc, o, e = run(binary, "inspect", root + b"/missing-" + HOSTILE)
    assert rc == 1, e
    assert_safe(o, e, ESCAPED)


@builds
def test_command_line_echoes(tmp_path, label, binary):
    for args in ([b"export", b"--format", HOSTILE + BAD, b"a", b"b"], [HOSTILE + BAD],
                 [b"export", b"--dtype", HOSTILE + BAD, b"a", b"b"],
                 [b"inspect", b"--" + HOSTILE + BAD]):
        rc, out, err = run(binary, *args)
        assert rc == 2, (args, err)
        assert_safe(out, err, ESCAPED + ESCAPED_BAD)


@builds
def test_revision_echoed(tmp_path, label, binary):
    rc, out, err = run(binary, "export", "org/name", tmp_path / "out", "--revision", HOSTILE,
                       cwd=tmp_path)
    assert rc == 2, err  # a revision that is not a valid name is a bad command line
    assert_safe(out, err, ESCAPED)


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("ts") / "export"
    subprocess.run([str(ferry_builds()[0][1]), "export", str(FIXTURE), str(out), "-q"],
                   check=True)
    return out


def plant_in_manifest(export_dir, dst):
    """A copy of the export whose export.json names its component, its file, the architecture
    and an input with the hostile characters (the file renamed to match)."""
    dst = Path(shutil.copytree(export_dir, dst))
    hostile = HOSTILE.decode()
    manifest = json.loads((dst / "export.json").read_text())
    comp = manifest["components"].pop("model")
    new_file = "m" + hostile + ".onnx"
    (dst / comp["file"]).rename(dst / new_file)
    comp["file"] = new_file
    comp["metadata"]["inputs"][0]["name"] = "input" + hostile
    manifest["architecture"] = "Arch" + hostile
    manifest["components"]["model" + hostile] = comp
    (dst / "export.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False))
    return dst, manifest


@builds
def test_inspect_escapes_manifest_strings(export_dir, tmp_path, label, binary):
    dst, manifest = plant_in_manifest(export_dir, tmp_path / "exp")
    rc, out, err = run(binary, "inspect", dst)
    assert_safe(out, err, ESCAPED)
    if rc == 0:   # validation may refuse the names instead; then the refusal is escaped
        assert b"component model\\u009b31m" in out, out
    rc, out, err = run(binary, "inspect", dst, "--json")
    assert_safe(out, err, ESCAPED)
    if rc == 0:
        assert json.loads(out) == manifest, "inspect --json must decode to the manifest"


@builds
def test_inspect_invalid_utf8_manifest(export_dir, tmp_path, label, binary):
    dst = Path(shutil.copytree(export_dir, tmp_path / "exp"))
    text = (dst / "export.json").read_bytes()
    text = text.replace(b'"LlamaForCausalLM"', b'"Llama' + BAD + b'"', 1)
    (dst / "export.json").write_bytes(text)
    for extra in ([], ["--json"]):
        rc, out, err = run(binary, "inspect", dst, *extra)
        assert rc == 1, err
        assert_safe(out, err, REFUSED_UTF8)
