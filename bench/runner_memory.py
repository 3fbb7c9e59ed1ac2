#!/usr/bin/env python3
"""Peak RSS of running a generation export with ferry's runners vs. the single-graph export.

Writes a small Qwen3-shaped checkpoint (hidden 512, 8 layers, 8 heads of 64, 4 kv heads,
intermediate 1408, vocab 32000, tied embeddings; random bf16 weights, exported as fp32:
~160 MB of weights) into bench/work/, exports it with the ferry CLI as a plain dynamic graph and
in every generation layout, then runs each in a fresh process (only numpy, onnxruntime or
OpenVINO, and ferry imported) and reads that process's peak RSS (VmHWM):
  - plain:  ExportedModel(...)(input_ids=prompt + new tokens), one onnxruntime session;
  - each generation layout: ExportedModel.generate(prompt, max_new_tokens=NEW);
  - two-default-sessions: what the runners avoid, a hand loop over prefill.onnx and decode.onnx
    in two onnxruntime sessions with default options (each maps the data file and prepacks
    its own copy of the weights);
and the same for OpenVINO (plain openvino_model.xml called once, stateful and stateless
generation). Also prints each loop's time per generated token, prompt included (one warm-up
run first; on a shared machine a rough figure).

    .venv/bin/python bench/runner_memory.py [--ferry build/ferry] [--new 32] [--prompt 32]
        [--flags="--quantize int4 --ort-fusions cpu"]     # extra flags for every export

The acceptance bound of the runners: peak RSS within 10% of the single-graph export's.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from export_bench import WORK, write_checkpoint  # noqa: E402

SHAPE = dict(hidden_size=512, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
             intermediate_size=1408, vocab_size=32000)
LAYERS, MAX_CACHE_LEN = 8, 256
GEN = ["--dynamic", "--for-generation"]
STATIC = [*GEN, "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN)]
OV = ["--format", "openvino"]
# name -> (export flags, what the child runs)
RUNS = {
    "onnx plain (baseline)": (["--dynamic"], "call"),
    "onnx prefill+decode (single-token)": ([*GEN, "--single-token-decode"], "generate"),
    "onnx prefill+decode, two default sessions": ([*GEN, "--single-token-decode"], "two"),
    "onnx multi-token decode (default)": (GEN, "generate"),
    "onnx static prefill+decode": (STATIC, "generate"),
    "onnx static one graph": ([*STATIC, "--multi-token-decode"], "generate"),
    "openvino plain (baseline)": ([*OV, "--dynamic"], "call"),
    "openvino stateful": ([*OV, *GEN], "generate"),
    "openvino stateless": ([*OV, *GEN, "--disable-stateful"], "generate"),
    "openvino stateless prefill+decode": ([*OV, *GEN, "--disable-stateful",
                                           "--single-token-decode"], "generate"),
}


# --- the child: one run in a fresh process ---------------------------------------------------


def peak_rss_mib():
    """VmHWM: unlike ru_maxrss, it starts afresh at exec (a child would otherwise report its
    parent's high-water mark)."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024


def two_default_sessions(export, ids, new):
    """Greedy tokens through prefill.onnx and decode.onnx in two default sessions."""
    import onnxruntime as ort

    manifest = json.loads((export / "export.json").read_text())
    pairs = manifest["components"]["decode"]["metadata"]["cache"]["pairs"]
    to_past = {p["output"]: p["input"] for p in pairs}
    prefill, decode = (ort.InferenceSession(str(export / f"{name}.onnx"),
                                            providers=["CPUExecutionProvider"])
                       for name in ("prefill", "decode"))
    mask = np.ones_like(ids)
    names = [o.name for o in prefill.get_outputs()]
    outs = dict(zip(names, prefill.run(names, {"input_ids": ids, "attention_mask": mask,
                                               "position_ids": np.arange(ids.shape[1])[None]})))
    for step in range(new - 1):
        token = outs["logits"][:, -1].argmax(-1)[:, None]
        mask = np.ones((1, ids.shape[1] + step + 1), np.int64)
        names = [o.name for o in decode.get_outputs()]
        feeds = {"input_ids": token, "attention_mask": mask,
                 "position_ids": np.array([[ids.shape[1] + step]]),
                 **{to_past[n]: outs[n] for n in to_past}}
        outs = dict(zip(names, decode.run(names, feeds)))


def child(kind, export, prompt, new):
    sys.path.insert(0, str(ROOT / "python"))
    from ferry import ExportedModel

    ids = (np.arange(prompt, dtype=np.int64)[None] * 37) % 31000 + 100
    exported = ExportedModel.from_pretrained(export)

    def once():
        if kind == "call":
            full = (np.arange(prompt + new, dtype=np.int64)[None] * 37) % 31000 + 100
            exported(input_ids=full)
        elif kind == "two":
            two_default_sessions(Path(export), ids, new)
        else:  # greedy, every row to `new` tokens (the checkpoint's eos ids lie past its vocab)
            exported.generate(ids, max_new_tokens=new, do_sample=False, eos_token_id=[])

    once()
    start = time.perf_counter()
    once()
    elapsed = time.perf_counter() - start
    print(json.dumps({"peak_mib": peak_rss_mib(), "ms_per_token": 1e3 * elapsed / new}))


# --- the parent --------------------------------------------------------------------------------


def main():
    parser = argparse.ArgumentParser(description="peak RSS of generation runners")
    parser.add_argument("--ferry", type=Path, default=ROOT / "build" / "ferry")
    parser.add_argument("--work", type=Path, default=WORK / "runner_memory")
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--new", type=int, default=32)
    parser.add_argument("--flags", default="", help="extra ferry export flags for every export")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--ckpt", type=Path, help="an existing checkpoint instead of the small "
                        "one (e.g. bench/work/ckpt-0.6b, the bench model)")
    parser.add_argument("--only", help="run only the rows whose name starts with this "
                        "(\"onnx\" or \"openvino\")")
    parser.add_argument("--child", nargs=2, metavar=("KIND", "EXPORT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.child[0], args.child[1], args.prompt, args.new)

    ckpt = args.ckpt or args.work / "ckpt"
    if args.work.exists():
        shutil.rmtree(args.work)
    if args.ckpt is None:
        write_checkpoint(ckpt, LAYERS, SHAPE["vocab_size"], shape=SHAPE)
    else:
        args.work.mkdir(parents=True)
    env = dict(os.environ, FERRY_LIB=str(args.ferry.resolve().parent / "libferry.so"))
    exports, rows = {}, []
    try:
        for name, (flags, kind) in RUNS.items():
            if args.only and not name.startswith(args.only):
                continue
            flags = [*flags, *args.flags.split()]
            key = tuple(flags)
            if key not in exports:
                exports[key] = args.work / f"export{len(exports)}"
                made = subprocess.run([str(args.ferry), "export", str(ckpt), str(exports[key]),
                                       *flags, "--quiet"], capture_output=True, text=True)
                if made.returncode:  # e.g. an ONNX-only flag on an OpenVINO export
                    exports[key] = made.stderr.strip()
            if isinstance(exports[key], str):
                rows.append((name, {"error": exports[key]}))
                continue
            out = subprocess.run([sys.executable, __file__, "--child", kind, str(exports[key]),
                                  "--prompt", str(args.prompt), "--new", str(args.new)],
                                 capture_output=True, text=True, env=env)
            if out.returncode:
                sys.exit(f"{name}: {out.stderr.strip()}")
            rows.append((name, json.loads(out.stdout.splitlines()[-1])))
        plain = exports.get(("--dynamic", *args.flags.split()))
        data = plain / "model.onnx.data" if isinstance(plain, Path) else None
        weights = data.stat().st_size / 2**20 if data and data.exists() else float("nan")
    finally:
        if not args.keep:
            shutil.rmtree(args.work, ignore_errors=True)

    shape = f"{args.ckpt}" if args.ckpt else f"{SHAPE}, {LAYERS} layers"
    print(f"checkpoint: {shape}; {weights:.0f} MiB of ONNX weights "
          f"(export flags: {args.flags or 'none'}); prompt {args.prompt}, {args.new} new "
          "tokens; onnxruntime and OpenVINO on CPU\n")
    print("| run | peak RSS (MiB) | vs. its plain export | ms / new token |")
    print("|---|---:|---:|---:|")
    baseline = None
    for name, row in rows:
        if "error" in row:
            print(f"| {name} | not exported: {row['error']} | | |")
            continue
        plain = "plain" in name
        if plain:
            baseline = row["peak_mib"]
        timing = "— (one call)" if plain else f"{row['ms_per_token']:.1f}"
        print(f"| {name} | {row['peak_mib']:.0f} | {row['peak_mib'] / baseline:.2f}x | "
              f"{timing} |")


if __name__ == "__main__":
    main()
