"""Hostile inputs through the CLI: safetensors headers, config.json, index files, recipes and
export.json written to hurt. Every case must end the same way: exit 1, one line on stderr
("ferry: error: ...") naming the file and the tensor or key at fault, no control bytes from the
file in that line, nothing left in the output's parent directory - and no allocation sized by
what the file claims rather than what it holds.

That last point is measured, not assumed: the release binary (and clang's UBSan build) runs
under RLIMIT_AS = 512 MiB (an allocation sized by a claimed 2^40-byte tensor or 10^9 layers fails
there, and "out of memory" is not the expected message), the ASan/UBSan binary under
max_allocation_size_mb=64 (any single allocation over 64 MB aborts with a report and exit 86).
A control test shows that a good export runs under the same limits, and a sensitivity test that
the 64 MB limit does catch an allocation of that size.

Each case runs through the release build and, under `make test` (FERRY_BUILD_SAN,
FERRY_BUILD_UBSAN), the sanitizer builds too, where any leak, memory error or undefined behaviour
on the refusal path fails the test."""

import json
import os
import resource
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import ARCHS, ASAN_BIN, FERRY_BIN, ROOT, SANITIZER_ENV, read_safetensors

from conftest import FIXTURE  # noqa: E402
ST = "model.safetensors"
VICTIM = "model.layers.1.self_attn.k_proj.weight"   # F32 [32, 64] in the fixture
AS_LIMIT = 512 << 20      # a good export of the fixture needs ~256 MB of address space


@pytest.fixture
def ckpt(tmp_path):
    """A private copy of the shipped tiny Llama, to be damaged."""
    return Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))


def run_limited(binary, *args):
    """Runs ferry with the memory limits described above; returns (rc, stdout, stderr)."""
    binary = Path(binary)
    if binary != ASAN_BIN:     # release, and clang's UBSan build (no shadow memory)
        env = dict(os.environ) if binary == FERRY_BIN else dict(SANITIZER_ENV)

        def limit():
            resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    else:
        env = dict(SANITIZER_ENV)
        env["ASAN_OPTIONS"] += ":max_allocation_size_mb=64:allocator_may_return_null=0"
        limit = None
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=limit)
    return proc.returncode, proc.stdout, proc.stderr


def one_line(rc, stderr, *culprits):
    assert rc == 1, f"exit {rc}, expected 1; stderr: {stderr!r}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    line = lines[0]
    assert not any(ord(c) < 0x20 or ord(c) == 0x7F for c in line), repr(line)
    assert "out of memory" not in line, f"an allocation followed a claim: {line}"
    for culprit in culprits:
        options = culprit if isinstance(culprit, tuple) else (culprit,)
        assert any(c in line for c in options), f"{options} not named in: {line}"
    return line


def expect_refusal(model, tmp_path, build, *culprits, extra=()):
    parent = tmp_path / "outs"
    parent.mkdir()
    rc, _, stderr = run_limited(build, "export", model, parent / "out", "--dynamic", *extra)
    line = one_line(rc, stderr, *culprits)
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"
    return line


def write_header_text(path, text, data):
    """A safetensors file from raw header bytes (padded to 8 with spaces) and data."""
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + data)


def header_text(header):
    return json.dumps(header, separators=(",", ":")).encode()


def test_control_good_export_under_the_limits(tmp_path, build):
    """The limits leave room for a real export: the refusals below are not the limits'."""
    rc, _, stderr = run_limited(build, "export", FIXTURE, tmp_path / "out", "--dynamic", "-q")
    assert rc == 0, stderr


@pytest.mark.skipif(ASAN_BIN is None, reason="needs the sanitizer build (FERRY_BUILD_SAN, "
                    "set by make test-python)")
def test_sensitivity_allocation_limit_catches_a_big_allocation(ckpt):
    """The instrument works: a real 70 MB header (under the 100 MB cap, so ferry copies it) is
    one 70 MB allocation, and the sanitizer build stops there. Hostile headers above only claim
    such sizes, and pass."""
    header, data = read_safetensors(ckpt / ST)
    header["__metadata__"] = {"format": "pt", "pad": "a" * (70 << 20)}
    write_header_text(ckpt / ST, header_text(header), data)
    rc, _, stderr = run_limited(ASAN_BIN, "export", ckpt, ckpt.parent / "out", "-q")
    assert rc == 86 and "allocation" in stderr, (rc, stderr[-2000:])


@pytest.mark.skipif(ASAN_BIN is None or shutil.which("cc") is None,
                    reason="needs the sanitizer build (FERRY_BUILD_SAN) and a C compiler")
def test_sensitivity_leaks_fail_the_sanitizer_build(tmp_path):
    """A leak in the sanitizer binary is a failure under the tests' environment: a library
    preloaded into it that leaks 1234 bytes makes `ferry --version` exit 86 with an LSan report
    instead of 0."""
    src = tmp_path / "leak.c"
    src.write_text("#include <stdlib.h>\n#include <string.h>\n"
                   "__attribute__((constructor)) static void leak(void)\n"
                   "{ char *volatile p = malloc(1234); memset(p, 1, 1234); p = 0; }\n")
    lib = tmp_path / "leak.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", str(src), "-o", str(lib)], check=True)
    env = dict(SANITIZER_ENV, LD_PRELOAD=str(lib))
    env["ASAN_OPTIONS"] += ":verify_asan_link_order=0"
    proc = subprocess.run([str(ASAN_BIN), "--version"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 86 and "LeakSanitizer" in proc.stderr, proc.stderr[-2000:]
    clean = subprocess.run([str(ASAN_BIN), "--version"], capture_output=True,
                           text=True, env=SANITIZER_ENV, timeout=60)
    assert clean.returncode == 0, clean.stderr


# ---------------------------------------------------------------------------------------------
# safetensors headers


@pytest.mark.parametrize("claimed", [2**64 - 1, 2**64 - 8, 2**63, 2**32, "file+1"],
                         ids=["2^64-1", "2^64-8", "2^63", "2^32", "file-plus-one"])
def test_header_length_claims(ckpt, tmp_path, build, claimed):
    path = ckpt / ST
    raw = bytearray(path.read_bytes())
    n = len(raw) - 7 if claimed == "file+1" else claimed
    raw[:8] = struct.pack("<Q", n)
    path.write_bytes(bytes(raw))
    expect_refusal(ckpt, tmp_path, build, str(path), "runs past the end of the file")


def test_header_nested_deep(ckpt, tmp_path, build):
    _, data = read_safetensors(ckpt / ST)
    text = b'{"__metadata__": ' + b"[" * 200000 + b"]" * 200000 + b"}"
    write_header_text(ckpt / ST, text, data)
    expect_refusal(ckpt, tmp_path, build, str(ckpt / ST), "nesting deeper than 32 levels")


def test_header_huge(ckpt, tmp_path, build):
    """A 7 MB header of 100,000 extra (empty) tensors plus one whose range leaves the file:
    parsed in memory proportional to its real size, refused naming that tensor."""
    header, data = read_safetensors(ckpt / ST)
    for i in range(100000):
        header[f"junk.{i:06d}"] = {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}
    header["junk.last"] = {"dtype": "F32", "shape": [1 << 20],
                           "data_offsets": [len(data), len(data) + (4 << 20)]}
    write_header_text(ckpt / ST, header_text(header), data)
    assert (ckpt / ST).stat().st_size > 6e6
    expect_refusal(ckpt, tmp_path, build, "junk.last", "outside the data area")


@pytest.mark.parametrize("change,needle", [
    ({"dtype": "F16"}, "data_offsets span 8192 bytes but 2048 elements of F16 need 4096"),
    ({"dtype": "F64"}, "2048 elements of F64 need 16384"),
    ({"shape": [32, 65]}, "2080 elements of F32 need 8320"),
    ({"shape": [4294967296, 4294967296, 2]}, "the product of its shape overflows"),
    ({"shape": [2147483648, 2147483648]}, "overflow a 64-bit byte count"),
    ({"shape": [1, 1, 1, 1, 1, 1, 1, 1, 2048]}, "more than 8 dimensions"),
    ({"shape": [32, -64]}, "shape entry 1 is not a non-negative integer"),
    ({"shape": [9007199254740993]}, "shape entry 0 is not a non-negative integer"),
    ({"dtype": "F32\n"}, "has dtype 'F32\\x0a'"),
    ({"data_offsets": [8192, 0]}, "end before they begin"),
    ({"data_offsets": [0, 18446744073709551615]}, "must be two non-negative integers"),
    ({"data_offsets": [1 << 40, (1 << 40) + 8192]}, "outside the data area"),
], ids=["dtype-f16", "dtype-f64", "shape-wider", "product-overflow", "bytes-overflow",
        "rank-9", "negative-extent", "extent-2^53+1", "dtype-newline", "reversed",
        "end-2^64", "begin-2^40"])
def test_tensor_entry_disagreements(ckpt, tmp_path, build, change, needle):
    header, data = read_safetensors(ckpt / ST)
    assert header[VICTIM]["shape"] == [32, 64] and header[VICTIM]["dtype"] == "F32"
    begin = header[VICTIM]["data_offsets"][0]
    header[VICTIM]["data_offsets"] = [begin, begin + 8192]
    header[VICTIM].update(change)
    write_header_text(ckpt / ST, header_text(header), data)
    expect_refusal(ckpt, tmp_path, build, VICTIM, needle)


def _rewrite_name(ckpt, new_name_json):
    """Renames VICTIM in the raw header text to `new_name_json` (JSON string body, escapes
    allowed) and returns the data."""
    raw = (ckpt / ST).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    text, data = raw[8:8 + n].rstrip(b" "), raw[8 + n:]
    old = json.dumps(VICTIM).encode()
    assert text.count(old) == 1
    write_header_text(ckpt / ST, text.replace(old, b'"' + new_name_json + b'"'), data)


@pytest.mark.parametrize("name,needle", [
    (b"model.layers.1.self_attn.q_proj.weight", "appears twice"),
    (b"model.layers.1.self_attn.q_proj.weigh\\u0074", "appears twice"),
    (b"bad\xff\xfename", "tensor name 'bad\\xff\\xfename' is not valid UTF-8"),
    (b"bad\xc0\xafname", "is not valid UTF-8"),
    (b"a\\u0000b", "escaped NUL"),
    (b"a\nb", "raw control byte 0x0a"),
    (b"a\\nb", "tensor name 'a\\x0ab' holds control characters"),
    (b"\\u001b]0;owned\\u0007", "holds control characters"),
    (b"x" * 20000 + b"\\n", "xxxx...' holds control characters"),
], ids=["duplicate", "duplicate-escaped", "invalid-utf8", "overlong-utf8", "escaped-nul",
        "raw-newline", "escaped-newline", "terminal-escape", "20000-bytes"])
def test_tensor_names(ckpt, tmp_path, build, name, needle):
    _rewrite_name(ckpt, name)
    line = expect_refusal(ckpt, tmp_path, build, str(ckpt / ST), needle)
    assert len(line) < 1200, "a name made the message unbounded"


def test_offsets_overlap_everywhere(ckpt, tmp_path, build):
    """Every tensor pointed at the same bytes."""
    header, data = read_safetensors(ckpt / ST)
    for name, entry in header.items():
        if name != "__metadata__" and entry["shape"] == [32, 64]:
            entry["data_offsets"] = [0, 8192]
    write_header_text(ckpt / ST, header_text(header), data)
    expect_refusal(ckpt, tmp_path, build, "overlap")


# ---------------------------------------------------------------------------------------------
# config.json


@pytest.mark.parametrize("changes,culprit", [
    ({"num_hidden_layers": 0}, "num_hidden_layers"),
    ({"num_hidden_layers": 1000000000}, "num_hidden_layers"),
    ({"num_hidden_layers": 1024}, "model.layers.2"),           # the cap: refused by the weights
    ({"head_dim": 0}, "head_dim"),
    ({"head_dim": 15}, "head_dim 15 must be even"),
    ({"vocab_size": 0}, "vocab_size"),
    ({"vocab_size": 16777216, "hidden_size": 1048576, "intermediate_size": 16777216},
     "model.embed_tokens.weight"),                             # claims ~2^44 weights: shape check
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_key_value_heads": 0}, "num_key_value_heads"),
    ({"num_key_value_heads": 3}, "must divide num_attention_heads"),
    ({"num_attention_heads": 3, "num_key_value_heads": 1, "head_dim": None},
     "not a multiple of num_attention_heads"),
    ({"max_position_embeddings": 1 << 60}, "max_position_embeddings"),
    ({"rms_norm_eps": 1e999}, "rms_norm_eps"),
    ({"hidden_act": "\u001b[2Jsilu"}, ("hidden_act", "\\x1b[2Jsilu")),
    ({"architectures": ["Llama\nForCausalLM"]}, "Llama\\x0aForCausalLM"),
    ({"rope_parameters": {"rope_type": "yarn\r"}}, "yarn\\x0d"),
], ids=["layers-0", "layers-1e9", "layers-1024", "head_dim-0", "head_dim-odd", "vocab-0",
        "huge-sizes", "heads-0", "kv-heads-0", "kv-not-dividing", "heads-not-dividing-hidden",
        "positions-2^60", "eps-inf", "act-escape", "arch-newline", "rope-cr"])
def test_absurd_config(ckpt, tmp_path, build, changes, culprit):
    cfg = json.loads((ckpt / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    text = json.dumps(cfg).replace("Infinity", "1e999")
    (ckpt / "config.json").write_text(text)
    expect_refusal(ckpt, tmp_path, build, culprit)


def test_config_nested_deep(ckpt, tmp_path, build):
    (ckpt / "config.json").write_text('{"x": ' + "[" * 200000 + "]" * 200000 + "}")
    expect_refusal(ckpt, tmp_path, build, "config.json", "nesting deeper than 128 levels")


# ---------------------------------------------------------------------------------------------
# Sharded index files


@pytest.fixture
def sharded(ckpt, tmp_path):
    """The fixture split into two shards with an index."""
    header, data = read_safetensors(ckpt / ST)
    meta = header.pop("__metadata__", None)
    names = sorted(header)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(halves, 1):
        shard, blob, off = f"model-0000{i}-of-00002.safetensors", [], 0
        h = {"__metadata__": meta} if meta else {}
        for name in part:
            b, e = header[name]["data_offsets"]
            h[name] = dict(header[name], data_offsets=[off, off + e - b])
            blob.append(data[b:e])
            off += e - b
            weight_map[name] = shard
        write_header_text(ckpt / shard, header_text(h), b"".join(blob))
    (ckpt / ST).unlink()
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    return ckpt, weight_map


def test_sharded_control(sharded, tmp_path, build):
    ckpt, _ = sharded
    rc, _, stderr = run_limited(build, "export", ckpt, tmp_path / "out", "--dynamic", "-q")
    assert rc == 0, stderr


@pytest.mark.parametrize("shard", ["../ckpt-elsewhere.safetensors", "/etc/passwd",
                                   "sub/model.safetensors", "..", "", "model\n.safetensors"],
                         ids=["dotdot", "absolute", "subdir", "parent", "empty", "newline"])
def test_index_names_shard_outside(sharded, tmp_path, build, shard):
    ckpt, weight_map = sharded
    outside = tmp_path / "ckpt-elsewhere.safetensors"
    shutil.copy(ckpt / weight_map[VICTIM], outside)   # a real shard, should it be opened
    weight_map[VICTIM] = shard
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    expect_refusal(ckpt, tmp_path, build, "model.safetensors.index.json", VICTIM,
                   "not a plain file name inside the checkpoint directory")


def test_index_nested_deep(sharded, tmp_path, build):
    ckpt, _ = sharded
    (ckpt / "model.safetensors.index.json").write_text(
        '{"metadata": ' + "[" * 200000 + "]" * 200000 + "}")
    expect_refusal(ckpt, tmp_path, build, "model.safetensors.index.json",
                   "nesting deeper than 32 levels")


# ---------------------------------------------------------------------------------------------
# Recipes (--config)


@pytest.mark.parametrize("recipe,needle", [
    ('{"x": ' + "[" * 200000 + "]" * 200000 + "}", "nesting deeper than 32 levels"),
    ('{"\\u001b[2Jdynamic": true}', "unknown key '\\x1b[2Jdynamic'"),
    ('{"dynamic_shapes": {"input_ids": {"1": "se\\nquence"}}}', "bad symbol name 'se\\x0aquence'"),
    ('{"opset": 1e999}', "'opset' must be an integer"),
    ('{"generation_config": {"max_cache_len": 1e300}}', "max_cache_len"),
], ids=["nested-deep", "key-escape", "symbol-newline", "opset-inf", "cache-1e300"])
def test_hostile_recipe(tmp_path, build, recipe, needle):
    path = tmp_path / "recipe.json"
    path.write_text(recipe)
    expect_refusal(FIXTURE, tmp_path, build, "recipe.json", needle, extra=("--config", path))


def test_example_shape_overflow(tmp_path, build):
    path = tmp_path / "recipe.json"
    path.write_text('{"example_shapes": {"input_ids": [4503599627370495, 4503599627370495]}}')
    expect_refusal(FIXTURE, tmp_path, build, "example", extra=("--config", path))


# ---------------------------------------------------------------------------------------------
# export.json (ferry inspect): paths confined to the export directory


@pytest.fixture
def export_copy(exported, tmp_path):
    (tmp_path / "secret.data").write_bytes(b"secret")
    return Path(shutil.copytree(exported, tmp_path / "exp"))


def _edit_manifest(copy, edit):
    m = json.loads((copy / "export.json").read_text())
    edit(m["components"]["model"])
    (copy / "export.json").write_text(json.dumps(m))


@pytest.mark.parametrize("kind", ["absolute", "dotdot", "nested-dotdot", "link-out",
                                  "link-absolute", "link-parent-dir", "fifo", "directory"])
def test_manifest_paths(export_copy, tmp_path, build, kind):
    copy = export_copy
    if kind == "absolute":
        value = str(tmp_path / "secret.data")
    elif kind == "dotdot":
        value = "../secret.data"
    elif kind == "nested-dotdot":
        value = "a/../../secret.data"
    elif kind == "link-out":
        os.symlink("../secret.data", copy / "weights.data")
        value = "weights.data"
    elif kind == "link-absolute":
        os.symlink(str(tmp_path / "secret.data"), copy / "weights.data")
        value = "weights.data"
    elif kind == "link-parent-dir":
        os.symlink("..", copy / "up")
        value = "up/secret.data"
    elif kind == "fifo":
        os.mkfifo(copy / "weights.data")
        value = "weights.data"
    else:
        (copy / "weights.data").mkdir()
        value = "weights.data"
    _edit_manifest(copy, lambda c: c.__setitem__("data_files", [value]))
    rc, _, stderr = run_limited(build, "inspect", copy)
    one_line(rc, stderr, "export.json", value)


def test_manifest_repeated_key(export_copy, build):
    """A second "components": cJSON would validate the first, Python's json use the second."""
    text = (export_copy / "export.json").read_text().rstrip()
    assert text.endswith("}")
    evil = ', "components": {"model": {"file": "../secret.data", "role": "model"}}}'
    (export_copy / "export.json").write_text(text[:-1] + evil)
    rc, _, stderr = run_limited(build, "inspect", export_copy, "--json")
    one_line(rc, stderr, "export.json", "key 'components' appears more than once")


def test_manifest_component_name_escape(export_copy, build):
    m = json.loads((export_copy / "export.json").read_text())
    m["components"] = {"\u001b[2J": m["components"]["model"]}
    (export_copy / "export.json").write_text(json.dumps(m))
    rc, _, stderr = run_limited(build, "inspect", export_copy)
    one_line(rc, stderr, "export.json", "\\x1b[2J")


def test_manifest_metadata_escape(export_copy, build):
    """`ferry inspect` prints input names from the metadata: an escape sequence there is refused
    rather than sent to the terminal."""
    m = json.loads((export_copy / "export.json").read_text())
    m["components"]["model"]["metadata"]["inputs"][0]["name"] = "\u001b[2Jinput_ids"
    (export_copy / "export.json").write_text(json.dumps(m))
    rc, stdout, stderr = run_limited(build, "inspect", export_copy)
    one_line(rc, stderr, "export.json", "'\\x1b[2Jinput_ids' holds a control, format or "
             "invalid character at byte 0")
    assert "\x1b" not in stdout


def test_manifest_nested_deep(export_copy, build):
    (export_copy / "export.json").write_text('{"x": ' + "[" * 200000 + "]" * 200000 + "}")
    rc, _, stderr = run_limited(build, "inspect", export_copy)
    one_line(rc, stderr, "export.json", "nesting deeper than 32 levels")


# ---------------------------------------------------------------------------------------------
# The export path itself under ASan/UBSan
#
# The oracle tests (test_oracle_onnx.py) compare the release build's exports with transformers.
# Here the sanitizer build makes the same exports - every family, each precision and generation
# mode, a sharded checkpoint - and must exit 0 with no report (a leak or error exits 86) and
# write exactly the release build's bytes, so the oracle's verdict carries over to it.

needs_san = pytest.mark.skipif(ASAN_BIN is None, reason="needs the sanitizer build "
                               "(FERRY_BUILD_SAN, set by make test-python)")

SAN_EXPORTS = {
    "dynamic": ["--dynamic"],
    "bf16-dim": ["--dtype", "bf16", "--dim", "input_ids:1=sequence:1:64"],
    "fp16-static": ["--dtype", "fp16", "--example-shape", "input_ids=2x5"],
    "gen-dynamic": ["--for-generation", "--dynamic", "--multi-token-decode"],
    "gen-static": ["--for-generation", "--static-cache", "--max-cache-len", "32"],
}


def _tree_bytes(root):
    root = Path(root)
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@needs_san
@pytest.mark.parametrize("mode", list(SAN_EXPORTS))
@pytest.mark.parametrize("arch", [*ARCHS, "llama-sharded"])
def test_sanitized_export_matches_release(tmp_path_factory, tmp_path, arch, mode):
    from conftest import make_checkpoint

    family = arch.split("-")[0]
    key = f"san-{arch}"
    root = tmp_path_factory.getbasetemp() / key
    ckpt = root / "ckpt"
    if not ckpt.exists():   # one checkpoint per family and worker, shared by the modes
        extra = {"max_shard_size": "40KB"} if arch.endswith("sharded") else {}
        if family == "qwen3":
            extra["tie_word_embeddings"] = True
        make_checkpoint(root / "building", family, seed=7, **extra)
        (root / "building").rename(ckpt)
    flags = SAN_EXPORTS[mode]
    release = tmp_path / "release"
    san = tmp_path / "asan"
    proc = subprocess.run([str(FERRY_BIN), "export", str(ckpt), str(release), "-q", *flags],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rc, _, stderr = run_limited(ASAN_BIN, "export", ckpt, san, "-q", *flags)
    assert rc == 0 and stderr == "", f"exit {rc}: {stderr[-3000:]}"
    assert _tree_bytes(san) == _tree_bytes(release), "the sanitizer build wrote other bytes"
    rc, stdout, stderr = run_limited(ASAN_BIN, "inspect", san)
    assert rc == 0 and stderr == "" and "input_ids" in stdout, stderr[-3000:]
