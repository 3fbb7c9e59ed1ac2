"""Interrupting an export: Ctrl-C (SIGINT), SIGTERM or SIGHUP stops `ferry export` within a band
of weights, removes everything it wrote and leaves an existing export byte for byte as it was;
ferry then dies of the signal, so that a shell sees exit status 128 + N and a script's loop
stops. A second signal stops it at once (what that leaves, the next export removes), and a
signal ignored when ferry starts (nohup's SIGHUP) stays ignored. Python's save_pretrained does
the same on KeyboardInterrupt.

Before this, a SIGTERM half-way through exporting the bench checkpoint left 545 MB in
`.OUT.ferry-tmp-*` until the next export to OUT.

The CLI is held still at its first progress line (stall.py), before any band of weights is
written, while the signal arrives; the Python process is stopped with SIGSTOP once its weights
file has appeared, so neither depends on timing."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import FERRY_BIN, FIXTURE, ROOT, SANITIZER_ENV, ferry_export
from stall import StalledExport
from test_crash_safety import make_big_checkpoint

STOP_SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def default_dispositions(ignore=()):
    """A preexec_fn: the stop signals handled by default in the child (a test runner may have
    inherited SIGINT ignored, as a background job does), except those in `ignore`."""
    def preexec():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN if sig in ignore else signal.SIG_DFL)
    return preexec


def digest(root):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.iterdir())}


def stalled(binary, out, *args, ignore=()):
    """`ferry export FIXTURE out` held at its first progress line, its temporary directory
    made and no weight written yet."""
    env = SANITIZER_ENV if binary != FERRY_BIN else None
    run = StalledExport([binary, "export", FIXTURE, out, "--dynamic", *args], env=env,
                        preexec_fn=default_dispositions(ignore))
    try:
        run.wait_until(lambda: list(out.parent.glob(f".{out.name}.ferry-tmp-*/export")),
                       "the temporary directory")
    except BaseException:
        run.kill()
        raise
    return run


@pytest.mark.parametrize("sig", STOP_SIGNALS, ids=lambda s: s.name)
def test_signal_stops_and_removes_everything(tmp_path, build, sig):
    out = tmp_path / "out"
    run = stalled(build, out)
    run.proc.send_signal(sig)
    rc, text = run.release()
    assert rc == -sig, text[-600:]
    lines = [line for line in text.splitlines() if line.startswith("ferry:")]
    assert lines == [f"ferry: error: export to {out} interrupted: nothing was written"], text
    assert os.listdir(tmp_path) == [], "something was left behind"


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_existing_export_untouched(tmp_path, build, fmt):
    out = ferry_export(FIXTURE, tmp_path / "out", "--dynamic", "--format", fmt, "-q")
    before = digest(out)
    run = stalled(build, out, "--format", fmt, "--force")
    run.proc.send_signal(signal.SIGINT)
    rc, text = run.release()
    assert rc == -signal.SIGINT, text[-600:]
    assert ("interrupted: nothing was written; the export already there is untouched"
            in text), text[-600:]
    assert digest(out) == before
    assert os.listdir(tmp_path) == ["out"], "temporary directory left behind"


def test_second_signal_stops_at_once(tmp_path):
    """Still held at its progress line, ferry cannot reach its next band: the second signal
    ends it there. Its temporary directory stays until the next export to the same place.
    (Two different signals: two pending SIGINTs would be delivered as one.)"""
    out = tmp_path / "out"
    run = stalled(FERRY_BIN, out)
    run.proc.send_signal(signal.SIGINT)
    run.proc.send_signal(signal.SIGTERM)
    try:
        rc = run.proc.wait(timeout=30)
    finally:
        run.kill()
    assert rc in (-signal.SIGINT, -signal.SIGTERM)
    assert len([n for n in os.listdir(tmp_path) if ".ferry-tmp-" in n]) == 1
    ferry_export(FIXTURE, out, "--dynamic", "-q")
    assert os.listdir(tmp_path) == ["out"]


def test_ignored_signal_stays_ignored(tmp_path):
    """Under nohup SIGHUP is ignored: the export goes on to the end."""
    out = tmp_path / "out"
    run = stalled(FERRY_BIN, out, ignore=(signal.SIGHUP,))
    run.proc.send_signal(signal.SIGHUP)
    rc, text = run.release()
    assert rc == 0, text[-600:]
    assert "exported" in text
    assert (out / "model.onnx.data").stat().st_size > 0
    assert os.listdir(tmp_path) == ["out"]


# ---------------------------------------------------------------------------------------------
# Python: KeyboardInterrupt in save_pretrained

SAVE_SCRIPT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {python!r})
    import ferry
    exported = ferry.OnnxExporter().export({ckpt!r}, config=ferry.OnnxConfig(dynamic=True))
    print("ready", flush=True)
    try:
        exported.save_pretrained({out!r})
        print("saved", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt", sorted(os.listdir({parent!r})), flush=True)
    exported.save_pretrained({out!r})   # the same export, saved whole this time
    print("then saved", sorted(os.listdir({out!r})), flush=True)
""")


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    # ~155 MB of bf16 weights, 310 MB as fp32: long enough to be caught half-way
    return make_big_checkpoint(tmp_path_factory.mktemp("interrupt") / "ckpt", seed=7,
                               vocab=16000, hidden=1024, inter=2816, layers=4, heads=16, kv=8,
                               head_dim=64)


def test_keyboard_interrupt_in_save_pretrained(tmp_path, big):
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "out"
    script = SAVE_SCRIPT.format(python=str(ROOT / "python"), ckpt=str(big), out=str(out),
                                parent=str(parent))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            preexec_fn=default_dispositions())
    try:
        assert proc.stdout.readline().strip() == "ready"
        # Stopped as soon as the weights file exists: the save is then under way, far from done.
        deadline = time.monotonic() + 120
        while True:
            found = list(parent.glob(".out.ferry-tmp-*/export/model.onnx.data"))
            if found:
                proc.send_signal(signal.SIGSTOP)
                break
            assert proc.poll() is None, "the save ended before it could be interrupted"
            assert time.monotonic() < deadline, "no weights file appeared"
            time.sleep(0.001)
        written = found[0].stat().st_size
        proc.send_signal(signal.SIGINT)
        proc.send_signal(signal.SIGCONT)
        output, _ = proc.communicate(timeout=300)
    finally:
        proc.kill()
    lines = output.splitlines()
    assert lines[0] == "KeyboardInterrupt []", (written, output)
    assert lines[1].startswith("then saved ['config.json', 'export.json'"), output
    assert os.listdir(parent) == ["out"]
