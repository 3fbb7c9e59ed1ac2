#!/usr/bin/env python3
"""What reading an export's files against their CRC-32s costs at load: ferry_exported_load
alone, with ferry_exported_verify, and the floor (reading the same files with no CRC), each
from the page cache and cold (the files' pages dropped with posix_fadvise first); and, beside
them, the runtime's own session creation on the same export, which the check comes before.

    .venv/bin/python bench/load_verify.py [EXPORT ...] [--runs 5]

Default export: SmolLM2-135M (fp32 ONNX), exported from build/real-models/ (the test suite's
real-weights checkpoint) into bench/work/.
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("FERRY_BUILD", ROOT / "build"))
WORK = ROOT / "bench" / "work"
os.environ.setdefault("FERRY_LIB", str(BUILD / "libferry.so"))
sys.path.insert(0, str(ROOT / "python"))


def component_files(out):
    import json

    manifest = json.loads((out / "export.json").read_text())
    return sorted({out / f for c in manifest["components"].values()
                   for f in [c["file"], *c.get("data_files", [])]})


def drop_cache(files):
    for f in files:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def read_all(files):
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            while fh.read(4 << 20):
                pass


def timed(fn, files, cold):
    if cold:
        drop_cache(files)
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("exports", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    from ferry import _lib

    lib = _lib._c()
    exports = args.exports
    if not exports:
        ckpt = BUILD / "real-models" / "smollm2-135m-instruct"
        if not (ckpt / "config.json").exists():
            sys.exit(f"{ckpt} missing: run the test suite once (make test) or name an export")
        out = WORK / "load-verify-smollm2-onnx"
        subprocess.run([str(BUILD / "ferry"), "export", str(ckpt), str(out), "--format", "onnx",
                        "--force", "-q"], check=True)
        exports = [out]
    print("| export | MB | cache | load (s) | load + verify (s) | read floor (s) | "
          "verify GB/s | session (s) |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for out in exports:
        files = component_files(out)
        size = sum(f.stat().st_size for f in files)

        def load(verify):
            handle = ctypes.c_void_p()
            status = lib.ferry_exported_load(str(out).encode(), None, ctypes.byref(handle))
            if not status and verify:
                status = lib.ferry_exported_verify(handle)
            lib.ferry_exported_free(handle)
            if status:
                sys.exit(f"{out}: load failed ({status})")

        def session():
            import ferry

            model = ferry.ExportedModel.from_pretrained(out)
            model._runner()
            model.close()

        for cold in (False, True):
            read_all(files)
            rows = {k: [] for k in ("load", "verify", "floor", "session")}
            for _ in range(args.runs):
                rows["load"].append(timed(lambda: load(False), files, cold))
                rows["verify"].append(timed(lambda: load(True), files, cold))
                rows["floor"].append(timed(lambda: read_all(files), files, cold))
                rows["session"].append(timed(session, files, cold))
            med = {k: statistics.median(v) for k, v in rows.items()}
            rate = size / 1e9 / max(med["verify"] - med["load"], 1e-9)
            print(f"| {out.name} | {size / 1e6:.0f} | {'cold' if cold else 'warm'} | "
                  f"{med['load']:.3f} | {med['verify']:.3f} | {med['floor']:.3f} | {rate:.1f} | "
                  f"{med['session']:.3f} |", flush=True)
    print("\nsession: ExportedModel.from_pretrained (which verifies) and the runtime's session "
          "creation; verify GB/s: bytes over (load + verify - load).")


if __name__ == "__main__":
    main()
