"""The `ferry` console script of a pip-installed ferry: runs the C command shipped in the package
(ferry/bin/ferry) with the same arguments, so `ferry export ...` works from the venv's PATH.

FERRY_PYTHON is set to this interpreter (unless the caller set it), so that the subcommands the C
command hands to Python, such as `ferry validate`, run in the environment ferry is installed in.
"""

import os
import sys
from pathlib import Path


def main():
    command = Path(__file__).resolve().parent / "bin" / "ferry"
    if not command.is_file():
        sys.stderr.write(f"ferry: {command} is missing: this ferry package was not installed with "
                         "`pip install` (in a source tree, run build/ferry)\n")
        return 2
    os.environ.setdefault("FERRY_PYTHON", sys.executable)
    os.execv(str(command), ["ferry"] + sys.argv[1:])  # messages say "ferry: ...", as the C build


if __name__ == "__main__":
    sys.exit(main())
