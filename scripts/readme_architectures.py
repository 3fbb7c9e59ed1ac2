#!/usr/bin/env python3
"""Writes README.md's "Supported architectures:" line from ferry's registry
(ferry.supported_architectures(), the list `ferry export` names when it refuses an
architecture), so the README never lists what ferry cannot export or leaves out what it can.

    .venv/bin/python scripts/readme_architectures.py          # rewrite the line
    .venv/bin/python scripts/readme_architectures.py --check  # exit 1 if it is stale

libferry.so is found as the Python package finds it ($FERRY_LIB, else build/).
"""

import argparse
import os
import re
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = "<!-- scripts/readme_architectures.py writes the next line from ferry's registry -->"


def generated():
    os.environ.setdefault("FERRY_LIB", str(ROOT / "build" / "libferry.so"))
    sys.path.insert(0, str(ROOT / "python"))
    import ferry

    text = "Supported architectures: " + ", ".join(ferry.supported_architectures()) + "."
    return "\n".join(textwrap.wrap(text, width=96, break_on_hyphens=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text = README.read_text()
    pattern = re.compile(re.escape(MARKER) + r"\n(Supported architectures:.*?\.)\n\n", re.S)
    found = pattern.search(text)
    if not found:
        sys.exit(f"{README}: no '{MARKER}' line followed by the list")
    want = generated()
    if found.group(1) == want:
        return 0
    if args.check:
        print(f"{README} lists other architectures than ferry's registry; run "
              f"scripts/readme_architectures.py\nREADME:   {found.group(1)!r}\nregistry: {want!r}")
        return 1
    README.write_text(text[:found.start(1)] + want + text[found.end(1):])
    return 0


if __name__ == "__main__":
    sys.exit(main())
