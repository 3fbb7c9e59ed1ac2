"""The command line every latency runner shares (ort_latency.py, ov_latency.py,
genai_latency.py): the export, where the timings go, and the same threads, prompt length,
decode steps and repetitions for every runtime, so their rows compare."""

import argparse
import os
from pathlib import Path


def latency_parser(doc):
    """An ArgumentParser with --dir, --json, --threads, --prompt, --steps and --reps; each
    runner adds its own options."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--dir", type=Path, required=True, help="the export directory")
    p.add_argument("--json", type=Path, required=True, help="where the timings are written")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--reps", type=int, default=5)
    return p
