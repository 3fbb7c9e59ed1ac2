"""The `ferry` console script of a pip-installed ferry: runs the C command shipped in the package
(ferry/bin/ferry) with the same arguments, so `ferry export ...` works from the venv's PATH. A
hub id given as a checkpoint or an export is downloaded first (ferry.hub), and the C command is
handed the local copy.

FERRY_PYTHON is set to this interpreter (unless the caller set it), so that the subcommands the C
command hands to Python, such as `ferry validate`, run in the environment ferry is installed in;
FERRY_TOKENIZER_PYTHON too, so that `ferry export --format openvino` writes the tokenizer
converted for openvino-genai (python/ferry/_tokenizers.py).
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
    # an OpenVINO export then carries openvino-tokenizers' conversion of the tokenizer
    # (cli/convert_tokenizer.c; set empty, none is converted)
    os.environ.setdefault("FERRY_TOKENIZER_PYTHON", sys.executable)
    args = _downloaded(sys.argv[1:])
    if isinstance(args, int):
        return args
    os.execv(str(command), ["ferry"] + args)  # messages say "ferry: ...", as the C build


def _downloaded(args):
    """`args` with each hub id a subcommand takes (a checkpoint, an export) replaced by its local
    copy, downloaded here with huggingface_hub (ferry.hub.cli_argv): the C command stays
    offline. A download that fails is one line and exit 1 (2 for a bad argument)."""
    from ._lib import FerryError
    from .hub import cli_argv

    try:
        return cli_argv(args)
    except FerryError as error:
        sys.stderr.write(f"ferry: error: {error}\n")
        return 2 if error.status == 1 else 1
    except KeyboardInterrupt:
        sys.stderr.write("ferry: error: download interrupted\n")
        return 130


if __name__ == "__main__":
    sys.exit(main())
