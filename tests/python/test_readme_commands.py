"""The README as a newcomer pastes it (issue 37): every fenced sh/bash/console block and every
python block runs, in the README's order, in one shell whose working directory is a fresh
directory laid out as a clone after `make demo` and `make venv` (fixtures/, build/ and .venv are
links to this tree's, nothing is copied). Each command must exit 0, and what the commands claim
to write must be there. Also: docs/cli.md names every option the command's --help lists."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import FERRY_BIN, FERRY_BUILD, ROOT

README = ROOT / "README.md"

# Lines the test does not run, each because this suite's environment already did it:
SKIPPED = (
    # `make test` builds build/ and .venv (`make venv`) before the suite runs, and `make demo`
    # is that build plus one export: running them here would rebuild the tree the suite is using.
    "make demo", "make test", "make venv",
    # needs the network and a whole CMake build; tests/python/test_pip_install.py runs it
    "pip install",
)

FENCE = re.compile(r"^```(sh|bash|console|python)[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def readme_blocks():
    """[(language, text)] of the README's runnable blocks, in order. A console block's commands
    are its `$ ` lines; the other lines are output."""
    blocks = []
    for lang, text in FENCE.findall(README.read_text()):
        if lang == "console":
            text = "".join(line[2:] + "\n" for line in text.splitlines() if line.startswith("$ "))
        blocks.append(("python" if lang == "python" else "sh", text))
    return blocks


def shell_lines(text):
    """The block's lines, a skipped command commented out with the reason."""
    out = []
    for line in text.splitlines():
        command = line.strip()
        if any(command.startswith(s) for s in SKIPPED):
            assert not command.endswith("\\"), f"a skipped command continues: {line!r}"
            out.append(f"# skipped, done by this suite's environment: {command}")
        else:
            out.append(line)
    return out


def script(blocks):
    """One bash script running every block in order: a failing command stops it, naming its
    block. A python block runs in the shell's python3 (the venv's, once activated)."""
    lines = ["set -eE -o pipefail",
             "trap 'echo \"README block $README_BLOCK failed (exit $?): $BASH_COMMAND\" >&2' ERR"]
    for n, (lang, text) in enumerate(blocks, 1):
        lines.append(f"README_BLOCK={n}")
        if lang == "python":
            tag = f"README_PYTHON_{n}"
            assert tag not in text
            lines += [f"python3 - <<'{tag}'", text.rstrip("\n"), tag]
        else:
            lines += shell_lines(text)
    lines.append("echo README-DONE")
    return "\n".join(lines) + "\n"


def fresh_shell_env(venv):
    """This process's environment as a new shell has it: no venv active, no ferry on PATH, no
    PYTHONPATH or FERRY_PYTHON; what activating `venv` and the README's PATH line add must come
    from the README."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "FERRY_PYTHON", "VIRTUAL_ENV", "PYTHONHOME", "FERRY_LIB")}
    keep = [p for p in env.get("PATH", "").split(os.pathsep)
            if p and Path(p).resolve() != (venv / "bin").resolve()
            and not (Path(p) / "ferry").exists()]
    env["PATH"] = os.pathsep.join(keep)
    # The README's python/ferry finds build/libferry.so beside it; a suite run against another
    # build (FERRY_BUILD) points it there, as build/ (linked below) is that build.
    if FERRY_BUILD != (ROOT / "build").resolve():
        env["FERRY_LIB"] = str(FERRY_BUILD / "libferry.so")
    return env


def claimed_outputs(blocks):
    """The directories the README's commands say they write: `ferry export MODEL OUT` and
    `save_pretrained("OUT")`."""
    outs = []
    for lang, text in blocks:
        if lang == "python":
            outs += re.findall(r"save_pretrained\(\s*[\"']([^\"']+)[\"']", text)
        else:
            for line in text.splitlines():
                words = line.split("#")[0].split()
                if words[:2] == ["ferry", "export"]:
                    outs.append(words[3])
    return outs


def test_readme_commands_run_as_pasted(tmp_path):
    venv = Path(sys.prefix)
    assert sys.prefix != sys.base_prefix and (venv / "bin" / "activate").is_file(), \
        "run the suite in the venv `make venv` makes (.venv/bin/python -m pytest)"
    for name, target in (("fixtures", ROOT / "fixtures"), ("build", FERRY_BUILD),
                         (".venv", venv)):
        (tmp_path / name).symlink_to(target, target_is_directory=True)
    blocks = readme_blocks()
    assert sum(lang == "python" for lang, _ in blocks) >= 2 and len(blocks) >= 6, blocks
    # kept with a failed test's tmp_path: `bash readme.sh` there replays the run
    (tmp_path / "readme.sh").write_text(script(blocks))
    env = fresh_shell_env(venv)
    (tmp_path / "readme-env.json").write_text(json.dumps(env, indent=1))
    proc = subprocess.run(["bash", "readme.sh"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0 and "README-DONE" in proc.stdout, (
        f"exit {proc.returncode}; where `import ferry` fails, .venv misses `make venv`'s "
        f".pth for python/\n{output[-6000:]}")

    outs = claimed_outputs(blocks)
    assert len(outs) == len(set(outs)), f"the README writes one directory twice: {outs}"
    formats, generation = set(), False
    for out in outs:
        manifest = tmp_path / out / "export.json"
        assert manifest.is_file(), f"README: {out} was not written\n{output[-3000:]}"
        doc = json.loads(manifest.read_text())
        formats.add(doc["format"])
        generation |= "decode" in doc["components"]
    # the newcomer's page shows every format, and a generation export
    assert formats >= {"onnx", "openvino", "pt2", "executorch"} and generation, (formats, outs)
    for lang, text in blocks:
        for line in text.splitlines() if lang == "sh" else []:
            words = line.split("#")[0].split()
            if words[:2] == ["ferry", "validate"]:
                target = json.loads((tmp_path / words[2] / "export.json").read_text())
                assert target.get("validated_with"), f"{line}: recorded no validation"


def _options(help_text):
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))


@pytest.mark.parametrize("command", ["", "export", "inspect", "graph", "validate"])
def test_cli_reference_names_every_option(command):
    """docs/cli.md is the reference of every option `ferry <command> --help` lists."""
    args = [str(FERRY_BIN)] + ([command] if command else []) + ["--help"]
    shown = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    usage = [line for line in shown.splitlines() if line.lstrip().startswith("-")]
    reference = (ROOT / "docs" / "cli.md").read_text()
    missing = sorted(o for o in _options("\n".join(usage))
                     if not re.search(rf"(?<![\w-]){o}(?![\w-])", reference))
    assert not missing, f"docs/cli.md does not name {missing} (ferry {command} --help)"
