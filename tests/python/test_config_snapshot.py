"""config.json and generation_config.json are saved as they were read (and checked) when the
model was opened, not copied again at save time: between export() and save_pretrained() the
files may have become a link to /dev/zero (the copy filled the disk), a FIFO (the copy hung on
open) or another config (the export was saved with a config it was not made from).

Each case runs in a child process under RLIMIT_FSIZE = 32 MB (SIGXFSZ ignored, so a runaway
write fails with EFBIG instead of filling the disk) and a timeout, so that the unfixed code
fails the test instead of taking the machine down."""

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import FIXTURE, ROOT

CHILD = textwrap.dedent("""
    import json, os, resource, signal, sys
    sys.path.insert(0, {python!r})
    resource.setrlimit(resource.RLIMIT_FSIZE, (32 << 20, 32 << 20))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    from ferry import FerryError, OnnxConfig, OnnxExporter
    model, out, swap = sys.argv[1:4]
    if {generation!r}:
        exported = OnnxExporter().export_for_generation(model, config=OnnxConfig(dynamic=True))
    else:
        exported = OnnxExporter().export(model)
    exec(swap)
    try:
        exported.save_pretrained(out)
    except FerryError as e:
        print("FerryError:", e)
        sys.exit(3)
""")

SWAPS = {
    "generation-config-to-dev-zero":
        "os.remove(model + '/generation_config.json');"
        "os.symlink('/dev/zero', model + '/generation_config.json')",
    "config-to-dev-zero":
        "os.remove(model + '/config.json'); os.symlink('/dev/zero', model + '/config.json')",
    "config-to-fifo": "os.remove(model + '/config.json'); os.mkfifo(model + '/config.json')",
    "generation-config-to-fifo":
        "os.remove(model + '/generation_config.json');"
        "os.mkfifo(model + '/generation_config.json')",
    "config-rewritten":
        "open(model + '/config.json', 'w').write(json.dumps({'architectures': ['Other']}))",
    "generation-config-rewritten":
        "open(model + '/generation_config.json', 'w').write(json.dumps({'other': 1}))",
    "generation-config-removed": "os.remove(model + '/generation_config.json')",
}


def run_child(tmp_path, case, swap=None, generation=False, drop_generation_config=False):
    """Exports a copy of the fixture in a child, runs `swap` (default SWAPS[case]), saves."""
    model = Path(shutil.copytree(FIXTURE, tmp_path / "model"))
    if drop_generation_config:
        (model / "generation_config.json").unlink()
    opened = {name: (model / name).read_bytes() for name in
              ("config.json", "generation_config.json") if (model / name).exists()}
    out = tmp_path / "out"
    code = CHILD.format(python=str(ROOT / "python"), generation=generation)
    started = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", code, str(model), str(out),
                               swap or SWAPS[case]],
                              capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, OMP_NUM_THREADS="1"))
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: save_pretrained hung (a FIFO opened at save time?)")
    took = time.monotonic() - started
    assert proc.returncode == 0, f"{case}: exit {proc.returncode}\n{proc.stdout}{proc.stderr}"
    assert took < 30, f"{case}: {took:.0f} s"
    return opened, out


@pytest.mark.parametrize("case", list(SWAPS))
def test_saved_as_opened(tmp_path, case):
    opened, out = run_child(tmp_path, case)
    assert (out / "config.json").read_bytes() == opened["config.json"]
    assert (out / "generation_config.json").read_bytes() == opened["generation_config.json"]
    assert sorted(os.listdir(tmp_path)) == ["model", "out"]


def test_absent_generation_config_stays_absent(tmp_path):
    """No generation_config.json when the model was opened: none is saved, even if one (here a
    link to /dev/zero) appears before the save."""
    model = tmp_path / "model"
    opened, out = run_child(tmp_path, "appears",
                            "os.symlink('/dev/zero', model + '/generation_config.json')",
                            drop_generation_config=True)
    assert (out / "config.json").read_bytes() == opened["config.json"]
    assert not (out / "generation_config.json").exists()
    assert model.exists()


@pytest.mark.parametrize("case", ["generation-config-to-dev-zero", "config-to-fifo"])
def test_generation_export_saved_as_opened(tmp_path, case):
    """A generation export rebuilds generation_config.json from the JSON parsed at open; its
    config.json is the bytes read then."""
    opened, out = run_child(tmp_path, case, generation=True)
    assert (out / "config.json").read_bytes() == opened["config.json"]
    saved = json.loads((out / "generation_config.json").read_text())
    original = json.loads(opened["generation_config.json"])
    assert {k: v for k, v in saved.items() if k != "cache_implementation"} == \
        {k: v for k, v in original.items() if k != "cache_implementation"}
