#!/usr/bin/env python3
"""Encoder-decoder exports: ferry's export of a Whisper-small-shaped checkpoint (--model t5: a
T5-base-shaped one) against transformers' OnnxExporter and optimum-cli, and the encoder's and
decode's speed in onnxruntime (issue 36's benchmark).

    .venv/bin/python bench/whisper_bench.py            # the full run (see the report's header)
    .venv/bin/python bench/whisper_bench.py --tiny     # the same on a 2-layer checkpoint (minutes)
    .venv/bin/python bench/whisper_bench.py --model t5 [--tiny]     # T5-base's shapes (below)

1. Writes a random fp32 checkpoint of WhisperForConditionalGeneration with whisper-small's
   shapes into bench/work/whisper-small/ (--tiny: bench/work/whisper-tiny/): transformers builds
   it (WhisperForConditionalGeneration(WhisperConfig(...)), its own initialisation, seed 0) and
   saves it with save_pretrained, in a subprocess: d_model 768, 12 encoder + 12 decoder layers,
   12 heads, ffn 3072, vocab 51865, 80 mel bins, max_source_positions 1500,
   max_target_positions 448 (242 M parameters, 0.97 GB); with WhisperFeatureExtractor's
   preprocessor_config.json and a generation_config.json laid out as whisper-small's
   (decoder_start 50258, eos / pad / bos 50257, no_timestamps 50363, forced_decoder_ids
   [[1, 50259], [2, 50359], [3, 50363]] = <|en|> <|transcribe|> <|notimestamps|>,
   begin_suppress_tokens, suppress_tokens, lang_to_id / task_to_id for en / transcribe).
   --tiny keeps the widths and the vocabulary with 2 + 2 layers (about 75 M parameters).
   The checkpoint is reused while its stamp matches. Then bench/peer_transformers_whisper.py
   writes the runtime's inputs (--mode inputs: the checkpoint's WhisperFeatureExtractor on 30 s
   of synthetic audio, input_features [1, 80, 3000]; the 4 init tokens; seeded step tokens) and
   runs transformers' generate() on them (--mode generate, greedy, 8 tokens): the tokens ferry's
   generate() must give too.
2. Exports, one process each, measured by peers_bench.measure (wall time, peak RSS of the
   process tree, others' CPU meanwhile):
     ferry         build/ferry export CKPT OUT --for-generation --dynamic
                     --format onnx                       (fp32: encoder, prefill, decode; the
                                                          reference of every ratio)
                     --format onnx --ort-fusions cpu     (onnxruntime's contrib ops)
                     ... --ort-fusions cpu --quantize int4   (MatMulNBits)
                     --format onnx --quantize int4       (standard ONNX: DequantizeLinear +
                                                          MatMul; exported, not timed: the CPU
                                                          provider runs it unfused)
                     --format openvino                   (stateful: WhisperPipeline's layout;
                                                          exported, not timed)
                   median of --repeats each
     transformers  bench/peer_transformers_whisper.py CKPT OUT, the model in float32, once each
                   (timeout --peer-timeout):
                     --mode generation  export_for_generation(model, {"input_features": ...},
                                        config=OnnxConfig(dynamic=True)): prefill, decode
                                        (5.24 writes no encoder)
                     --mode encoder     export(model.get_encoder(), {"input_features": ...},
                                        config=OnnxConfig(dynamic=True))
                   reported apart and together (the two walls added, the larger peak)
     optimum       optimum-cli export onnx --model CKPT --task
                   automatic-speech-recognition-with-past OUT, from its own venv
                   (bench/work/venv-optimum, made from bench/requirements-optimum.txt as
                   bench/peers_bench.py makes it; --optimum-work names another folder for it);
                   a row with the reason when it cannot be had
     floor         `cp`, `cp` + `sync FILE` of ferry's model.onnx.data, and as many bytes written
                   past the page cache and synced (dd oflag=direct conv=fsync;
                   peers_bench.cp_baseline), median of --repeats
   Every transformers / optimum export is watched by moe_bench.MemoryGuard (killed, a row with
   that error, when the machine's available memory falls under --memory-floor-mib).
   ferry's ONNX export then runs ferry's generate() (the Python binding) on the same features:
   its tokens must be transformers' generate()'s.
3. Runtime, bench/whisper_latency.py, onnxruntime CPU, --threads (2), one process per export:
   the encoder on the 30 s features (median of --encoder-reps), the 4-token prompt (median of
   --prefill-reps), then the mean of --steps (32) one-token decode steps, for ferry's ONNX
   export, its --ort-fusions cpu forms (fp32, int4), transformers' export (its encoder + its
   prefill / decode) and optimum's, on the same arrays. First a short check pass (1 encoder
   call, 1 prompt, 4 steps) whose encoder output and logits are compared with ferry's (max
   |difference|); then --rounds interleaved rounds, as bench/vlm_ab.py runs them (each round
   every export once, the order rotated a round; each round after waiting for a quiet
   machine), and the median over rounds.
4. Writes bench/work/benchmarks-whisper.md and bench/work/whisper-results.json (with --tiny:
   bench/work/benchmarks-whisper-tiny.md and bench/work/whisper-results-tiny.json). A step that
   fails is a row with its error, never dropped.

--model t5 runs the same steps on T5ForConditionalGeneration with t5-base's shapes (T5Config:
vocab 32128, d_model 768, d_kv 64, d_ff 3072, 12 + 12 layers, 12 heads, 32 relative-attention
buckets up to distance 128, relu MLP, tied embeddings; decoder_start / pad 0, eos 1), built and
saved as above into bench/work/t5-base/ (--tiny: 2 + 2 layers, bench/work/t5-tiny/), with the
generation_config.json save_pretrained writes and no tokenizer (no exporter here needs one).
Its inputs: input_ids [1, 512] (seeded ordinary tokens ending with eos) and attention_mask
(ones) for the encoder, the decoder prompt [[decoder_start_token_id]], seeded step tokens; the
generate() check is generate(input_ids=..., attention_mask=..., max_new_tokens=8) on both
sides. ferry's OpenVINO export is its stateful decode (exported, not timed). transformers:
export_for_generation(model, {"input_ids": ..., "attention_mask": ...}) and the encoder export
of model.get_encoder() on the same; generate() starts T5's decoder from one token, so that
documented call traces a decode whose past is fixed at 1 token (torch never keeps a size of 0
or 1 dynamic) and cannot run the second step: its runtime row is that error. A third export
adds decoder_input_ids of 2 tokens to the same call (peer_transformers_whisper.py
--decoder-tokens 2), whose graphs stay dynamic: the transformers row that decodes (with the
same encoder export). optimum-cli: --task text2text-generation-with-past. It writes
bench/work/benchmarks-t5.md and bench/work/t5-results.json (-tiny with --tiny), its logs in
bench/work/t5-logs/.

The build is read, never made: if build/ferry is missing or was modified in the last seconds
(a rebuild under way), each ferry step waits for it. The run records the binary's sha256 at every
ferry step and the report says whether it changed during the run. The exports measured for the
runtime are kept until it is done (about 8 GB of disk for the full run), then deleted.
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

from export_bench import WORK  # noqa: E402
from moe_bench import MemoryGuard, Run, fmt_s, git_rev, show  # noqa: E402
from peers_bench import CONTENDED, OPTIMUM_PACKAGES, PEER_ENV, Exporter, brief, cell, \
    cp_baseline, ensure_optimum_venv, ferry_version, fmt_cores, fmt_mib, machine_info, \
    measure, run_export, versions, wait_idle  # noqa: E402

MiB = 1024 * 1024
PY = sys.executable

# whisper-small's shapes (WhisperConfig's arguments)
SMALL = dict(vocab_size=51865, d_model=768, encoder_layers=12, decoder_layers=12,
             encoder_attention_heads=12, decoder_attention_heads=12, encoder_ffn_dim=3072,
             decoder_ffn_dim=3072, num_mel_bins=80, max_source_positions=1500,
             max_target_positions=448)
TINY = dict(SMALL, encoder_layers=2, decoder_layers=2)
TOKENS = dict(decoder_start_token_id=50258, bos_token_id=50257, eos_token_id=50257,
              pad_token_id=50257, begin_suppress_tokens=[220, 50257])
# whisper-small's suppress_tokens (non-speech symbols and the task / timestamp specials)
SUPPRESS = [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92,
            93, 359, 503, 522, 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627,
            3246, 3253, 3268, 3536, 3846, 3961, 4183, 4667, 6585, 6647, 7273, 9061, 9383, 10428,
            10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604,
            18362, 18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302,
            32470, 36865, 42863, 47425, 49870, 50254, 50258, 50358, 50359, 50360, 50361, 50362]
GENERATION_CONFIG = {
    "bos_token_id": 50257, "decoder_start_token_id": 50258, "eos_token_id": 50257,
    "pad_token_id": 50257, "max_length": 448, "no_timestamps_token_id": 50363,
    "begin_suppress_tokens": [220, 50257], "suppress_tokens": SUPPRESS,
    "forced_decoder_ids": [[1, 50259], [2, 50359], [3, 50363]], "is_multilingual": True,
    "lang_to_id": {"<|en|>": 50259}, "task_to_id": {"transcribe": 50359, "translate": 50358}}
GENERATE_TOKENS = 8

# t5-base's shapes (T5Config's arguments)
T5_BASE = dict(vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
               num_decoder_layers=12, num_heads=12, relative_attention_num_buckets=32,
               relative_attention_max_distance=128, feed_forward_proj="relu",
               tie_word_embeddings=True)
T5_TINY = dict(T5_BASE, num_layers=2, num_decoder_layers=2)
T5_TOKENS = dict(decoder_start_token_id=0, eos_token_id=1, pad_token_id=0)

GEN = ["--for-generation", "--dynamic", "--force", "--quiet"]
# ferry's forms: key, label, options, whether its runtime is measured. The reference is "onnx"
# (standard ONNX, ferry's default); --ort-fusions cpu is its onnxruntime-only form, and its int4
# form is the one onnxruntime runs fused (MatMulNBits): the standard int4 graph
# (DequantizeLinear + MatMul) runs unfused on onnxruntime's CPU provider (the --tiny smoke run:
# 14x the fp32 decode step), so it is exported and not timed.
FERRY_FORMS = [
    ("onnx", "ferry ONNX", ["--format", "onnx"], True),
    ("onnx-fused", "ferry ONNX --ort-fusions cpu", ["--format", "onnx", "--ort-fusions", "cpu"],
     True),
    ("onnx-fused-int4", "ferry ONNX --ort-fusions cpu --quantize int4",
     ["--format", "onnx", "--ort-fusions", "cpu", "--quantize", "int4"], True),
    ("onnx-int4", "ferry ONNX --quantize int4 (standard ONNX)",
     ["--format", "onnx", "--quantize", "int4"], False),
    ("openvino", "ferry OpenVINO (stateful: WhisperPipeline's layout)", ["--format", "openvino"],
     False),
]


class Whisper:
    """What the harness and its report take from the model: its checkpoint, its inputs, its
    peers' settings and the report's words for them."""
    key = "whisper"  # bench/work/<key>-results*.json, <key>-logs*, <key>-out*, benchmarks-<key>*
    title = "speech-to-text exports (Whisper-small shapes)"
    dirs = ("whisper-small", "whisper-tiny")  # full, --tiny
    full, tiny, tokens = SMALL, TINY, TOKENS
    classes = ("WhisperConfig", "WhisperForConditionalGeneration")
    feature_extractor = "WhisperFeatureExtractor"  # saved with feature_size=num_mel_bins
    generation_config = GENERATION_CONFIG  # written as generation_config.json (None: transformers')
    parameters = 242e6
    openvino_label = "ferry OpenVINO (stateful: WhisperPipeline's layout)"
    optimum_task = "automatic-speech-recognition-with-past"
    generate_inputs = ("input_features",)  # ferry's generate(): its keyword arguments
    ferry_generate_skip = 0  # tokens ferry's generate() returns before the new ones
    # transformers' exports: (results key, OUT's name, peer_transformers_whisper.py's options)
    tf_exports = [("generation", "tf-generation", ["--mode", "generation"]),
                  ("encoder", "tf-encoder", ["--mode", "encoder"])]
    # runtime rows of transformers' exports: (name, its generation export's key)
    tf_runtime = [("tf-onnx", "generation")]

    def checkpoint_text(self, data, ck, c):
        return (
            f"{ck['path']}: WhisperForConditionalGeneration with whisper-small's shapes"
            + (" but 2 + 2 layers" if data["tiny"] else "")
            + f", built by transformers (its own random initialisation, seed 0) and saved with "
            f"save_pretrained ({ck['dtype'].replace('torch.', '')}): d_model {c['d_model']}, "
            f"{c['encoder_layers']} encoder + {c['decoder_layers']} decoder layers, "
            f"{c['encoder_attention_heads']} heads, ffn {c['encoder_ffn_dim']}, vocab "
            f"{c['vocab_size']}, {c['num_mel_bins']} mel bins, max_source_positions "
            f"{c['max_source_positions']}, max_target_positions {c['max_target_positions']}, "
            f"tied output embedding. {millions(ck['parameters'])} parameters "
            f"({millions(ck['encoder'])} in the encoder), {ck['bytes'] / MiB:,.0f} MiB of "
            f"safetensors; written in {ck['wall']:.0f} s at {fmt_mib(ck['peak_rss'])} MiB peak RSS"
            + (" (an earlier run's, reused)" if ck["how"] == "reused" else "") + ". "
            "generation_config.json as whisper-small lays it out: decoder_start_token_id 50258, "
            "eos / pad / bos 50257, no_timestamps_token_id 50363, forced_decoder_ids "
            "[[1, 50259], [2, 50359], [3, 50363]] (<|en|> <|transcribe|> <|notimestamps|>), "
            "begin_suppress_tokens [220, 50257], whisper-small's suppress_tokens; "
            "preprocessor_config.json from WhisperFeatureExtractor(feature_size=80).")

    # the generate() paragraph: its head (transformers' call), ferry's call, its tail
    generate_head = (f"transformers' `generate(input_features=..., max_new_tokens="
                     f"{GENERATE_TOKENS}, return_dict_in_generate=True).sequences` past the 4 "
                     "init tokens, on the runtime's features: ")
    generate_ferry = ("; ferry's `ExportedModel.from_pretrained(OUT).generate(...)` on its ONNX "
                      "export: ")
    generate_tail = (". (transformers' random initialisation makes a model that repeats one "
                     "token; the check is that both loops run the checkpoint's settings alike. "
                     "generate()'s plain return is not compared: the token is a timestamp token, "
                     "and generate() re-splits a sequence holding them into segments, returning "
                     "some tokens twice.)")

    def export_text(self, data):
        """The export table's preamble, from its transformers part to its optimum part."""
        return (
            "transformers: one run each, timeout "
            f"{data['peer_timeout'] / 60:.0f} min, the model loaded with "
            "`WhisperForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)`, traced "
            "on the runtime's input_features [1, 80, 3000]: `export_for_generation(model, "
            "{\"input_features\": ...}, config=OnnxConfig(dynamic=True))` writes prefill and "
            "decode only (transformers 5.24: generate() runs the encoder before its first decoder "
            "forward, so no encoder graph is traced), so the encoder is exported by itself too "
            "(`export(model.get_encoder(), {\"input_features\": ...}, config=OnnxConfig("
            "dynamic=True))`), in a second process; *generation + encoder* adds the two walls "
            "and keeps the larger peak: the like-for-like row against ferry's three graphs. "
            "transformers' graphs fix the batch at 1 (the trace's); ferry's take any batch. "
            "optimum-cli: `export onnx --task automatic-speech-recognition-with-past` at its "
            "defaults (fp32, CPU; it writes encoder_model, decoder_model, decoder_with_past_model "
            "and decoder_model_merged), once.")

    def runtime_inputs_text(self, data):
        """The runtime paragraph's arrays, then what the encoder and the prompt run on."""
        return ("input_features [1, 80, 3000] (30 s of synthetic audio through the checkpoint's "
                f"WhisperFeatureExtractor), the 4 init tokens {data.get('prompt_ids')} as the "
                "prompt", "the features", "the prefill over the 4 tokens")

    forms_text = (
        "ferry's other rows are its other forms of the same export (not peers): "
        "`--ort-fusions cpu` writes onnxruntime's contrib ops where it has them "
        "(MultiHeadAttention in the encoder; the graphs run on onnxruntime only), and its "
        "int4 form MatMulNBits for the decoder's linear layers (ferry's --quantize keeps the "
        "encoder and the cross key/value projections float: its last_hidden_state is "
        "fp32's, above). ")
    reproduce = ".venv/bin/python bench/whisper_bench.py"

    def runtime_failure(self, name, error):
        """Why a peer's runtime row failed, where the model knows it ("": it does not)."""
        return ""


class T5(Whisper):
    key = "t5"
    title = "text-to-text exports (T5-base shapes)"
    dirs = ("t5-base", "t5-tiny")
    full, tiny, tokens = T5_BASE, T5_TINY, T5_TOKENS
    classes = ("T5Config", "T5ForConditionalGeneration")
    feature_extractor = None
    generation_config = None
    parameters = 223e6
    openvino_label = "ferry OpenVINO (stateful decode)"
    optimum_task = "text2text-generation-with-past"
    generate_inputs = ("input_ids", "attention_mask")
    ferry_generate_skip = 1  # the decoder_start_token_id, as transformers' sequences begin
    tf_exports = Whisper.tf_exports + [
        ("generation_prompt2", "tf-generation-prompt2",
         ["--mode", "generation", "--decoder-tokens", "2"])]
    tf_runtime = Whisper.tf_runtime + [("tf-onnx-prompt2", "generation_prompt2")]

    def checkpoint_text(self, data, ck, c):
        return (
            f"{ck['path']}: T5ForConditionalGeneration with t5-base's shapes"
            + (" but 2 + 2 layers" if data["tiny"] else "")
            + f", built by transformers (its own random initialisation, seed 0) and saved with "
            f"save_pretrained ({ck['dtype'].replace('torch.', '')}): d_model {c['d_model']}, "
            f"{c['num_layers']} encoder + {c['num_decoder_layers']} decoder blocks, "
            f"{c['num_heads']} heads of {c['d_kv']}, d_ff {c['d_ff']} ({c['feed_forward_proj']}), "
            f"vocab {c['vocab_size']}, relative attention in {c['relative_attention_num_buckets']} "
            f"buckets up to distance {c['relative_attention_max_distance']}, the output "
            "embedding tied to the shared one (its input scaled by d_model^-0.5). "
            f"{millions(ck['parameters'])} parameters ({millions(ck['encoder'])} in the encoder, "
            f"the shared embedding counted there), {ck['bytes'] / MiB:,.0f} MiB of safetensors; "
            f"written in {ck['wall']:.0f} s at {fmt_mib(ck['peak_rss'])} MiB peak RSS"
            + (" (an earlier run's, reused)" if ck["how"] == "reused" else "") + ". "
            "generation_config.json as save_pretrained writes it (decoder_start_token_id 0, "
            "eos 1, pad 0); no tokenizer: no exporter here needs one.")

    generate_head = (f"transformers' `generate(input_ids=..., attention_mask=..., max_new_tokens="
                     f"{GENERATE_TOKENS}, return_dict_in_generate=True).sequences` past the "
                     "decoder_start_token_id, on the runtime's input_ids and attention_mask: ")
    generate_ferry = ("; ferry's `ExportedModel.from_pretrained(OUT).generate(input_ids=..., "
                      "attention_mask=..., ...)` on its ONNX export, past the start token it "
                      "returns first too: ")
    generate_tail = (". (A random checkpoint's tokens mean nothing; the check is that both loops "
                     "run the checkpoint alike.)")

    def export_text(self, data):
        return (
            "transformers: one run each, timeout "
            f"{data['peer_timeout'] / 60:.0f} min, the model loaded with "
            "`T5ForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)`, traced on "
            "the runtime's input_ids [1, 512] and attention_mask: `export_for_generation(model, "
            "{\"input_ids\": ..., \"attention_mask\": ...}, config=OnnxConfig(dynamic=True))` "
            "writes prefill and decode only (transformers 5.24: generate() runs the encoder "
            "before its first decoder forward, so no encoder graph is traced), so the encoder is "
            "exported by itself too (`export(model.get_encoder(), {\"input_ids\": ..., "
            "\"attention_mask\": ...}, config=OnnxConfig(dynamic=True))`), in a second process; "
            "*generation + encoder* adds the two walls and keeps the larger peak: the "
            "like-for-like row against ferry's three graphs. generate() starts T5's decoder from "
            "decoder_start_token_id alone, so the traced prefill takes 1 token and the traced "
            "decode a past of 1, and torch never keeps a size of 0 or 1 dynamic: that decode.onnx "
            "takes a self-attention cache of exactly 1 token, so it runs the first decode step "
            "and no other (its runtime row below is onnxruntime's error). A third process runs "
            "the same call with `decoder_input_ids` of 2 tokens added to the inputs "
            "(decoder_start_token_id and the first step token; `--decoder-tokens 2`), so "
            "generate() prefills 2 tokens and both graphs keep their sequence axes: a user's "
            "way around it, not the guide's call; its decode is the transformers row that "
            "decodes, with the same encoder export. transformers' graphs fix the batch at 1 "
            "(the trace's); ferry's take any batch. optimum-cli: `export onnx --task "
            "text2text-generation-with-past` at its defaults (fp32, CPU; it writes "
            "encoder_model, decoder_model, decoder_with_past_model and decoder_model_merged), "
            "once; it needs no tokenizer.")

    def runtime_inputs_text(self, data):
        return ("input_ids [1, 512] (seeded ordinary tokens, the last eos) and attention_mask "
                "[1, 512] (ones) for the encoder, the decoder prompt "
                f"{data.get('prompt_ids')} (decoder_start_token_id), every decoder also taking "
                "the encoder's attention mask", "the 512 tokens",
                "the first decoder call, over the start token")

    forms_text = (
        "ferry's other rows are its other forms of the same export (not peers): "
        "`--ort-fusions cpu` fuses each attention's query / key / value projections into one "
        "MatMul (the cross keys and values of every decoder block into one in the encoder) and "
        "writes RMSNormalization (T5's attention adds its relative position bias, so no "
        "MultiHeadAttention), and its int4 form MatMulNBits for the linear layers of the "
        "encoder and the decoder (the cross key/value projection stays float; the encoder's "
        "last_hidden_state is int4's, above). ")
    reproduce = ".venv/bin/python bench/whisper_bench.py --model t5"

    def runtime_failure(self, name, error):
        if name != "tf-onnx" or "Expected: 1" not in error:
            return ""
        return (" (generate() starts T5's decoder from decoder_start_token_id alone, so the "
                "documented export traces a decode whose self-attention cache is fixed at 1 "
                "token: it runs the first decode step and no other; the export with a 2-token "
                "decoder prompt is transformers' row that decodes)")


MODELS = {m.key: m() for m in (Whisper, T5)}


def ferry_forms(spec):
    """FERRY_FORMS with the model's OpenVINO label."""
    return [(key, spec.openvino_label if key == "openvino" else label, opts, timed)
            for key, label, opts, timed in FERRY_FORMS]


# ---------------------------------------------------------------------------------------------
# The checkpoint

WRITE_CHECKPOINT = r"""
import json, sys, time
from pathlib import Path
import torch
import transformers
from transformers.utils import logging
logging.set_verbosity_error()
path, cfg, gen = Path(sys.argv[1]), json.loads(sys.argv[2]), json.loads(sys.argv[3])
config_class, model_class, extractor = json.loads(sys.argv[4])
t = time.perf_counter()
torch.manual_seed(0)
model = getattr(transformers, model_class)(getattr(transformers, config_class)(**cfg)).eval()
print(f"bench-phase init {time.perf_counter() - t:.2f}", flush=True)
t = time.perf_counter()
model.save_pretrained(path)
if extractor:
    getattr(transformers, extractor)(feature_size=cfg["num_mel_bins"]).save_pretrained(path)
if gen is not None:
    (path / "generation_config.json").write_text(json.dumps(gen, indent=2))
print(f"bench-phase save {time.perf_counter() - t:.2f}", flush=True)
print(json.dumps({"parameters": sum(p.numel() for p in model.parameters()),
                  "encoder": sum(p.numel() for p in model.get_encoder().parameters()),
                  "dtype": str(next(model.parameters()).dtype)}))
"""


def last_json(log):
    for line in reversed(Path(log).read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    return None


def make_checkpoint(spec, path, cfg, log_dir):
    """config.json, model.safetensors, generation_config.json (and Whisper's
    preprocessor_config.json), written by transformers in a subprocess; reused when its stamp
    matches. -> dict."""
    stamp = dict(config=cfg, generation=spec.generation_config, v=1)
    stamp_file = path / "bench-stamp.json"
    if stamp_file.exists() and (path / "model.safetensors").exists() and \
            json.loads(stamp_file.read_text()).get("stamp") == stamp:
        return dict(json.loads(stamp_file.read_text())["made"], how="reused")
    shutil.rmtree(path, ignore_errors=True)
    log = log_dir / f"checkpoint-{path.name}.log"
    r = measure([PY, "-c", WRITE_CHECKPOINT, path, json.dumps(cfg),
                 json.dumps(spec.generation_config),
                 json.dumps([*spec.classes, spec.feature_extractor])],
                log, env=PEER_ENV, timeout=1800)
    if r["error"]:
        raise SystemExit(f"could not write the checkpoint: {r['error']} (see {log})")
    made = dict(last_json(log), wall=r["wall"], peak_rss=r["peak_rss"])
    stamp_file.write_text(json.dumps({"stamp": stamp, "made": made}))
    return dict(made, how="written")


# ---------------------------------------------------------------------------------------------
# Steps


def ferry_export(run, key, ckpt, label, opts, repeats):
    """-> (result, OUT): ferry's export of one form, median of `repeats`; OUT kept."""
    out = run.args.out_root / f"ferry-{key}"
    run.say(f"ferry {key} x{repeats}")
    sha = run.ferry_hash()
    exp = Exporter(f"ferry-{key}", label, None, None, None, repeats=repeats,
                   cmd=[str(run.args.ferry), "export", str(ckpt), "{out}", *opts, *GEN])
    r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
    if r.get("error") and r.get("rc") in (126, 127):  # the binary was being replaced
        run.ferry_hash()
        r = run_export(exp, out, run.args.log_dir, run.args.export_timeout)
    r["ferry_sha256"] = sha
    r["cmd"] = show(exp.cmd, ckpt)
    run.say(f"  -> {brief(r)}")
    return r, out


def guarded_export(run, ckpt, name, label, cmd, script, env=None):
    """-> (result, OUT): one peer export (once), watched by MemoryGuard."""
    out = run.args.out_root / name
    exp = Exporter(name, label, None, None, None, env=env or PEER_ENV, cmd=cmd)
    run.say(f"{label} (timeout {run.args.peer_timeout:.0f} s)")
    with MemoryGuard(str(out), floor=run.args.memory_floor_mib * MiB, script=script) as guard:
        r = run_export(exp, out, run.args.log_dir, run.args.peer_timeout)
    r["min_mem_available"] = guard.low
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
    r["cmd"] = show([c for c in exp.cmd], ckpt)
    run.say(f"  -> {brief(r)}")
    return r, out


FERRY_GENERATE = r"""
import json, sys
import numpy as np
import ferry
x = np.load(sys.argv[2])
names, skip = json.loads(sys.argv[4]), int(sys.argv[5])
exported = ferry.ExportedModel.from_pretrained(sys.argv[1])
tokens = exported.generate(**{n: x[n] for n in names}, max_new_tokens=int(sys.argv[3]))
print(json.dumps({"tokens": np.asarray(tokens)[:, skip:].tolist()}))
"""


def ferry_generate(run, out, want):
    """ferry's generate() (its Python binding) on the export in `out`: its tokens against
    transformers' generate()'s (`want`). -> dict."""
    a = run.args
    env = dict(PEER_ENV, FERRY_LIB=str(a.ferry.parent / "libferry.so"),
               PYTHONPATH=str(ROOT / "python"))
    log = a.log_dir / "generate-ferry.log"
    r = measure([PY, "-c", FERRY_GENERATE, out, a.inputs, str(GENERATE_TOKENS),
                 json.dumps(a.spec.generate_inputs), str(a.spec.ferry_generate_skip)], log, env=env,
                timeout=900)
    got = None if r["error"] else (last_json(log) or {}).get("tokens")
    return dict(tokens=got, error=r["error"], wall=r["wall"], peak_rss=r["peak_rss"],
                equal=got is not None and got == want)


def latency_cmd(a, kind, out, res_json, logits, steps, reps, encoder_reps, encoder_dir=None):
    cmd = [PY, HERE / "whisper_latency.py", "--kind", kind, "--dir", out, "--inputs", a.inputs,
           "--json", res_json, "--logits", logits, "--threads", str(a.threads), "--steps",
           str(steps), "--reps", str(reps), "--encoder-reps", str(encoder_reps)]
    if encoder_dir:
        cmd += ["--encoder-dir", encoder_dir]
    return cmd


def one_latency(run, name, spec, tag, steps, reps, encoder_reps):
    """bench/whisper_latency.py once on one export. -> result (with its figures)."""
    a = run.args
    res_json = a.log_dir / f"latency-{name}-{tag}.json"
    logits = a.log_dir / f"logits-{name}-{tag}.npz"
    res_json.unlink(missing_ok=True)
    cmd = latency_cmd(a, spec["kind"], spec["dir"], res_json, logits, steps, reps, encoder_reps,
                      spec.get("encoder_dir"))
    r = measure(cmd, a.log_dir / f"latency-{name}-{tag}.log", timeout=a.runtime_timeout)
    if not r["error"]:
        r.update(json.loads(res_json.read_text()))
        r["logits_file"] = str(logits)
    shown = {str(spec["dir"]): "OUT", str(spec.get("encoder_dir")): "ENCODER_OUT",
             str(a.inputs): "INPUTS.npz", str(res_json): "R.json", str(logits): "L.npz"}
    r["cmd"] = show([shown.get(str(c), c) for c in cmd], a.ckpt)
    return r


FIGURES = ("encoder_ms", "prefill_ms", "first_token_ms", "decode_ms_mean")


def runtime(run, specs):
    """The check pass (agreement with ferry's ONNX export), then --rounds interleaved rounds.
    `specs`: {name: {kind, dir[, encoder_dir], label}}, ferry's ONNX export first. -> dict."""
    import numpy as np

    a = run.args
    names = list(specs)
    out = {"check": {}, "rounds": [], "median": {}, "agreement": {}}
    # --- the check pass: the same arrays through every export, compared with ferry's
    run.say("runtime check pass (1 encoder call, 1 prompt, 4 steps)")
    for name in names:
        r = one_latency(run, name, specs[name], "check", 4, 1, 1)
        out["check"][name] = {k: r.get(k) for k in ("error", "logits_file", "cmd", "wall",
                                                    "peak_rss")}
        run.say(f"  {name}: {brief(r)}")
    ref = out["check"].get("ferry-onnx") or {}
    if ref.get("logits_file") and Path(ref["logits_file"]).exists():
        base = np.load(ref["logits_file"])
        out["ref_scale"] = {k: float(np.abs(base[k]).max()) for k in base.files}
        for name in names[1:]:
            f = out["check"][name].get("logits_file")
            if f and Path(f).exists():
                got = np.load(f)
                out["agreement"][name] = {k: float(np.abs(got[k] - base[k]).max())
                                          for k in got.files
                                          if k in base.files and got[k].shape == base[k].shape}
        run.say(f"  max |diff| from ferry's ONNX: {out['agreement']}")
    # --- the timed rounds
    ok = [n for n in names if not out["check"][n]["error"]]
    for k in range(a.rounds):
        waited = wait_idle(120.0)
        order = ok[k % len(ok):] + ok[:k % len(ok)] if ok else []
        run.say(f"round {k + 1}/{a.rounds} (waited {waited:.0f} s for a quiet machine): "
                + ", ".join(order))
        got = {}
        for name in order:
            tries = []
            for attempt in range(a.latency_tries):
                if attempt:  # disturbed: wait for a quiet machine, then once more
                    waited = wait_idle(180.0)
                    run.say(f"  {name}: others used {tries[-1]['foreign_cpu']:.2f} cores; "
                            f"again after waiting {waited:.0f} s")
                tag = f"r{k + 1}" + (f"-try{attempt + 1}" if attempt else "")
                r = one_latency(run, name, specs[name], tag, a.steps, a.prefill_reps,
                                a.encoder_reps)
                run.say(f"  {name}: {brief(r)}" + (
                    f", encoder {r['encoder_ms']:,.0f} ms, prompt {r['prefill_ms']:,.1f} ms"
                    if r.get("encoder_ms") else ""))
                tries.append(r)
                if r["error"] or (r.get("foreign_cpu") or 0) <= CONTENDED:
                    break
            good = [t for t in tries if not t["error"]]
            best = min(good, key=lambda t: t.get("foreign_cpu") or 0) if good else tries[-1]
            got[name] = {key: best.get(key) for key in (*FIGURES, "error", "peak_rss",
                                                       "foreign_cpu", "encoder_load_s",
                                                       "prefill_load_s", "decode_load_s", "cmd")}
            got[name]["tries"] = len(tries)
        out["rounds"].append(got)
    for name in names:
        runs = [rd[name] for rd in out["rounds"] if name in rd]
        good = [r for r in runs if not r.get("error")]
        if not good:
            err = out["check"][name]["error"] or next((r["error"] for r in runs), "not run")
            out["median"][name] = {"error": err}
            continue
        med = {key: statistics.median(r[key] for r in good) for key in FIGURES}
        for key in ("peak_rss", "foreign_cpu", "encoder_load_s", "prefill_load_s",
                    "decode_load_s"):
            vals = [r[key] for r in good if r.get(key) is not None]
            med[key] = statistics.median(vals) if vals else None
        med.update(rounds=len(good), error=None, cmd=good[0]["cmd"],
                   tries=sum(r.get("tries", 1) for r in good),
                   per_round={key: [r[key] for r in good] for key in FIGURES})
        out["median"][name] = med
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ferry", type=Path,
                   default=Path(os.environ.get("FERRY_BUILD", ROOT / "build")) / "ferry")
    p.add_argument("--work", type=Path, default=WORK)
    p.add_argument("--model", choices=sorted(MODELS), default="whisper",
                   help="whisper: Whisper-small's shapes (default); t5: T5-base's")
    p.add_argument("--tiny", action="store_true", help="a 2-layer checkpoint: a smoke run")
    p.add_argument("--md", type=Path, help="report (default bench/work/benchmarks-MODEL.md; "
                   "benchmarks-MODEL-tiny.md with --tiny)")
    p.add_argument("--json", type=Path, help="raw results (default bench/work/"
                   "MODEL-results.json; MODEL-results-tiny.json with --tiny)")
    p.add_argument("--repeats", type=int, default=None,
                   help="ferry runs per form (median; default 3, 2 with --tiny)")
    p.add_argument("--no-peers", action="store_true", help="skip transformers and optimum")
    p.add_argument("--no-optimum", action="store_true", help="skip optimum-cli")
    p.add_argument("--optimum-work", type=Path, default=None,
                   help="the folder holding venv-optimum (made there if missing; default --work)")
    p.add_argument("--venv-python", default=os.environ.get("BENCH_PYTHON", "python3"),
                   help="interpreter that creates the optimum venv")
    p.add_argument("--memory-floor-mib", type=float, default=1536,
                   help="a peer export is killed (a row with that error) when the machine's "
                        "available memory falls under this (default 1536)")
    p.add_argument("--peer-timeout", type=float, default=None,
                   help="seconds per transformers / optimum export (default 3600, 900 with "
                        "--tiny)")
    p.add_argument("--export-timeout", type=float, default=1800)
    p.add_argument("--runtime-timeout", type=float, default=1200,
                   help="seconds per bench/whisper_latency.py run")
    p.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    p.add_argument("--steps", type=int, default=32, help="timed decode steps (mean)")
    p.add_argument("--prefill-reps", type=int, default=3, help="timed prompts (median)")
    p.add_argument("--encoder-reps", type=int, default=3, help="timed encoder calls (median)")
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved runtime rounds (median over them)")
    p.add_argument("--latency-tries", type=int, default=None,
                   help="in a round, an export measured while others used more than "
                        f"{CONTENDED} cores is measured again after waiting for a quiet "
                        "machine, at most this many times in all (the least disturbed kept; "
                        "default 2, 1 with --tiny)")
    p.add_argument("--resume", action="store_true",
                   help="keep the steps an interrupted run saved (MODEL-results*.json.partial)")
    p.add_argument("--report-from", type=Path, metavar="RESULTS.json",
                   help="only rewrite the report from an earlier run's results")
    p.add_argument("--note", action="append", default=[],
                   help="a sentence for the report's Notes (repeatable)")
    args = p.parse_args()
    suffix = "-tiny" if args.tiny else ""
    if args.report_from:
        data = json.loads(args.report_from.read_text())
        # the results' model names the default report (--model is the run's)
        args.md = args.md or args.work / f"benchmarks-{data.get('model', 'whisper')}{suffix}.md"
        if args.note:
            data["notes"] = list(dict.fromkeys(data.get("notes", []) + args.note))
            args.report_from.write_text(json.dumps(data, indent=2, default=str))
        write_report(args.md, data)
        print(f"wrote {args.md}")
        return
    spec = args.spec = MODELS[args.model]
    args.md = args.md or args.work / f"benchmarks-{spec.key}{suffix}.md"
    args.json = args.json or args.work / f"{spec.key}-results{suffix}.json"
    args.repeats = args.repeats or (2 if args.tiny else 3)
    args.latency_tries = args.latency_tries or (1 if args.tiny else 2)
    args.peer_timeout = args.peer_timeout or (900 if args.tiny else 3600)
    args.ferry, args.work = args.ferry.resolve(), args.work.resolve()
    args.optimum_work = (args.optimum_work or args.work).resolve()
    args.log_dir = args.work / f"{spec.key}-logs{suffix}"
    args.out_root = args.work / f"{spec.key}-out{suffix}"
    args.work.mkdir(parents=True, exist_ok=True)
    if not args.resume:
        shutil.rmtree(args.log_dir, ignore_errors=True)
        shutil.rmtree(args.out_root, ignore_errors=True)
    args.log_dir.mkdir(parents=True, exist_ok=True)
    run = Run(args)
    data = run.data
    data.update(model=spec.key, tiny=args.tiny, command="python bench/whisper_bench.py" + (
        " " + shlex.join(sys.argv[1:]) if sys.argv[1:] else ""),
        date=datetime.datetime.now().strftime("%Y-%m-%d %H:%M"), threads=args.threads,
        steps=args.steps, prefill_reps=args.prefill_reps, encoder_reps=args.encoder_reps,
        rounds=args.rounds, latency_tries=args.latency_tries, repeats=args.repeats,
        peer_timeout=args.peer_timeout, memory_floor_mib=args.memory_floor_mib,
        machine=machine_info(),
        notes=list(dict.fromkeys(data.get("notes", []) + args.note)),
        loadavg_start=os.getloadavg(), ferry_rev=git_rev(),
        ferry_version=ferry_version(args.ferry))

    # --- 1. the checkpoint, the runtime's inputs, transformers' generate()
    cfg = dict(spec.tiny if args.tiny else spec.full, **spec.tokens)
    ckpt = args.work / spec.dirs[1 if args.tiny else 0]
    args.ckpt = ckpt
    need = (0 if (ckpt / "model.safetensors").exists() else 4 * spec.parameters) + 9 * 2**30
    free = shutil.disk_usage(args.work).free
    if free < need * (0.35 if args.tiny else 1):
        raise SystemExit(f"{args.work}: {free / 2**30:.1f} GiB free, the run needs about "
                         f"{need / 2**30:.1f} GiB (the checkpoint and the exports it times)")
    made = make_checkpoint(spec, ckpt, cfg, args.log_dir)
    data["checkpoint"] = dict(path=str(ckpt.relative_to(ROOT)) if ckpt.is_relative_to(ROOT)
                              else str(ckpt), config=cfg, generation_config=spec.generation_config,
                              bytes=(ckpt / "model.safetensors").stat().st_size, **made)
    run.say(f"checkpoint {ckpt} ({made['how']}, {made['parameters'] / 1e6:,.1f} M parameters, "
            f"{data['checkpoint']['bytes'] / MiB:,.0f} MiB)")
    args.inputs = args.log_dir / "inputs.npz"
    if not args.inputs.exists():
        r = measure([PY, HERE / "peer_transformers_whisper.py", ckpt, args.inputs, "--mode",
                     "inputs", "--steps", str(args.steps + 8)], args.log_dir / "inputs.log",
                    env=PEER_ENV, timeout=900)
        if r["error"]:
            raise SystemExit(f"could not make the runtime's inputs: {r['error']}")
    import numpy as np

    x = np.load(args.inputs)
    data["inputs"] = {k: [list(x[k].shape), str(x[k].dtype)] for k in x.files}
    data["prompt_ids"] = x["prompt_ids"].tolist()
    if not run.done("generate-transformers"):
        log = args.log_dir / "generate-transformers.log"
        tokens = args.log_dir / "generate-transformers.json"
        r = measure([PY, HERE / "peer_transformers_whisper.py", ckpt, tokens, "--mode",
                     "generate", "--new", str(GENERATE_TOKENS)], log, env=PEER_ENV, timeout=1800)
        run.save("generate-transformers", dict(
            error=r["error"], wall=r["wall"], peak_rss=r["peak_rss"],
            tokens=None if r["error"] else json.loads(tokens.read_text())["tokens"]))
        run.say(f"transformers generate(): {brief(r)}")
    want = data["results"]["generate-transformers"].get("tokens")

    # --- 2. ferry: export (and its floor, its generate()); outputs kept for the runtime
    specs = {}
    for key, label, opts, timed_runtime in ferry_forms(spec):
        step = f"ferry-{key}"
        out = args.out_root / step
        if not run.done(step):
            r, out = ferry_export(run, key, ckpt, label, opts, args.repeats)
            entry = {"export": r}
            if not r.get("error"):
                entry["graphs"] = sorted(p.name for p in out.iterdir())
                if key == "onnx":
                    run.say("cp + sync + dd of model.onnx.data")
                    entry["cp"] = cp_baseline(out / "model.onnx.data", args.out_root,
                                              args.log_dir, spec.key, args.repeats)
                    entry["generate"] = ferry_generate(run, out, want)
                    run.say(f"  ferry generate(): {entry['generate']['tokens']} "
                            f"(transformers' {want}: equal {entry['generate']['equal']})")
            if not timed_runtime:
                shutil.rmtree(out, ignore_errors=True)
            run.save(step, entry)
        if timed_runtime and not data["results"][step]["export"].get("error") and out.exists():
            specs[step] = dict(kind="ferry-onnx", dir=out, label=label)

    # --- transformers: the generation export(s), the encoder
    if not args.no_peers:
        tf_out = {mode: args.out_root / name for mode, name, _ in spec.tf_exports}
        if not run.done("tf"):
            entry = {}
            for mode, name, opts in spec.tf_exports:
                out = tf_out[mode]
                entry[mode], _ = guarded_export(
                    run, ckpt, name, "transformers OnnxExporter " + " ".join(opts),
                    [PY, str(HERE / "peer_transformers_whisper.py"), str(ckpt), "{out}", *opts],
                    "peer_transformers_whisper.py")
                if not entry[mode].get("error"):
                    entry[mode]["graphs"] = sorted(p.name for p in out.iterdir())
            run.save("tf", entry)
        tf = data["results"]["tf"]
        for name, mode in spec.tf_runtime:
            if all(not (tf.get(m) or {"error": "not run"}).get("error")
                   for m in (mode, "encoder")) and tf_out[mode].exists():
                specs[name] = dict(kind="tf-onnx", dir=tf_out[mode],
                                   encoder_dir=tf_out["encoder"], label=RUNTIME_LABELS[name])

    # --- optimum-cli
    if not args.no_peers and not args.no_optimum:
        opt_out = args.out_root / "optimum"
        if not run.done("optimum"):
            opt_py, err, setup_s = ensure_optimum_venv(args.optimum_work, args.log_dir,
                                                       args.venv_python)
            if err:
                entry = {"export": dict(error=err, wall=setup_s, peak_rss=None)}
            else:
                cli = str(Path(opt_py).parent / "optimum-cli")
                r, _ = guarded_export(
                    run, ckpt, "optimum", "optimum-cli export onnx",
                    [cli, "export", "onnx", "--model", str(ckpt), "--task",
                     spec.optimum_task, "{out}"], "optimum-cli")
                r["cmd"] = r["cmd"].replace(str(Path(opt_py).parent) + "/", "")
                if not r.get("error"):
                    r["graphs"] = sorted(p.name for p in opt_out.iterdir())
                entry = {"export": r, "setup_s": setup_s,
                         "versions": versions(opt_py, OPTIMUM_PACKAGES)}
            run.save("optimum", entry)
        if not data["results"]["optimum"]["export"].get("error") and opt_out.exists():
            specs["optimum-onnx"] = dict(kind="optimum-onnx", dir=opt_out,
                                         label="optimum-cli (optimum-onnx)")

    # --- 3. the runtime, ferry's ONNX export first (the reference)
    if not run.done("runtime") and "ferry-onnx" in specs:
        run.save("runtime", runtime(run, specs))
    shutil.rmtree(args.out_root, ignore_errors=True)

    data.update(loadavg_end=os.getloadavg(),
                versions=versions(PY, ["transformers", "torch", "onnxruntime", "openvino", "onnx",
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


def millions(n):
    return f"{n / 1e6:,.0f} M" if n >= 1e7 else f"{n / 1e6:.2f} M"


def ratio_x(theirs, ours):
    return "-" if not theirs or not ours else f"{theirs / ours:.2f}x"


def rss_part(ours, theirs):
    """ferry's peak RSS as a part of another's: '1/N'."""
    return "-" if not theirs or not ours else f"1/{theirs / ours:.0f}" if theirs >= ours \
        else f"{ours / theirs:.1f}x theirs"


def no_slower(ours, theirs):
    if not ours or not theirs:
        return "-"
    q = ours / theirs
    return "yes" if q <= 1.0 else "within 5 %" if q <= 1.05 else "**no**"


def combined(gen, enc):
    """transformers' generation export and encoder export as one: walls added, the larger peak."""
    if not gen or not enc:
        return None
    both = dict(wall=gen["wall"] + enc["wall"], peak_rss=max(gen["peak_rss"] or 0,
                                                             enc["peak_rss"] or 0),
                foreign_cpu=max(gen.get("foreign_cpu") or 0, enc.get("foreign_cpu") or 0))
    if gen.get("error") or enc.get("error"):
        return dict(both, error=gen.get("error") or enc.get("error"))
    return dict(both, error=None,
                out_bytes=(gen.get("out_bytes") or 0) + (enc.get("out_bytes") or 0))


def export_line(label, r, ref):
    """| exporter | status | wall | vs ferry | peak RSS | ferry's RSS | output | others' CPU |"""
    if r is None:
        return f"| {label} | not run | - | - | - | - | - | - |"
    if r.get("error"):
        return (f"| {label} | **failed**: {cell(r['error'])} | {r.get('wall') or 0:.0f} | - | "
                f"{fmt_mib(r.get('peak_rss'))} | - | - | {fmt_cores(r.get('foreign_cpu'))} |")
    if not ref or ref.get("error"):  # None: the reference itself; {}: not compared
        return (f"| {label} | ok | {fmt_s(r)} | {'ref' if ref is None else '-'} | "
                f"{fmt_mib(r['peak_rss'])} | {'ref' if ref is None else '-'} | "
                f"{fmt_mib(r.get('out_bytes'))} | {fmt_cores(r.get('foreign_cpu'))} |")
    return (f"| {label} | ok | {fmt_s(r)} | {r['wall'] / ref['wall']:.1f}x | "
            f"{fmt_mib(r['peak_rss'])} | {rss_part(ref['peak_rss'], r['peak_rss'])} | "
            f"{fmt_mib(r.get('out_bytes'))} | {fmt_cores(r.get('foreign_cpu'))} |")


RUNTIME_LABELS = {**{f"ferry-{key}": label for key, label, _, _ in FERRY_FORMS},
                  "tf-onnx": "transformers OnnxExporter (its encoder export + prefill / decode)",
                  "tf-onnx-prompt2": "transformers OnnxExporter, a 2-token decoder prompt traced "
                                     "(its encoder export + prefill / decode)",
                  "optimum-onnx": "optimum-cli (encoder_model, decoder_model, "
                                  "decoder_with_past_model)"}


def summary(data):
    S, out = data["results"], []
    spec = MODELS[data.get("model", "whisper")]
    ferry = (S.get("ferry-onnx") or {}).get("export")
    if ferry and ferry.get("error"):
        out.append(f"ferry's ONNX export failed: {cell(ferry['error'])}.")
    elif ferry:
        text = (f"ferry exported the checkpoint to ONNX (encoder, prefill, decode) in "
                f"{ferry['wall']:.1f} s at {fmt_mib(ferry['peak_rss'])} MiB peak RSS")
        cp = (S.get("ferry-onnx") or {}).get("cp") or {}
        ws = cp.get("write_sync")
        if ws and not ws.get("error"):
            text += (f" ({ferry['wall'] / ws['wall']:.2f}x the disk's floor for its "
                     f"{fmt_mib(cp['bytes'])} MiB of weights)")
        tf = S.get("tf") or {}
        both = combined(tf.get("generation"), tf.get("encoder"))
        if both and not both.get("error"):
            text += (f"; transformers' OnnxExporter, generation + encoder, took "
                     f"{both['wall']:.0f} s ({both['wall'] / ferry['wall']:.0f}x) at "
                     f"{fmt_mib(both['peak_rss'])} MiB (ferry's is 1/"
                     f"{both['peak_rss'] / ferry['peak_rss']:.0f})")
        elif both:
            text += f"; transformers' OnnxExporter failed: {cell(both['error'])}"
        opt = (S.get("optimum") or {}).get("export")
        if opt and not opt.get("error"):
            text += (f"; optimum-cli took {opt['wall']:.0f} s ({opt['wall'] / ferry['wall']:.0f}x)"
                     f" at {fmt_mib(opt['peak_rss'])} MiB (ferry's is 1/"
                     f"{opt['peak_rss'] / ferry['peak_rss']:.0f})")
        elif opt:
            text += f"; optimum-cli: {cell(opt['error'])}"
        out.append(text + ".")
        gen = (S.get("ferry-onnx") or {}).get("generate")
        if gen:
            out.append(f"ferry's generate() on its ONNX export gave "
                       + ("the same tokens as" if gen["equal"] else "**other tokens than**")
                       + f" transformers' generate() ({GENERATE_TOKENS} greedy tokens"
                       + (f"; {cell(gen['error'])}" if gen.get("error") else "") + ").")
    rt = S.get("runtime") or {}
    med = rt.get("median") or {}
    ref = med.get("ferry-onnx") or {}
    if ref and not ref.get("error"):
        for name in ("tf-onnx", "tf-onnx-prompt2", "optimum-onnx"):
            m = med.get(name)
            if m and m.get("error"):
                out.append(f"onnxruntime, {RUNTIME_LABELS[name].split(' (')[0]}: **failed**: "
                           f"{cell(m['error']).rstrip('.')}"
                           f"{spec.runtime_failure(name, m['error'])}.")
            if not m or m.get("error"):
                continue
            parts = [f"{what} {ref[k]:,.1f} vs {m[k]:,.1f} ms (ferry no slower: "
                     f"{no_slower(ref[k], m[k])})" for k, what in
                     (("encoder_ms", "encoder"), ("first_token_ms", "encoder + prompt"),
                      ("decode_ms_mean", "decode/step"))]
            out.append(f"onnxruntime, ferry vs {RUNTIME_LABELS[name].split(' (')[0]}: "
                       + "; ".join(parts) + ".")
        forms = [f"{RUNTIME_LABELS[n]}: encoder + prompt {m['first_token_ms']:,.1f} ms, decode "
                 f"{m['decode_ms_mean']:,.1f} ms/step" for n, m in med.items()
                 if n.startswith("ferry-") and n != "ferry-onnx" and not m.get("error")]
        if forms:
            out.append("ferry's other forms (same harness): " + "; ".join(forms) + ".")
    return (["## Summary", ""] + [f"- {x}" for x in out] + [""]) if out else []


def _measurements(step):
    out = []
    for v in (step.values() if isinstance(step, dict) else step):
        if isinstance(v, dict):
            if "wall" in v and "peak_rss" in v:
                out.append(v)
            else:
                out.extend(_measurements(v))
        elif isinstance(v, list):
            out.extend(_measurements(v))
    return out


def write_report(path, data):
    S, info, ck = data["results"], data["machine"], data["checkpoint"]
    c = ck["config"]
    spec = MODELS[data.get("model", "whisper")]
    L = [f"# Benchmarks: {spec.title}", "",
         f"Written by `{data['command']}` on {data['date']} (the run took "
         f"{data['total_s'] / 60:.0f} min)." + (" **A smoke run on a 2-layer checkpoint: its "
                                                 "figures mean little.**" if data["tiny"] else ""),
         "",
         f"**Machine**: {info['cpu']}, {info['cores']} cores, {info['ram_gib']:.0f} GiB RAM, "
         f"Linux {info['kernel']}, {info.get('fs', '?')} filesystem, Python {info['python']}. "
         f"Load average {data['loadavg_start'][0]:.2f} at the start, "
         f"{data['loadavg_end'][0]:.2f} at the end.", "",
         f"**ferry**: {data['ferry_version']}, git {data['ferry_rev']}, build/ferry sha256 "
         f"{', '.join(data['ferry_hashes'])}"
         + (" (**the binary changed during the run**: another build replaced it)"
            if data.get("ferry_sha256_changed") else " (the same binary for every ferry step)")
         + ". **Versions**: " + ", ".join(f"{k} {val or 'not installed'}"
                                          for k, val in data["versions"].items())]
    opt = S.get("optimum") or {}
    if opt.get("versions"):
        L[-1] += "; optimum's venv: " + ", ".join(f"{k} {val or 'not installed'}"
                                                   for k, val in opt["versions"].items())
    L[-1] += "."
    L.append("")
    foreign = [r.get("foreign_cpu") for r in _measurements(S) if r.get("foreign_cpu") is not None]
    if foreign:
        L += [f"**Load**: other processes used {statistics.median(foreign):.2f} of the "
              f"{info['cores']} cores (median over the measurements, up to {max(foreign):.2f}; "
              "column *others' CPU*: CPU time outside the measured process tree and this "
              "harness, from /proc/stat).", ""]
    L += summary(data)

    # --- checkpoint
    L += ["## Checkpoint", "", spec.checkpoint_text(data, ck, c), ""]
    gt = S.get("generate-transformers") or {}
    gf = (S.get("ferry-onnx") or {}).get("generate") or {}
    if gt:
        L += [spec.generate_head
              + (f"**failed**: {cell(gt['error'])}" if gt.get("error") else f"{gt['tokens']}")
              + (spec.generate_ferry + (f"**failed**: {cell(gf['error'])}" if gf.get("error")
                                        else f"{gf['tokens']} ("
                                        + ("the same" if gf["equal"] else "**not the same**")
                                        + ")")
                 if gf else "")
              + spec.generate_tail, ""]

    # --- exports
    L += ["## Export: ferry against transformers' OnnxExporter and optimum-cli", "",
          "One process each, from the same checkpoint, the page cache warm (`sync` untimed "
          "before each). *wall*: start to exit. *peak RSS*: the whole process tree (sum of "
          "VmRSS, sampled every 50 ms then 200 ms, never below any process's VmHWM). ferry: "
          f"median of {data['repeats']} runs (range in brackets), `--for-generation --dynamic`, "
          "fp32 unless said. " + spec.export_text(data)
          + " *vs ferry*: the exporter's wall over ferry's ONNX "
          "export's (above 1: ferry faster); *ferry's RSS*: ferry's ONNX export's peak as a "
          "part of the exporter's.", "",
          "| exporter | status | wall (s) | vs ferry | peak RSS (MiB) | ferry's RSS | output "
          "(MiB) | others' CPU |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    ferry = (S.get("ferry-onnx") or {}).get("export")
    for key, label, _, _ in ferry_forms(spec):
        r = (S.get(f"ferry-{key}") or {}).get("export")
        if r is not None:
            L.append(export_line(label, r, None if key == "onnx" else {}))
    tf = S.get("tf")
    if tf:
        gen, enc = tf.get("generation"), tf.get("encoder")
        L.append(export_line("transformers OnnxExporter export_for_generation (prefill, decode)",
                             gen, ferry))
        L.append(export_line("transformers OnnxExporter export(model.get_encoder())", enc, ferry))
        L.append(export_line("**transformers OnnxExporter generation + encoder**",
                             combined(gen, enc), ferry))
        if "generation_prompt2" in tf:
            L.append(export_line("transformers OnnxExporter export_for_generation, "
                                 "decoder_input_ids of 2 tokens (prefill, decode)",
                                 tf["generation_prompt2"], ferry))
    elif "tf" not in S:
        L.append("| transformers OnnxExporter | not run (--no-peers) | - | - | - | - | - | - |")
    if opt:
        L.append(export_line("optimum-cli export onnx", opt.get("export"), ferry))
    else:
        L.append("| optimum-cli export onnx | not run (--no-peers / --no-optimum) | - | - | - | - "
                 "| - | - |")
    cp = (S.get("ferry-onnx") or {}).get("cp")
    if cp:
        for key, what in (("cp", "`cp` of ferry's model.onnx.data"),
                          ("cp_sync", "`cp` + `sync FILE`"),
                          ("write_sync", "as many bytes written past the page cache and synced "
                                         "(`dd oflag=direct conv=fsync`)")):
            r = cp.get(key)
            if r:
                L.append(f"| *floor: {what}* | ok | {fmt_s(r)} | - | {fmt_mib(r['peak_rss'])} | "
                         f"- | {fmt_mib(cp['bytes'])} | {fmt_cores(r.get('foreign_cpu'))} |")
    L.append("")
    if cp and ferry and not ferry.get("error"):
        ws = cp.get("write_sync")
        L += [f"ferry's ONNX export takes {ferry['wall'] / cp['cp']['wall']:.2f}x the time of "
              f"`cp` of its weights file, {ferry['wall'] / cp['cp_sync']['wall']:.2f}x that of "
              "`cp` + `sync` (ferry fsyncs what it writes before it exits)"
              + (f" and {ferry['wall'] / ws['wall']:.2f}x the disk's floor for those bytes "
                 "(written past the page cache and synced, nothing read)" if ws else "") + ".",
              ""]
    phases = []
    for name, r in (("transformers generation", (tf or {}).get("generation")),
                    ("transformers encoder", (tf or {}).get("encoder")),
                    ("transformers generation, 2-token decoder prompt",
                     (tf or {}).get("generation_prompt2")),
                    ("optimum", opt.get("export"))):
        if r and r.get("phases"):
            phases.append(f"{name}: " + ", ".join(f"{k} {v:.0f} s" for k, v in r["phases"].items()))
    if phases:
        L += ["Where the Python exporters spend their time: " + "; ".join(phases) + ".", ""]
    if opt.get("setup_s"):
        L += [f"optimum's venv was made by this run in {opt['setup_s']:.0f} s (not in its "
              "wall).", ""]
    graphs = [(label, (S.get(k) or {}).get("graphs") or ((S.get(k) or {}).get("export") or {})
               .get("graphs")) for k, label in (("ferry-onnx", "ferry ONNX"),
                                                ("ferry-openvino", "ferry OpenVINO"))]
    graphs += [("transformers " + m.replace("_prompt2", ", 2-token decoder prompt"),
                ((tf or {}).get(m) or {}).get("graphs"))
               for m in ("generation", "encoder", "generation_prompt2")]
    graphs.append(("optimum", (opt.get("export") or {}).get("graphs")))
    graphs = [(label, g) for label, g in graphs if g]
    if graphs:
        L += ["Files written: " + "; ".join(f"{label}: {', '.join(g)}" for label, g in graphs)
              + ".", ""]

    # --- runtime
    L += runtime_tables(data, spec)

    notes = data.get("notes") or []
    if notes:
        L += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]

    # --- commands
    L += ["## Commands", "", f"ferry (median of {data['repeats']}; CKPT is {ck['path']}):", "",
          "```sh"]
    for key, label, _, _ in ferry_forms(spec):
        r = (S.get(f"ferry-{key}") or {}).get("export")
        if r and r.get("cmd"):
            L += [f"# {label}", r["cmd"]]
    L += ["```", "", "transformers (bench/peer_transformers_whisper.py; its docstring has the "
          "calls) and optimum (its own venv):", "", "```sh"]
    for r in [(tf or {}).get("generation"), (tf or {}).get("encoder"),
              (tf or {}).get("generation_prompt2"), opt.get("export")]:
        if r and r.get("cmd"):
            L.append(r["cmd"])
    rt = S.get("runtime") or {}
    lat_cmds = [line for n, m in (rt.get("median") or {}).items() if m.get("cmd")
                for line in (f"# {RUNTIME_LABELS.get(n, n).split(' (')[0]}", m["cmd"])]
    L += ["```", "", "Runtime (one process per export and round; INPUTS.npz from "
          "`python bench/peer_transformers_whisper.py CKPT INPUTS.npz --mode inputs`):", "",
          "```sh"] + lat_cmds + \
        ["```", "", "HF_HUB_OFFLINE=1 for the Python exporters.", "", "## Reproduce", "",
         "```sh", f"{spec.reproduce}          # this report",
         f"{spec.reproduce} --tiny   # a smoke run in minutes", "```", "",
         f"Raw figures: bench/work/{spec.key}-results{'-tiny' if data['tiny'] else ''}.json; "
         f"each process's output: bench/work/{spec.key}-logs{'-tiny' if data['tiny'] else ''}/.",
         ""]
    path.write_text("\n".join(L))


def runtime_tables(data, spec):
    rt = data["results"].get("runtime")
    if not rt:
        return []
    med, agree, scale = rt.get("median") or {}, rt.get("agreement") or {}, rt.get("ref_scale") or {}
    ref = med.get("ferry-onnx") or {}
    ok_ref = ref if not ref.get("error") else {}
    arrays, encoder_on, prompt_is = spec.runtime_inputs_text(data)
    L = ["## Runtime: onnxruntime CPU, encoder and decode", "",
         f"bench/whisper_latency.py, one process per export, {data['threads']} threads "
         "(intra_op_num_threads; inter_op 1, sequential, ORT_ENABLE_ALL, CPUExecutionProvider), "
         f"batch 1, the same arrays for every export: {arrays}, then seeded tokens one a step. "
         "Every call through IOBinding, each output an OrtValue bound as a later call's input "
         f"(no copy). *encoder*: the encoder graph on {encoder_on}, median of "
         f"{data['encoder_reps']} after a warm-up; ferry's encoder also makes every decoder "
         "layer's cross-attention keys and values, which transformers' and optimum's prefill "
         "(decoder_model) make from the hidden states, so *encoder + prompt* (the time to the "
         f"first token's logits) is the like-for-like figure. *prompt*: {prompt_is} from an "
         f"empty cache, median of {data['prefill_reps']} after a warm-up. "
         f"*decode*: the mean of {data['steps']} one-token steps after 4 warm-up steps, from "
         "the prompt's cache (a step covers binding its inputs and the run). transformers' "
         "decode takes the cross cache as an input and returns it as an output each step (fed "
         "back, as its OnnxModelRunner loop does); ferry's and optimum's take it as an input. "
         f"Each figure is the median over {data['rounds']} interleaved rounds (every export "
         "once a round, the order rotated, each round after waiting for a quiet machine; a run "
         f"during which other processes used more than {CONTENDED} cores was run again after "
         "waiting, at most "
         f"{data.get('latency_tries', 1)} runs in all, the least disturbed kept: *runs*); "
         "*vs ferry*: the export's time over ferry's ONNX export's (above 1: ferry faster).", "",
         "| export | encoder (ms) | vs ferry | prompt (ms) | vs ferry | encoder + prompt (ms) | "
         "vs ferry | ferry no slower | decode (ms/step) | vs ferry | ferry no slower | peak RSS "
         "(MiB) | others' CPU | rounds (runs) |",
         "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---:|---:|---:|"]

    def num(v, d=1):
        return "-" if v is None else f"{v:,.{d}f}"

    for name, m in med.items():
        label = RUNTIME_LABELS.get(name, name)
        if m.get("error"):
            L.append(f"| {label} | **failed**: {cell(m['error'])} | - | - | - | - | - | - | - | - "
                     "| - | - | - | 0 |")
            continue
        is_ref = name == "ferry-onnx"
        peer = not name.startswith("ferry-")

        def vs(key):
            return "ref" if is_ref else ratio_x(m[key], ok_ref.get(key))

        L.append(f"| {label} | {num(m['encoder_ms'], 0)} | {vs('encoder_ms')} | "
                 f"{num(m['prefill_ms'])} | {vs('prefill_ms')} | {num(m['first_token_ms'], 0)} | "
                 f"{vs('first_token_ms')} | "
                 f"{no_slower(ok_ref.get('first_token_ms'), m['first_token_ms']) if peer else '-'}"
                 f" | {num(m['decode_ms_mean'])} | {vs('decode_ms_mean')} | "
                 f"{no_slower(ok_ref.get('decode_ms_mean'), m['decode_ms_mean']) if peer else '-'}"
                 f" | {fmt_mib(m.get('peak_rss'))} | {fmt_cores(m.get('foreign_cpu'))} | "
                 f"{m['rounds']} ({m.get('tries', m['rounds'])}) |")
    L.append("")
    rounds = [f"{RUNTIME_LABELS.get(n, n).split(' (')[0]}: encoder "
              + ", ".join(f"{v:,.0f}" for v in m["per_round"]["encoder_ms"]) + " ms; decode "
              + ", ".join(f"{v:.2f}" for v in m["per_round"]["decode_ms_mean"]) + " ms/step"
              for n, m in med.items() if not m.get("error")]
    if rounds:
        L += ["Each round's figures (in round order): " + "; ".join(rounds) + ".", ""]
    if agree:
        L += ["The exports compute the same function: max |Δ| from ferry's ONNX export, in the "
              "check pass before the timed rounds (the encoder's last_hidden_state, the prompt's "
              "logits at every position, the 4th step's logits): " + "; ".join(
                  f"{RUNTIME_LABELS.get(n, n).split(' (')[0]}: " + ", ".join(
                      f"{k} {v:.1e}" for k, v in d.items()) for n, d in agree.items())
              + (" (ferry's largest magnitudes: " + ", ".join(
                  f"{k} {v:.2f}" for k, v in scale.items()) + ")" if scale else "")
              + ". The int4 row differs by its quantization, not by a fault.", ""]
    ferry_rows = [n for n in med if n.startswith("ferry-") and n != "ferry-onnx"]
    if ferry_rows:
        L += [spec.forms_text + "ferry's standard-ONNX int4 export "
              "(DequantizeLinear + MatMul) is in the export table but not timed: onnxruntime's "
              "CPU provider runs it unfused, dequantizing every weight each call.", ""]
    fails = [(n, c["error"]) for n, c in (rt.get("check") or {}).items() if c.get("error")]
    if fails:
        L += ["Check pass failures: " + "; ".join(f"{n}: {cell(e).rstrip('.')}"
                                                  + spec.runtime_failure(n, e)
                                                  for n, e in fails) + ".", ""]
    loads = [f"{RUNTIME_LABELS.get(n, n).split(' (')[0]}: encoder {m['encoder_load_s']:.1f} s, "
             f"prompt {m['prefill_load_s']:.1f} s, decode {m['decode_load_s']:.1f} s"
             for n, m in med.items() if not m.get("error") and m.get("decode_load_s") is not None]
    if loads:
        L += ["Session creation times (median), not in the figures above: " + "; ".join(loads)
              + ".", ""]
    return L


if __name__ == "__main__":
    main()
