#!/usr/bin/env python3
"""onnxruntime CPU latency of one encoder-decoder export (Whisper, T5): the encoder on its input
(Whisper: 30 s of audio; T5: 512 tokens), the prompt (Whisper: the 4 init tokens; T5: the
decoder_start_token_id), then one-token decode steps.

    python bench/whisper_latency.py --kind ferry-onnx|tf-onnx|optimum-onnx --dir OUT \
        [--encoder-dir ENC_OUT] --inputs INPUTS.npz --json result.json [--logits L.npz] \
        [--threads 2] [--steps 32] [--reps 3] [--encoder-reps 3]

One process per export (bench/whisper_bench.py measures its peak RSS). INPUTS.npz is what
bench/peer_transformers_whisper.py --mode inputs wrote: the encoder's inputs (Whisper:
input_features [1, 80, 3000], the checkpoint's WhisperFeatureExtractor on 30 s of synthetic
audio; T5: input_ids [1, 512], seeded ids, and attention_mask [1, 512], ones), prompt_ids (the
tokens generate() starts the decoder from: Whisper's 4 init tokens, T5's decoder_start_token_id)
and step_ids (seeded tokens fed one a step, not sampled), so every export gets the same arrays.
Each graph is fed the arrays its inputs name; a decoder's encoder_attention_mask (ferry's,
optimum's) or attention_mask (transformers') is the encoder's attention_mask. The same settings
for all: onnxruntime CPUExecutionProvider, intra_op_num_threads = --threads, inter_op 1,
sequential, ORT_ENABLE_ALL (bench/ort_latency.session_options). Batch 1. Every call goes
through IOBinding: each output stays an OrtValue and is bound as a later call's input as it is
(no copy), outputs allocated by onnxruntime on the CPU.

What each export's graphs are and how they are fed (Whisper's names; T5's encoders take
input_ids and attention_mask in place of input_features, and every T5 decoder also takes the
encoder's mask, as said above):
  ferry-onnx    encoder.onnx   input_features -> last_hidden_state, present.<l>.cross_key/value
                prefill.onnx   input_ids, past_key_values.<l>.cross_key/value (the encoder's)
                               -> logits, present.<l>.key/value
                decode.onnx    input_ids, past_key_values.<l>.key/value (the previous call's),
                               past_key_values.<l>.cross_key/value (the encoder's, every step)
                               -> logits, present.<l>.key/value
  tf-onnx       --encoder-dir/model.onnx  input_features -> last_hidden_state
                prefill.onnx   decoder_input_ids, encoder_outputs.last_hidden_state -> logits,
                               cache.{self,cross}_attention_cache.layers.<l>.keys/values (its
                               cross keys/values are made here, from the hidden states)
                decode.onnx    decoder_input_ids, encoder_outputs.last_hidden_state,
                               input.cache.{self,cross}_attention_cache... (the previous
                               call's) -> logits, output.cache.{self,cross}_attention_cache...
                               (as transformers' own OnnxModelRunner loop feeds the returned
                               cache back)
  optimum-onnx  encoder_model.onnx  input_features -> last_hidden_state
                decoder_model.onnx  input_ids, encoder_hidden_states -> logits,
                               present.<l>.decoder/encoder.key/value
                decoder_with_past_model.onnx  input_ids, past_key_values.<l>.decoder.* (the
                               previous call's), past_key_values.<l>.encoder.* (the prompt's)
                               -> logits, present.<l>.decoder.key/value
                (optimum also writes decoder_model_merged.onnx, both decoders behind an If on
                use_cache_branch; the two plain graphs are what it merges)

The stages, one after the other, each stage's graph loaded before it is timed:
  encoder  one warm-up, then the median of --encoder-reps calls
  prompt   the prompt's ids in one call from an empty self-attention cache: one warm-up, then
           the median of --reps
  decode   from the prompt's cache: 4 untimed one-token steps, then back to the prompt's cache
           and --steps timed steps (mean). A step's time covers binding its inputs and running
           it.
*first token* (encoder + prompt) is the sum of the two medians. The encoder's last_hidden_state,
the prompt's logits (every position) and the last step's logits go to --logits (npz) so the
harness can check that the exports compute the same function.
"""

import gc
import json
import re
import statistics
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from latency_args import latency_parser
from ort_latency import session_options

KINDS = {
    "ferry-onnx": dict(encoder="encoder.onnx", prompt="prefill.onnx", decode="decode.onnx"),
    "tf-onnx": dict(encoder=None, prompt="prefill.onnx", decode="decode.onnx"),
    "optimum-onnx": dict(encoder="encoder_model.onnx", prompt="decoder_model.onnx",
                         decode="decoder_with_past_model.onnx"),
}
# cache names -> (self|cross, layer, key|value)
CACHE = [
    # ferry: present.<l>.key, present.<l>.cross_key, past_key_values.<l>.cross_value, ...
    (re.compile(r"^(?:present|past_key_values)\.(\d+)\.(cross_)?(key|value)$"),
     lambda m: ("cross" if m.group(2) else "self", int(m.group(1)), m.group(3))),
    # transformers: [input.|output.]cache.self_attention_cache.layers.<l>.keys
    (re.compile(r"^(?:input\.|output\.)?cache\.(self|cross)_attention_cache\.layers\.(\d+)\."
                r"(keys|values)$"),
     lambda m: (m.group(1), int(m.group(2)), m.group(3)[:-1])),
    # optimum: present.<l>.decoder.key, past_key_values.<l>.encoder.value
    (re.compile(r"^(?:present|past_key_values)\.(\d+)\.(decoder|encoder)\.(key|value)$"),
     lambda m: ("self" if m.group(2) == "decoder" else "cross", int(m.group(1)), m.group(3))),
]
IDS = ("input_ids", "decoder_input_ids")
HIDDEN = ("encoder_outputs.last_hidden_state", "encoder_hidden_states")
# a decoder's padding mask over the encoder's positions (T5's): the encoder's attention_mask
MASKS = ("encoder_attention_mask", "attention_mask")


def slot(name):
    for pattern, key in CACHE:
        m = pattern.match(name)
        if m:
            return key(m)
    return None


class Graph:
    """One ONNX graph in onnxruntime, run through IOBinding: run(feeds) takes numpy arrays or
    OrtValues and returns {output name: OrtValue}."""

    def __init__(self, path, threads):
        self.name = Path(path).name
        t = time.perf_counter()
        self.session = ort.InferenceSession(str(path), session_options(threads),
                                            providers=["CPUExecutionProvider"])
        self.load_s = time.perf_counter() - t
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]

    def run(self, feeds):
        binding = self.session.io_binding()
        for name in self.inputs:
            value = feeds[name]
            if isinstance(value, np.ndarray):
                binding.bind_cpu_input(name, value)
            else:
                binding.bind_ortvalue_input(name, value)
        for name in self.outputs:
            binding.bind_output(name, "cpu")
        try:
            self.session.run_with_iobinding(binding)
        except Exception as e:  # onnxruntime's message spans lines: one line, for the report
            raise RuntimeError(f"{self.name}: {' '.join(str(e).split())}") from None
        return dict(zip(self.outputs, binding.get_outputs()))


def timed(fn, reps, warmup=1):
    """-> (median ms over `reps` calls after `warmup` untimed ones, all ms, the last result)."""
    times, result = [], None
    for k in range(warmup + reps):
        t = time.perf_counter()
        result = fn()
        if k >= warmup:
            times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times), times, result


def feeds_for(graph, ids, hidden, cache, mask=None):
    """The inputs of a decoder graph: its ids, the encoder's hidden states and attention mask
    where it takes them, and each cache input from `cache` ({slot: value})."""
    out = {}
    for name in graph.inputs:
        if name in IDS:
            out[name] = ids
        elif name in HIDDEN:
            out[name] = hidden
        elif name in MASKS and mask is not None:
            out[name] = mask
        else:
            s = slot(name)
            if s is None or s not in cache:
                raise SystemExit(f"{name}: an input this runner does not know how to feed "
                                 f"(has {sorted(cache)})")
            out[name] = cache[s]
    return out


def main():
    p = latency_parser(__doc__)
    p.add_argument("--kind", required=True, choices=sorted(KINDS))
    p.add_argument("--encoder-dir", type=Path, help="transformers' encoder export (model.onnx)")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--logits", type=Path)
    p.add_argument("--encoder-reps", type=int, default=3)
    p.set_defaults(steps=32, reps=3, threads=2)
    a = p.parse_args()
    files = KINDS[a.kind]
    x = np.load(a.inputs)
    # the encoder's inputs: every array but the decoder's
    enc_inputs = {k: np.ascontiguousarray(x[k]) for k in x.files
                  if k not in ("prompt_ids", "step_ids")}
    mask = enc_inputs.get("attention_mask")
    prompt = np.ascontiguousarray(x["prompt_ids"], np.int64)
    step_ids = np.ascontiguousarray(x["step_ids"], np.int64)
    if len(step_ids) < a.steps:
        raise SystemExit(f"{a.inputs} holds {len(step_ids)} step tokens, fewer than --steps")
    result = dict(kind=a.kind, threads=a.threads, steps=a.steps, prompt=int(prompt.shape[1]),
                  **{k: list(v.shape) for k, v in enc_inputs.items()},
                  onnxruntime=ort.__version__)
    saved = {}

    # --- encoder
    enc_path = a.dir / files["encoder"] if files["encoder"] else \
        (a.encoder_dir / "model.onnx" if a.encoder_dir else None)
    if enc_path is None:
        raise SystemExit(f"{a.kind} needs --encoder-dir")
    enc = Graph(enc_path, a.threads)
    result["encoder_load_s"] = enc.load_s
    missing = [n for n in enc.inputs if n not in enc_inputs]
    if missing:
        raise SystemExit(f"{enc.name} takes {missing}, which {a.inputs} does not hold")
    enc_feeds = {n: enc_inputs[n] for n in enc.inputs}
    ms, all_ms, out = timed(lambda: enc.run(enc_feeds), a.encoder_reps)
    result.update(encoder_ms=ms, encoder_ms_all=all_ms)
    hidden = out["last_hidden_state"]
    saved["encoder_hidden"] = hidden.numpy()
    # ferry's encoder also gives every layer's cross keys/values
    fixed = {slot(n): v for n, v in out.items() if n != "last_hidden_state"}
    if None in fixed:
        raise SystemExit(f"encoder outputs this runner does not know: {list(out)}")
    result["encoder_outputs"] = len(out)
    del enc
    gc.collect()

    # --- prompt
    pre = Graph(a.dir / files["prompt"], a.threads)
    result["prefill_load_s"] = pre.load_s
    pre_feeds = feeds_for(pre, prompt, hidden, fixed, mask)
    ms, all_ms, out = timed(lambda: pre.run(pre_feeds), a.reps)
    result.update(prefill_ms=ms, prefill_ms_all=all_ms,
                  first_token_ms=result["encoder_ms"] + ms)
    saved["prefill_logits"] = out["logits"].numpy()[0]
    after_prompt = dict(fixed)
    for n, v in out.items():
        if n == "logits" or n == "encoder_last_hidden_state":
            continue
        s = slot(n)
        if s is None:
            raise SystemExit(f"prompt outputs this runner does not know: {n}")
        after_prompt[s] = v
    del pre, pre_feeds
    gc.collect()

    # --- decode
    dec = Graph(a.dir / files["decode"], a.threads)
    result["decode_load_s"] = dec.load_s

    def run_steps(count):
        cache, times, logits = dict(after_prompt), [], None
        for k in range(count):
            t = time.perf_counter()
            try:
                out = dec.run(feeds_for(dec, step_ids[k], hidden, cache, mask))
            except RuntimeError as e:
                raise RuntimeError(f"decode step {k + 1} (a past of {prompt.shape[1] + k} "
                                   f"tokens): {e}") from None
            times.append(1e3 * (time.perf_counter() - t))
            logits = out.pop("logits")
            for n, v in out.items():
                if n != "encoder_last_hidden_state":
                    cache[slot(n)] = v
        return times, np.asarray(logits.numpy()[0, -1], np.float32)

    run_steps(4)
    times, last = run_steps(a.steps)
    result.update(decode_ms_mean=statistics.fmean(times), decode_ms_median=statistics.median(times),
                  decode_ms_all=times, decode_past=int(prompt.shape[1]))
    saved["decode_last"] = last
    if a.logits:
        np.savez(a.logits, **saved)
    a.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_all")}))


if __name__ == "__main__":
    main()
