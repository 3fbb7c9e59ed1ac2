"""A live export's temporary directory survives a cleaner that cannot see its process.

An export running in another PID namespace (a container) is held in the middle of writing its
weights (stall.py). Its temporary directory carries the pid it has in its namespace, chosen to be
one no process outside has, so a cleaner that judged by `kill(pid, 0)` would call it abandoned.
An export to the same destination made from outside must leave it in place, because its writer
still holds the lock file inside it; once that writer is killed, the next export removes it."""

import fcntl
import os
import random
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, ferry_export
from stall import StalledExport

FIXTURE = ROOT / "fixtures" / "tiny-llama"


def unshare_prefix():
    """An unshare command line that gives a new PID namespace here, or None."""
    for cmd in (["unshare", "--pid", "--fork", "--mount-proc"],
                ["unshare", "--user", "--map-root-user", "--pid", "--fork", "--mount-proc"]):
        try:
            probe = subprocess.run([*cmd, "true"], capture_output=True, timeout=60)
        except (FileNotFoundError, subprocess.TimeoutExpired):
            return None
        if probe.returncode == 0:
            return cmd
    return None


def free_pid():
    """A pid that no process outside the namespace has (well clear of the low pids kernel
    threads and init take)."""
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    rng = random.Random(os.getpid())
    for _ in range(1000):
        pid = rng.randrange(pid_max // 2, pid_max - 1)
        if not any(Path(f"/proc/{p}").exists() for p in (pid, pid + 1)):
            return pid
    pytest.skip("no free pid found")


def test_live_export_in_another_pid_namespace_keeps_its_temp_dir(tmp_path):
    prefix = unshare_prefix()
    if prefix is None:
        pytest.skip("unshare cannot create a PID namespace here (needs root or user namespaces)")
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "model"
    inner = free_pid()
    # Inside: the next pid handed out is inner + 1, for ferry (the shell forks it).
    script = (f"echo {inner} > /proc/sys/kernel/ns_last_pid 2>/dev/null; "
              f"'{FERRY_BIN}' export '{FIXTURE}' '{out}'; exit $?")
    run = StalledExport([*prefix, "sh", "-c", script])
    try:
        pattern = re.compile(r"^\.model\.ferry-tmp-(\d+)-[A-Za-z0-9]{6}$")
        found = run.wait_until(lambda: [n for n in os.listdir(parent) if pattern.match(n)],
                               "the namespaced export's temporary directory")
        name = found[0]
        tmp = parent / name
        run.wait_until(lambda: list(tmp.glob("**/model.onnx.data")), "its weights file")
        pid = int(pattern.match(name).group(1))
        if Path(f"/proc/{pid}").exists():
            pytest.skip(f"pid {pid} from inside the namespace is also alive outside: the test "
                        "would not show anything (ns_last_pid could not be set)")
        before = sorted(p.relative_to(tmp) for p in tmp.rglob("*"))

        # From outside: an export to the same destination, which cleans stale temp dirs first.
        ferry_export(FIXTURE, out, "-q")
        assert tmp.is_dir(), "a live export's temporary directory was removed"
        assert sorted(p.relative_to(tmp) for p in tmp.rglob("*")) == before
    finally:
        run.kill()
    # unshare is reaped at once; ferry, inside, dies as its namespace is torn down, and the
    # kernel releases its lock then.
    deadline = time.monotonic() + 60
    with open(tmp / "lock", "r+b") as f:
        while True:
            try:
                fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError:
                assert time.monotonic() < deadline, "the killed export's lock is still held"
                time.sleep(0.05)
        fcntl.lockf(f, fcntl.LOCK_UN)
    # Its writer is dead: the next export removes its directory.
    ferry_export(FIXTURE, out, "--force", "-q")
    assert os.listdir(parent) == ["model"], os.listdir(parent)
