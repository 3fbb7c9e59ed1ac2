#!/usr/bin/env python3
"""Mixture of experts: ferry's export of a Qwen3-MoE checkpoint against transformers' exporters,
its peak RSS against the checkpoint's size, and the MoE export's decode against a dense export
with the same active parameters (issue 34's benchmark).

    .venv/bin/python bench/moe_bench.py            # the full run (about an hour on 2 cores)
    .venv/bin/python bench/moe_bench.py --tiny     # the same on tiny checkpoints (minutes)

1. Writes random bf16 checkpoints into bench/work/ with numpy + safetensors (no torch init; the
   tensors come from export_bench.random_bf16, one at a time):
     moe-2g        Qwen3MoeForCausalLM: hidden 1024, 16 heads / 8 KV heads, head_dim 128, 16
                   experts of moe_intermediate_size 768, 4 active (norm_topk_prob), every layer
                   sparse, vocab 151936, tied embeddings, 20 layers (about 2 GB of bf16)
     moe-1g        the same with 8 layers (about half the bytes)
     dense-active  Qwen3ForCausalLM with moe-2g's attention and layers and intermediate_size
                   4 x 768 = 3072: the parameters a token of moe-2g uses, less the router
   The experts are stored per expert, as transformers 5's save_pretrained writes them
   (model.layers.N.mlp.gate.weight [E, h]; model.layers.N.mlp.experts.K.{gate,up,down}_proj.weight).
   A 2-layer version of both configs is loaded first by transformers' from_pretrained, which
   must report no missing, unexpected or mismatched key and whose fused expert parameters must
   hold the tensors written (the run stops otherwise).
2. Exports, one process each, measured by peers_bench.measure (wall time, peak RSS of the
   process tree, others' CPU meanwhile):
     ferry         build/ferry export CKPT OUT --dynamic --for-generation
                     --format onnx                       (standard ONNX, fp32)
                     --format onnx --ort-fusions cpu     (com.microsoft.MoE, GroupQueryAttention)
                     --format openvino                   (one stateful graph)
                   on moe-1g, moe-2g and dense-active (median of --repeats each)
     transformers  bench/peer_transformers.py CKPT OUT --mode generation --format onnx|openvino
                   on moe-2g, once each (timeout --peer-timeout)
     cp + sync     of ferry's model.onnx.data (peers_bench.cp_baseline), the floor of writing
                   those bytes
3. Decode in onnxruntime CPU (bench/ort_latency.py, the same threads and loop for all: a
   128-token prefill, then the mean of 64 one-token steps) for moe-2g and dense-active, standard
   ONNX and --ort-fusions cpu; the same in OpenVINO CPU (bench/ov_latency.py) for ferry's
   OpenVINO exports; and transformers' exports where they succeeded. Each form's pair (the
   mixture, then the dense model) runs back to back after waiting for a quiet machine; while
   other processes use more than a quarter of a core during either half, the pair runs again
   (--latency-tries, 3), and each export's fastest try is kept.
   The floor: the bytes a decode step must read (the active weights in fp32, the whole tied
   head, the KV cache) over the copy bandwidth numpy measures here (quant_bench.copy_bandwidth:
   --threads buffers of 512 MiB copied at once, read + write bytes / time, best of 5).
4. Writes docs/benchmarks-moe.md and bench/work/moe-results.json (with --tiny:
   bench/work/benchmarks-moe-tiny.md and bench/work/moe-results-tiny.json). A step that fails
   is a row with its error, never dropped.

The build is read, never made: if build/ferry is missing or was modified in the last seconds
(a rebuild under way), each ferry step waits for it. The run records the binary's sha256 at
every ferry step and the report says whether it changed during the run.
"""

import argparse
import datetime
import hashlib
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from export_bench import QWEN3_06B, WORK, qwen3_config, tensor_shapes, write_checkpoint, \
    write_random_checkpoint  # noqa: E402
from peers_bench import CONTENDED, PEER_ENV, Exporter, brief, cell, cp_baseline, dir_bytes, \
    ferry_version, fmt_cores, fmt_mib, fmt_ratio, logits_agreement, machine_info, measure, \
    run_export, run_latency, versions, wait_idle, write_tokenizer  # noqa: E402
from quant_bench import copy_bandwidth  # noqa: E402

MiB = 1024 * 1024
PY = sys.executable

# Qwen3-MoE geometry: Qwen3-0.6B's attention (hidden 1024, 16 heads, 8 KV heads, head_dim 128)
# with a mixture of 16 experts, 4 active, as issue 34 asks.
MOE_SHAPE = dict(QWEN3_06B, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=768)
TINY_SHAPE = dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                  intermediate_size=512, vocab_size=4000, num_experts=8, num_experts_per_tok=2,
                  moe_intermediate_size=128)
FULL = {"moe-1g": dict(kind="moe", layers=8), "moe-2g": dict(kind="moe", layers=20),
        "dense-active": dict(kind="dense", layers=20)}
TINY = {"moe-1g": dict(kind="moe", layers=1), "moe-2g": dict(kind="moe", layers=2),
        "dense-active": dict(kind="dense", layers=2)}
MAIN, HALF, DENSE = "moe-2g", "moe-1g", "dense-active"

# ferry's forms: name, label, options, the onnxruntime / OpenVINO runner's kind
GEN = ["--dynamic", "--for-generation", "--force", "--quiet"]
FERRY_FORMS = [
    ("onnx", "ferry ONNX", ["--format", "onnx"], ("ort", "ferry-gen")),
    ("fused", "ferry ONNX --ort-fusions cpu", ["--format", "onnx", "--ort-fusions", "cpu"],
     ("ort", "ferry-gen")),
    ("openvino", "ferry OpenVINO", ["--format", "openvino"], ("ov", "ferry-gen")),
]
PEER_FORMS = [
    ("tf-onnx", "transformers OnnxExporter", "onnx", "onnx", ("ort", "transformers-gen")),
    ("tf-openvino", "transformers OpenVINOExporter", "openvino", "openvino", ("ov", "tf-gen")),
]


# ---------------------------------------------------------------------------------------------
# Checkpoints


def moe_config(layers, shape):
    """config.json of a Qwen3MoeForCausalLM: Qwen3's keys (export_bench.qwen3_config) plus the
    mixture's, every layer sparse."""
    cfg = qwen3_config(layers, shape["vocab_size"], {k: v for k, v in shape.items()
                                                      if k in QWEN3_06B})
    cfg.update(architectures=["Qwen3MoeForCausalLM"], model_type="qwen3_moe",
               num_experts=shape["num_experts"], num_experts_per_tok=shape["num_experts_per_tok"],
               moe_intermediate_size=shape["moe_intermediate_size"], decoder_sparse_step=1,
               mlp_only_layers=[], norm_topk_prob=True, output_router_logits=False,
               router_aux_loss_coef=0.001)
    return cfg


def dense_config(layers, shape):
    """Qwen3ForCausalLM whose MLP has the active width of the mixture: top_k x moe width."""
    dense = {k: v for k, v in shape.items() if k in QWEN3_06B}
    dense["intermediate_size"] = shape["num_experts_per_tok"] * shape["moe_intermediate_size"]
    return qwen3_config(layers, shape["vocab_size"], dense)


def moe_shapes(cfg):
    """Tensor names and shapes as transformers 5's save_pretrained writes a Qwen3-MoE: the router
    `mlp.gate` and each expert's own three projections."""
    h, ff, n_exp = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["num_experts"]
    shapes = {}
    for name, shape in tensor_shapes(dict(cfg, intermediate_size=1)).items():
        if ".mlp." not in name:
            shapes[name] = shape
        elif name.endswith("mlp.gate_proj.weight"):  # one per layer: the mixture goes here
            p = name[:-len("gate_proj.weight")]
            shapes[p + "gate.weight"] = (n_exp, h)
            for e in range(n_exp):
                shapes[f"{p}experts.{e}.gate_proj.weight"] = (ff, h)
                shapes[f"{p}experts.{e}.up_proj.weight"] = (ff, h)
                shapes[f"{p}experts.{e}.down_proj.weight"] = (h, ff)
    return shapes


def write_moe_checkpoint(path, cfg, seed=0):
    """config.json + model.safetensors (header, then each tensor as it is generated)."""
    write_random_checkpoint(path, cfg, moe_shapes(cfg), seed)


def make_checkpoint(work, name, spec, shape, tag=""):
    """-> (path, config, how); reused when its stamp matches."""
    path = work / f"ckpt-{name}{tag}"
    cfg = (moe_config if spec["kind"] == "moe" else dense_config)(spec["layers"], shape)
    stamp = dict(config=cfg, v=1)
    stamp_file = path / "bench-stamp.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp and \
            (path / "model.safetensors").exists():
        return path, cfg, "reused"
    shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    if spec["kind"] == "moe":
        write_moe_checkpoint(path, cfg)
    else:
        dense = {k: cfg[k] for k in QWEN3_06B if k in cfg}
        write_checkpoint(path, spec["layers"], cfg["vocab_size"], shape=dense)
        assert json.loads((path / "config.json").read_text()) == cfg
    write_tokenizer(path)
    stamp_file.write_text(json.dumps(stamp))
    return path, cfg, f"written in {time.perf_counter() - start:.0f} s"


def param_counts(cfg):
    """-> dict: total parameters; `active`, those one token's step reads (attention, norms,
    router, the top_k experts, the whole head: tied, it is the embedding table; one embedding
    row); `all_experts`, the same with every expert (what plain ops that run every expert read)."""
    h, d, L = cfg["hidden_size"], cfg["head_dim"], cfg["num_hidden_layers"]
    q, kv, vocab = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d, cfg["vocab_size"]
    attn = 2 * q * h + 2 * kv * h + 2 * d + 2 * h
    if "num_experts" in cfg:
        expert = 3 * cfg["moe_intermediate_size"] * h
        router = cfg["num_experts"] * h
        mlp_all, mlp_active = router + cfg["num_experts"] * expert, \
            router + cfg["num_experts_per_tok"] * expert
    else:
        mlp_all = mlp_active = 3 * cfg["intermediate_size"] * h
    head = vocab * h
    tail = h + head + (0 if cfg.get("tie_word_embeddings") else vocab * h)
    return dict(total=L * (attn + mlp_all) + tail,
                active=L * (attn + mlp_active) + h + head + h,
                all_experts=L * (attn + mlp_all) + h + head + h)


def kv_bytes(cfg, tokens, itemsize=4):
    return 2 * cfg["num_hidden_layers"] * cfg["num_key_value_heads"] * cfg["head_dim"] * tokens \
        * itemsize


CHECK_NAMES = r"""
import json, sys, torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging
logging.set_verbosity_error()
path, kind = sys.argv[1], sys.argv[2]
model, info = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                   output_loading_info=True)
bad = {k: sorted(map(str, v)) for k, v in info.items() if v}
out = {"class": type(model).__name__, "loading_info": {k: len(v) for k, v in info.items()},
       "problems": bad}
import numpy as np, struct
blob = open(path + "/model.safetensors", "rb").read()
n = struct.unpack("<Q", blob[:8])[0]
header = json.loads(blob[8:8 + n])
raw = {k: np.frombuffer(blob, np.uint16, int(np.prod(v["shape"])), 8 + n + v["data_offsets"][0])
       .reshape(v["shape"]) for k, v in header.items() if k != "__metadata__"}
def f32(a):  # bf16 bits -> float32
    return torch.from_numpy((a.astype(np.uint32) << 16).view(np.float32))
sd = model.state_dict()
checked = 0
if kind == "moe":
    cfg = model.config
    for layer in range(cfg.num_hidden_layers):
        p = f"model.layers.{layer}.mlp."
        gu, dn = sd[p + "experts.gate_up_proj"], sd[p + "experts.down_proj"]
        ff = cfg.moe_intermediate_size
        assert torch.equal(sd[p + "gate.weight"], f32(raw[p + "gate.weight"])), "router"
        for e in range(cfg.num_experts):
            q = f"{p}experts.{e}."
            assert torch.equal(gu[e, :ff], f32(raw[q + "gate_proj.weight"])), q + "gate_proj"
            assert torch.equal(gu[e, ff:], f32(raw[q + "up_proj.weight"])), q + "up_proj"
            assert torch.equal(dn[e], f32(raw[q + "down_proj.weight"])), q + "down_proj"
            checked += 3
    out["experts_checked"] = checked
for name, value in raw.items():  # every other tensor: loaded as written
    if ".experts." in name:
        continue
    assert torch.equal(sd[name], f32(value)), name
out["tensors_in_file"] = len(raw)
out["parameters"] = sum(p.numel() for p in model.parameters())
with torch.no_grad():
    logits = model(torch.arange(8)[None] % model.config.vocab_size).logits
out["forward_ok"] = bool(torch.isfinite(logits).all())
print(json.dumps(out))
sys.exit(1 if bad or not out["forward_ok"] else 0)
"""


def check_names(work, log_dir):
    """Load 2-layer versions of both configs with transformers: no missing, unexpected or
    mismatched keys, every tensor where it was written. -> dict per kind."""
    results = {}
    for kind in ("moe", "dense"):
        path, cfg, _ = make_checkpoint(work, f"names-check-{kind}", dict(kind=kind, layers=2),
                                       TINY_SHAPE)
        log = log_dir / f"names-check-{kind}.log"
        r = measure([PY, "-c", CHECK_NAMES, str(path), kind], log, env=PEER_ENV, timeout=600)
        text = log.read_text(errors="replace").strip().splitlines()
        got = None
        for line in reversed(text):
            if line.startswith("{"):
                got = json.loads(line)
                break
        if got:
            got["expected_parameters"] = param_counts(cfg)["total"]
        results[kind] = dict(ok=not r["error"] and got is not None and
                             got["parameters"] == got["expected_parameters"],
                             error=r["error"], result=got, checkpoint=str(path))
    return results


# ---------------------------------------------------------------------------------------------
# ferry's binary: another build may replace it while this runs


def ferry_ready(ferry, wait_limit=900):
    """Wait until `ferry` exists, has not changed for 10 s and answers --version; -> sha256."""
    start = time.time()
    while True:
        try:
            st = ferry.stat()
            if time.time() - st.st_mtime > 10 and os.access(ferry, os.X_OK):
                ok = subprocess.run([str(ferry), "--version"], capture_output=True,
                                    timeout=30).returncode == 0
                if ok and ferry.stat().st_mtime == st.st_mtime:
                    return hashlib.sha256(ferry.read_bytes()).hexdigest()[:16]
        except (OSError, subprocess.SubprocessError):
            pass
        if time.time() - start > wait_limit:
            raise SystemExit(f"{ferry} not ready after {wait_limit} s")
        time.sleep(5)


def git_rev():
    try:
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "src",
                                "include", "CMakeLists.txt"],
                               capture_output=True, text=True).stdout.strip()
        return rev + (" (+ uncommitted changes under src/)" if dirty else "")
    except OSError:
        return "?"


# ---------------------------------------------------------------------------------------------
# Steps


class Run:
    """Results, saved after every step (bench/work/moe-results*.json.partial), so that --resume
    skips what an interrupted run already measured."""

    def __init__(self, args):
        self.args = args
        self.start = time.perf_counter()
        self.partial = args.json.with_suffix(".json.partial")
        self.data = {}
        if args.resume and self.partial.exists():
            self.data = json.loads(self.partial.read_text())
        self.data.setdefault("results", {})
        self.data.setdefault("ferry_hashes", [])

    def say(self, msg):
        print(f"[{time.perf_counter() - self.start:6.0f} s] {msg}", flush=True)

    def done(self, key):
        return key in self.data["results"]

    def save(self, key, value):
        self.data["results"][key] = value
        self.partial.write_text(json.dumps(self.data, indent=2, default=str))

    def ferry_hash(self):
        h = ferry_ready(self.args.ferry)
        if h not in self.data["ferry_hashes"]:
            self.data["ferry_hashes"].append(h)
        return h


def ferry_exports(run, name, ckpt, forms, repeats, keep):
    """ferry's forms of one checkpoint (median of `repeats`). -> {form: result}; with `keep`
    the outputs stay in bench/work/moe-out/ for the latency runs."""
    out_root = run.args.work / "moe-out"
    res = {}
    for form, label, opts, _ in forms:
        run.say(f"{name}: ferry {form} x{repeats}")
        sha = run.ferry_hash()
        exp = Exporter(f"{name}-ferry-{form}", label, None, None, None, repeats=repeats,
                       cmd=[str(run.args.ferry), "export", str(ckpt), "{out}", *opts, *GEN])
        out = out_root / exp.name
        r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
        if r.get("error") and r.get("rc") in (126, 127):  # the binary was being replaced
            run.ferry_hash()
            r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
        r["ferry_sha256"] = sha
        r["cmd"] = show(exp.cmd, ckpt)
        run.say(f"  -> {brief(r)}")
        res[form] = r
        if form == "onnx" and not r.get("error") and (out / "model.onnx.data").exists():
            run.say(f"{name}: cp + sync baseline")
            res["cp"] = cp_baseline(out / "model.onnx.data", run.args.work, run.args.log_dir,
                                    name, repeats)
        if not keep:
            shutil.rmtree(out, ignore_errors=True)
    return res


class MemoryGuard:
    """While a transformers export runs: if the machine's MemAvailable falls under `floor`,
    SIGKILL that export's process group (found by its unique OUT path on the command line and
    its `script`), so that the kernel's OOM killer does not pick another process on this shared
    machine."""

    def __init__(self, marker, floor=1536 * MiB, script="peer_transformers.py"):
        import threading

        self.marker, self.floor, self.fired, self.low = marker, floor, None, None
        self.script = script.encode()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()

    @staticmethod
    def available():
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
        return None

    def _watch(self):
        import signal

        while not self.stop.wait(0.5):
            avail = self.available()
            self.low = avail if self.low is None else min(self.low, avail)
            if avail >= self.floor:
                continue
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if any(self.marker.encode() == arg for arg in cmdline) and \
                        any(arg.endswith(self.script) for arg in cmdline):
                    try:
                        os.killpg(os.getpgid(int(entry)), signal.SIGKILL)
                        self.fired = avail
                    except OSError:
                        pass


def peer_export(run, name, ckpt, key, label, fmt):
    out = run.args.work / "moe-out" / f"{name}-{key}"
    exp = Exporter(f"{name}-{key}", label, None, None, None, env=PEER_ENV,
                   cmd=[PY, str(HERE / "peer_transformers.py"), str(ckpt), "{out}",
                        "--mode", "generation", "--format", fmt])
    run.say(f"{name}: {label} (timeout {run.args.peer_timeout:.0f} s)")
    with MemoryGuard(str(out)) as guard:
        r = run_export(exp, out, run.args.log_dir, run.args.peer_timeout)
    r["min_mem_available"] = guard.low
    if guard.fired is not None:
        r["error"] = (f"killed by this harness when the machine's available memory fell to "
                      f"{guard.fired / MiB:,.0f} MiB (of {machine_info()['ram_gib']:.0f} GiB), "
                      f"the export's tree then holding {r['peak_rss'] / MiB:,.0f} MiB")
    if not r.get("error"):
        import re

        text = Path(r["log_abs"]).read_text(errors="replace")
        r["phases"] = {m.group(1): float(m.group(2)) for m in
                       re.finditer(r"^bench-phase (\w+) ([\d.]+)$", text, re.M)}
    r["cmd"] = show(exp.cmd, ckpt)
    run.say(f"  -> {brief(r)}")
    return r, out


class LatencyArgs:
    def __init__(self, args):
        self.threads, self.prompt, self.steps = args.threads, args.prompt, args.steps
        self.prefill_reps, self.runtime_timeout = args.prefill_reps, args.runtime_timeout


def latency(run, name, out, ckpt, runner, tag=""):
    """bench/ort_latency.py (peers_bench.run_latency) or bench/ov_latency.py on one export."""
    engine, kind = runner
    a = run.args
    if engine == "ort":
        exp = Exporter(name, None, None, kind, None)
        return run_latency(exp, out, str(ckpt), a.log_dir, LatencyArgs(a), tag=tag)
    res_json = a.log_dir / f"latency-{name}{tag}.json"
    res_json.unlink(missing_ok=True)
    r = measure([PY, HERE / "ov_latency.py", "--kind", kind, "--dir", out, "--json", res_json,
                 "--threads", str(a.threads), "--prompt", str(a.prompt), "--steps", str(a.steps),
                 "--reps", str(a.prefill_reps)], a.log_dir / f"latency-{name}{tag}.log",
                timeout=a.runtime_timeout)
    if not r["error"]:
        r.update(json.loads(res_json.read_text()))
    return r


def show(cmd, ckpt):
    words = ["OUT" if c == "{out}" else "CKPT" if str(c) == str(ckpt) else str(c) for c in cmd]
    words = ["python" if w == PY else w for w in words]
    return shlex.join(words).replace(str(ROOT) + "/", "")


def op_counts(out):
    """{op type: count} of an ONNX export's decode graph (which MoE form it holds)."""
    import collections

    import onnx

    path = out / "decode.onnx"
    if not path.exists():
        return None
    graph = onnx.load(str(path), load_external_data=False).graph
    return dict(collections.Counter((f"{n.domain}." if n.domain else "") + n.op_type
                                    for n in graph.node))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ferry", type=Path,
                   default=Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry")
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--tiny", action="store_true", help="tiny checkpoints: a smoke run")
    p.add_argument("--md", type=Path, help="report (default docs/benchmarks-moe.md; "
                   "bench/work/benchmarks-moe-tiny.md with --tiny)")
    p.add_argument("--json", type=Path, help="raw results (default bench/work/moe-results.json; "
                   "moe-results-tiny.json with --tiny)")
    p.add_argument("--repeats", type=int, default=None, help="ferry runs per form (median; "
                   "default 3, 2 with --tiny)")
    p.add_argument("--no-peers", action="store_true", help="skip transformers' exporters")
    p.add_argument("--peer-timeout", type=float, default=None,
                   help="seconds per transformers export (default 2400, 600 with --tiny)")
    p.add_argument("--export-timeout", type=float, default=1800)
    p.add_argument("--runtime-timeout", type=float, default=1800)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--prefill-reps", type=int, default=3, help="timed prefills (median)")
    p.add_argument("--latency-tries", type=int, default=3,
                   help="at most this many measurements of each decode pair while others "
                        "disturb them (the fastest of each export's is kept)")
    p.add_argument("--resume", action="store_true",
                   help="keep the steps an interrupted run saved (moe-results*.json.partial)")
    p.add_argument("--report-from", type=Path, metavar="RESULTS.json",
                   help="only rewrite the report from an earlier run's results")
    p.add_argument("--note", action="append", default=[],
                   help="a sentence for the report's Notes (repeatable; with --report-from it is "
                        "also added to RESULTS.json)")
    args = p.parse_args()
    if args.md is None:
        args.md = args.work / "benchmarks-moe-tiny.md" if args.tiny else \
            ROOT / "docs" / "benchmarks-moe.md"
    if args.json is None:
        args.json = args.work / ("moe-results-tiny.json" if args.tiny else "moe-results.json")
    if args.report_from:
        data = json.loads(args.report_from.read_text())
        if args.note:
            data.setdefault("notes", []).extend(args.note)
            args.report_from.write_text(json.dumps(data, indent=2, default=str))
        write_report(args.md, data)
        print(f"wrote {args.md}")
        return
    args.repeats = args.repeats or (2 if args.tiny else 3)
    args.peer_timeout = args.peer_timeout or (600 if args.tiny else 2400)
    args.ferry, args.work = args.ferry.resolve(), args.work.resolve()
    args.log_dir = args.work / ("moe-logs-tiny" if args.tiny else "moe-logs")
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        shutil.rmtree(args.log_dir, ignore_errors=True)
        shutil.rmtree(args.work / "moe-out", ignore_errors=True)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    run = Run(args)
    data = run.data
    data.update(tiny=args.tiny, command="python bench/moe_bench.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""),
        date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), threads=args.threads,
        prompt=args.prompt, steps=args.steps, prefill_reps=args.prefill_reps,
        repeats=args.repeats, peer_timeout=args.peer_timeout, machine=machine_info(),
        latency_tries=args.latency_tries, notes=data.get("notes", []) + args.note,
        loadavg_start=os.getloadavg(), ferry_rev=git_rev(), ferry_version=ferry_version(args.ferry))

    # --- 1. checkpoints
    if not run.done("names"):
        run.say("checking the tensor names with transformers (2-layer checkpoints)")
        names = check_names(args.work, args.log_dir)
        run.save("names", names)
        for kind, r in names.items():
            run.say(f"  {kind}: {'ok' if r['ok'] else 'FAILED'} {r['result'] or r['error']}")
    names = data["results"]["names"]
    if not all(r["ok"] for r in names.values()):
        raise SystemExit("the checkpoints' names or parameter counts do not load as transformers "
                         f"expects: {json.dumps(names, indent=2)}")
    shape = TINY_SHAPE if args.tiny else MOE_SHAPE
    specs = TINY if args.tiny else FULL
    ckpts, sizes = {}, {}
    for name, spec in specs.items():
        path, cfg, how = make_checkpoint(args.work, name, spec, shape, "-tiny" if args.tiny else "")
        ckpts[name] = path
        sizes[name] = dict(spec, path=str(path.relative_to(ROOT)), config=cfg,
                           bytes=(path / "model.safetensors").stat().st_size, **param_counts(cfg))
        run.say(f"checkpoint {name}: {path} ({how}, {sizes[name]['bytes'] / MiB:,.0f} MiB)")
    data["sizes"] = sizes

    # --- the memory bandwidth (once now, once at the end: the best is kept)
    bw = [copy_bandwidth(args.threads)]
    run.say(f"copy bandwidth {bw[0] / 1e9:.1f} GB/s")

    # --- 2. ferry on the half-size checkpoint (its peak RSS against moe-2g's)
    if not run.done(HALF):
        run.save(HALF, {"exports": ferry_exports(run, HALF, ckpts[HALF], FERRY_FORMS,
                                                 args.repeats, keep=False)})

    # --- 2+3. ferry on moe-2g and the dense model, then each form's decode as a pair (the
    # mixture, then the dense model, back to back, so that the ratio compares like conditions)
    if not (run.done(MAIN) and run.done(DENSE)):
        exports = {name: ferry_exports(run, name, ckpts[name], FERRY_FORMS, args.repeats,
                                       keep=True) for name in (MAIN, DENSE)}
        for name in (MAIN, DENSE):
            exports[name]["graphs"] = {form: op_counts(args.work / "moe-out" /
                                                       f"{name}-ferry-{form}")
                                       for form in ("onnx", "fused")
                                       if not exports[name][form].get("error")}
        lat = {MAIN: {}, DENSE: {}}
        budget = 900.0
        for form, _, _, runner in FERRY_FORMS:
            names = [n for n in (MAIN, DENSE) if not exports[n][form].get("error")]
            tries = []
            for attempt in range(args.latency_tries):
                waited = wait_idle(min(60.0 if attempt == 0 else 180.0, budget))
                budget = max(0.0, budget - waited)
                pair = {}
                for name in names:
                    out = args.work / "moe-out" / f"{name}-ferry-{form}"
                    run.say(f"{name}: latency of ferry {form}"
                            + (f" (try {attempt + 1}; waited {waited:.0f} s for a quieter machine)"
                               if attempt else ""))
                    pair[name] = latency(run, f"{name}-ferry-{form}", out, ckpts[name], runner,
                                         tag="" if attempt == 0 else f"-try{attempt + 1}")
                    run.say(f"  -> {brief(pair[name])}")
                tries.append(pair)
                worst = max((r.get("foreign_cpu") or 0) for r in pair.values()) if pair else 0
                if worst <= CONTENDED:
                    break
            # per export, its fastest try: other processes only ever add time
            keep = ("prefill_ms", "decode_ms_mean", "foreign_cpu", "error")
            for name in names:
                ok = [t[name] for t in tries if not t[name].get("error")]
                best = min(ok, key=lambda r: r.get("decode_ms_mean") or r["prefill_ms"]) if ok \
                    else tries[-1][name]
                best["tries"] = [{k: t[name].get(k) for k in keep} for t in tries]
                lat[name][form] = best
            for name in names:
                shutil.rmtree(args.work / "moe-out" / f"{name}-ferry-{form}", ignore_errors=True)
        for name in (MAIN, DENSE):
            run.save(name, {"exports": exports[name], "latency": lat[name]})

    # --- transformers' exporters on moe-2g
    for key, label, fmt, _, runner in PEER_FORMS:
        step = f"peer-{key}"
        if args.no_peers or run.done(step):
            continue
        r, out = peer_export(run, MAIN, ckpts[MAIN], key, label, fmt)
        entry = {"export": r}
        if not r.get("error"):
            run.say(f"{MAIN}: latency of {label}")
            entry["latency"] = latency(run, f"{MAIN}-{key}", out, ckpts[MAIN], runner)
            run.say(f"  -> {brief(entry['latency'])}")
        shutil.rmtree(out, ignore_errors=True)
        run.save(step, entry)

    # --- the exports agree with each other (same weights, same tokens)
    for name in (MAIN, DENSE):
        lat = data["results"].get(name, {}).get("latency", {})
        ort_rows = {f: {"latency": v} for f, v in lat.items() if f in ("onnx", "fused")}
        if MAIN == name:
            peer = (data["results"].get("peer-tf-onnx") or {}).get("latency")
            if peer:
                ort_rows["tf-onnx"] = {"latency": peer}
        logits_agreement(ort_rows, "onnx")

    bw.append(copy_bandwidth(args.threads))
    run.say(f"copy bandwidth {bw[1] / 1e9:.1f} GB/s")
    data.update(bandwidth=max(bw), bandwidths=bw, loadavg_end=os.getloadavg(),
                versions=versions(PY, ["onnxruntime", "openvino", "transformers", "torch", "onnx",
                                       "onnxscript", "numpy", "safetensors"]),
                total_s=time.perf_counter() - run.start)
    data["ferry_sha256_changed"] = len(data["ferry_hashes"]) > 1
    args.json.write_text(json.dumps(data, indent=2, default=str))
    run.partial.unlink(missing_ok=True)
    args.md.parent.mkdir(parents=True, exist_ok=True)
    write_report(args.md, data)
    run.say(f"wrote {args.md} and {args.json}")
    print(args.md.read_text())


# ---------------------------------------------------------------------------------------------
# Report


def fmt_s(r):
    return f"{r['wall']:.1f}" + (f" ({min(r['walls']):.1f}-{max(r['walls']):.1f})"
                                 if len(r.get("walls", [])) > 1 else "")


def write_report(path, data):
    S, sizes, info = data["results"], data["sizes"], data["machine"]
    main, half, dense = sizes[MAIN], sizes[HALF], sizes[DENSE]
    cfg = main["config"]
    moe_ex = S.get(MAIN, {}).get("exports", {})
    L = ["# Benchmarks: mixture of experts (Qwen3-MoE)", "",
         f"Written by `{data['command']}` on {data['date']} (the run took "
         f"{data['total_s'] / 60:.0f} min)." + (" **A smoke run on tiny checkpoints: its figures "
                                                 "mean nothing.**" if data["tiny"] else ""), "",
         f"**Machine**: {info['cpu']}, {info['cores']} cores, {info['ram_gib']:.0f} GiB RAM, "
         f"Linux {info['kernel']}, {info.get('fs', '?')} filesystem, Python {info['python']}. "
         f"Load average {data['loadavg_start'][0]:.2f} at the start, "
         f"{data['loadavg_end'][0]:.2f} at the end.", "",
         f"**ferry**: {data['ferry_version']}, git {data['ferry_rev']}, build/ferry sha256 "
         f"{', '.join(data['ferry_hashes'])}"
         + (" (**the binary changed during the run**: another build replaced it, so ferry's rows "
            "may come from different builds)" if data.get("ferry_sha256_changed") else
            " (the same binary for every ferry step)") + ". "
         "**Versions**: " + ", ".join(f"{k} {v or 'not installed'}"
                                      for k, v in data["versions"].items()) + ".", ""]
    if data.get("ferry_sha256_changed"):
        by_hash = {}
        for name in (HALF, MAIN, DENSE):
            for form, r in (S.get(name, {}).get("exports") or {}).items():
                if isinstance(r, dict) and r.get("ferry_sha256"):
                    by_hash.setdefault(r["ferry_sha256"], []).append(f"{name} {form}")
        L += ["ferry's rows by binary: " + "; ".join(f"{h}: {', '.join(v)}"
                                                      for h, v in by_hash.items()) + ".", ""]
    foreign = [r.get("foreign_cpu") for step in S.values() if isinstance(step, dict)
               for r in _all_results(step) if r.get("foreign_cpu") is not None]
    if foreign:
        L += [f"**Load**: other processes used {statistics.median(foreign):.2f} of the "
              f"{info['cores']} cores (median over the measurements, up to {max(foreign):.2f}; "
              "column *others' CPU*: CPU time outside the measured process tree and this harness, "
              "from /proc/stat). Another engineer's build ran on this machine during the run, so "
              "times carry that noise; rows of the same table ran under the same conditions "
              "only as far as that column says.", ""]

    L += summary(data)

    # --- checkpoints
    L += ["## Checkpoints", "",
          "Random bf16 weights written with numpy + safetensors (bench/moe_bench.py). Every "
          f"checkpoint: hidden {cfg['hidden_size']}, {cfg['num_attention_heads']} heads / "
          f"{cfg['num_key_value_heads']} KV heads, head_dim {cfg['head_dim']}, q/k norms, vocab "
          f"{cfg['vocab_size']}, tied embeddings. The mixtures: {cfg['num_experts']} experts of "
          f"width {cfg['moe_intermediate_size']}, {cfg['num_experts_per_tok']} active, "
          "norm_topk_prob, every layer sparse, experts stored per expert as transformers 5's "
          "save_pretrained writes them. The dense model has the mixture's active width "
          f"({cfg['num_experts_per_tok']} x {cfg['moe_intermediate_size']} = "
          f"{dense['config']['intermediate_size']}). *Active*: the parameters one decode step "
          "reads (attention, norms, router, the chosen experts, the whole tied head).", "",
          "| checkpoint | class | layers | parameters | active / token | safetensors (MiB) |",
          "|---|---|---:|---:|---:|---:|"]
    for name in (HALF, MAIN, DENSE):
        s = sizes[name]
        L.append(f"| {name} | {s['config']['architectures'][0]} | {s['layers']} | "
                 f"{s['total'] / 1e6:,.0f} M | {s['active'] / 1e6:,.0f} M | "
                 f"{s['bytes'] / MiB:,.0f} |")
    nm = S.get("names", {})
    if nm:
        moe_r = (nm.get("moe") or {}).get("result") or {}
        L += ["", "The names were checked first on 2-layer versions of both configs: "
              "transformers' `AutoModelForCausalLM.from_pretrained(..., output_loading_info=True)` "
              "reported " + "; ".join(
                  f"{k}: " + ("no missing, unexpected or mismatched key" if v["ok"] else
                              f"**{v['error'] or v['result']}**")
                  for k, v in nm.items())
              + f", and every expert's tensors ({moe_r.get('experts_checked', '?')} of them) "
              "are where the fused `experts.gate_up_proj` / `experts.down_proj` parameters hold "
              "them after loading.", ""]

    # --- exports vs peers
    L += ["## Export: ferry against transformers' exporters", "",
          f"On {MAIN} ({main['bytes'] / MiB:,.0f} MiB of safetensors). Every export is fp32, "
          "dynamic shapes, for generation. One process each. *wall*: start to exit. *peak RSS*: "
          "the whole process tree (sum of VmRSS, sampled every 50 ms then 200 ms, never below any "
          "process's VmHWM). "
          f"ferry: median of {data['repeats']} runs (range in brackets); transformers: one run, "
          f"timeout {data['peer_timeout'] / 60:.0f} min. *vs ferry*: a transformers export over "
          "ferry's export of the same format (*ref*). The floor rows copy the bytes of ferry's "
          "model.onnx.data (the weights in fp32) with `cp`, then with `cp` and `sync FILE` "
          f"(median of {data['repeats']}).", "",
          "| exporter | status | wall (s) | vs ferry | peak RSS (MiB) | vs ferry | output (MiB) "
          "| others' CPU |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    pairs = {"tf-onnx": "onnx", "tf-openvino": "openvino"}
    for form, label, _, _ in FERRY_FORMS:
        r = moe_ex.get(form)
        if r is None:
            continue
        L.append(export_row(label, r, None, "ref" if form in pairs.values() else "-"))
    for key, label, _, _, _ in PEER_FORMS:
        step = S.get(f"peer-{key}")
        if step is None:
            L.append(f"| {label} | not run | - | - | - | - | - | - |")
            continue
        L.append(export_row(label, step["export"], moe_ex.get(pairs[key]), "-"))
    cp = moe_ex.get("cp")
    if cp:
        ref = moe_ex.get("onnx", {})
        L.append(f"| *floor: `cp` of ferry's model.onnx.data* | ok | {cp['cp']['wall']:.1f} | - | "
                 f"{fmt_mib(cp['cp']['peak_rss'])} | - | {fmt_mib(cp['bytes'])} | "
                 f"{fmt_cores(cp['cp'].get('foreign_cpu'))} |")
        L.append(f"| *floor: `cp` + `sync FILE`* | ok | {cp['cp_sync']['wall']:.1f} | - | "
                 f"{fmt_mib(cp['cp_sync']['peak_rss'])} | - | {fmt_mib(cp['bytes'])} | "
                 f"{fmt_cores(cp['cp_sync'].get('foreign_cpu'))} |")
    L.append("")
    if cp and not (moe_ex.get("onnx") or {}).get("error"):
        ref = moe_ex["onnx"]
        L += [f"ferry's ONNX export takes {fmt_ratio(ref['wall'], cp['cp']['wall'])} the time of "
              f"`cp` of its weights file and {fmt_ratio(ref['wall'], cp['cp_sync']['wall'])} that "
              "of `cp` + `sync` (ferry fsyncs what it writes before it exits).", ""]
    phases = [(label, (S.get(f"peer-{key}") or {}).get("export", {}).get("phases"))
              for key, label, _, _, _ in PEER_FORMS]
    phases = [(lab, p) for lab, p in phases if p]
    if phases:
        L += ["Where transformers' exports spend their time: " + "; ".join(
            f"{lab}: " + ", ".join(f"{k} {v:.0f} s" for k, v in p.items()) for lab, p in phases)
            + ".", ""]

    lows = [(label, (S.get(f"peer-{key}") or {}).get("export", {}).get("min_mem_available"))
            for key, label, _, _, _ in PEER_FORMS]
    lows = [(lab, v) for lab, v in lows if v]
    if lows:
        L += ["The peak RSS column sums VmRSS over a tree's processes, so it counts file-backed "
              "pages (a mapped checkpoint or output) that the kernel can reclaim. The machine's "
              "lowest MemAvailable during each transformers export: " + ", ".join(
                  f"{lab} {v / MiB:,.0f} MiB" for lab, v in lows)
              + f" (of {info['ram_gib'] * 1024:,.0f} MiB, shared with the other work).", ""]

    # --- RSS flatness
    half_ex = S.get(HALF, {}).get("exports", {})
    L += ["## ferry's peak RSS against the checkpoint's size", "",
          f"The same exports on {HALF} ({half['layers']} layers, {half['bytes'] / MiB:,.0f} MiB) and "
          f"{MAIN} ({main['layers']} layers, {main['bytes'] / MiB:,.0f} MiB, "
          f"{main['bytes'] / half['bytes']:.2f}x the bytes). Target: flat, at most 200 MiB.", "",
          f"| form | {HALF} wall (s) | {MAIN} wall (s) | wall ratio | {HALF} peak RSS (MiB) | "
          f"{MAIN} peak RSS (MiB) | RSS ratio | RSS / checkpoint ({MAIN}) | ≤ 200 MiB |",
          "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for form, label, _, _ in FERRY_FORMS:
        a, b = half_ex.get(form), moe_ex.get(form)
        if not a or not b:
            continue
        if a.get("error") or b.get("error"):
            L.append(f"| {label} | {cell(a.get('error') or 'ok')} | {cell(b.get('error') or 'ok')} "
                     "| - | - | - | - | - | - |")
            continue
        worst = max(a["peak_rss"], b["peak_rss"])
        L.append(f"| {label} | {fmt_s(a)} | {fmt_s(b)} | {fmt_ratio(b['wall'], a['wall'])} | "
                 f"{fmt_mib(a['peak_rss'])} | {fmt_mib(b['peak_rss'])} | "
                 f"{fmt_ratio(b['peak_rss'], a['peak_rss'])} | "
                 f"{100 * b['peak_rss'] / main['bytes']:.1f} % | "
                 f"{'yes' if worst <= 200 * MiB else '**no**'} |")
    L.append("")
    dense_ex = S.get(DENSE, {}).get("exports", {})
    if dense_ex:
        L += [f"ferry on {DENSE} ({dense['bytes'] / MiB:,.0f} MiB): " + "; ".join(
            f"{label} " + (f"{fmt_s(r)} s, {fmt_mib(r['peak_rss'])} MiB" if not r.get("error")
                           else f"failed: {cell(r['error'])}")
            for form, label, _, _ in FERRY_FORMS if (r := dense_ex.get(form))) + ".", ""]

    # --- decode
    moe_lat = S.get(MAIN, {}).get("latency", {})
    dense_lat = S.get(DENSE, {}).get("latency", {})
    bw = data["bandwidth"]
    tokens = data["prompt"] + data["steps"] // 2 + 2
    floor_active = (main["active"] * 4 + kv_bytes(cfg, tokens)) / bw
    floor_all = (main["all_experts"] * 4 + kv_bytes(cfg, tokens)) / bw
    floor_dense = (dense["active"] * 4 + kv_bytes(dense["config"], tokens)) / bw
    L += ["## Decode: the mixture against a dense model of the same active parameters", "",
          f"{MAIN} against {DENSE} (the same attention and layers, an MLP of the mixture's active "
          f"width). Batch 1, a {data['prompt']}-token prompt, then the mean of {data['steps']} "
          f"one-token steps (4 warm-up steps first), {data['threads']} threads, the same seeded "
          "tokens for all. onnxruntime: bench/ort_latency.py (CPUExecutionProvider, "
          "intra_op_num_threads = threads, sequential, ORT_ENABLE_ALL, caches passed as OrtValues "
          "through IOBinding). OpenVINO: bench/ov_latency.py (CPU, f32 inference precision, the "
          "stateful graph). *prefill*: median of "
          f"{data['prefill_reps']} prompts after a warm-up. Each form's two exports ran back to back "
          "(the mixture, then the dense model), after waiting up to a minute for the machine to "
          f"go quiet; while others disturbed either half by more than {CONTENDED} cores the pair "
          f"was measured again after a longer wait (at most {data.get('latency_tries', 2)} tries, "
          "15 minutes of waiting in all; *tries*), and each export's fastest try is the figure "
          "(others' work only ever adds time; *others' CPU* is that try's). "
          "Target: the mixture within 1.5x of the dense model.", "",
          f"| runtime / form | {MAIN} decode (ms/step) | {DENSE} decode (ms/step) | MoE / dense "
          "| within 1.5x | MoE vs floor | MoE prefill (ms) | dense prefill (ms) | MoE runtime peak "
          "RSS (MiB) | others' CPU (MoE / dense) | tries |",
          "|---|---:|---:|---:|---|---:|---:|---:|---:|---|---:|"]
    labels = {"onnx": "onnxruntime, standard ONNX", "fused": "onnxruntime, --ort-fusions cpu",
              "openvino": "OpenVINO, ferry's IR"}
    for form, _, _, _ in FERRY_FORMS:
        m, d = moe_lat.get(form), dense_lat.get(form)
        if m is None and d is None:
            continue
        m, d = m or {}, d or {}
        if m.get("error") or d.get("error"):
            L.append(f"| {labels[form]} | {cell(m.get('error') or dec(m))} | "
                     f"{cell(d.get('error') or dec(d))} | - | - | - | - | - | - | - | - |")
            continue
        md, dd = m.get("decode_ms_mean"), d.get("decode_ms_mean")
        ratio = md / dd if md and dd else None
        L.append(f"| {labels[form]} | {dec(m)} | {dec(d)} | "
                 f"{'-' if ratio is None else f'{ratio:.2f}x'} | "
                 f"{'-' if ratio is None else 'yes' if ratio <= 1.5 else '**no**'} | "
                 f"{fmt_ratio(md, 1e3 * floor_active)} | {m.get('prefill_ms', 0):.0f} | "
                 f"{d.get('prefill_ms', 0):.0f} | {fmt_mib(m.get('peak_rss'))} | "
                 f"{fmt_cores(m.get('foreign_cpu'))} / {fmt_cores(d.get('foreign_cpu'))} | "
                 f"{len(m.get('tries') or [1])} |")
    for key, label, _, _, _ in PEER_FORMS:
        lat = (S.get(f"peer-{key}") or {}).get("latency")
        if not lat:
            continue
        engine = "onnxruntime" if key == "tf-onnx" else "OpenVINO"
        if lat.get("error"):
            L.append(f"| {engine}, {label}'s export | {cell(lat['error'])} | - | - | - | - | - | - "
                     "| - | - | - |")
            continue
        md = lat.get("decode_ms_mean")
        L.append(f"| {engine}, {label}'s export | {dec(lat)} | - | - | - | "
                 f"{fmt_ratio(md, 1e3 * floor_active)} | {lat.get('prefill_ms', 0):.0f} | - | "
                 f"{fmt_mib(lat.get('peak_rss'))} | {fmt_cores(lat.get('foreign_cpu'))} | 1 |")
    L.append("")
    graphs = S.get(MAIN, {}).get("exports", {}).get("graphs") or {}
    shown = ("NonZero", "ScatterElements", "Gemm", "TopK", "com.microsoft.MoE",
             "com.microsoft.GroupQueryAttention")
    parts = []
    for form, counts in graphs.items():
        if counts:
            parts.append(f"{labels[form].split(', ')[1]}: " + ", ".join(
                f"{counts[op]} {op}" for op in shown if counts.get(op)))
    if parts:
        L += [f"The MoE forms measured, from the op counts of {MAIN}'s decode.onnx "
              f"({main['layers']} layers): " + "; ".join(parts) + ". ferry's OpenVINO IR holds "
              "the tiled block the CPU plugin turns into GatherMatmul (docs/formats.md).", ""]
    diffs = [(f, v.get("max_abs_diff")) for f, v in moe_lat.items() if v.get("max_abs_diff")
             is not None and f != "onnx"]
    tf_lat = (S.get("peer-tf-onnx") or {}).get("latency") or {}
    if tf_lat.get("max_abs_diff") is not None:
        diffs.append(("transformers' ONNX export", tf_lat["max_abs_diff"]))
    if diffs:
        L += ["The exports compute the same function: max |Δ logits| from ferry's standard ONNX "
              f"export of {MAIN} over the prompt's last position and the last step: " + ", ".join(
                  f"{labels.get(f, f)} {v:.1e}" for f, v in diffs)
              + (f" (logits reach ~{moe_lat['onnx']['ref_scale']:.1f})"
                 if moe_lat.get("onnx", {}).get("ref_scale") else "") + ".", ""]

    # --- the floor
    L += ["### The floor", "",
          f"A decode step reads every weight it uses once. Memory bandwidth measured here: "
          f"{bw / 1e9:.1f} GB/s (numpy copying {data['threads']} x 512 MiB at once, read + write "
          "bytes / time, best of 5; measured at the start and the end of the run: "
          + ", ".join(f"{b / 1e9:.1f}" for b in data["bandwidths"]) + " GB/s, the higher kept). "
          f"KV cache at ~{tokens} tokens included (fp32).", "",
          "| what a step reads | parameters | bytes (fp32, MiB) | floor (ms/step) |",
          "|---|---:|---:|---:|",
          f"| {MAIN}, the {cfg['num_experts_per_tok']} chosen experts only | "
          f"{main['active'] / 1e6:,.0f} M | {(main['active'] * 4 + kv_bytes(cfg, tokens)) / MiB:,.0f} "
          f"| {1e3 * floor_active:.1f} |",
          f"| {MAIN}, all {cfg['num_experts']} experts (a form that runs every expert) "
          f"| {main['all_experts'] / 1e6:,.0f} M | "
          f"{(main['all_experts'] * 4 + kv_bytes(cfg, tokens)) / MiB:,.0f} | {1e3 * floor_all:.1f} |",
          f"| {DENSE} | {dense['active'] / 1e6:,.0f} M | "
          f"{(dense['active'] * 4 + kv_bytes(dense['config'], tokens)) / MiB:,.0f} | "
          f"{1e3 * floor_dense:.1f} |", ""]
    rows = []
    for form in ("onnx", "fused", "openvino"):
        m, d = moe_lat.get(form) or {}, dense_lat.get(form) or {}
        if m.get("decode_ms_mean") and d.get("decode_ms_mean"):
            rows.append(f"{labels[form]}: the mixture {m['decode_ms_mean'] / (1e3 * floor_active):.2f}x "
                        f"its floor, the dense model {d['decode_ms_mean'] / (1e3 * floor_dense):.2f}x "
                        "its own")
    if rows:
        L += ["Measured against the floor: " + "; ".join(rows) + ".", ""]

    notes = data.get("notes") or []
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]

    # --- commands
    L += ["## Commands", "",
          f"ferry (`--dynamic --for-generation`, median of {data['repeats']}; CKPT is "
          f"{sizes[HALF]['path']}, {sizes[MAIN]['path']} or {sizes[DENSE]['path']}):", "", "```sh"]
    for form, _, _, _ in FERRY_FORMS:
        r = moe_ex.get(form)
        if r:
            L.append(r["cmd"])
    L += ["```", "", f"transformers, on {sizes[MAIN]['path']}:", "", "```sh"]
    for key, *_ in PEER_FORMS:
        step = S.get(f"peer-{key}")
        if step:
            L.append(step["export"]["cmd"])
    L += ["```", "", "Latency (one process per export):", "", "```sh",
          f"python bench/ort_latency.py --kind ferry-gen --dir OUT --config CKPT/config.json "
          f"--json R.json --threads {data['threads']} --prompt {data['prompt']} --steps "
          f"{data['steps']} --reps {data['prefill_reps']}",
          f"python bench/ov_latency.py --kind ferry-gen --dir OUT --json R.json --threads "
          f"{data['threads']} --prompt {data['prompt']} --steps {data['steps']} --reps "
          f"{data['prefill_reps']}", "```", "",
          "transformers' exports run the same way (`--kind transformers-gen`, `--kind tf-gen`). "
          "HF_HUB_OFFLINE=1 for the Python exporters; the page cache is warm for everyone (the "
          "checkpoints were just written or read; `sync` runs untimed before each export).", "",
          "## Reproduce", "", "```sh", ".venv/bin/python bench/moe_bench.py          # this report",
          ".venv/bin/python bench/moe_bench.py --tiny   # a smoke run in minutes", "```", "",
          f"Raw figures: bench/work/{'moe-results-tiny.json' if data['tiny'] else 'moe-results.json'}; "
          f"each process's output: bench/work/moe-logs{'-tiny' if data['tiny'] else ''}/.", ""]
    path.write_text("\n".join(L))


def summary(data):
    """Short sentences with the figures issue 34 asks for."""
    S, sizes = data["results"], data["sizes"]
    main, half = sizes[MAIN], sizes[HALF]
    ex = S.get(MAIN, {}).get("exports", {})
    out = []
    for key, label, _, ferry_form, _ in PEER_FORMS:
        f, t = ex.get(ferry_form) or {}, (S.get(f"peer-{key}") or {}).get("export") or {}
        if f.get("error"):
            out.append(f"ferry's {ferry_form} export of {MAIN} failed: {cell(f['error'])}.")
        elif t.get("error"):
            out.append(f"ferry exported {MAIN} to {ferry_form} in {f['wall']:.0f} s at "
                       f"{fmt_mib(f['peak_rss'])} MiB peak RSS; {label} failed: "
                       f"{cell(t['error'])}.")
        elif t:
            out.append(f"{ferry_form}: ferry exported {MAIN} ({main['bytes'] / MiB:,.0f} MiB) in "
                       f"{f['wall']:.0f} s at {fmt_mib(f['peak_rss'])} MiB peak RSS; {label} "
                       f"took {t['wall']:.0f} s ({t['wall'] / f['wall']:.0f}x) and "
                       f"{fmt_mib(t['peak_rss'])} MiB ({t['peak_rss'] / f['peak_rss']:.0f}x).")
    hx = S.get(HALF, {}).get("exports", {})
    pairs = [(form, hx.get(form), ex.get(form)) for form, *_ in FERRY_FORMS]
    pairs = [(fm, a, b) for fm, a, b in pairs if a and b and not a.get("error")
             and not b.get("error")]
    if pairs:
        worst = max(max(a["peak_rss"], b["peak_rss"]) for _, a, b in pairs)
        out.append(f"ferry's peak RSS from {HALF} to {MAIN} ({main['bytes'] / half['bytes']:.2f}x "
                   "the bytes): " + ", ".join(
                       f"{fm} {fmt_mib(a['peak_rss'])} -> {fmt_mib(b['peak_rss'])} MiB"
                       for fm, a, b in pairs)
                   + f"; at most {fmt_mib(worst)} MiB, "
                   + ("within" if worst <= 200 * MiB else "**over**") + " the 200 MiB target.")
    ml, dl = S.get(MAIN, {}).get("latency", {}), S.get(DENSE, {}).get("latency", {})
    rat = []
    for form, *_ in FERRY_FORMS:
        m, d = (ml.get(form) or {}).get("decode_ms_mean"), (dl.get(form) or {}).get("decode_ms_mean")
        if m and d:
            rat.append(f"{form} {m:.0f} vs {d:.0f} ms/step ({m / d:.2f}x"
                       + ("" if m / d <= 1.5 else ", **over 1.5x**") + ")")
    if rat:
        cfg = main["config"]
        tokens = data["prompt"] + data["steps"] // 2 + 2
        floor = 1e3 * (main["active"] * 4 + kv_bytes(cfg, tokens)) / data["bandwidth"]
        best = min((ml[f]["decode_ms_mean"], f) for f in ml if ml[f].get("decode_ms_mean"))
        out.append(f"Decode, {MAIN} vs {DENSE} (target within 1.5x): " + "; ".join(rat)
                   + f". The floor for the mixture's active weights is {floor:.0f} ms/step; its "
                   f"fastest form ({best[1]}) takes {best[0] / floor:.1f}x that.")
    return (["## Summary", ""] + [f"- {x}" for x in out] + [""]) if out else []


def dec(r):
    return "-" if not r.get("decode_ms_mean") else f"{r['decode_ms_mean']:.1f}"


def export_row(label, r, ref, no_ref):
    if r.get("error"):
        return f"| {label} | **failed**: {cell(r['error'])} (after {r.get('wall', 0):.0f} s) | - | - " \
               f"| {fmt_mib(r.get('peak_rss'))} | - | - | {fmt_cores(r.get('foreign_cpu'))} |"
    ok_ref = ref if ref and not ref.get("error") else None
    return (f"| {label} | ok | {fmt_s(r)} | "
            f"{fmt_ratio(r['wall'], ok_ref['wall']) if ok_ref else no_ref} | "
            f"{fmt_mib(r['peak_rss'])} | "
            f"{fmt_ratio(r['peak_rss'], ok_ref['peak_rss']) if ok_ref else no_ref} "
            f"| {fmt_mib(r.get('out_bytes'))} | {fmt_cores(r.get('foreign_cpu'))} |")


def _all_results(step):
    """Every measurement dict under a step's entry."""
    out = []
    for v in step.values():
        if isinstance(v, dict):
            if "wall" in v:
                out.append(v)
            else:
                out.extend(_all_results(v))
    return out


if __name__ == "__main__":
    main()
