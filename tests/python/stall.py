"""Holds a `ferry export` still in the middle of its save, without timing luck.

The export's stderr is a pseudo-terminal whose buffer the test has filled beforehand, so ferry
(which draws a progress line when stderr is a terminal) blocks on its first progress write. That
write happens while the weights are being written: after the temporary directory and its lock
exist, before anything is renamed. The export stays blocked until `release()` reads the
terminal, or dies with `kill()`."""

import os
import pty
import signal
import subprocess
import time
from pathlib import Path


def _fill(fd):
    """Writes to a non-blocking terminal fd until it stays full (the kernel moves bytes between
    its buffers asynchronously, so one EAGAIN is not yet full)."""
    idle = 0
    while idle < 5:
        wrote = 0
        try:
            while True:
                wrote += os.write(fd, b"x" * 256)
        except BlockingIOError:
            pass
        idle = idle + 1 if wrote == 0 else 0
        time.sleep(0.02)


class StalledExport:
    def __init__(self, argv, env=None, preexec_fn=None):
        self.master, slave = pty.openpty()
        name = os.ttyname(slave)
        filler = os.open(name, os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY)
        _fill(filler)
        os.close(filler)
        # A second open file description: O_NONBLOCK above must not reach ferry.
        err = os.open(name, os.O_WRONLY | os.O_NOCTTY)
        self.proc = subprocess.Popen([str(a) for a in argv], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=err,
                                     start_new_session=True, env=env, preexec_fn=preexec_fn)
        os.close(err)
        os.close(slave)

    def wait_until(self, predicate, what, timeout=120):
        """Polls predicate() until it returns something true, which it returns."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate()
            if found:
                return found
            if self.proc.poll() is not None:
                raise AssertionError(f"ferry exited ({self.proc.returncode}) before {what}")
            time.sleep(0.01)
        raise AssertionError(f"timed out waiting for {what}")

    def release(self, timeout=300):
        """Drains the terminal until ferry exits; returns (exit status, what it wrote, the
        filler removed, newlines as written)."""
        os.set_blocking(self.master, False)
        chunks, deadline, exited = [], time.monotonic() + timeout, None
        while True:
            try:
                chunks.append(os.read(self.master, 65536))
                continue
            except BlockingIOError:
                # the terminal hands on what ferry wrote last a moment after it exits: read
                # on until every writer is gone (EIO), or a second after the exit
                if exited is not None and time.monotonic() > exited + 1:
                    break
            except OSError:  # EIO: every writer is gone, all read
                break
            if exited is None and self.proc.poll() is not None:
                exited = time.monotonic()
            if time.monotonic() > deadline:
                self.kill()
                raise AssertionError("ferry did not finish once released")
            time.sleep(0.01)
        self.proc.wait()
        os.close(self.master)
        text = b"".join(chunks).lstrip(b"x").decode("utf-8", "replace").replace("\r\n", "\n")
        return self.proc.returncode, text

    def kill(self):
        """SIGKILL to ferry and everything it started (its own process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass
        return self.proc.returncode
