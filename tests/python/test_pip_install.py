"""`pip install .` (issue 13): a fresh venv gets a self-contained ferry package, libferry and
the C command inside it, the `ferry` command on the venv's PATH, and none of this tree's
./build. Everything runs outside the repository with FERRY_LIB unset, so only what pip
installed can answer. `pip wheel .` makes a wheel holding the same files.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import FIXTURE, ROOT


def _run(cmd, cwd, env, timeout=900):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=timeout)
    assert proc.returncode == 0, (f"{' '.join(map(str, cmd))} -> exit {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-4000:]}")
    return proc


def _clean_env():
    """This process's environment without what points at the source tree's ferry."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("FERRY_LIB", "FERRY_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep)
                                  if ".venv" not in p)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A fresh venv with `pip install .[onnx]` of this tree; numpy and onnxruntime at the
    versions requirements-test.txt pins (so pip takes them from its cache)."""
    work = tmp_path_factory.mktemp("pip")
    venv = work / "venv"
    env = _clean_env()
    _run([sys.executable, "-m", "venv", venv], work, env)
    _run([venv / "bin" / "pip", "install", "--quiet", "-c", ROOT / "requirements-test.txt",
          f"{ROOT}[onnx]"], work, env)
    return venv


def test_import_finds_the_library_inside_the_package(venv, tmp_path):
    out = _run([venv / "bin" / "python", "-c",
                "import ferry, ferry._lib as l; print(ferry.__file__); "
                "print(l._find_library()); print(ferry.version())"],
               tmp_path, _clean_env()).stdout.split()
    package = Path(out[0]).parent
    assert package.is_relative_to(venv), out
    assert Path(out[1]) == package / "lib" / "libferry.so", out
    assert out[2] == (ROOT / "CMakeLists.txt").read_text().split("project(ferry VERSION ")[1] \
        .split()[0], out


def test_ferry_command_on_path_exports(venv, tmp_path):
    env = _clean_env()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    out = tmp_path / "onnx"
    proc = _run(["ferry", "export", FIXTURE, out, "--format", "onnx", "--dynamic"], tmp_path, env)
    assert "exported" in proc.stderr
    assert {"model.onnx", "model.onnx.data", "export.json"} <= {p.name for p in out.iterdir()}
    # A usage error reaches the caller with the C command's own exit status and name.
    bad = subprocess.run(["ferry", "export"], capture_output=True, text=True, cwd=tmp_path,
                         env=env)
    assert bad.returncode == 2 and bad.stderr.startswith("ferry: "), bad.stderr


def test_installed_package_exports_and_runs(venv, tmp_path):
    """The guide's snippet through the installed package: export, save, load, call."""
    script = f"""
import numpy as np
from ferry import ExportedModel, OnnxConfig, OnnxExporter
exported = OnnxExporter().export({str(FIXTURE)!r}, config=OnnxConfig(dynamic=True))
exported.save_pretrained("saved")
out = ExportedModel.from_pretrained("saved")(input_ids=np.array([[1, 2, 3]]))
# No transformers in this venv: the outputs read like its ModelOutput, by name or attribute.
assert type(out).__name__ == "ExportOutput" and out["logits"] is out.logits, type(out)
logits = out.logits
assert logits.shape[:2] == (1, 3) and np.isfinite(logits).all(), logits.shape
print("ok")
"""
    assert _run([venv / "bin" / "python", "-c", script], tmp_path,
                _clean_env()).stdout.strip() == "ok"


def test_pip_wheel_holds_library_and_command(tmp_path):
    env = _clean_env()
    _run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path / "w",
          ROOT], tmp_path, env)
    (wheel,) = (tmp_path / "w").glob("ferry-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"ferry/__init__.py", "ferry/lib/libferry.so", "ferry/bin/ferry"} <= names, names
    assert any(n.startswith("ferry/lib/libcjson.so") for n in names), names
    assert any(n.startswith("ferry/lib/libdeflate.so") for n in names), names
    assert any(n.endswith("entry_points.txt") for n in names), names


def _pins(path):
    """{name: version} of the `name==version` lines of a requirements file."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_extras_pin_the_tested_versions():
    """An extra's pinned package is at the version the tests run (requirements-test.txt, or
    requirements-nodeps.txt for executorch), and `validate` brings what the eager reference and a
    .pt2 need."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    tested = _pins(ROOT / "requirements-test.txt") | _pins(ROOT / "requirements-nodeps.txt")
    for extra, requirements in extras.items():
        for requirement in requirements:
            if "==" in requirement:
                name, version = requirement.split("==")
                assert tested.get(name.lower()) == version, (extra, requirement)
    names = {extra: {r.split("==")[0] for r in reqs} for extra, reqs in extras.items()}
    assert {"torch", "transformers"} <= names["validate"], names
    assert "torch" in names["torch"] and "executorch" in names["executorch"], names
    assert {"openvino", "openvino-tokenizers", "openvino-genai"} <= names["openvino"], names
