#!/usr/bin/env python3
"""transformers' own ONNX export of an encoder-decoder checkpoint directory (Whisper, or T5: its
config.json's model_type says which), as a user would run it (one process). The speech and
text-to-text counterpart of bench/peer_transformers_vlm.py.

    python bench/peer_transformers_whisper.py CKPT OUT --mode generation|encoder \
        [--dtype float32|bfloat16] [--decoder-tokens N]
    python bench/peer_transformers_whisper.py CKPT INPUTS.npz --mode inputs [--steps 40]
    python bench/peer_transformers_whisper.py CKPT TOKENS.json --mode generate [--new 8]

The documented API (transformers.exporters, transformers 5.24) at its defaults for a CPU export:

    model = WhisperForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)  # CPU
    input_features = WhisperFeatureExtractor.from_pretrained(CKPT)(30 s of audio)  # [1, 80, 3000]
    OnnxExporter().export_for_generation(model, {"input_features": input_features},
                                         config=OnnxConfig(dynamic=True))
    exported.save_pretrained(OUT)

`--mode generation` is that call. In transformers 5.24 it writes prefill and decode only:
generate() runs the encoder before its first decoder forward, so the traced prefill takes
encoder_outputs.last_hidden_state (and makes the cross-attention keys and values itself) and no
encoder graph is written. `--mode encoder` therefore exports the encoder by itself:

    OnnxExporter().export(model.get_encoder(), {"input_features": input_features},
                          config=OnnxConfig(dynamic=True))

The graphs it writes (ONNX names):
  encoder (model.onnx)  input_features -> last_hidden_state
  prefill.onnx          decoder_input_ids [1, s], encoder_outputs.last_hidden_state
                        -> logits, cache.self_attention_cache.layers.<l>.keys/values,
                           cache.cross_attention_cache.layers.<l>.keys/values,
                           encoder_last_hidden_state
  decode.onnx           decoder_input_ids [1, 1], encoder_outputs.last_hidden_state,
                        input.cache.{self,cross}_attention_cache.layers.<l>.keys/values
                        -> logits, output.cache.{self,cross}_attention_cache..., 
                           encoder_last_hidden_state
(the batch is fixed at 1: the trace's batch). The prompt generate() traced is the generation
config's init tokens (decoder_start_token_id and forced_decoder_ids: 4 tokens for the bench
checkpoint), so the prefill's sequence axis and the decode's past stay dynamic; with a 1-token
prompt torch would specialise both to 1.

The audio: 30 s of seeded synthetic sound at 16 kHz (a few gliding tones in noise, so the
log-mel has structure), through the checkpoint's own WhisperFeatureExtractor: input_features
[1, 80, 3000], the encoder's whole window.

`--mode inputs` exports nothing: it writes OUT (.npz) with the arrays bench/whisper_latency.py
feeds every export: input_features (as above), prompt_ids [1, 4] (the init tokens, as
generate() lays them out: decoder_start_token_id, then forced_decoder_ids by position) and
step_ids [--steps, 1, 1] (seeded tokens fed one a step, not sampled).

`--mode generate` loads the checkpoint and runs WhisperForConditionalGeneration.generate()
(greedy, --new tokens, return_dict_in_generate=True) on the same features; writes the
sequences past the init tokens to OUT (.json): the check that the checkpoint works with
transformers' generate(). (Its plain return is not used: when the sequence holds timestamp
tokens, which a random model emits even under <|notimestamps|>, generate() splits it into
segments and returns their tokens joined, some twice.)

T5 (model_type "t5", bench/whisper_bench.py --model t5) is fed what its generate() takes, the
same calls otherwise:

    model = T5ForConditionalGeneration.from_pretrained(CKPT, dtype=torch.float32)
    inputs = {"input_ids": ..., "attention_mask": ...}  # [1, 512]: seeded random ids, ones
    OnnxExporter().export_for_generation(model, inputs, config=OnnxConfig(dynamic=True))
    OnnxExporter().export(model.get_encoder(), inputs, config=OnnxConfig(dynamic=True))

The ids: T5's usual input length, 512, seeded random ordinary tokens (3 .. 31999: past pad 0,
eos 1 and unk 2, below the sentinels) ending with eos, as its tokenizer ends a text; the mask all
ones. generate() starts T5's decoder from decoder_start_token_id alone, a 1-token prompt, so
torch specialises the traced decode's self-attention cache length to 1 (a size of 0 or 1 is
never dynamic): the documented call's decode.onnx takes a past of exactly 1 token and cannot run
the second decode step. `--decoder-tokens 2` adds `decoder_input_ids` of 2 tokens
(decoder_start_token_id, then the first step token) to the inputs, so generate() prefills 2 and
the prefill's sequence axis and the decode's past stay dynamic (a user's way around it; not the
guide's call). `--mode inputs` writes input_ids, attention_mask, prompt_ids [[decoder_start]]
and step_ids (seeded ordinary tokens); `--mode generate` runs T5ForConditionalGeneration's
generate() on the same ids and mask and writes the sequences past the start token.

Prints `bench-phase NAME SECONDS` lines (load, export, save) for the harness.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

SAMPLE_RATE = 16000
SECONDS = 30


def audio(seed=0, seconds=SECONDS):
    """30 s of mono float32 audio at 16 kHz: three gliding tones and some noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(seconds * SAMPLE_RATE, dtype=np.float64) / SAMPLE_RATE
    wave = np.zeros_like(t)
    for f0, f1, amp in ((220.0, 440.0, 0.3), (700.0, 1200.0, 0.2), (2500.0, 1800.0, 0.1)):
        freq = f0 + (f1 - f0) * t / seconds
        wave += amp * np.sin(2 * np.pi * np.cumsum(freq) / SAMPLE_RATE)
    wave *= 0.5 + 0.5 * np.sin(2 * np.pi * 0.7 * t) ** 2  # syllable-like envelope
    wave += 0.02 * rng.standard_normal(t.shape)
    return wave.astype(np.float32)


def input_features(ckpt, seed=0):
    """-> float32 [1, num_mel_bins, 3000]: the checkpoint's WhisperFeatureExtractor on audio()."""
    from transformers import WhisperFeatureExtractor

    fe = WhisperFeatureExtractor.from_pretrained(ckpt)
    out = fe(audio(seed), sampling_rate=SAMPLE_RATE, return_tensors="np")
    return np.asarray(out["input_features"], np.float32)


def prompt_ids(ckpt):
    """The init tokens generate() starts the decoder with: decoder_start_token_id, then the
    generation config's forced_decoder_ids in position order. -> int64 [1, n]."""
    gen = json.loads((Path(ckpt) / "generation_config.json").read_text())
    forced = sorted(gen.get("forced_decoder_ids") or [])
    if [i for i, _ in forced] != list(range(1, len(forced) + 1)):
        raise SystemExit(f"forced_decoder_ids not in positions 1..n: {forced}")
    return np.array([[gen["decoder_start_token_id"], *(t for _, t in forced)]], np.int64)


def whisper_inputs(ckpt, steps, seed=0):
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    feats = input_features(ckpt, seed)
    rng = np.random.default_rng(seed + 1)
    # ordinary text tokens (below the special tokens, which start at eos 50257)
    step_ids = rng.integers(0, min(cfg["vocab_size"], 50257), size=(steps, 1, 1)).astype(np.int64)
    return dict(input_features=feats, prompt_ids=prompt_ids(ckpt), step_ids=step_ids)


# T5: the encoder's input length; its ordinary tokens (past pad 0, eos 1, unk 2; below the
# sentinels <extra_id_*>, which start at 32000)
T5_LENGTH = 512
T5_TOKENS = (3, 32000)


def t5_encoder_inputs(ckpt, seed=0):
    """-> {input_ids, attention_mask}, int64 [1, 512]: seeded ordinary tokens ending with eos (as
    T5's tokenizer ends a text), the mask all ones."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    rng = np.random.default_rng(seed)
    ids = rng.integers(T5_TOKENS[0], min(cfg["vocab_size"], T5_TOKENS[1]), size=(1, T5_LENGTH))
    ids[0, -1] = cfg["eos_token_id"]
    return dict(input_ids=ids.astype(np.int64), attention_mask=np.ones_like(ids, np.int64))


def t5_prompt_ids(ckpt):
    """T5's decoder prompt: decoder_start_token_id alone. -> int64 [1, 1]."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    return np.array([[cfg["decoder_start_token_id"]]], np.int64)


def t5_inputs(ckpt, steps, seed=0):
    rng = np.random.default_rng(seed + 1)
    step_ids = rng.integers(*T5_TOKENS, size=(steps, 1, 1)).astype(np.int64)
    return dict(t5_encoder_inputs(ckpt, seed), prompt_ids=t5_prompt_ids(ckpt), step_ids=step_ids)


# per model_type: (the encoder's inputs {name: array}, the decoder's prompt, the runtime's arrays)
MODELS = {
    "whisper": (lambda ckpt: {"input_features": input_features(ckpt)}, prompt_ids,
                whisper_inputs),
    "t5": (t5_encoder_inputs, t5_prompt_ids, t5_inputs),
}


def model_type(ckpt):
    kind = json.loads((Path(ckpt) / "config.json").read_text()).get("model_type")
    if kind not in MODELS:
        raise SystemExit(f"{ckpt}: model_type {kind!r}; this script knows {sorted(MODELS)}")
    return kind


def main():
    p = argparse.ArgumentParser()
    p.add_argument("ckpt")
    p.add_argument("out")
    p.add_argument("--mode", choices=["generation", "encoder", "inputs", "generate"],
                   default="generation")
    p.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                   help="the dtype the model is loaded in, so the export's (default float32)")
    p.add_argument("--steps", type=int, default=40, help="--mode inputs: decode tokens")
    p.add_argument("--new", type=int, default=8, help="--mode generate: new tokens")
    p.add_argument("--decoder-tokens", type=int, default=None,
                   help="--mode generation: also pass decoder_input_ids of this many tokens "
                        "(decoder_start_token_id, then the first step tokens) to the traced "
                        "generate(), so a longer prompt is traced (T5's 1-token start "
                        "specialises the decode's past to 1)")
    args = p.parse_args()
    kind = model_type(args.ckpt)
    encoder_inputs, decoder_prompt, runtime_arrays = MODELS[kind]

    if args.mode == "inputs":
        arrays = runtime_arrays(args.ckpt, args.steps)
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez(out, **arrays)
        print(json.dumps({k: [list(v.shape), str(v.dtype)] for k, v in arrays.items()}))
        return 0

    t0 = time.perf_counter()
    import torch
    import transformers

    arch = json.loads((Path(args.ckpt) / "config.json").read_text())["architectures"][0]
    model = getattr(transformers, arch).from_pretrained(args.ckpt,
                                                        dtype=getattr(torch, args.dtype))
    model.eval()
    # the encoder's inputs as torch tensors: float ones in the model's dtype, ids as they are
    inputs = {k: torch.from_numpy(v).to(getattr(torch, args.dtype)) if v.dtype.kind == "f"
              else torch.from_numpy(v) for k, v in encoder_inputs(args.ckpt).items()}
    t1 = time.perf_counter()
    print(f"bench-phase load {t1 - t0:.2f}", flush=True)
    for k, v in inputs.items():
        print(f"{k} {list(v.shape)} {str(v.dtype).replace('torch.', '')}", flush=True)

    if args.mode == "generate":
        with torch.no_grad():
            out = model.generate(**inputs, max_new_tokens=args.new,
                                 do_sample=False, return_dict_in_generate=True)
        # the sequences past the init tokens: generate()'s plain return re-splits a sequence
        # holding timestamp tokens into segments (a random model emits them even under
        # <|notimestamps|>) and can repeat tokens; the one generate call's sequences cannot
        tokens = out.sequences[:, decoder_prompt(args.ckpt).shape[1]:]
        Path(args.out).write_text(json.dumps({"tokens": tokens.tolist()}))
        print(f"bench-phase generate {time.perf_counter() - t1:.2f}", flush=True)
        print(json.dumps({"tokens": tokens.tolist()}))
        return 0

    from transformers.exporters import OnnxConfig, OnnxExporter

    exporter = OnnxExporter()
    if args.mode == "generation":
        sample = dict(inputs)
        if args.decoder_tokens:
            steps = runtime_arrays(args.ckpt, args.decoder_tokens)["step_ids"].reshape(-1)
            ids = np.concatenate([decoder_prompt(args.ckpt)[0], steps])[:args.decoder_tokens]
            sample["decoder_input_ids"] = torch.from_numpy(ids[None].astype(np.int64))
            print(f"decoder_input_ids {ids.tolist()}", flush=True)
        exported = exporter.export_for_generation(model, sample, config=OnnxConfig(dynamic=True))
    else:
        exported = exporter.export(model.get_encoder(), inputs, config=OnnxConfig(dynamic=True))
    t2 = time.perf_counter()
    print(f"bench-phase export {t2 - t1:.2f}", flush=True)

    exported.save_pretrained(args.out)
    print(f"bench-phase save {time.perf_counter() - t2:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
