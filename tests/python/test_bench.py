"""bench/export_bench.py stays runnable: a one-layer, small-vocab run end to end."""

import subprocess
import sys

from conftest import FERRY_BIN, ROOT


def test_bench_smoke(tmp_path):
    assert FERRY_BIN.exists(), f"ferry binary not found at {FERRY_BIN}"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "export_bench.py"), "--layers", "1", "--vocab",
         "2048", "--work", str(tmp_path), "--ferry", str(FERRY_BIN)],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for needle in ("| ferry export |", "| cp model.onnx.data |", "| cp + sync |", "ferry / cp =",
                   "Reproduce: python bench/export_bench.py --layers 1 --vocab 2048"):
        assert needle in proc.stdout, proc.stdout
    assert not (tmp_path / "out-onnx").exists() and not (tmp_path / "copy.bin").exists()
