#!/usr/bin/env python3
"""Export throughput: ferry vs. plain `cp` of the same number of bytes.

Writes a Qwen3-0.6B-shaped checkpoint with random bf16 weights (hidden 1024, 28 layers, 16 heads,
8 kv heads, head_dim 128, intermediate 3072, vocab 151936, tied embeddings) straight to
safetensors with numpy (no torch init: fast, O(one tensor) memory) into bench/work/, then runs
`ferry export ... --format onnx --dynamic --force` (bf16 -> fp32) as a separate process,
measuring wall time, peak RSS and output bytes; then times `cp` of the produced model.onnx.data
to another file on the same disk (and cp + sync), and prints a markdown table.

    .venv/bin/python bench/export_bench.py [--layers 28] [--vocab 151936] [--ferry build/ferry]

The page cache is not dropped (that needs privileges): both ferry and cp read warm inputs when
the checkpoint was just written, so the comparison is write-bound on both sides.
"""

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "bench" / "work"

QWEN3_06B = dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072, vocab_size=151936)


# Qwen3-1.7B's geometry (also tied embeddings), for the scaling runs of bench/peers_bench.py.
QWEN3_17B = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=6144, vocab_size=151936)


def qwen3_config(layers, vocab, shape=None):
    """config.json as the hub's Qwen3-0.6B spells it (legacy rope_theta key, bf16); `shape`
    (default QWEN3_06B) gives the other geometry keys."""
    cfg = dict(shape or QWEN3_06B, num_hidden_layers=layers, vocab_size=vocab)
    cfg.update(architectures=["Qwen3ForCausalLM"], model_type="qwen3", hidden_act="silu",
               attention_bias=False, attention_dropout=0.0, bos_token_id=151643,
               eos_token_id=151645, max_position_embeddings=40960, max_window_layers=layers,
               rms_norm_eps=1e-6, rope_scaling=None, rope_theta=1000000, sliding_window=None,
               tie_word_embeddings=True, torch_dtype="bfloat16", use_cache=True,
               use_sliding_window=False, initializer_range=0.02)
    return cfg


def tensor_shapes(cfg):
    h, d = cfg["hidden_size"], cfg["head_dim"]
    q, kv, ff = cfg["num_attention_heads"] * d, cfg["num_key_value_heads"] * d, cfg["intermediate_size"]
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({
            p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
            p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
            p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,),
            p + "mlp.gate_proj.weight": (ff, h), p + "mlp.up_proj.weight": (ff, h),
            p + "mlp.down_proj.weight": (h, ff)})
    shapes["model.norm.weight"] = (h,)
    return shapes


def random_bf16(rng, shape, std):
    """bf16 bits of N(0, std) (or N(1, 0.1) for norm weights), generated in 8M-element chunks."""
    n = int(np.prod(shape))
    out = np.empty(n, dtype=np.uint16)
    for start in range(0, n, 1 << 23):
        stop = min(n, start + (1 << 23))
        x = rng.standard_normal(stop - start, dtype=np.float32) * std
        if len(shape) == 1:
            x += 1.0
        bits = x.view(np.uint32)
        out[start:stop] = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return out


def write_checkpoint(path, layers, vocab, seed=0, shape=None):
    """config.json + model.safetensors, written tensor by tensor."""
    cfg = qwen3_config(layers, vocab, shape)
    return path, write_random_checkpoint(path, cfg, tensor_shapes(cfg), seed)


def write_random_checkpoint(path, cfg, shapes, seed):
    """`cfg` as config.json and random bf16 tensors of `shapes` ({name: shape}) as
    model.safetensors (its header, then each tensor as it is generated: memory stays flat),
    with Qwen3's generation_config.json. Returns the tensors' bytes."""
    path.mkdir(parents=True, exist_ok=True)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in shapes.items():
        nbytes = 2 * int(np.prod(shape))
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    rng = np.random.default_rng(seed)
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for name, shape in shapes.items():
            f.write(random_bf16(rng, shape, 0.02 if len(shape) > 1 else 0.1).tobytes())
    (path / "config.json").write_text(json.dumps(cfg, indent=2))
    (path / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": True}, indent=2))
    return offset


def run_measured(cmd):
    """-> (wall seconds, peak RSS bytes, exit code) of one child process.

    Peak RSS comes from GNU time when installed, else from polling the child's VmHWM. Not from
    wait4()'s ru_maxrss: a child forked from this (large) Python process inherits its RSS
    high-water mark across exec, so even `true` would report tens of MiB."""
    gnu_time = Path("/usr/bin/time")
    if gnu_time.exists():
        with tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
            start = time.perf_counter()
            rc = subprocess.call([str(gnu_time), "-q", "-f", "%M", "-o", rss.name, *cmd])
            wall = time.perf_counter() - start
            lines = [ln for ln in open(rss.name).read().split() if ln.isdigit()]
            return wall, int(lines[-1]) * 1024, rc
    start = time.perf_counter()
    proc = subprocess.Popen(cmd)
    peak = 0
    while proc.poll() is None:
        try:
            with open(f"/proc/{proc.pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        peak = max(peak, int(line.split()[1]) * 1024)
        except OSError:
            pass
        time.sleep(0.005)
    return time.perf_counter() - start, peak, proc.returncode


def main():
    parser = argparse.ArgumentParser(description="ferry export vs cp")
    parser.add_argument("--layers", type=int, default=QWEN3_06B["num_hidden_layers"])
    parser.add_argument("--vocab", type=int, default=QWEN3_06B["vocab_size"])
    parser.add_argument("--ferry", type=Path,
                        default=Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry")
    parser.add_argument("--work", type=Path, default=WORK)
    parser.add_argument("--keep", action="store_true", help="keep bench/work afterwards")
    args = parser.parse_args()

    ckpt, in_bytes = args.work / f"qwen3-shaped-L{args.layers}-V{args.vocab}", 0
    t = time.perf_counter()
    if (ckpt / "model.safetensors").exists() and (ckpt / "config.json").exists():
        in_bytes, made = (ckpt / "model.safetensors").stat().st_size, "reused from an earlier run"
    else:
        _, in_bytes = write_checkpoint(ckpt, args.layers, args.vocab)
        made = f"written in {time.perf_counter() - t:.1f} s"
    out = args.work / "out-onnx"
    cmd = [str(args.ferry), "export", str(ckpt), str(out), "--format", "onnx", "--dynamic",
           "--force", "--quiet"]
    subprocess.run(["sync"], check=True)
    wall, rss, rc = run_measured(cmd)
    if rc != 0:
        sys.exit(f"ferry failed (exit {rc}): {' '.join(cmd)}")
    out_bytes = sum(p.stat().st_size for p in out.iterdir())
    data = out / "model.onnx.data"
    copy = args.work / "copy.bin"

    subprocess.run(["sync"], check=True)
    cp_wall, cp_rss, _ = run_measured(["cp", str(data), str(copy)])
    copy.unlink()
    subprocess.run(["sync"], check=True)
    t = time.perf_counter()
    subprocess.run(["cp", str(data), str(copy)], check=True)
    subprocess.run(["sync"], check=True)
    cps_wall = time.perf_counter() - t
    copy_bytes = data.stat().st_size
    copy.unlink()

    mb = 1024 * 1024
    print(f"\nCheckpoint: Qwen3-0.6B shape, {args.layers} layers, vocab {args.vocab}, bf16 random "
          f"({in_bytes / mb:.0f} MiB, {made}); export to fp32, dynamic.\n")
    print("| step | wall (s) | peak RSS (MiB) | bytes written | MiB/s |")
    print("|---|---:|---:|---:|---:|")
    print(f"| ferry export | {wall:.2f} | {rss / mb:.0f} | {out_bytes} | {out_bytes / mb / wall:.0f} |")
    print(f"| cp model.onnx.data | {cp_wall:.2f} | {cp_rss / mb:.0f} | {copy_bytes} | "
          f"{copy_bytes / mb / cp_wall:.0f} |")
    print(f"| cp + sync | {cps_wall:.2f} | - | {copy_bytes} | {copy_bytes / mb / cps_wall:.0f} |")
    print(f"\nferry / cp = {wall / cp_wall:.2f}x, ferry / (cp + sync) = {wall / cps_wall:.2f}x "
          f"(ferry fsyncs its output before the rename)\n")
    print("Reproduce: " + " ".join(["python", "bench/export_bench.py", "--layers", str(args.layers),
                                     "--vocab", str(args.vocab)]))
    print("Command timed: " + " ".join(cmd))
    if not args.keep:
        shutil.rmtree(out)


if __name__ == "__main__":
    main()
