#!/usr/bin/env python3
"""Generation latency on onnxruntime CPU: ferry's static-cache decode vs. transformers' own.

Writes a Qwen3-0.6B-shaped checkpoint with random bf16 weights and tied embeddings (the maker of
bench/export_bench.py) into bench/work/, then in the same run exports it twice:
  - ferry: `ferry export CKPT OUT --dynamic --for-generation --static-cache --max-cache-len 192
    --multi-token-decode` -> one decode.onnx serving prompt and steps;
  - transformers: `OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(
    dynamic=True), generation_config=GenerationConfig(cache_implementation="static",
    max_cache_len=192), multi_token_decode=True)` on the same checkpoint loaded in fp32 (in a
    child process, so that a failure is reported rather than fatal).
Both decode graphs then run the guide's loop under one SessionOptions (intra_op_num_threads =
cores): a fresh cache, the 128-token prompt in one call (prefill latency), then 64 one-token
steps (mean decode-step latency), each input.<name>/output.<name> cache pair bound to ONE
OrtValue with IOBinding so the cache is updated in place. Warm-up calls precede both timings;
the two graphs take turns call by call (a disturbance from another process hits both alike, and
the share of the cores other processes used while timing is printed); the same token ids feed
both graphs, and their logits are compared as a sanity check.

    python bench/generation_bench.py [--layers 28] [--vocab 151936] [--ferry build/ferry]
    python bench/generation_bench.py --layers 2 --vocab 8192      # quick variant
"""

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from export_bench import QWEN3_06B, WORK, write_checkpoint  # noqa: E402

PROMPT, STEPS, MAX_CACHE_LEN = 128, 64, 192


# --- exporting ------------------------------------------------------------------------------


def export_ferry(ferry, ckpt, out, dry=False):
    """-> (command, wall seconds or None when `dry`, error or None)."""
    cmd = [str(ferry), "export", str(ckpt), str(out), "--dynamic", "--for-generation",
           "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN), "--multi-token-decode",
           "--force", "--quiet"]
    if dry:
        return cmd, None, None
    t = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        return cmd, wall, f"exit {proc.returncode}: {proc.stderr.strip()}"
    return cmd, wall, None


HF_EXPORT = """
import sys, torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.exporters import OnnxConfig, OnnxExporter
ckpt, out, max_cache_len = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
inputs = {"input_ids": torch.arange(1, 9)[None], "attention_mask": torch.ones(1, 8, dtype=torch.long)}
exported = OnnxExporter().export_for_generation(
    model, inputs, config=OnnxConfig(dynamic=True),
    generation_config=GenerationConfig(cache_implementation="static", max_cache_len=max_cache_len),
    multi_token_decode=True)
exported.save_pretrained(out)
print("components:", ",".join(exported.components))
"""


def export_transformers(ckpt, out, log, dry=False):
    """-> (call text, wall seconds or None when `dry`, error or None); the exporter runs in a
    child process."""
    shown = (f'OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(dynamic=True), '
             f'generation_config=GenerationConfig(cache_implementation="static", '
             f'max_cache_len={MAX_CACHE_LEN}), multi_token_decode=True)')
    if dry:
        return shown, None, None
    shutil.rmtree(out, ignore_errors=True)
    cmd = [sys.executable, "-c", HF_EXPORT, str(ckpt), str(out), str(MAX_CACHE_LEN)]
    t = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t
    if rc != 0 or not (out / "decode.onnx").exists():
        lines = [ln.strip() for ln in open(log, errors="replace") if ln.strip()]
        errors = [ln for ln in lines if "Error" in ln or "error" in ln] or lines or ["no output"]
        return shown, wall, f"exit {rc}: {errors[-1][:300]} (log: {log})"
    return shown, wall, None


# --- running --------------------------------------------------------------------------------


def session_options(threads):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return opts


class InPlaceLoop:
    """The guide's loop over one decode graph: cache buffers made from the graph's own input.*
    metadata (symbolic cache axis = MAX_CACHE_LEN, batch 1), each input.<name>/output.<name>
    pair bound to one OrtValue; logits bound to a preallocated buffer per query length."""

    def __init__(self, path, opts):
        import onnxruntime as ort

        self.ort = ort
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.binding = self.session.io_binding()
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = {o.name for o in self.session.get_outputs()}
        self.mask_name = next(n for n in inputs if n.startswith("attention_mask"))
        self.vocab = next(o.shape[-1] for o in self.session.get_outputs() if o.name == "logits")
        dtypes = {"tensor(float)": np.float32, "tensor(float16)": np.float16,
                  "tensor(int64)": np.int64}
        self.cache, self.counters = {}, []
        for name, info in inputs.items():
            if not name.startswith("input."):
                continue
            out_name = "output." + name[len("input."):]
            assert out_name in outputs, f"{path}: no output for {name}"
            dims = [1 if d == "batch" else int(d) if not isinstance(d, str) or d.isdigit()
                    else MAX_CACHE_LEN for d in info.shape]
            array = np.zeros(dims, dtype=dtypes[info.type])
            value = ort.OrtValue.ortvalue_from_numpy(array)
            self.binding.bind_ortvalue_input(name, value)
            self.binding.bind_ortvalue_output(out_name, value)
            self.cache[name] = (array, value)
            if name.endswith("cumulative_length"):
                self.counters.append(array)
        assert self.counters, f"{path}: no cumulative_length counters"
        self.logits = {}

    def reset(self):
        for array in self.counters:
            array[...] = 0

    def __call__(self, token_ids, start):
        q = token_ids.shape[1]
        positions = np.arange(start, start + q)
        mask = (np.arange(MAX_CACHE_LEN)[None, :] <= positions[:, None])[None, None]
        if q not in self.logits:
            array = np.empty((1, q, self.vocab), dtype=np.float32)
            self.logits[q] = (array, self.ort.OrtValue.ortvalue_from_numpy(array))
        b = self.binding
        b.bind_cpu_input("input_ids", np.ascontiguousarray(token_ids, dtype=np.int64))
        b.bind_cpu_input(self.mask_name, mask)
        b.bind_cpu_input("position_ids", positions[None].astype(np.int64))
        b.bind_ortvalue_output("logits", self.logits[q][1])
        self.session.run_with_iobinding(b)
        return self.logits[q][0]


def measure(loops, tokens, prefill_runs, warmup_steps):
    """{name: latencies (seconds) and logits} for every loop, on one fixed token sequence. The
    loops take turns call by call, so that a disturbance hits all of them alike."""
    prompt, steps = tokens[:, :PROMPT], tokens[0, PROMPT:]
    for loop in loops.values():  # warm-up: prompt + a few steps, twice
        for _ in range(2):
            loop.reset()
            loop(prompt, 0)
            for k in range(warmup_steps):
                loop(steps[k:k + 1][None], PROMPT + k)
    out = {name: dict(prefill=[], steps=[]) for name in loops}
    for _ in range(prefill_runs):
        for name, loop in loops.items():
            loop.reset()
            t = time.perf_counter()
            logits = loop(prompt, 0)
            out[name]["prefill"].append(time.perf_counter() - t)
            out[name]["first"] = logits[0, -1].copy()
    for loop in loops.values():
        loop.reset()
        loop(prompt, 0)
    for k in range(STEPS):
        for name, loop in loops.items():
            t = time.perf_counter()
            logits = loop(steps[k:k + 1][None], PROMPT + k)
            out[name]["steps"].append(time.perf_counter() - t)
            out[name]["last"] = logits[0, -1].copy()
    for name, loop in loops.items():
        counters = {int(c.reshape(-1)[0]) for c in loop.counters}
        assert counters == {PROMPT + STEPS}, f"{name}: cache counters {counters}"
        r = out[name]
        r.update(prefill_runs=len(r["prefill"]), prefill=statistics.median(r["prefill"]),
                 step_mean=statistics.fmean(r["steps"]), step_p50=statistics.median(r["steps"]))
    return out


# --- report ---------------------------------------------------------------------------------


def cpu_busy():
    """(busy CPU seconds of the whole machine, CPU seconds of this process, wall seconds), or
    None where /proc/stat is unreadable."""
    try:
        fields = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    tick = os.sysconf("SC_CLK_TCK")
    own = os.times()
    return (sum(fields[:8]) - idle) / tick, own.user + own.system, time.monotonic()


def machine():
    model = platform.processor() or "unknown cpu"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(next(ln for ln in open("/proc/meminfo") if ln.startswith("MemTotal")).split()[1])
        mem = f", {kb / 2**20:.0f} GiB RAM"
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} cores{mem}, {platform.system()} {platform.release()}"


def versions(ferry):
    out = {"python": platform.python_version()}
    for name in ("onnxruntime", "transformers", "torch", "onnx", "onnxscript", "numpy"):
        try:
            out[name] = __import__(name).__version__
        except Exception:  # noqa: BLE001 - a missing package is reported, not fatal
            out[name] = "not installed"
    proc = subprocess.run([str(ferry), "--version"], capture_output=True, text=True)
    out["ferry"] = (proc.stdout.strip() or "?").splitlines()[0].removeprefix("ferry ")
    return out


def ms(x):
    return f"{x * 1e3:.1f}"


def main():
    parser = argparse.ArgumentParser(description="ferry vs transformers ONNX generation latency")
    parser.add_argument("--layers", type=int, default=QWEN3_06B["num_hidden_layers"])
    parser.add_argument("--vocab", type=int, default=QWEN3_06B["vocab_size"])
    parser.add_argument("--ferry", type=Path,
                        default=Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--prefill-runs", type=int, default=5)
    parser.add_argument("--warmup-steps", type=int, default=4)
    parser.add_argument("--keep", action="store_true", help="keep the exports afterwards")
    parser.add_argument("--reuse-exports", action="store_true",
                        help="time the exports kept by an earlier --keep run instead of exporting")
    args = parser.parse_args()

    ckpt = args.work / f"qwen3-shaped-L{args.layers}-V{args.vocab}"
    t = time.perf_counter()
    if (ckpt / "model.safetensors").exists() and (ckpt / "config.json").exists():
        made = "reused"
    else:
        write_checkpoint(ckpt, args.layers, args.vocab)
        made = f"written in {time.perf_counter() - t:.1f} s"
    ferry_out, hf_out = args.work / "gen-ferry", args.work / "gen-transformers"

    if args.reuse_exports and all((d / "decode.onnx").exists() for d in (ferry_out, hf_out)):
        ferry_cmd, ferry_wall, ferry_err = export_ferry(args.ferry, ckpt, ferry_out, dry=True)
        hf_cmd, hf_wall, hf_err = export_transformers(ckpt, hf_out, None, dry=True)
    else:
        ferry_cmd, ferry_wall, ferry_err = export_ferry(args.ferry, ckpt, ferry_out)
        hf_cmd, hf_wall, hf_err = export_transformers(ckpt, hf_out,
                                                      args.work / "gen-transformers.log")

    busy_before = cpu_busy()
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, args.vocab, size=(1, PROMPT + STEPS), dtype=np.int64)
    opts = session_options(args.threads)
    results, loops = {}, {}
    for name, out, err in (("ferry", ferry_out, ferry_err), ("transformers", hf_out, hf_err)):
        if err:
            results[name] = err
            continue
        try:
            loops[name] = InPlaceLoop(out / "decode.onnx", opts)
        except Exception as e:  # noqa: BLE001 - a runtime failure goes in the table
            results[name] = f"onnxruntime: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    try:
        results.update(measure(loops, tokens, args.prefill_runs, args.warmup_steps))
    except Exception as e:  # noqa: BLE001
        for name in loops:
            results[name] = f"onnxruntime: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
    loops.clear()
    busy_after = cpu_busy()
    f, h = results["ferry"], results["transformers"]
    print(f"\nCheckpoint: Qwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}, bf16 random "
          f"weights, tied embeddings ({made}); both exports fp32, static cache "
          f"max_cache_len {MAX_CACHE_LEN}, multi-token decode; batch 1.")
    print(f"Loop: the guide's, one decode graph, cache pairs bound in place (IOBinding, CPU); "
          f"prefill = {PROMPT}-token prompt on an empty cache (median of "
          f"{args.prefill_runs} after 2 warm-up passes), decode = mean of {STEPS} one-token steps "
          f"after it; the two graphs take turns call by call.\n")
    print("| | ferry | transformers | ferry / transformers |")
    print("|---|---:|---:|---:|")

    told = set()

    def row(label, key, fmt=ms):
        cells = []
        for r in (f, h):
            cells.append(fmt(r[key]) if isinstance(r, dict) else
                         "failed (above)" if r in told else f"failed: {r}")
            if not isinstance(r, dict):
                told.add(r)
        ratio = (f"{f[key] / h[key]:.2f}" if isinstance(f, dict) and isinstance(h, dict)
                 else "n/a")
        print(f"| {label} | {cells[0]} | {cells[1]} | {ratio} |")

    row(f"prefill, {PROMPT} tokens (ms)", "prefill")
    row(f"decode step, mean of {STEPS} (ms)", "step_mean")
    row("decode step, median (ms)", "step_p50")
    if ferry_wall is not None and hf_wall is not None:
        print(f"| export wall time (s) | {ferry_wall:.1f}{' (failed)' if ferry_err else ''} | "
              f"{hf_wall:.1f}{' (failed)' if hf_err else ''} | {ferry_wall / hf_wall:.3f} |")
    if isinstance(f, dict) and isinstance(h, dict):
        d0 = float(np.abs(f["first"] - h["first"]).max())
        d1 = float(np.abs(f["last"] - h["last"]).max())
        print(f"\nSanity: max |ferry - transformers| logits, last prompt position {d0:.2e}, "
              f"last step {d1:.2e} (same weights, same tokens).")
    print(f"\nMachine: {machine()}; onnxruntime CPUExecutionProvider, intra_op_num_threads "
          f"{args.threads}, inter_op 1, default graph optimizations.")
    if busy_before and busy_after:
        others = ((busy_after[0] - busy_before[0]) - (busy_after[1] - busy_before[1])) / (
            (busy_after[2] - busy_before[2]) * (os.cpu_count() or 1))
        print(f"Other processes used {max(0.0, others) * 100:.0f}% of the machine's cores while "
              f"timing (from /proc/stat; more than a few % means the numbers are disturbed).")
    print("Versions: " + ", ".join(f"{k} {v}" for k, v in versions(args.ferry).items()))
    print("Reproduce: " + " ".join(["python", "bench/generation_bench.py", "--layers",
                                     str(args.layers), "--vocab", str(args.vocab)]
                                    + (["--work", str(args.work)] if args.work != WORK else [])
                                    + (["--reuse-exports"] if ferry_wall is None else [])))
    print("ferry command: " + " ".join(ferry_cmd))
    print("transformers call: " + hf_cmd)
    if not args.keep:
        shutil.rmtree(ferry_out, ignore_errors=True)
        shutil.rmtree(hf_out, ignore_errors=True)


if __name__ == "__main__":
    main()
