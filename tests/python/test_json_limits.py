"""What parsing a JSON file may cost. cJSON builds ~80 bytes per value, so byte caps alone let a
file of tiny values grow ~40x in memory (a 98 MB safetensors header took 4 GB; two 62 MB config
files 5 GB) and an allocation failure then read as "invalid JSON near byte N". Now every kind of
JSON file ferry reads has caps on bytes, values and nesting (src/util/json.h), checked in one
linear pass before the parser allocates, and refused with one line that says "limit".

Measured, not assumed: the binaries run under RLIMIT_AS = 512 MiB, where the unbounded parse of
any of these files fails. The ASan build is not run here: it reserves terabytes of shadow address
space, so an address-space limit cannot apply to it (its per-allocation limit, used by
test_hostile_inputs.py, would stop the 98 MB header copy that precedes the parse); the limits are
checked under it by the C tests (test_json.c, which ctest runs under both sanitizer builds) and
by the nesting cases of test_hostile_inputs.py."""

import json
import os
import resource
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, SANITIZER_ENV, UBSAN_BIN, read_safetensors

from conftest import FIXTURE  # noqa: E402
ST = "model.safetensors"
AS_LIMIT = 512 << 20
QUICK_S = 30          # a linear scan of 100 MB; generous for a shared two-core machine

BUILDS = [("release", FERRY_BIN)] + ([("clang-ubsan", UBSAN_BIN)] if UBSAN_BIN else [])


@pytest.fixture(params=[b[1] for b in BUILDS], ids=[b[0] for b in BUILDS])
def build(request):
    """conftest's builds less ASan's: RLIMIT_AS cannot bound a process with ASan's shadow
    memory, so the limits here are checked on the release and clang UBSan builds."""
    return request.param


@pytest.fixture
def ckpt(tmp_path):
    return Path(shutil.copytree(FIXTURE, tmp_path / "ckpt"))


def run_as(binary, *args, limit=AS_LIMIT):
    """Runs ferry under RLIMIT_AS = `limit`; returns (rc, stdout, stderr, seconds)."""
    env = dict(os.environ) if Path(binary) == FERRY_BIN else dict(SANITIZER_ENV)

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    start = time.monotonic()
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env, preexec_fn=cap)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - start


def refused_at_limit(result, *needles):
    rc, _, stderr, seconds = result
    assert rc == 1, f"exit {rc}, expected 1; stderr: {stderr[-2000:]!r}"
    lines = stderr.strip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr[-2000:]
    line = lines[0]
    assert "limit" in line and "out of memory" not in line, line
    for needle in needles:
        assert needle in line, f"{needle!r} not in: {line}"
    assert seconds < QUICK_S, f"took {seconds:.1f} s: {line}"
    return line


def tiny_values(n):
    """n zeros in a JSON array: 2 bytes of text per value, the worst growth in cJSON."""
    return b"[" + b"0," * (n - 1) + b"0]"


def config_with(extra_key, payload):
    cfg = json.loads((FIXTURE / "config.json").read_text())
    text = json.dumps(cfg).encode()
    return text[:-1] + b', "' + extra_key.encode() + b'": ' + payload + b"}"


def export(model, tmp_path, build, *extra):
    parent = tmp_path / "outs"
    parent.mkdir()
    result = run_as(build, "export", model, parent / "out", "-q", *extra)
    assert os.listdir(parent) == [], f"left behind: {os.listdir(parent)}"
    return result


# ---------------------------------------------------------------------------------------------
# config.json and generation_config.json (16 MB, 1e6 values, 128 levels)


def test_config_60mb_of_tiny_values(ckpt, tmp_path, build):
    """The issue's case: ~60 MB of tiny values, under the old 64 MB cap, took GBs to parse."""
    (ckpt / "config.json").write_bytes(config_with("x", tiny_values(30_000_000)))
    assert (ckpt / "config.json").stat().st_size > 60e6
    refused_at_limit(export(ckpt, tmp_path, build), "config.json",
                     "exceed the limit of 16777216")


def test_config_values_under_the_byte_cap(ckpt, tmp_path, build):
    """15 MB, under the byte cap, but 7.5 million values."""
    (ckpt / "config.json").write_bytes(config_with("x", tiny_values(7_500_000)))
    refused_at_limit(export(ckpt, tmp_path, build), "config.json",
                     "JSON values exceed the limit of 1000000 for a config file")


def test_generation_config_values(ckpt, tmp_path, build):
    (ckpt / "generation_config.json").write_bytes(b'{"suppress_tokens": ' +
                                                  tiny_values(7_500_000) + b"}")
    refused_at_limit(export(ckpt, tmp_path, build), "generation_config.json",
                     "7500002 JSON values exceed the limit of 1000000 for a config file")


def test_config_deep(ckpt, tmp_path, build):
    (ckpt / "config.json").write_bytes(config_with("x", b"[" * 500_000 + b"]" * 500_000))
    refused_at_limit(export(ckpt, tmp_path, build), "config.json",
                     "nesting deeper than 128 levels")


def test_config_at_the_value_cap_exports(ckpt, tmp_path, build):
    """The cap leaves room: 999,900 values under a key ferry does not read export under the
    same 512 MiB (the parse needs ~80 MB of it)."""
    (ckpt / "config.json").write_bytes(config_with("x", tiny_values(999_900)))
    rc, _, stderr, _ = run_as(build, "export", ckpt, tmp_path / "out", "-q")
    assert rc == 0, stderr[-2000:]


def test_allocation_failure_is_out_of_memory(ckpt, tmp_path, build):
    """A parse within the caps that still does not fit the memory given is reported as out of
    memory, naming the file, not as "invalid JSON" (what cJSON's failure used to read as):
    999,900 empty strings need ~110 MB, the process gets 64 MiB."""
    payload = b"[" + b'"",' * 999_899 + b'""]'
    (ckpt / "config.json").write_bytes(config_with("x", payload))
    rc, _, stderr, _ = run_as(build, "export", ckpt, tmp_path / "out", "-q", limit=64 << 20)
    assert rc == 1, stderr[-2000:]
    line = stderr.strip()
    assert "config.json: out of memory parsing" in line and "invalid JSON" not in line, line
    assert "\n" not in line


# ---------------------------------------------------------------------------------------------
# safetensors header (100 MB, 5e6 values, 32 levels) and index (64 MB, 2e6 values)


def write_header(path, header_text, data):
    header_text += b" " * (-len(header_text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(header_text)) + header_text + data)


def test_header_98mb_of_tiny_entries(ckpt, tmp_path, build):
    """The issue's case: a 98 MB header (under the 100 MB cap) of tiny entries took 4 GB."""
    header, data = read_safetensors(ckpt / ST)
    text = json.dumps(header).encode()[:-1] + b', "junk": ' + tiny_values(49_000_000) + b"}"
    write_header(ckpt / ST, text, data)
    assert (ckpt / ST).stat().st_size > 98e6
    refused_at_limit(export(ckpt, tmp_path, build), str(ckpt / ST),
                     "JSON values exceed the limit of 5000000 for a safetensors header")


def test_header_deep(ckpt, tmp_path, build):
    header, data = read_safetensors(ckpt / ST)
    deep = b"[" * 1_000_000 + b"]" * 1_000_000
    text = json.dumps(header).encode()[:-1] + b', "junk": ' + deep + b"}"
    write_header(ckpt / ST, text, data)
    refused_at_limit(export(ckpt, tmp_path, build), str(ckpt / ST),
                     "nesting deeper than 32 levels")


@pytest.fixture
def sharded(ckpt):
    """The fixture's one file as the single shard an index names."""
    shard = "model-00001-of-00001.safetensors"
    (ckpt / ST).rename(ckpt / shard)
    header, _ = read_safetensors(ckpt / shard)
    weight_map = {name: shard for name in header if name != "__metadata__"}
    return ckpt, weight_map


def test_index_60mb_of_tiny_values(sharded, tmp_path, build):
    ckpt, weight_map = sharded
    text = (b'{"weight_map": ' + json.dumps(weight_map).encode() + b', "metadata": ' +
            tiny_values(30_000_000) + b"}")
    (ckpt / "model.safetensors.index.json").write_bytes(text)
    refused_at_limit(export(ckpt, tmp_path, build), "model.safetensors.index.json",
                     "JSON values exceed the limit of 2000000 for a safetensors index")


# ---------------------------------------------------------------------------------------------
# export.json (16 MB, 1e6 values) and recipes (1 MiB, 1e4 values)


def test_manifest_values(exported, tmp_path, build):
    copy = Path(shutil.copytree(exported, tmp_path / "exp"))
    text = (copy / "export.json").read_bytes().rstrip()
    (copy / "export.json").write_bytes(text[:-1] + b', "x": ' + tiny_values(7_000_000) + b"}")
    refused_at_limit(run_as(build, "inspect", copy), "export.json",
                     "JSON values exceed the limit of 1000000 for a manifest")


def test_manifest_deep(exported, tmp_path, build):
    copy = Path(shutil.copytree(exported, tmp_path / "exp"))
    text = (copy / "export.json").read_bytes().rstrip()
    deep = b"[" * 10**6 + b"]" * 10**6
    (copy / "export.json").write_bytes(text[:-1] + b', "x": ' + deep + b"}")
    refused_at_limit(run_as(build, "inspect", copy), "export.json",
                     "nesting deeper than 32 levels")


@pytest.mark.parametrize("payload,needle", [
    (b'{"dynamic": true, "x": ' + tiny_values(7_000_000) + b"}",
     "exceed the limit of 1048576 for a recipe"),
    (b'{"dynamic": true, "x": ' + tiny_values(400_000) + b"}",
     "400003 JSON values exceed the limit of 10000 for a recipe"),
    (b'{"x": ' + b"[" * 400_000 + b"]" * 400_000 + b"}", "nesting deeper than 32 levels"),
], ids=["14mb", "400k-values", "deep"])
def test_recipe(tmp_path, build, payload, needle):
    recipe = tmp_path / "recipe.json"
    recipe.write_bytes(payload)
    refused_at_limit(export(FIXTURE, tmp_path, build, "--config", recipe), "recipe.json", needle)
