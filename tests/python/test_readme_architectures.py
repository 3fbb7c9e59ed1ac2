"""README.md's architecture list is ferry's registry (scripts/readme_architectures.py writes it),
and every family the tests build is in it."""

import os
import subprocess
import sys

from conftest import ARCH_CLASS, FERRY_BUILD, ROOT


def test_readme_lists_the_registry():
    env = dict(os.environ, FERRY_LIB=str(FERRY_BUILD / "libferry.so"))
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "readme_architectures.py"),
                           "--check"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_registry_has_every_tested_family():
    import ferry

    listed = ferry.supported_architectures()
    assert len(listed) == len(set(listed))
    assert set(ARCH_CLASS.values()) <= set(listed), listed
