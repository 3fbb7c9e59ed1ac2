"""Two ferry binaries' .pte decode against each other, in interleaved rounds: what a change to
the ExecuTorch backend gains, measured in one run on one machine.

    .venv/bin/python bench/pte_ab.py CKPT --old OLD/ferry [--new build/ferry] [--rounds 5]
                                     [--quantize int4]

Each binary exports CKPT for the guide's C++ loop (batch 1, a static cache of 256 slots, the
alloc flags off: the program pte_bench.py and pte_int4_ratio.py time); then the two programs
alternate, a fresh process each round, timing a 128-token prompt and 32 one-token steps
(median). Prints each round and the median of each, and new / old. Build OLD from the commit
before the change (git worktree add /tmp/old HEAD~1 && cmake -S /tmp/old -B /tmp/old/b &&
cmake --build /tmp/old/b).
"""

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pte_bench import guide_loop  # noqa: E402
from pte_int4_ratio import cpp_decode  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["--format", "executorch", "--dim", "input_ids:1=sequence:1:128", "--for-generation",
         "--static-cache", "--max-cache-len", "256", "--multi-token-decode",
         "--no-alloc-graph-input", "--no-alloc-graph-output", "--no-alloc-mutable-buffers",
         "--quiet", "--force"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ckpt")
    parser.add_argument("--old", required=True, help="the ferry binary before the change")
    parser.add_argument("--new", default=str(ROOT / "build" / "ferry"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quantize", choices=["int4"], help="both exports quantized")
    args = parser.parse_args()
    work = ROOT / "bench" / "work" / "pte-ab"
    work.mkdir(parents=True, exist_ok=True)
    binary, err = guide_loop(work, work)
    if err:
        sys.exit(f"pte_ab: the guide's C++ loop does not build: {err}")
    extra = ["--quantize", args.quantize] if args.quantize else []
    programs = {}
    for name, ferry in (("old", args.old), ("new", args.new)):
        out = work / f"{name}-{Path(args.ckpt).name}{'-' + args.quantize if args.quantize else ''}"
        subprocess.run([ferry, "export", args.ckpt, str(out), *FLAGS, *extra], check=True)
        programs[name] = out / "decode.pte"
    times = {"old": [], "new": []}
    print("| round | old (ms/step) | new (ms/step) |\n|---|---|---|")
    for r in range(args.rounds):
        for name in ("old", "new"):
            times[name].append(cpp_decode(binary, programs[name]))
        print(f"| {r + 1} | {times['old'][-1]:.1f} | {times['new'][-1]:.1f} |", flush=True)
    old, new = statistics.median(times["old"]), statistics.median(times["new"])
    print(f"\nmedian old {old:.2f} ms/step, new {new:.2f} ms/step: new/old {new / old:.3f} "
          f"over {args.rounds} rounds")


if __name__ == "__main__":
    main()
