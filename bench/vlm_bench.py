#!/usr/bin/env python3
"""Vision-language exports: ferry's export of a Qwen2-VL-2B-shaped checkpoint against transformers'
OnnxExporter and OpenVINOExporter, and the image encoder's and decode's speed in onnxruntime and
OpenVINO (issue 35's benchmark).

    .venv/bin/python bench/vlm_bench.py            # the full run (2-4 hours on 2 cores, 23 GiB)
    .venv/bin/python bench/vlm_bench.py --tiny     # the same on a tiny checkpoint (minutes)

1. Writes a random bf16 checkpoint of Qwen2VLForConditionalGeneration with Qwen2-VL-2B-Instruct's
   shapes into bench/work/qwen2vl-2b/ with numpy + safetensors (export_bench.
   write_random_checkpoint: one tensor at a time): text hidden 1536, 28 layers, 12 heads / 2 KV
   heads, intermediate 8960, vocab 151936, M-RoPE sections [16, 24, 24], tied embeddings;
   vision tower depth 32, embed_dim 1280, 16 heads, mlp_ratio 4, patch 14, merge 2, temporal
   patch 2, merger out 1536 (2.21 B parameters, 4.4 GB). Tensors are named as transformers 5's
   save_pretrained names them; with the processor's preprocessor_config.json
   (Qwen2VLImageProcessorPil().save_pretrained) and Qwen2-VL-2B-Instruct's
   generation_config.json. First, a 2-layer / depth-2 version of the same config is checked in
   a subprocess: transformers builds it and saves it with save_pretrained, and the names and
   shapes must be those this script writes; the written one loads with
   Qwen2VLForConditionalGeneration.from_pretrained with no missing, unexpected or mismatched
   key, every tensor as written, and a forward over an image is finite (the run stops
   otherwise).
2. Exports, one process each, measured by peers_bench.measure (wall time, peak RSS of the
   process tree, others' CPU meanwhile):
     ferry         build/ferry export CKPT OUT --for-generation --dynamic
                     --format onnx                            (fp32; 5 graphs)
                     --format openvino --disable-stateful     (fp32; 5 graphs)
                   image_encoder, embed_tokens, language_model, lm_head, decode
                   (median of --repeats)
     transformers  bench/peer_transformers_vlm.py CKPT OUT --format onnx|openvino, model
                   loaded in float32 (as ferry exports fp32), once each (timeout
                   --peer-timeout):
                     --mode generation  export_for_generation(model, processor inputs,
                                        config=OnnxConfig(dynamic=True)): language_model,
                                        lm_head, decode (5.24 writes no image encoder)
                     --mode encoder     export(model.model.visual, {hidden_states, grid_thw},
                                        config=OnnxConfig(dynamic=True)): the tower alone
                   reported apart and together (the two processes' walls added, the larger
                   peak). A transformers export killed for memory (it is killed when the
                   machine's available memory falls under --memory-floor-mib, 1.5 GiB, so that
                   the kernel's OOM killer picks no other process) is a row with its error, then
                   runs again with
                   the model in bfloat16 (--no-bf16-fallback: not), compared with ferry's
                   --dtype bf16 export of the same format.
     cp + sync     of ferry's model.onnx.data (peers_bench.cp_baseline), and as many bytes
                   written past the page cache and synced (dd): the floor of writing
                   those bytes
3. Runtime, bench/vlm_latency.py, one process per export and runtime, the same inputs for all
   (transformers' own processor inputs and positions for one 448 x 448 image: grid [1, 32, 32],
   1024 patches, 256 image tokens in a 268-token prompt; bench/peer_transformers_vlm.py --mode
   inputs), the same threads and loops: the image encoder (median of --encoder-reps), the
   prompt (language model + head; median of --prefill-reps), then the mean of --steps one-token
   decode steps; onnxruntime CPU on the ONNX exports, OpenVINO CPU on the OpenVINO ones; ferry's
   exports and transformers' (where they were written). Each run waits for a quiet machine and
   runs again while others used over a quarter of a core (at most --latency-tries, keeping the
   fastest). The features and logits of every export are compared with ferry's ONNX export's.
4. Writes docs/benchmarks-vlm.md and bench/work/vlm-results.json (with --tiny:
   bench/work/benchmarks-vlm-tiny.md and bench/work/vlm-results-tiny.json). A step that fails
   is a row with its error, never dropped.

The build is read, never made: if build/ferry is missing or was modified in the last seconds
(a rebuild under way), each ferry step waits for it. The run records the binary's sha256 at
every ferry step and the report says whether it changed during the run. Outputs are deleted as
soon as they are measured (the full run needs about 25 GB of free disk at its peak: the
checkpoint, one export and a copy of ferry's weights).
"""

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from export_bench import WORK, write_random_checkpoint  # noqa: E402
from moe_bench import MemoryGuard, Run, fmt_s, git_rev, show  # noqa: E402
from peers_bench import CONTENDED, PEER_ENV, Exporter, brief, cell, cp_baseline, \
    ferry_version, fmt_cores, fmt_mib, machine_info, measure, run_export, versions, \
    wait_idle  # noqa: E402

MiB = 1024 * 1024
PY = sys.executable

# Qwen2-VL-2B-Instruct's shapes, in transformers 5's config layout
TEXT_2B = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
               num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=32768,
               rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                "mrope_section": [16, 24, 24]})
VISION_2B = dict(depth=32, embed_dim=1280, hidden_size=1536, num_heads=16, mlp_ratio=4)
TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
              vision_end_token_id=151653)
# --tiny: Qwen2-VL's layout at toy widths (the vocabulary kept: the token ids and
# generate()'s end-of-sequence ids must be in it)
TEXT_TINY = dict(TEXT_2B, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2,
                 rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                  "mrope_section": [4, 6, 6]})
VISION_TINY = dict(depth=2, embed_dim=64, hidden_size=128, num_heads=4, mlp_ratio=2)
GENERATION_CONFIG = {"bos_token_id": 151643, "pad_token_id": 151643, "do_sample": True,
                     "eos_token_id": [151645, 151643], "repetition_penalty": 1.0,
                     "temperature": 0.01, "top_p": 0.001, "top_k": 1}

GEN = ["--for-generation", "--dynamic", "--force", "--quiet"]
# ferry's forms: key, label, options, the vlm_latency kind
# (each peer's reference is ferry's default form of its format, the key that names the format;
# another form of it, key "<format>-...", is a row of its own)
FERRY_FORMS = [
    ("onnx", "ferry ONNX", ["--format", "onnx"], "ferry-onnx"),
    ("openvino", "ferry OpenVINO (stateful: VLMPipeline's layout)", ["--format", "openvino"],
     "ferry-openvino-stateful"),
    ("openvino-stateless", "ferry OpenVINO (--disable-stateful)",
     ["--format", "openvino", "--disable-stateful"], "ferry-openvino"),
]


def base_format(key):
    """The format of a ferry form's key ("openvino-stateless" -> "openvino")."""
    return key.split("-")[0]
# transformers' exporters: format, label, the vlm_latency kind
PEER_FORMS = [("onnx", "transformers OnnxExporter", "tf-onnx"),
              ("openvino", "transformers OpenVINOExporter", "tf-openvino")]
ENGINE = {"onnx": "onnxruntime", "openvino": "OpenVINO"}
LAT_SIZE, TRACE_SIZE = 448, 224


# ---------------------------------------------------------------------------------------------
# The checkpoint


def qwen2vl_config(text, vision):
    """config.json of a Qwen2VLForConditionalGeneration as transformers 5 writes it (text_config
    and vision_config, rope_parameters), bf16."""
    return {"architectures": ["Qwen2VLForConditionalGeneration"], "model_type": "qwen2_vl",
            **TOKENS, "tie_word_embeddings": True, "torch_dtype": "bfloat16",
            "text_config": dict(model_type="qwen2_vl_text", hidden_act="silu", rms_norm_eps=1e-6,
                                attention_dropout=0.0, use_cache=True, bos_token_id=151643,
                                eos_token_id=151645, tie_word_embeddings=True,
                                initializer_range=0.02, **text),
            "vision_config": dict(model_type="qwen2_vl_vision", hidden_act="quick_gelu",
                                  in_channels=3, patch_size=14, spatial_merge_size=2,
                                  temporal_patch_size=2, initializer_range=0.02, **vision)}


def tensor_shapes(cfg):
    """{name: shape} as transformers 5's save_pretrained writes a Qwen2VLForConditionalGeneration
    (the tower under visual., the language model under model., the head tied)."""
    t, v = cfg["text_config"], cfg["vision_config"]
    h, E = t["hidden_size"], v["embed_dim"]
    d = h // t["num_attention_heads"]
    q, kv, ff = t["num_attention_heads"] * d, t["num_key_value_heads"] * d, t["intermediate_size"]
    p, mlp, merged = v["patch_size"], E * v["mlp_ratio"], E * v["spatial_merge_size"] ** 2
    S = {"visual.patch_embed.proj.weight": (E, v["in_channels"], v["temporal_patch_size"], p, p)}
    for i in range(v["depth"]):
        b = f"visual.blocks.{i}."
        S.update({b + "norm1.weight": (E,), b + "norm1.bias": (E,),
                  b + "norm2.weight": (E,), b + "norm2.bias": (E,),
                  b + "attn.qkv.weight": (3 * E, E), b + "attn.qkv.bias": (3 * E,),
                  b + "attn.proj.weight": (E, E), b + "attn.proj.bias": (E,),
                  b + "mlp.fc1.weight": (mlp, E), b + "mlp.fc1.bias": (mlp,),
                  b + "mlp.fc2.weight": (E, mlp), b + "mlp.fc2.bias": (E,)})
    S.update({"visual.merger.ln_q.weight": (E,), "visual.merger.ln_q.bias": (E,),
              "visual.merger.mlp.0.weight": (merged, merged), "visual.merger.mlp.0.bias": (merged,),
              "visual.merger.mlp.2.weight": (v["hidden_size"], merged),
              "visual.merger.mlp.2.bias": (v["hidden_size"],)})
    S["model.embed_tokens.weight"] = (t["vocab_size"], h)
    for i in range(t["num_hidden_layers"]):
        b = f"model.layers.{i}."
        S.update({b + "input_layernorm.weight": (h,), b + "post_attention_layernorm.weight": (h,),
                  b + "self_attn.q_proj.weight": (q, h), b + "self_attn.q_proj.bias": (q,),
                  b + "self_attn.k_proj.weight": (kv, h), b + "self_attn.k_proj.bias": (kv,),
                  b + "self_attn.v_proj.weight": (kv, h), b + "self_attn.v_proj.bias": (kv,),
                  b + "self_attn.o_proj.weight": (h, q),
                  b + "mlp.gate_proj.weight": (ff, h), b + "mlp.up_proj.weight": (ff, h),
                  b + "mlp.down_proj.weight": (h, ff)})
    S["model.norm.weight"] = (h,)
    return S


def param_counts(cfg):
    """-> dict: vision (the tower and merger), text (embedding, layers, norm; the head is tied),
    total."""
    vision = text = 0
    for name, shape in tensor_shapes(cfg).items():
        n = 1
        for s in shape:
            n *= s
        if name.startswith("visual."):
            vision += n
        else:
            text += n
    return dict(vision=vision, text=text, total=vision + text)


def warm_page_cache(directory):
    """Reads every file of `directory` once, untimed."""
    for p in sorted(Path(directory).iterdir()):
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(16 << 20):
                    pass


def make_checkpoint(path, cfg, log_dir):
    """config.json, model.safetensors, generation_config.json, preprocessor_config.json;
    reused when its stamp matches. -> how it was made."""
    stamp = dict(config=cfg, v=1)
    stamp_file = path / "bench-stamp.json"
    if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp and \
            (path / "model.safetensors").exists() and (path / "preprocessor_config.json").exists():
        return "reused"
    shutil.rmtree(path, ignore_errors=True)
    start = time.perf_counter()
    write_random_checkpoint(path, cfg, tensor_shapes(cfg), seed=0)
    (path / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2))
    r = measure([PY, "-c", "import sys\nfrom transformers.models.qwen2_vl."
                 "image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil\n"
                 "Qwen2VLImageProcessorPil().save_pretrained(sys.argv[1])", path],
                log_dir / f"preprocessor-{path.name}.log", env=PEER_ENV, timeout=600)
    if r["error"]:
        raise SystemExit(f"could not write preprocessor_config.json: {r['error']}")
    stamp_file.write_text(json.dumps(stamp))
    return f"written in {time.perf_counter() - start:.0f} s"


CHECK_NAMES = r"""
import json, struct, sys
import numpy as np, torch
from pathlib import Path
from transformers import Qwen2VLConfig, Qwen2VLForConditionalGeneration
from transformers.utils import logging
logging.set_verbosity_error()
mine, ref_dir = Path(sys.argv[1]), Path(sys.argv[2])
sys.path.insert(0, sys.argv[3])
from peer_transformers_vlm import processor_inputs

def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return n, {k: v for k, v in json.loads(f.read(n)).items() if k != "__metadata__"}

out = {}
# 1. transformers' own save_pretrained of the same config: the names and shapes it writes
cfg = json.loads((mine / "config.json").read_text())
kwargs = {k: v for k, v in cfg.items() if k not in ("architectures", "model_type", "torch_dtype")}
torch.manual_seed(0)
torch.set_default_dtype(torch.bfloat16)
ref = Qwen2VLForConditionalGeneration(Qwen2VLConfig(**kwargs))
torch.set_default_dtype(torch.float32)
ref.save_pretrained(ref_dir)
del ref
ref_shapes = {}
for f in sorted(ref_dir.glob("*.safetensors")):
    ref_shapes.update({k: v["shape"] for k, v in header(f)[1].items()})
n, written = header(mine / "model.safetensors")
mine_shapes = {k: v["shape"] for k, v in written.items()}
out["saved_by_transformers"] = len(ref_shapes)
out["written"] = len(mine_shapes)
out["only_in_transformers"] = sorted(set(ref_shapes) - set(mine_shapes))
out["only_written"] = sorted(set(mine_shapes) - set(ref_shapes))
out["shape_differs"] = sorted(k for k in set(ref_shapes) & set(mine_shapes)
                              if ref_shapes[k] != mine_shapes[k])
# 2. the written checkpoint loads as written
model, info = Qwen2VLForConditionalGeneration.from_pretrained(mine, dtype=torch.float32,
                                                              output_loading_info=True)
model.eval()
out["loading_info"] = {k: sorted(map(str, v)) for k, v in info.items()}
blob = open(mine / "model.safetensors", "rb").read()
sd = model.state_dict()
unequal = []
for name, v in written.items():
    raw = np.frombuffer(blob, np.uint16, int(np.prod(v["shape"])), 8 + n + v["data_offsets"][0])
    value = torch.from_numpy((raw.astype(np.uint32) << 16).view(np.float32).reshape(v["shape"]))
    # in memory, transformers 5 holds the tower under model.visual. and the language model under
    # model.language_model. (its conversion mapping renames the saved names on load)
    held = next((k for k in (name, "model." + name, name.replace("model.", "model.language_model.", 1))
                 if k in sd), None)
    if held is None or not torch.equal(sd[held], value):
        unequal.append(name)
out["not_as_written"] = unequal
out["parameters"] = sum(p.numel() for p in model.parameters())
t = model.config.text_config
out["config"] = dict(text_layers=t.num_hidden_layers, hidden=t.hidden_size,
                     mrope_section=t.rope_parameters.get("mrope_section"),
                     vision_depth=model.config.vision_config.depth,
                     tied=model.lm_head.weight.data_ptr() == model.model.language_model.embed_tokens.weight.data_ptr())
inputs = processor_inputs(mine, 112)
with torch.no_grad():
    logits = model(**inputs).logits
out["forward_ok"] = bool(torch.isfinite(logits).all())
out["forward_tokens"] = list(inputs["input_ids"].shape)
print(json.dumps(out))
bad = out["only_in_transformers"] or out["only_written"] or out["shape_differs"] or \
    any(out["loading_info"].get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")) \
    or unequal or not out["forward_ok"] or not out["config"]["tied"]
sys.exit(1 if bad else 0)
"""


def check_names(work, text, vision, log_dir):
    """A 2-layer / depth-2 version of the run's config: the writer against transformers'
    save_pretrained, and from_pretrained of what was written. -> dict."""
    cfg = qwen2vl_config(dict(text, num_hidden_layers=2), dict(vision, depth=2))
    path, ref = work / "qwen2vl-names-check", work / "qwen2vl-names-check-transformers"
    make_checkpoint(path, cfg, log_dir)
    shutil.rmtree(ref, ignore_errors=True)
    log = log_dir / "names-check.log"
    r = measure([PY, "-c", CHECK_NAMES, path, ref, HERE], log, env=PEER_ENV, timeout=1800)
    shutil.rmtree(ref, ignore_errors=True)
    got = None
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            got = json.loads(line)
            break
    if got:
        got["expected_parameters"] = param_counts(cfg)["total"]
    ok = not r["error"] and got is not None and got["parameters"] == got["expected_parameters"]
    shutil.rmtree(path, ignore_errors=True)
    return dict(ok=ok, error=r["error"], result=got, config=cfg, wall=r["wall"],
                peak_rss=r["peak_rss"])


# ---------------------------------------------------------------------------------------------
# Steps


def ferry_export(run, key, ckpt, label, opts, repeats, tag=""):
    """-> (result, OUT): ferry's export of one form, median of `repeats`; OUT kept."""
    out = run.args.out_root / f"ferry-{key}{tag}"
    run.say(f"ferry {key}{tag} x{repeats}")
    sha = run.ferry_hash()
    exp = Exporter(f"ferry-{key}{tag}", label, None, None, None, repeats=repeats,
                   cmd=[str(run.args.ferry), "export", str(ckpt), "{out}", *opts, *GEN])
    warm_page_cache(ckpt)  # a latency run before may have pushed it out of the page cache
    r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
    if r.get("error") and r.get("rc") in (126, 127):  # the binary was being replaced
        run.ferry_hash()
        r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
    r["ferry_sha256"] = sha
    r["cmd"] = show(exp.cmd, ckpt)
    run.say(f"  -> {brief(r)}")
    return r, out


def peer_export(run, ckpt, fmt, label, mode, dtype):
    """-> (result, OUT): one transformers export, watched by MemoryGuard."""
    tag = "" if dtype == "float32" else "-bf16"
    out = run.args.out_root / f"tf-{fmt}-{mode}{tag}"
    exp = Exporter(f"tf-{fmt}-{mode}{tag}", label, None, None, None, env=PEER_ENV,
                   cmd=[PY, str(HERE / "peer_transformers_vlm.py"), str(ckpt), "{out}",
                        "--mode", mode, "--format", fmt, "--dtype", dtype,
                        "--image", str(TRACE_SIZE)])
    run.say(f"{label} {mode} ({dtype}; timeout {run.args.peer_timeout:.0f} s)")
    warm_page_cache(ckpt)
    with MemoryGuard(str(out), floor=run.args.memory_floor_mib * MiB,
                     script="peer_transformers_vlm.py") as guard:
        r = run_export(exp, out, run.args.log_dir, run.args.peer_timeout)
    r["min_mem_available"] = guard.low
    r["dtype"] = dtype
    if guard.fired is not None:
        r["error"] = (f"killed by this harness when the machine's available memory fell to "
                      f"{guard.fired / MiB:,.0f} MiB (of {machine_info()['ram_gib']:.0f} GiB), "
                      f"the export's tree then holding {r['peak_rss'] / MiB:,.0f} MiB")
        r["out_of_memory"] = True
    elif r.get("rc") in (-9, 137):
        r["out_of_memory"] = True
    text = Path(r["log_abs"]).read_text(errors="replace") if r.get("log_abs") else ""
    r["phases"] = {m.group(1): float(m.group(2)) for m in
                   re.finditer(r"^bench-phase (\w+) ([\d.]+)$", text, re.M)}
    r["cmd"] = show(exp.cmd, ckpt)
    run.say(f"  -> {brief(r)}")
    return r, out


def a_rounds(run):
    return run.args.ab_rounds if not run.args.tiny else min(run.args.ab_rounds, 3)


def decode_ab(run, fmt, ckpt, peer_out, peer_kind, features):
    """bench/vlm_decode_ab.py: ferry's default export of `fmt` (exported again: the first was
    removed after its latency run) and transformers' generation export, their decode paired in
    one process."""
    a = run.args
    key, label, opts, kind = next(f for f in FERRY_FORMS if f[0] == fmt)
    out = a.out_root / f"ferry-{key}-ab"
    shutil.rmtree(out, ignore_errors=True)
    r = measure([a.ferry, "export", ckpt, out, *opts, *GEN], a.log_dir / f"export-{key}-ab.log",
                timeout=a.export_timeout)
    if r["error"]:
        return {"error": f"ferry's export: {r['error']}"}
    res_json = a.log_dir / f"decode-ab-{fmt}.json"
    res_json.unlink(missing_ok=True)
    cmd = [PY, HERE / "vlm_decode_ab.py", "--export", f"{kind}={out}", "--export",
           f"{peer_kind}={peer_out}", "--inputs", a.inputs, "--features", features, "--ckpt",
           ckpt, "--rounds", str(a_rounds(run)), "--block", "8", "--threads", str(a.threads),
           "--json", res_json]
    wait_idle(60.0)
    run.say(f"paired decode A/B {kind} / {peer_kind} ({a_rounds(run)} rounds)")
    r = measure(cmd, a.log_dir / f"decode-ab-{fmt}.log", timeout=a.runtime_timeout)
    shutil.rmtree(out, ignore_errors=True)
    if r["error"]:
        return {"error": r["error"]}
    got = json.loads(res_json.read_text())
    got.update(ferry=kind, peer=peer_kind, peak_rss=r["peak_rss"],
               others_cpu=r.get("foreign_cpu"))
    return got


def latency(run, name, kind, out, ckpt, encoder_dir=None, features=None, encoder_only=False):
    """bench/vlm_latency.py on one export, after waiting for a quiet machine; measured again
    while others used more than CONTENDED cores (at most --latency-tries), the fastest kept."""
    a = run.args
    tries, budget = [], 900.0
    for attempt in range(a.latency_tries):
        waited = wait_idle(min(60.0 if attempt == 0 else 180.0, budget))
        budget = max(0.0, budget - waited)
        tag = "" if attempt == 0 else f"-try{attempt + 1}"
        res_json = a.log_dir / f"latency-{name}{tag}.json"
        logits = a.log_dir / f"logits-{name}{tag}.npz"
        res_json.unlink(missing_ok=True)
        cmd = [PY, HERE / "vlm_latency.py", "--kind", kind, "--dir", out, "--inputs", a.inputs,
               "--ckpt", ckpt, "--json", res_json, "--logits", logits,
               "--threads", str(a.threads), "--steps", str(a.steps), "--reps",
               str(a.prefill_reps), "--encoder-reps", str(a.encoder_reps)]
        if encoder_dir:
            cmd += ["--encoder-dir", encoder_dir]
        if features:
            cmd += ["--features", features]
        if encoder_only:
            cmd += ["--encoder-only"]
        run.say(f"latency {name}" + (f" (try {attempt + 1}; waited {waited:.0f} s)"
                                     if attempt else ""))
        r = measure(cmd, a.log_dir / f"latency-{name}{tag}.log", timeout=a.runtime_timeout)
        if not r["error"]:
            r.update(json.loads(res_json.read_text()))
            r["logits_file"] = str(logits)
        shown = {str(out): "OUT", str(encoder_dir): "TOWER_OUT", str(a.inputs): "INPUTS.npz",
                 str(res_json): "R.json", str(logits): "L.npz", str(features): "FEATURES.npz"}
        r["cmd"] = show([shown.get(str(c), c) for c in cmd], ckpt)
        r["encoder_only"] = encoder_only
        run.say(f"  -> {brief(r)}" + (f", encoder {r['encoder_ms']:.0f} ms"
                                      if r.get("encoder_ms") else ""))
        tries.append(r)
        if r["error"] or (r.get("foreign_cpu") or 0) <= CONTENDED:
            break
    ok = [t for t in tries if not t["error"]]
    best = min(ok, key=lambda t: t.get("decode_ms_mean") or t.get("encoder_ms") or 0) if ok \
        else tries[-1]
    keep = ("encoder_ms", "prefill_ms", "decode_ms_mean", "foreign_cpu", "error")
    best["tries"] = [{k: t.get(k) for k in keep} for t in tries]
    return best


def agreement(data):
    """max |difference| of each export's features and logits from ferry's ONNX export's."""
    import numpy as np

    lat = data["results"].get("ferry-onnx", {}).get("latency") or {}
    if not lat.get("logits_file") or not Path(lat["logits_file"]).exists():
        return
    ref = np.load(lat["logits_file"])
    data["ref_scale"] = {k: float(np.abs(ref[k]).max()) for k in ref.files}
    for key, step in data["results"].items():
        entry = step.get("latency") if isinstance(step, dict) else None
        if not isinstance(entry, dict) or not entry.get("logits_file") or \
                not Path(entry["logits_file"]).exists() or key == "ferry-onnx":
            continue
        got = np.load(entry["logits_file"])
        entry["max_abs_diff"] = {k: float(np.abs(got[k] - ref[k]).max()) for k in got.files
                                 if k in ref.files and got[k].shape == ref[k].shape}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ferry", type=Path,
                   default=Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry")
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--tiny", action="store_true", help="a tiny checkpoint: a smoke run")
    p.add_argument("--md", type=Path, help="report (default docs/benchmarks-vlm.md; "
                   "bench/work/benchmarks-vlm-tiny.md with --tiny)")
    p.add_argument("--json", type=Path, help="raw results (default bench/work/vlm-results.json; "
                   "vlm-results-tiny.json with --tiny)")
    p.add_argument("--repeats", type=int, default=None,
                   help="ferry runs per form (median; default 3, 2 with --tiny)")
    p.add_argument("--formats", default="onnx,openvino", help="onnx, openvino or both")
    p.add_argument("--no-peers", action="store_true", help="skip transformers' exporters")
    p.add_argument("--peer-dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the dtype transformers loads the model in (default float32, as ferry "
                        "exports fp32; bfloat16 also exports ferry with --dtype bf16 as its "
                        "reference)")
    p.add_argument("--no-bf16-fallback", action="store_true",
                   help="a float32 transformers export killed for memory is not run again in "
                        "bfloat16")
    p.add_argument("--memory-floor-mib", type=float, default=1536,
                   help="a transformers export is killed (a row with that error) when the "
                        "machine's available memory falls under this (default 1536)")
    p.add_argument("--peer-timeout", type=float, default=None,
                   help="seconds per transformers export (default 3600, 900 with --tiny)")
    p.add_argument("--export-timeout", type=float, default=1800)
    p.add_argument("--runtime-timeout", type=float, default=2400)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--steps", type=int, default=32, help="timed decode steps (mean)")
    p.add_argument("--prefill-reps", type=int, default=2, help="timed prompts (median)")
    p.add_argument("--encoder-reps", type=int, default=3, help="timed encoder calls (median)")
    p.add_argument("--ab-rounds", type=int, default=15,
                   help="rounds of the paired decode A/B (bench/vlm_decode_ab.py; 0: none)")
    p.add_argument("--latency-tries", type=int, default=2,
                   help="at most this many measurements of an export's latency while others "
                        "disturb it (the fastest kept)")
    p.add_argument("--resume", action="store_true",
                   help="keep the steps an interrupted run saved (vlm-results*.json.partial)")
    p.add_argument("--report-from", type=Path, metavar="RESULTS.json",
                   help="only rewrite the report from an earlier run's results")
    p.add_argument("--note", action="append", default=[],
                   help="a sentence for the report's Notes (repeatable)")
    args = p.parse_args()
    if args.md is None:
        args.md = args.work / "benchmarks-vlm-tiny.md" if args.tiny else \
            ROOT / "docs" / "benchmarks-vlm.md"
    if args.json is None:
        args.json = args.work / ("vlm-results-tiny.json" if args.tiny else "vlm-results.json")
    if args.report_from:
        data = json.loads(args.report_from.read_text())
        if args.note:
            data["notes"] = list(dict.fromkeys(data.get("notes", []) + args.note))
            args.report_from.write_text(json.dumps(data, indent=2, default=str))
        write_report(args.md, data)
        print(f"wrote {args.md}")
        return
    formats = [f for f in args.formats.split(",") if f]
    if not set(formats) <= {"onnx", "openvino"}:
        raise SystemExit(f"--formats: onnx and/or openvino, not {args.formats}")
    args.repeats = args.repeats or (2 if args.tiny else 3)
    args.peer_timeout = args.peer_timeout or (900 if args.tiny else 3600)
    args.ferry, args.work = args.ferry.resolve(), args.work.resolve()
    suffix = "-tiny" if args.tiny else ""
    args.log_dir = args.work / f"vlm-logs{suffix}"
    args.out_root = args.work / f"vlm-out{suffix}"
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        shutil.rmtree(args.log_dir, ignore_errors=True)
        shutil.rmtree(args.out_root, ignore_errors=True)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    run = Run(args)
    data = run.data
    data.update(tiny=args.tiny, command="python bench/vlm_bench.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""),
        date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), threads=args.threads,
        steps=args.steps, prefill_reps=args.prefill_reps, encoder_reps=args.encoder_reps,
        repeats=args.repeats, peer_timeout=args.peer_timeout, peer_dtype=args.peer_dtype,
        memory_floor_mib=args.memory_floor_mib,
        latency_tries=args.latency_tries, machine=machine_info(), formats=formats,
        notes=list(dict.fromkeys(data.get("notes", []) + args.note)),
        loadavg_start=os.getloadavg(),
        ferry_rev=git_rev(), ferry_version=ferry_version(args.ferry),
        trace_size=TRACE_SIZE, latency_size=LAT_SIZE)
    text, vision = (TEXT_TINY, VISION_TINY) if args.tiny else (TEXT_2B, VISION_2B)

    # --- 1. the checkpoint
    if not run.done("names"):
        run.say("checking the tensor names with transformers (2 layers, depth 2)")
        names = check_names(args.work, text, vision, args.log_dir)
        run.save("names", names)
        run.say(f"  {'ok' if names['ok'] else 'FAILED'}: {names['result'] or names['error']}")
    names = data["results"]["names"]
    if not names["ok"]:
        raise SystemExit("the written checkpoint's names, shapes or values are not what "
                         f"transformers writes and loads:\n{json.dumps(names, indent=2)}")
    cfg = qwen2vl_config(text, vision)
    ckpt = args.work / ("qwen2vl-tiny" if args.tiny else "qwen2vl-2b")
    # the checkpoint, then at most one export at a time: ferry's ONNX weights and their cp
    # copy, or an OpenVINO export (its graphs hold their own weights: about 1.9x the fp32 bytes)
    params = param_counts(cfg)["total"]
    need = (0 if (ckpt / "model.safetensors").exists() else 2 * params) + 2 * 4 * params + 2**30
    free = shutil.disk_usage(args.work).free
    if free < need:
        raise SystemExit(f"{args.work}: {free / 2**30:.1f} GiB free, the run needs about "
                         f"{need / 2**30:.1f} GiB (the checkpoint, one fp32 export and a copy)")
    how = make_checkpoint(ckpt, cfg, args.log_dir)
    if how == "reused":
        # warm for everyone, as a checkpoint just written is: a reused one may have left the
        # page cache since, and the first export would then read it from the disk
        warm_page_cache(ckpt)
    data["checkpoint"] = dict(path=str(ckpt.relative_to(ROOT)), config=cfg,
                              bytes=(ckpt / "model.safetensors").stat().st_size,
                              **param_counts(cfg))
    run.say(f"checkpoint {ckpt} ({how}, {data['checkpoint']['bytes'] / MiB:,.0f} MiB)")
    args.inputs = args.log_dir / f"inputs-{LAT_SIZE}.npz"
    if not args.inputs.exists():
        r = measure([PY, HERE / "peer_transformers_vlm.py", ckpt, args.inputs, "--mode", "inputs",
                     "--image", str(LAT_SIZE)], args.log_dir / "inputs.log", env=PEER_ENV,
                    timeout=900)
        if r["error"]:
            raise SystemExit(f"could not make the latency inputs: {r['error']}")
    import numpy as np

    x = np.load(args.inputs)
    data["inputs"] = {k: [list(x[k].shape), str(x[k].dtype)] for k in x.files}
    data["inputs_grid"] = x["image_grid_thw"].tolist()

    # --- 2 + 3. ferry: export, floor, latency; then the outputs go
    for key, label, opts, kind in FERRY_FORMS:
        step = f"ferry-{key}"
        if base_format(key) not in formats or run.done(step):
            continue
        r, out = ferry_export(run, key, ckpt, label, opts, args.repeats)
        entry = {"export": r}
        if not r.get("error"):
            entry["graphs"] = sorted(p.name for p in out.iterdir())
            if key == "onnx" and (out / "model.onnx.data").exists():
                run.say("cp + sync of model.onnx.data")
                entry["cp"] = cp_baseline(out / "model.onnx.data", args.work, args.log_dir,
                                          "vlm", args.repeats)
            entry["latency"] = latency(run, step, kind, out, ckpt)
        shutil.rmtree(out, ignore_errors=True)
        run.save(step, entry)

    # --- transformers: the generation export, the tower, their latency
    for fmt, label, kind in PEER_FORMS:
        step = f"tf-{fmt}"
        if args.no_peers or fmt not in formats or run.done(step):
            continue
        # ferry's image features, for a transformers generation export without its tower
        features = next((lat["logits_file"] for lat in (
            (data["results"].get(k) or {}).get("latency") or {} for k in (f"ferry-{fmt}",
                                                                          "ferry-onnx"))
            if lat.get("logits_file") and not lat.get("error")), None)
        entry, outs = {}, {}
        for mode in ("generation", "encoder"):
            r, out = peer_export(run, ckpt, fmt, label, mode, args.peer_dtype)
            entry[mode], outs[mode] = r, out
            if r.get("error") and r.get("out_of_memory") and args.peer_dtype == "float32" \
                    and not args.no_bf16_fallback:
                shutil.rmtree(out, ignore_errors=True)
                entry[f"{mode}_bf16"], outs[f"{mode}_bf16"] = peer_export(
                    run, ckpt, fmt, label, mode, "bfloat16")
        # the runtime: each half as written in the run's dtype, else in bfloat16
        use = {}
        for mode in ("generation", "encoder"):
            for key in (mode, f"{mode}_bf16"):
                if key in entry and not entry[key].get("error"):
                    use[mode] = key
                    break
        if use:
            gen, enc = use.get("generation"), use.get("encoder")
            if gen:
                lat = latency(run, step, kind, outs[gen], ckpt,
                              encoder_dir=outs[enc] if enc else None,
                              features=None if enc else features)
            else:  # the tower alone
                lat = latency(run, f"{step}-encoder-only", kind, outs[enc], ckpt,
                              encoder_dir=outs[enc], encoder_only=True)
            lat["dtypes"] = {m: entry[k]["dtype"] for m, k in use.items()}
            entry["latency"] = lat
        if use.get("generation") and features and a_rounds(run):
            entry["decode_ab"] = decode_ab(run, fmt, ckpt, outs[use["generation"]], kind,
                                           features)
        for out in outs.values():
            shutil.rmtree(out, ignore_errors=True)
        run.save(step, entry)

    # --- ferry --dtype bf16: the reference of transformers' bfloat16 exports
    for key, label, opts, _ in FERRY_FORMS:
        step = f"ferry-{key}-bf16"
        peer = data["results"].get(f"tf-{key}") or {}
        wanted = peer and (args.peer_dtype == "bfloat16" or any(k.endswith("_bf16") for k in peer))
        if not wanted or run.done(step):
            continue
        # VLMPipeline's layout is fp32 only: the bf16 reference is the stateless form
        opts = opts + (["--disable-stateful"] if key == "openvino" else []) + ["--dtype", "bf16"]
        r, out = ferry_export(run, key, ckpt, label + " --dtype bf16", opts, args.repeats,
                              tag="-bf16")
        shutil.rmtree(out, ignore_errors=True)
        run.save(step, {"export": r})

    agreement(data)
    data.update(loadavg_end=os.getloadavg(),
                versions=versions(PY, ["transformers", "torch", "onnxruntime", "openvino", "onnx",
                                       "onnxscript", "numpy", "safetensors", "pillow"]),
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


def millions(n):
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:,.0f} M" if n >= 1e7 else \
        f"{n / 1e6:.2f} M"


def ratio_x(theirs, ours):
    return "-" if not theirs or not ours else f"{theirs / ours:.1f}x"


def rss_part(ours, theirs):
    """ferry's peak RSS as a part of transformers': '1/N'."""
    return "-" if not theirs or not ours else f"1/{theirs / ours:.0f}" if theirs >= ours \
        else f"{ours / theirs:.1f}x theirs"


def combined(gen, enc):
    """transformers' generation export and tower export as one: walls added, the larger peak."""
    if not gen or not enc:
        return None
    if gen.get("error") or enc.get("error"):
        return dict(error=gen.get("error") or enc.get("error"), wall=gen["wall"] + enc["wall"],
                    peak_rss=max(gen["peak_rss"], enc["peak_rss"]))
    return dict(error=None, wall=gen["wall"] + enc["wall"],
                peak_rss=max(gen["peak_rss"], enc["peak_rss"]),
                out_bytes=(gen.get("out_bytes") or 0) + (enc.get("out_bytes") or 0))


def export_line(label, r, ref, target=True):
    """| exporter | status | wall | ferry faster | ≥30x | peak RSS | ferry's RSS | ≤1/20 | output |
    others' CPU |"""
    if r is None:
        return f"| {label} | not run | - | - | - | - | - | - | - | - |"
    if r.get("error"):
        return (f"| {label} | **failed**: {cell(r['error'])} | {r.get('wall', 0):.0f} | - | - | "
                f"{fmt_mib(r.get('peak_rss'))} | - | - | - | {fmt_cores(r.get('foreign_cpu'))} |")
    ok_ref = ref if ref and not ref.get("error") else None
    if ok_ref is None:
        return (f"| {label} | ok | {fmt_s(r)} | {'ref' if ref is None else '-'} | - | "
                f"{fmt_mib(r['peak_rss'])} | {'ref' if ref is None else '-'} | - | "
                f"{fmt_mib(r.get('out_bytes'))} | {fmt_cores(r.get('foreign_cpu'))} |")
    fast = r["wall"] / ok_ref["wall"]
    lean = r["peak_rss"] / ok_ref["peak_rss"]
    return (f"| {label} | ok | {fmt_s(r)} | {fast:.1f}x | "
            f"{('yes' if fast >= 30 else '**no**') if target else '-'} | "
            f"{fmt_mib(r['peak_rss'])} | {rss_part(ok_ref['peak_rss'], r['peak_rss'])} | "
            f"{('yes' if lean >= 20 else '**no**') if target else '-'} | "
            f"{fmt_mib(r.get('out_bytes'))} | {fmt_cores(r.get('foreign_cpu'))} |")


def no_slower(ours, theirs):
    if not ours or not theirs:
        return "-"
    q = ours / theirs
    return "yes" if q <= 1.0 else "within 5 %" if q <= 1.05 else "**no**"


def write_report(path, data):
    S, info, ck = data["results"], data["machine"], data["checkpoint"]
    cfg = ck["config"]
    t, v = cfg["text_config"], cfg["vision_config"]
    L = ["# Benchmarks: vision-language exports (Qwen2-VL-2B shapes)", "",
         f"Written by `{data['command']}` on {data['date']} (the run took "
         f"{data['total_s'] / 60:.0f} min)." + (" **A smoke run on a tiny checkpoint: its figures "
                                                 "mean nothing.**" if data["tiny"] else ""), "",
         f"**Machine**: {info['cpu']}, {info['cores']} cores, {info['ram_gib']:.0f} GiB RAM, "
         f"Linux {info['kernel']}, {info.get('fs', '?')} filesystem, Python {info['python']}. "
         f"Load average {data['loadavg_start'][0]:.2f} at the start, "
         f"{data['loadavg_end'][0]:.2f} at the end.", "",
         f"**ferry**: {data['ferry_version']}, git {data['ferry_rev']}, build/ferry sha256 "
         f"{', '.join(data['ferry_hashes'])}"
         + (" (**the binary changed during the run**: another build replaced it)"
            if data.get("ferry_sha256_changed") else " (the same binary for every ferry step)")
         + ". **Versions**: " + ", ".join(f"{k} {val or 'not installed'}"
                                          for k, val in data["versions"].items()) + ".", ""]
    foreign = [r.get("foreign_cpu") for r in _measurements(S) if r.get("foreign_cpu") is not None]
    if foreign:
        L += [f"**Load**: other processes used {statistics.median(foreign):.2f} of the "
              f"{info['cores']} cores (median over the measurements, up to {max(foreign):.2f}; "
              "column *others' CPU*: CPU time outside the measured process tree and this "
              "harness, from /proc/stat).", ""]
    L += summary(data)

    # --- checkpoint
    names = S.get("names") or {}
    res = names.get("result") or {}
    L += ["## Checkpoint", "",
          f"{ck['path']}: random bf16 weights written with numpy + safetensors "
          "(bench/vlm_bench.py), Qwen2VLForConditionalGeneration with Qwen2-VL-2B-Instruct's "
          f"shapes: text hidden {t['hidden_size']}, {t['num_hidden_layers']} layers, "
          f"{t['num_attention_heads']} heads / {t['num_key_value_heads']} KV heads, intermediate "
          f"{t['intermediate_size']}, vocab {t['vocab_size']}, M-RoPE sections "
          f"{t['rope_parameters']['mrope_section']}, tied embeddings; vision depth {v['depth']}, "
          f"embed_dim {v['embed_dim']}, {v['num_heads']} heads, mlp_ratio {v['mlp_ratio']}, patch "
          f"{v['patch_size']}, merge {v['spatial_merge_size']}, temporal patch "
          f"{v['temporal_patch_size']}, merger out {v['hidden_size']}. "
          f"{millions(ck['total'])} parameters ({millions(ck['vision'])} in the tower and "
          f"merger, {millions(ck['text'])} in the language model), "
          f"{ck['bytes'] / MiB:,.0f} MiB of safetensors; fp32 exports hold about "
          f"{ck['total'] * 4 / MiB:,.0f} MiB of weights.", ""]
    if res:
        li = res.get("loading_info") or {}
        L += ["The names were checked first on a 2-layer / depth-2 version of the same config: "
              f"transformers built it and saved it with save_pretrained ({res['saved_by_transformers']} "
              f"tensors), and this script's writer wrote {res['written']}; "
              + ("the same names and shapes" if not (res["only_in_transformers"] or
                                                   res["only_written"] or res["shape_differs"])
                 else f"**they differ**: {res['only_in_transformers'][:5]} / "
                      f"{res['only_written'][:5]} / {res['shape_differs'][:5]}")
              + ". `Qwen2VLForConditionalGeneration.from_pretrained` of the written one reported "
              + ("no missing, unexpected or mismatched key" if not any(li.values())
                 else f"**{li}**")
              + (", every tensor as written" if not res.get("not_as_written")
                 else f", **{len(res['not_as_written'])} tensors not as written**")
              + f" ({res['parameters']:,} parameters; the head tied: {res['config']['tied']}), "
              f"and a forward over a 112 x 112 image ({res['forward_tokens'][1]} tokens) was "
              f"{'finite' if res['forward_ok'] else '**not finite**'}.", ""]

    # --- exports
    grid = data.get("inputs_grid")
    L += ["## Export: ferry against transformers' exporters", "",
          "One process each, from the same checkpoint. *wall*: start to exit. *peak RSS*: the "
          "whole process tree (sum of VmRSS, sampled every 50 ms then 200 ms, never below any "
          f"process's VmHWM). ferry: median of {data['repeats']} runs (range in brackets), "
          "`--for-generation --dynamic`, fp32 (its default), five graphs: image_encoder, "
          "embed_tokens, language_model, lm_head, decode. transformers: one run each, timeout "
          f"{data['peer_timeout'] / 60:.0f} min, the model loaded with "
          "`Qwen2VLForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)` and the "
          f"processor's inputs for one {data['trace_size']} x {data['trace_size']} image "
          "(image_grid_thw [1, 16, 16], 64 image tokens): `export_for_generation(model, inputs, "
          "config=OnnxConfig(dynamic=True))` writes language_model, lm_head and decode only "
          "(transformers 5.24: generate() encodes the image before its first forward, so no "
          "image encoder is traced), so the tower is exported by itself too "
          "(`export(model.model.visual, {hidden_states, grid_thw}, config=OnnxConfig(dynamic="
          "True))`), in a second process; *generation + tower* adds the two walls and keeps the "
          "larger peak: the like-for-like row against ferry's five graphs. transformers traces "
          "batch 1 without padding, so its generation graphs fix the batch at 1 and take no "
          "attention_mask, and its tower's cu_seqlens is fixed at [0, patches] (one image a "
          "call, as ferry's image_encoder takes them); ferry's graphs take any batch. "
          "*ferry faster*: "
          "transformers' wall over ferry's (target ≥ 30x); *ferry's RSS*: ferry's peak as a part "
          "of transformers' (target ≤ 1/20). The floor rows copy ferry's model.onnx.data (the "
          f"fp32 weights) with `cp`, then `cp` + `sync FILE` (median of {data['repeats']}).", ""]
    head = ["| exporter | status | wall (s) | ferry faster | ≥ 30x | peak RSS (MiB) | ferry's RSS "
            "| ≤ 1/20 | output (MiB) | others' CPU |",
            "|---|---|---:|---:|---|---:|---:|---|---:|---:|"]
    for fmt, label, _ in PEER_FORMS:
        if fmt not in data.get("formats", [fmt]):
            continue
        fkey = f"ferry-{fmt}"
        ferry = (S.get(fkey) or {}).get("export")
        peer = S.get(f"tf-{fmt}") or {}
        flabel = next(lab for k, lab, _, _ in FERRY_FORMS if k == fmt)
        L += [f"### {'ONNX' if fmt == 'onnx' else 'OpenVINO'}", ""] + head
        L.append(export_line(flabel, ferry, None))
        for key, other, _, _ in FERRY_FORMS:
            if key != fmt and base_format(key) == fmt and (S.get(f"ferry-{key}") or {}).get(
                    "export"):
                L.append(export_line(other, S[f"ferry-{key}"]["export"], None))
        fp32 = data.get("peer_dtype", "float32") == "float32"
        fb = (S.get(f"{fkey}-bf16") or {}).get("export")
        dl = "fp32" if fp32 else "bf16"
        ref = ferry if fp32 else fb
        if not fp32 and fb:
            L.append(export_line(flabel + " --dtype bf16 (the reference of bf16 rows)", fb, None))
        gen, enc = peer.get("generation"), peer.get("encoder")
        L.append(export_line(f"{label} export_for_generation ({dl})", gen, ref, False))
        L.append(export_line(f"{label} tower alone ({dl})", enc, ref, False))
        L.append(export_line(f"**{label} generation + tower ({dl})**", combined(gen, enc), ref))
        if "generation_bf16" in peer or "encoder_bf16" in peer:
            # the fallback: what ran out of memory in fp32, again in bf16, against ferry's bf16
            if fb:
                L.append(export_line(flabel + " --dtype bf16 (the reference of bf16 rows)", fb,
                                     None))
            gen_b, enc_b = peer.get("generation_bf16"), peer.get("encoder_bf16")
            if gen_b:
                L.append(export_line(f"{label} export_for_generation (bf16, after fp32 ran out "
                                     "of memory)", gen_b, fb, False))
            if enc_b:
                L.append(export_line(f"{label} tower alone (bf16, after fp32 ran out of memory)",
                                     enc_b, fb, False))
            mixed = not (gen_b and enc_b)
            L.append(export_line(f"**{label} generation + tower (bf16"
                                 + (", the other half fp32" if mixed else "") + ")**",
                                 combined(gen_b or gen, enc_b or enc), fb))
        cp = (S.get(fkey) or {}).get("cp")
        if cp:
            L.append(f"| *floor: `cp` of ferry's model.onnx.data* | ok | {cp['cp']['wall']:.1f} | "
                     f"- | - | {fmt_mib(cp['cp']['peak_rss'])} | - | - | {fmt_mib(cp['bytes'])} | "
                     f"{fmt_cores(cp['cp'].get('foreign_cpu'))} |")
            L.append(f"| *floor: `cp` + `sync FILE`* | ok | {cp['cp_sync']['wall']:.1f} | - | - | "
                     f"{fmt_mib(cp['cp_sync']['peak_rss'])} | - | - | {fmt_mib(cp['bytes'])} | "
                     f"{fmt_cores(cp['cp_sync'].get('foreign_cpu'))} |")
            ws = cp.get("write_sync")
            if ws:
                L.append(f"| *floor: as many bytes written past the page cache and synced "
                         f"(`dd oflag=direct conv=fsync`)* | ok | {ws['wall']:.1f} | - | - | "
                         f"{fmt_mib(ws['peak_rss'])} | - | - | {fmt_mib(cp['bytes'])} | "
                         f"{fmt_cores(ws.get('foreign_cpu'))} |")
        L.append("")
        if cp and ferry and not ferry.get("error"):
            ws = cp.get("write_sync")
            L += [f"ferry's ONNX export takes {ferry['wall'] / cp['cp']['wall']:.2f}x the time of "
                  f"`cp` of its weights file and {ferry['wall'] / cp['cp_sync']['wall']:.2f}x that "
                  "of `cp` + `sync` (ferry fsyncs what it writes before it exits)"
                  + (f", and {ferry['wall'] / ws['wall']:.2f}x the disk's floor for those bytes "
                     "(written past the page cache and synced, nothing read)" if ws else "")
                  + ".", ""]
        phases = [(f"{mode}{' (bf16)' if mode.endswith('_bf16') else ''}".replace("_bf16", ""),
                   r.get("phases")) for mode, r in peer.items()
                  if mode.startswith(("generation", "encoder")) and isinstance(r, dict)
                  and r.get("phases")]
        if phases:
            L += [f"Where {label}'s processes spend their time: " + "; ".join(
                f"{m}: " + ", ".join(f"{k} {val:.0f} s" for k, val in ph.items())
                for m, ph in phases) + ".", ""]
        lows = [(m, r.get("min_mem_available")) for m, r in peer.items()
                if m.startswith(("generation", "encoder")) and isinstance(r, dict)
                and r.get("min_mem_available")]
        if lows:
            L += ["The machine's lowest MemAvailable during each: " + ", ".join(
                f"{m} {val / MiB:,.0f} MiB" for m, val in lows)
                + f" (of {info['ram_gib'] * 1024:,.0f} MiB). The peak RSS sums VmRSS over the "
                "tree, so it counts file-backed pages (the mapped checkpoint, outputs) the "
                "kernel can reclaim.", ""]

    # --- runtime
    L += runtime_tables(data)

    notes = data.get("notes") or []
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]

    # --- commands
    L += ["## Commands", "", f"ferry (median of {data['repeats']}; CKPT is {ck['path']}):", "",
          "```sh"]
    for key, *_ in FERRY_FORMS:
        r = (S.get(f"ferry-{key}") or {}).get("export")
        if r:
            L.append(r["cmd"])
    L += ["```", "", "transformers (bench/peer_transformers_vlm.py; its docstring has the calls):",
          "", "```sh"]
    for fmt, _, _ in PEER_FORMS:
        for mode, r in (S.get(f"tf-{fmt}") or {}).items():
            if mode.startswith(("generation", "encoder")) and isinstance(r, dict) and r.get("cmd"):
                L.append(r["cmd"])
    lat_cmds = [lat["cmd"] for step in S.values() if isinstance(step, dict)
                for k, lat in step.items() if k.startswith("latency") and isinstance(lat, dict)
                and lat.get("cmd")]
    L += ["```", "", "Runtime (one process per export; INPUTS.npz from "
          f"`python bench/peer_transformers_vlm.py CKPT INPUTS.npz --mode inputs --image "
          f"{data['latency_size']}`):", "", "```sh"] + \
        lat_cmds + \
        ["```", "", "HF_HUB_OFFLINE=1 for the Python exporters; the page cache is warm for "
         "everyone (the checkpoint is read once, untimed, before each exporter's runs; `sync` "
         "runs untimed before each export).", "", "## Reproduce", "", "```sh",
         ".venv/bin/python bench/vlm_bench.py          # this report",
         ".venv/bin/python bench/vlm_bench.py --tiny   # a smoke run in minutes", "```", "",
         f"Raw figures: bench/work/{'vlm-results-tiny.json' if data['tiny'] else 'vlm-results.json'}"
         f"; each process's output: bench/work/vlm-logs{'-tiny' if data['tiny'] else ''}/.", ""]
    path.write_text("\n".join(L))


def _lat_rows(data):
    """[(engine, label, result, is_ferry)] of every latency measured, ferry's first."""
    S, rows = data["results"], []
    for fmt, flabel, kind in PEER_FORMS:
        f = (S.get(f"ferry-{fmt}") or {}).get("latency")
        if f:
            rows.append((fmt, "ferry", f, True))
        for key, label, _, _ in FERRY_FORMS:
            other = (S.get(f"ferry-{key}") or {}).get("latency")
            if key != fmt and base_format(key) == fmt and other:
                # None: ferry's, not the reference; its ratios are to the reference
                rows.append((fmt, label.replace("ferry OpenVINO", "ferry"), other, None))
        peer = S.get(f"tf-{fmt}") or {}
        if peer and "latency" not in peer:
            rows.append((fmt, "transformers", {"error": "not measured: none of its exports was "
                                               "written (see the export table)"}, False))
        for k, lat in peer.items():
            if k.startswith("latency") and isinstance(lat, dict):
                d = lat.get("dtypes") or {}
                what = []
                if lat.get("encoder_only"):
                    what.append("tower only")
                elif d.get("encoder") is None and not lat.get("error"):
                    what.append("no tower: ferry's features")
                if "bfloat16" in d.values():
                    what.append("bf16 export: " + ", ".join(
                        f"{m} {dt}" for m, dt in d.items() if dt))
                rows.append((fmt, "transformers" + (f" ({'; '.join(what)})" if what else ""),
                             lat, False))
    return rows


def runtime_tables(data):
    rows = _lat_rows(data)
    if not rows:
        return []
    inputs = data.get("inputs") or {}
    S = data["results"]
    prompt = (inputs.get("input_ids") or [[1, "?"]])[0][1]
    patches = (inputs.get("pixel_values") or [["?"]])[0][0]
    L = ["## Runtime: the image encoder and decode", "",
         f"bench/vlm_latency.py, one process per export, {data['threads']} threads, batch 1, the "
         f"same arrays for every export: transformers' processor inputs for one "
         f"{data['latency_size']} x {data['latency_size']} image (image_grid_thw "
         f"{data.get('inputs_grid')}, {patches} patches), a {prompt}-token prompt holding its "
         "image tokens, generate()'s position_ids (a text row and get_rope_index's three) and "
         "the tower's cu_seqlens / position_ids as transformers' prepare_for_export computes "
         "them. onnxruntime: CPUExecutionProvider, intra_op_num_threads = threads, sequential, "
         "ORT_ENABLE_ALL, caches passed as OrtValues through IOBinding. OpenVINO: CPU, f32 "
         "inference precision. ferry's default OpenVINO export (the reference row) is "
         "openvino-genai's VLMPipeline layout, run stage by stage as the pipeline runs it: its "
         "encoder time covers the patch embedding, the rotary angles and frame mask computed "
         "in numpy and the merger; its prompt is the stateful language model from a reset "
         "state, whose logits cover every position (the pipeline slices the hidden states "
         "before the head when it loads the graph; this runner does not, so its prompt time "
         "holds the head over the whole prompt); each decode step is the token's embedding "
         "graph and the stateful language model, the cache in its variables. ferry's "
         "`--disable-stateful` decode gets the previous step's cache tensors; transformers' "
         "stateful decode (its default) keeps them in variables, set to the prompt's cache. "
         "*encoder*: the image encoder on that image, median of "
         f"{data['encoder_reps']} after a warm-up. *prompt*: language_model + lm_head over the "
         f"prompt's embeddings, median of {data['prefill_reps']} after a warm-up. *decode*: the "
         f"mean of {data['steps']} one-token steps after 4 warm-up steps, from the prompt's "
         "cache. *vs ferry*: transformers' time over ferry's in the same runtime (above 1: "
         "ferry faster; target: ferry no slower). Each run waited for a quiet machine and ran "
         f"again while others used more than {CONTENDED} cores (at most "
         f"{data.get('latency_tries', 2)} tries; the fastest kept; *tries*).", "",
         "| runtime | export | encoder (ms) | vs ferry | ferry no slower | prompt (ms) | vs ferry "
         "| decode (ms/step) | vs ferry | ferry no slower | runtime peak RSS (MiB) | others' CPU "
         "| tries |", "|---|---|---:|---:|---|---:|---:|---:|---:|---|---:|---:|---:|"]
    ref = {}
    for fmt, label, lat, is_ferry in rows:
        if is_ferry:
            ref[fmt] = lat if not lat.get("error") else None
    for fmt, label, lat, is_ferry in rows:
        eng = ENGINE[fmt]
        if lat.get("error"):
            L.append(f"| {eng} | {label} | **failed**: {cell(lat['error'])} | - | - | - | - | - | - "
                     f"| - | {fmt_mib(lat.get('peak_rss'))} | {fmt_cores(lat.get('foreign_cpu'))} "
                     f"| {len(lat.get('tries') or [1])} |")
            continue
        r = ref.get(fmt) or {}
        enc, pre, dec = lat.get("encoder_ms"), lat.get("prefill_ms"), lat.get("decode_ms_mean")

        def num(x, digits=1):
            return "-" if x is None else f"{x:,.{digits}f}"

        if is_ferry:
            L.append(f"| {eng} | {label} | {num(enc, 0)} | ref | - | {num(pre, 0)} | ref | "
                     f"{num(dec)} | ref | - | {fmt_mib(lat.get('peak_rss'))} | "
                     f"{fmt_cores(lat.get('foreign_cpu'))} | {len(lat.get('tries') or [1])} |")
        else:
            peer = is_ferry is False
            L.append(f"| {eng} | {label} | {num(enc, 0)} | {ratio_x(enc, r.get('encoder_ms'))} | "
                     f"{no_slower(r.get('encoder_ms'), enc) if peer else '-'} | {num(pre, 0)} | "
                     f"{ratio_x(pre, r.get('prefill_ms'))} | {num(dec)} | "
                     f"{ratio_x(dec, r.get('decode_ms_mean'))} | "
                     f"{no_slower(r.get('decode_ms_mean'), dec) if peer else '-'} | "
                     f"{fmt_mib(lat.get('peak_rss'))} "
                     f"| {fmt_cores(lat.get('foreign_cpu'))} | {len(lat.get('tries') or [1])} |")
    L.append("")
    diffs = [(ENGINE[fmt], label, lat["max_abs_diff"]) for fmt, label, lat, _ in rows
             if lat.get("max_abs_diff")]
    scale = data.get("ref_scale") or {}
    if diffs:
        L += ["The exports compute the same function: max |Δ| from ferry's ONNX export "
              "(onnxruntime) of the image features, the prompt's last logits and the last decode "
              "step's logits: " + "; ".join(
                  f"{eng} {label}: " + ", ".join(f"{k} {val:.1e}" for k, val in d.items())
                  for eng, label, d in diffs)
              + (" (the reference's largest magnitudes: " + ", ".join(
                  f"{k} {val:.2f}" for k, val in scale.items()) + ")" if scale else "") + ".", ""]
    loads = []
    for fmt, label, lat, _ in rows:
        if not lat.get("error") and lat.get("decode_load_s") is not None:
            loads.append(f"{ENGINE[fmt]} {label}: encoder {lat.get('encoder_load_s', 0):.1f} s, "
                         f"language model + head {lat.get('prefill_load_s', 0):.1f} s, decode "
                         f"{lat['decode_load_s']:.1f} s")
    if loads:
        L += ["Graph load (session creation / compile_model) times, not in the figures above: "
              + "; ".join(loads) + ".", ""]
    return L + decode_ab_table(data)


def decode_ab_table(data):
    """The paired decode A/B (bench/vlm_decode_ab.py) of each format, where it ran."""
    S = data["results"]
    done = [(fmt, label, (S.get(f"tf-{fmt}") or {}).get("decode_ab")) for fmt, label, _ in
            PEER_FORMS]
    done = [(fmt, label, ab) for fmt, label, ab in done if ab]
    if not done:
        return []
    L = ["## Runtime: decode paired in one process", "",
         "bench/vlm_decode_ab.py, right after each format's transformers latency run: ferry's "
         "default export of the format (exported again) and transformers' generation export, "
         "set up in one process from the same prompt (the real cache of the same "
         f"{done[0][2].get('past', '?')}-token prompt, ferry's image features in the image "
         "tokens' rows), their decode graphs held together, then rounds of one block of "
         "one-token steps of each (the same tokens, the order alternating each round), every "
         "block from the prompt's cache. The machine's memory bandwidth, which a 2B model's "
         "decode is bound by, drifts between processes and over seconds; within a round both "
         "exports meet the same machine. *ms/step*: the median over rounds of each block's "
         "mean; *tf / ferry*: the median of the per-round ratios (above 1: ferry faster), its "
         "range in brackets.", "",
         "| runtime | rounds x steps | ferry (ms/step) | transformers (ms/step) | tf / ferry | "
         "ferry no slower | last logits max abs diff | peak RSS (MiB) | others' CPU |",
         "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for fmt, label, ab in done:
        if ab.get("error"):
            L.append(f"| {ENGINE[fmt]} | failed: {cell(ab['error'])} | | | | | | | |")
            continue
        ferry, peer = ab["ferry"], ab["peer"]
        ratio = ab["ratio_to_" + ferry][peer]
        diff = ab["last_logits_max_abs_diff_to_" + ferry][peer]
        L.append(f"| {ENGINE[fmt]} | {ab['rounds']} x {ab['block']} | "
                 f"{ab['median_ms'][ferry]:.1f} | {ab['median_ms'][peer]:.1f} | "
                 f"{ratio['median']:.3f} ({ratio['min']:.2f}-{ratio['max']:.2f}) | "
                 f"{no_slower(1.0, ratio['median'])} | {diff:.1e} | "
                 f"{fmt_mib(ab.get('peak_rss'))} | {fmt_cores(ab.get('others_cpu'))} |")
    return L + [""]


def summary(data):
    """Short sentences with the figures issue 35 asks for."""
    S, out = data["results"], []
    fp32 = data.get("peer_dtype", "float32") == "float32"
    for fmt, label, _ in PEER_FORMS:
        ferry = (S.get(f"ferry-{fmt}") or {}).get("export")
        peer = S.get(f"tf-{fmt}")
        if not ferry:
            continue
        if ferry.get("error"):
            out.append(f"{fmt}: ferry's export failed: {cell(ferry['error'])}.")
            continue
        text = (f"{fmt}: ferry exported the checkpoint in {ferry['wall']:.1f} s at "
                f"{fmt_mib(ferry['peak_rss'])} MiB peak RSS")
        if not peer:
            out.append(text + "; transformers' exporter was not run.")
            continue
        gen, enc = peer.get("generation"), peer.get("encoder")
        both = combined(gen, enc)
        ref_label = "" if fp32 else " (bf16; against ferry --dtype bf16)"
        if both and not both.get("error"):
            ref = ferry if fp32 else (S.get(f"ferry-{fmt}-bf16") or {}).get("export") or ferry
            fast, lean = both["wall"] / ref["wall"], both["peak_rss"] / ref["peak_rss"]
            text += (f"; {label}{ref_label}, generation + tower, took {both['wall']:.0f} s "
                     f"({fast:.0f}x; target ≥ 30x: {'met' if fast >= 30 else '**not met**'}) at "
                     f"{fmt_mib(both['peak_rss'])} MiB (ferry's is 1/{lean:.0f}; target ≤ 1/20: "
                     f"{'met' if lean >= 20 else '**not met**'}); export_for_generation alone "
                     f"{gen['wall']:.0f} s ({gen['wall'] / ref['wall']:.0f}x), "
                     f"{fmt_mib(gen['peak_rss'])} MiB")
        else:
            errs = [f"{m} {cell(r['error'])}" for m, r in (("export_for_generation", gen),
                                                           ("tower", enc)) if r and r.get("error")]
            text += f"; {label} failed: " + "; ".join(errs)
            for m in ("generation_bf16", "encoder_bf16"):
                r = peer.get(m)
                if r:
                    text += (f"; in bfloat16 its {m.split('_')[0]} export "
                             + (f"failed too: {cell(r['error'])}" if r.get("error") else
                                f"took {r['wall']:.0f} s at {fmt_mib(r['peak_rss'])} MiB"))
            fb = (S.get(f"ferry-{fmt}-bf16") or {}).get("export")
            if fb and not fb.get("error"):
                text += (f" (ferry --dtype bf16: {fb['wall']:.1f} s, {fmt_mib(fb['peak_rss'])} "
                         "MiB)")
        out.append(text + ".")
    rows = _lat_rows(data)
    ref = {fmt: lat for fmt, _, lat, f in rows if f and not lat.get("error")}
    for fmt, label, lat, is_ferry in rows:
        r = ref.get(fmt)
        if is_ferry is not False or lat.get("error") or not r:
            continue
        parts = []
        for key, what in (("encoder_ms", "image encoder"), ("decode_ms_mean", "decode")):
            if lat.get(key) and r.get(key):
                parts.append(f"{what} {r[key]:,.1f} vs {lat[key]:,.1f} ms (ferry no slower: "
                             f"{no_slower(r[key], lat[key])})")
        if parts:
            out.append(f"{ENGINE[fmt]}, ferry vs {label}: " + "; ".join(parts) + ".")
    for fmt, label, _ in PEER_FORMS:
        ab = (S.get(f"tf-{fmt}") or {}).get("decode_ab")
        if ab and not ab.get("error"):
            ratio = ab["ratio_to_" + ab["ferry"]][ab["peer"]]["median"]
            out.append(f"{ENGINE[fmt]}, decode paired in one process: ferry "
                       f"{ab['median_ms'][ab['ferry']]:.1f} vs {label} "
                       f"{ab['median_ms'][ab['peer']]:.1f} ms/step, per-round ratio "
                       f"{ratio:.3f} (ferry no slower: {no_slower(1.0, ratio)}).")
    return (["## Summary", ""] + [f"- {x}" for x in out] + [""]) if out else []


def _measurements(step):
    out = []
    values = step.values() if isinstance(step, dict) else step
    for v in values:
        if isinstance(v, dict):
            if "wall" in v and "peak_rss" in v:
                out.append(v)
            else:
                out.extend(_measurements(v))
    return out


if __name__ == "__main__":
    main()
