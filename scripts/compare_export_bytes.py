#!/usr/bin/env python3
"""Two ferry builds, the same exports: are the files byte for byte the same? For refactors
that must not change any export, in any format.

    .venv/bin/python scripts/compare_export_bytes.py OLD_FERRY NEW_FERRY [--work DIR]

For each decoder and encoder family (tiny random checkpoints built by transformers, as the
tests build them) and each format × mode below, exports with both binaries and compares every
file of the two directories (their names, then their bytes). `--formats` and `--families`
narrow the run. Prints one line per difference and a summary;
exits 1 if any file differs. A mode the old build refuses is skipped (the new one must refuse
it too).
"""

import argparse
import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "python"))
from conftest import ARCHS, make_checkpoint  # noqa: E402
from test_encoders import FAMILIES as ENCODERS, build as make_encoder  # noqa: E402

STATIC = ["--static-cache", "--max-cache-len", "24"]
MODES = {
    "onnx": {
        "plain-dynamic": ["--dynamic"],
        "plain-static": ["--example-shape", "input_ids=2x7"],
        "plain-positions": ["--dynamic", "--inputs", "input_ids,attention_mask,position_ids"],
        "plain-fp16": ["--dynamic", "--dtype", "fp16"],
        "plain-int4": ["--dynamic", "--quantize", "int4"],
        "plain-int8-asym": ["--dynamic", "--quantize", "int8", "--asymmetric"],
        "gen-dynamic": ["--dynamic", "--for-generation"],
        "gen-single-token": ["--dynamic", "--for-generation", "--single-token-decode"],
        "gen-static": ["--dynamic", "--for-generation", *STATIC],
        "gen-fused-int4": ["--dynamic", "--for-generation", "--ort-fusions", "cpu",
                           "--quantize", "int4"],
        "gen-fused-fp16-cuda": ["--dynamic", "--for-generation", "--ort-fusions", "cuda",
                                "--dtype", "fp16"],
    },
    "openvino": {
        "plain-dynamic": ["--dynamic"],
        "plain-int4": ["--dynamic", "--quantize", "int4"],
        "plain-compressed": ["--dynamic", "--compress-to-fp16"],
        "gen-stateful": ["--dynamic", "--for-generation"],
        "gen-stateless": ["--dynamic", "--for-generation", "--disable-stateful"],
    },
    "pt2": {
        "plain-dynamic": ["--dynamic"],
        "plain-bf16": ["--dynamic", "--dtype", "bf16"],
        "plain-model-output": ["--dynamic", "--model-output"],
        "gen-static": ["--dynamic", "--for-generation", *STATIC],
    },
    "executorch": {
        "plain-dynamic": ["--dynamic"],
        "plain-portable": ["--dynamic", "--et-backend", "portable"],
        "plain-int4": ["--dynamic", "--quantize", "int4", "--quantize-embeddings"],
        "gen-static": ["--dynamic", "--for-generation", *STATIC, "--multi-token-decode"],
    },
}


# encoders have no generation components and no quantized path
ENCODER_MODES = {
    "onnx": {
        "plain-dynamic": ["--dynamic"],
        "plain-static": ["--example-shape", "input_ids=2x7"],
        "plain-fp16": ["--dynamic", "--dtype", "fp16"],
        "fused-cpu": ["--dynamic", "--ort-fusions", "cpu"],
        "fused-cuda": ["--dynamic", "--ort-fusions", "cuda"],
    },
    "openvino": {"plain-dynamic": ["--dynamic"]},
    "pt2": {"plain-dynamic": ["--dynamic"], "plain-model-output": ["--dynamic", "--model-output"]},
    "executorch": {"plain-dynamic": ["--dynamic"]},
}


def tree(d):
    return sorted(p.relative_to(d) for p in d.rglob("*") if p.is_file())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--work")
    ap.add_argument("--formats", help="comma-separated: onnx,openvino,pt2,executorch (default: all)")
    ap.add_argument("--families", help="comma-separated family names (default: all)")
    args = ap.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="ferry-bytes-"))
    formats = args.formats.split(",") if args.formats else None
    families = args.families.split(",") if args.families else None
    compared = differing = skipped = 0
    for family in [*ARCHS, *ENCODERS]:
        if families and family not in families:
            continue
        if family in ARCHS:
            ckpt = make_checkpoint(work / family / "ckpt", family, seed=11)
            table = MODES
        else:
            ckpt = make_encoder(work / family / "ckpt", family)
            table = ENCODER_MODES
        for fmt, modes in table.items():
            if formats and fmt not in formats:
                continue
            for mode, flags in modes.items():
                rcs, dirs = {}, {}
                for label, binary in (("old", args.old), ("new", args.new)):
                    d = work / family / f"{fmt}-{mode}-{label}"
                    shutil.rmtree(d, ignore_errors=True)
                    proc = subprocess.run([binary, "export", str(ckpt), str(d), "-q",
                                           "--format", fmt, *flags],
                                          capture_output=True, text=True)
                    rcs[label], dirs[label] = proc.returncode, d
                what = f"{family} {fmt} {mode}"
                if rcs["old"] != 0:
                    skipped += 1
                    if rcs["new"] == 0:
                        print(f"{what}: the old build refuses it, the new one exports it")
                    continue
                if rcs["new"] != 0:
                    print(f"{what}: the new build fails (exit {rcs['new']})")
                    differing += 1
                    continue
                names = tree(dirs["old"])
                if names != tree(dirs["new"]):
                    print(f"{what}: other files: {names} vs {tree(dirs['new'])}")
                    differing += 1
                    continue
                for name in names:
                    compared += 1
                    if not filecmp.cmp(dirs["old"] / name, dirs["new"] / name, shallow=False):
                        print(f"{what}: {name} differs")
                        differing += 1
                for d in dirs.values():
                    shutil.rmtree(d)
    print(f"{compared} files compared, {differing} differ, {skipped} exports refused by both")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
