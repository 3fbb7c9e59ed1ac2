"""`cmake --install` of the C library (issue 13): libferry (shared and static), include/ferry.h,
ferry.pc and the CMake package (ferry::ferry, ferry::ferry_static), and the CLI, installed from
the build under test ($FERRY_BUILD) into a temporary prefix, then used the ways a C project
would: tests/install/consumer.c built with pkg-config (shared, and static with --static) and
with find_package(ferry CONFIG) (tests/install/CMakeLists.txt, both targets). Every consumer
exports the shipped tiny Llama and must write what the installed CLI writes, byte for byte.
"""

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import FERRY_BUILD, FIXTURE, ROOT, ferry_header_version

CONSUMER = ROOT / "tests" / "install"
# Strict ISO C: ferry.h must hold up without _GNU_SOURCE or any other help from ferry's build.
C_FLAGS = ["-std=c11", "-pedantic", "-Wall", "-Wextra", "-Werror"]


def _tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} not found (`make deps-test` installs it)")
    return path


def _cmake():
    """The cmake that configured $FERRY_BUILD (its cmake_install.cmake is that cmake's), else
    the one on PATH."""
    cache = FERRY_BUILD / "CMakeCache.txt"
    if cache.exists():
        m = re.search(r"^CMAKE_COMMAND:INTERNAL=(.+)$", cache.read_text(), re.M)
        if m and Path(m.group(1)).exists():
            return m.group(1)
    return _tool("cmake")


def _run(cmd, env=None, cwd=None, timeout=300):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, cmd))} -> exit {proc.returncode}\n"
                    f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """An install of $FERRY_BUILD (once per xdist worker that runs this module)."""
    if not (FERRY_BUILD / "cmake_install.cmake").exists():
        pytest.fail(f"no configured build at {FERRY_BUILD} (make build)")
    prefix = tmp_path_factory.mktemp("install") / "prefix"
    _run([_cmake(), "--install", FERRY_BUILD, "--prefix", prefix])
    return prefix


@pytest.fixture(scope="module")
def libdir(prefix):
    """GNUInstallDirs' libdir as the build was configured (lib/, or lib/<multiarch>/ for /usr)."""
    pcs = list(prefix.rglob("ferry.pc"))
    assert len(pcs) == 1, pcs
    return pcs[0].parent.parent


@pytest.fixture(scope="module")
def reference(prefix, tmp_path_factory):
    """The installed CLI's export of the tiny Llama, which every consumer must reproduce."""
    out = tmp_path_factory.mktemp("reference") / "out"
    _run([prefix / "bin" / "ferry", "export", FIXTURE, out, "--dynamic"])
    return out


def _pkg_config_env(libdir):
    return dict(os.environ, PKG_CONFIG_PATH=str(libdir / "pkgconfig"))


def _needed(binary):
    """The DT_NEEDED entries of an ELF file."""
    out = _run([_tool("readelf"), "-d", binary])
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _resolved_libferry(binary, env=None):
    """Where the dynamic loader finds libferry.so.0 for `binary` (ldd), or None."""
    out = _run([_tool("ldd"), binary], env=env)
    m = re.search(r"libferry\.so\.0 => (\S+)", out)
    return m and Path(m.group(1))


def _check_consumer(binary, tmp_path, reference, env=None):
    """Runs the consumer on the tiny Llama: it must list the one component, "model", and write
    exactly the export the installed CLI wrote."""
    out = tmp_path / f"{Path(binary).name}-out"
    stdout = _run([binary, FIXTURE, out], env=env)
    lines = stdout.splitlines()
    assert lines == [f"version {ferry_header_version()}", "architecture LlamaForCausalLM",
                     "component model model.onnx"], stdout
    manifest = json.loads((out / "export.json").read_text())
    assert list(manifest["components"]) == ["model"]
    files = sorted(p.name for p in out.iterdir())
    assert files == sorted(p.name for p in reference.iterdir())
    assert {"model.onnx", "model.onnx.data", "export.json"} <= set(files)
    for name in files:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_installed_tree(prefix, libdir):
    """Exactly the public pieces: the CLI, both libraries, ferry.h (and no header of src/),
    ferry.pc, the CMake package; nothing installed names the source or build tree."""
    rel = {p.relative_to(prefix).as_posix() for p in prefix.rglob("*") if not p.is_dir()}
    lib = libdir.relative_to(prefix).as_posix()
    want = {"bin/ferry", "include/ferry.h", f"{lib}/libferry.a", f"{lib}/libferry.so",
            f"{lib}/libferry.so.0", f"{lib}/libferry.so.0.1.0", f"{lib}/pkgconfig/ferry.pc",
            f"{lib}/cmake/ferry/ferryConfig.cmake", f"{lib}/cmake/ferry/ferryConfigVersion.cmake",
            f"{lib}/cmake/ferry/ferryTargets.cmake"}
    assert want <= rel, want - rel
    # The rest: ferryTargets-<config>.cmake, one per configuration installed.
    extra = rel - want
    assert all(re.fullmatch(rf"{lib}/cmake/ferry/ferryTargets-\w+\.cmake", p) for p in extra), extra
    assert extra
    assert [p for p in rel if p.endswith(".h")] == ["include/ferry.h"]
    private = {p.name for p in (ROOT / "src").rglob("*.h")}
    assert private and not private & {Path(p).name for p in rel}
    header = (prefix / "include" / "ferry.h").read_bytes()
    assert header == (ROOT / "include" / "ferry.h").read_bytes()
    assert (libdir / "libferry.so").resolve() == libdir / "libferry.so.0.1.0"
    assert "libferry.so.0" in _run([_tool("readelf"), "-d", libdir / "libferry.so.0.1.0"])
    for name in rel:
        path = prefix / name
        if path.suffix in (".pc", ".cmake"):
            text = path.read_text()
            for tree in (str(ROOT), str(FERRY_BUILD)):
                assert tree not in text, (name, tree)
    # The CLI is static over libferry: it runs from the prefix alone.
    assert not any(n.startswith("libferry") for n in _needed(prefix / "bin" / "ferry"))
    version = _run([prefix / "bin" / "ferry", "--version"]).strip()
    assert version == f"ferry {ferry_header_version()}"


def test_header_self_contained(prefix, tmp_path):
    """ferry.h alone, first and only, compiles as strict C11 from the installed prefix."""
    src = tmp_path / "only_header.c"
    src.write_text("#include <ferry.h>\nint main(void) { return ferry_version() == 0; }\n")
    _run([_tool("cc"), *C_FLAGS, "-Wmissing-prototypes", "-Wstrict-prototypes", "-fsyntax-only",
          f"-I{prefix / 'include'}", src])


def test_pkg_config_shared(libdir, reference, tmp_path):
    env = _pkg_config_env(libdir)
    pkg_config = _tool("pkg-config")
    assert _run([pkg_config, "--modversion", "ferry"], env=env).strip() == ferry_header_version()
    assert _run([pkg_config, "--variable=libdir", "ferry"], env=env).strip() == str(libdir)
    flags = _run([pkg_config, "--cflags", "--libs", "ferry"], env=env).split()
    # A shared libferry carries its own dependencies: consumers link libferry alone.
    assert "-lferry" in flags and "-lcjson" not in flags, flags
    binary = tmp_path / "consumer_pc_shared"
    _run([_tool("cc"), *C_FLAGS, CONSUMER / "consumer.c", "-o", binary, *flags])
    assert "libferry.so.0" in _needed(binary)
    run_env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    assert _resolved_libferry(binary, run_env) == libdir / "libferry.so.0"
    _check_consumer(binary, tmp_path, reference, env=run_env)


def test_pkg_config_static(libdir, reference, tmp_path):
    """--static adds what libferry.a needs (cJSON through libcjson.pc, pthreads, libm). Debian
    ships no libcjson.a, so only libferry is linked statically (-l:libferry.a picks the
    archive beside libferry.so); cJSON and libc stay shared."""
    env = _pkg_config_env(libdir)
    flags = _run([_tool("pkg-config"), "--static", "--cflags", "--libs", "ferry"], env=env).split()
    for lib in ("-lferry", "-lcjson", "-lpthread", "-lm"):
        assert lib in flags, (lib, flags)
    flags = ["-l:libferry.a" if f == "-lferry" else f for f in flags]
    binary = tmp_path / "consumer_pc_static"
    _run([_tool("cc"), *C_FLAGS, CONSUMER / "consumer.c", "-o", binary, *flags])
    assert not any(n.startswith("libferry") for n in _needed(binary))
    _check_consumer(binary, tmp_path, reference)


def test_cmake_find_package(prefix, libdir, reference, tmp_path):
    """find_package(ferry CONFIG REQUIRED) with CMAKE_PREFIX_PATH: ferry::ferry runs through the
    RUNPATH CMake gives it (no LD_LIBRARY_PATH), ferry::ferry_static needs no libferry.so."""
    cmake = _cmake()
    build = tmp_path / "build"
    _run([cmake, "-S", CONSUMER, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
          "-DCMAKE_BUILD_TYPE=Release"])
    _run([cmake, "--build", build])
    shared, static = build / "consumer_shared", build / "consumer_static"
    assert "libferry.so.0" in _needed(shared)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    assert _resolved_libferry(shared, env) == libdir / "libferry.so.0"
    assert not any(n.startswith("libferry") for n in _needed(static))
    _check_consumer(shared, tmp_path, reference, env=env)
    _check_consumer(static, tmp_path, reference, env=env)
