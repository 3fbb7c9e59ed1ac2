"""generate() of a Whisper export (components encoder, prefill and decode; src/models/whisper.c),
as transformers' WhisperForConditionalGeneration.generate() runs short-form audio (up to 30 s,
the encoder's window) with greedy search (do_sample and temperature, which its Whisper reads
by rules of its own, are refused):

  encoder   input_features [batch, num_mel_bins, 3000] (what WhisperFeatureExtractor returns)
            -> each decoder layer's cross-attention keys and values, made once a sequence and
            fed to every decoder call (runners.cache.fixed)
  prompt    the init tokens: decoder_start_token_id, then the language and task tokens
            (language=, task=, or the generation config's forced_decoder_ids), then
            <|notimestamps|>, as transformers' _retrieve_init_tokens lays them out
  loop      begin_suppress_tokens masked at the first generated token, suppress_tokens at every
            one, then the logits processors of ferry.generation, then the most likely token.
            A generation_config.json's do_sample does not make it sample: transformers'
            Whisper samples only for a temperature given to generate(), and resets do_sample.

The result is the generated tokens alone [batch, new], without the init tokens and each row's
final eos (when eos_token_id is one id; a list of them drops none, as transformers' comparison
of the last token with the list never holds), right-padded with pad_token_id, as transformers
returns them. Timestamps (return_timestamps=True) and language detection (a multilingual model
called without language=) are refused by name; so is audio longer than the encoder's window,
which transformers decodes segment by segment. The feature extractor's attention_mask
(return_attention_mask=True) is taken and checked against the features; transformers reads it
only for long-form audio and token timestamps, so for audio within the window it changes
nothing here either."""

import json
from pathlib import Path

import numpy as np

from ._lib import FerryError, _escape
from .generation import _process, append_token, check_fits, resolve
from .seq2seq import Seq2SeqRunners

# generation settings this module applies on top of ferry.generation's
HANDLED = frozenset({"suppress_tokens", "begin_suppress_tokens", "forced_decoder_ids", "language",
                     "task", "return_timestamps", "no_timestamps_token_id",
                     "decoder_start_token_id", "lang_to_id", "task_to_id", "is_multilingual",
                     "no_speech_threshold"})
# transformers' GenerationConfig default max_length, which Whisper counts after the init tokens
_DEFAULT_MAX_LENGTH = 20


def _fail(message, status=1):
    raise FerryError(message, status=status)


class WhisperRunners(Seq2SeqRunners):
    """Runners (prefill, decode) of a Whisper export, plus its encoder: set_features() runs the
    encoder and hands its cross cache to the decoders for the sequence reset() started."""

    ENCODER_CALL = "runners.set_features(input_features), or generate(input_features=...)"

    def __init__(self, directory, manifest, device=None, every_component=False):
        super().__init__(directory, manifest, device, every_component)
        self.features = self.encoder.declared.get("input_features")
        if self.features is None:
            _fail("the encoder component takes no input_features", 3)

    def set_features(self, input_features):
        """Runs the encoder on `input_features` (float [batch, num_mel_bins, frames]) and makes
        its cross cache the decoders' for the current sequence (after reset(batch))."""
        dtype = np.float16 if self.features.get("dtype") == "float16" else np.float32
        if self.features.get("dtype") == "bfloat16":
            _fail("ferry's generate() does not run a bf16 Whisper export: numpy has no bfloat16 "
                  "to hand its encoder the features in; export it in fp32 or fp16")
        if hasattr(input_features, "detach"):  # a torch tensor, as transformers takes it
            input_features = input_features.detach().cpu().float().numpy()
        feats = np.asarray(input_features)
        if feats.dtype.kind != "f" or feats.ndim != 3:
            _fail(f"input_features must be a float array [batch, num_mel_bins, frames], not "
                  f"{_escape(feats.dtype)} of shape {list(feats.shape)}")
        shape = self.features.get("shape") or []
        if len(shape) == 3 and isinstance(shape[2], int) and feats.shape[2] != shape[2]:
            more = (" (longer audio than the encoder's 30 s window: transformers decodes it "
                    "segment by segment, which ferry's generate() does not; cut it into "
                    "windows of 30 s)" if feats.shape[2] > shape[2] else
                    " (pad it to the window as WhisperFeatureExtractor does)")
            _fail(f"input_features has {feats.shape[2]} frames, but the encoder takes exactly "
                  f"{shape[2]}{more}")
        if len(shape) == 3 and isinstance(shape[1], int) and feats.shape[1] != shape[1]:
            _fail(f"input_features has {feats.shape[1]} mel bins, but the encoder takes "
                  f"{shape[1]} (num_mel_bins)")
        if not np.isfinite(feats).all():
            _fail("input_features holds NaN or infinite values")
        self.encode({"input_features": np.ascontiguousarray(feats, dtype=dtype)})


def _config(directory):
    try:
        data = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError) as e:
        _fail(f"{_escape(Path(directory) / 'config.json')}: {_escape(e)}", 3)
    return data if isinstance(data, dict) else {}


def _token(value, what, vocab):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or \
            not 0 <= value < vocab:
        _fail(f"{what} must be a token id in 0..{vocab - 1}, not {_escape(repr(value))}")
    return int(value)


def _language_token(language, settings):
    """The token of `language` ("en", "english" or "<|en|>") in the generation config's
    lang_to_id, as transformers' language_to_id looks it up."""
    table = settings["lang_to_id"]
    if not isinstance(table, dict):
        _fail(f"language={_escape(repr(language))}: this model's generation config has no "
              "lang_to_id (an English-only Whisper takes no language)")
    if not isinstance(language, str):
        _fail(f"language must be a string such as 'en', not {_escape(repr(language))}; ferry's "
              "generate() takes one language for the batch")
    key = language.lower()
    candidates = [key, f"<|{key}|>"]
    for candidate in candidates:
        if candidate in table:
            return table[candidate]
    # a full name ("english"): the tokens name codes, and transformers maps names to codes
    from transformers.models.whisper.tokenization_whisper import TO_LANGUAGE_CODE

    code = TO_LANGUAGE_CODE.get(key)
    if code and f"<|{code}|>" in table:
        return table[f"<|{code}|>"]
    _fail(f"language {_escape(repr(language))} is not in this model's lang_to_id")


def init_tokens(settings, vocab):
    """The decoder prompt transformers' _retrieve_init_tokens makes for these settings."""
    start = settings["decoder_start_token_id"]
    if start is None:
        _fail("decoder_start_token_id is not set (generation_config.json or config.json)")
    tokens = [_token(start, "decoder_start_token_id", vocab)]
    language, task = settings["language"], settings["task"]
    if task is None and language is None:
        forced = settings["forced_decoder_ids"]
        if forced:
            if not isinstance(forced, list) or not all(
                    isinstance(p, (list, tuple)) and len(p) == 2 for p in forced):
                _fail(f"forced_decoder_ids must be [[index, token], ...], not "
                      f"{_escape(repr(forced))}")
            if forced[0][0] == 1:
                for i, (index, token) in enumerate(forced):
                    if index != i + 1:
                        _fail(f"forced_decoder_ids {_escape(repr(forced))} do not follow the "
                              "prompt pattern of Whisper (indices 1, 2, ...)")
                    tokens.append(token)
    language_undefined = len(tokens) <= 1 or tokens[1] is None
    if language is not None:
        lang = _language_token(language, settings)
        if len(tokens) > 1:
            tokens[1] = lang
        else:
            tokens.append(lang)
    elif isinstance(settings["lang_to_id"], dict) and language_undefined:
        _fail("this multilingual Whisper would detect the language first (transformers runs "
              "the decoder once to pick it), which ferry's generate() does not: pass "
              "language='en' (or the audio's language)")
    task_ids = settings["task_to_id"] if isinstance(settings["task_to_id"], dict) else None
    if task is not None:
        if task_ids is None or task not in task_ids:
            _fail(f"task {_escape(repr(task))} is not one of this model's tasks "
                  f"({', '.join(map(_escape, task_ids or {})) or 'none'})")
        ids = set(task_ids.values())
        if any(t in ids for t in tokens):
            tokens = [task_ids[task] if t in ids else t for t in tokens]
        else:
            tokens.append(task_ids[task])
    elif language is not None and task_ids and not any(t in task_ids.values() for t in tokens):
        tokens.append(task_ids["transcribe"])
    no_timestamps = settings["no_timestamps_token_id"]
    if no_timestamps is not None and tokens[-1] != no_timestamps:
        tokens.append(no_timestamps)
    tokens = [t for t in tokens if t is not None]
    return [_token(t, "an init token", vocab) for t in tokens]


def _id_list(value, what, vocab):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        _fail(f"{what} must be a list of token ids, not {_escape(repr(value))}")
    return [_token(t, what, vocab) for t in value]


def _one_id(value):
    """eos_token_id as transformers' Whisper compares a token with it: one id, or None for a
    list (a tensor element never equals a Python list)."""
    if hasattr(value, "tolist"):
        value = value.tolist()
    return int(value) if isinstance(value, (int, np.integer)) and \
        not isinstance(value, bool) else None


def _as_transformers_returns(rows, pad, eos):
    """Each row's tokens as WhisperForConditionalGeneration.generate() returns them
    (generate_with_fallback, then _pad_to_max_length): a row that ends in pad_token_id loses
    as many tokens from its end as it holds pad ids (one fewer when pad is also eos, whose
    last copy it then takes off as the eos), a final eos is dropped, and the rows are
    right-padded with pad_token_id to the longest. `eos` is _one_id()'s: None drops no eos."""
    kept = []
    for row in rows.tolist():
        if row and pad is not None and row[-1] == pad:
            drop = row.count(pad) - (1 if pad == eos else 0)
            row = row[:len(row) - drop] if drop > 0 else row
        if row and eos is not None and row[-1] == eos:
            row = row[:-1]
        kept.append(row)
    width = max(len(row) for row in kept)
    fill = pad if pad is not None else 0
    return np.array([row + [fill] * (width - len(row)) for row in kept], np.int64).reshape(
        len(kept), width)


def generate(runners, directory, input_features, attention_mask=None, seed=None, **kwargs):
    """Token ids [batch, new] (numpy int64, or a torch tensor when input_features is one); see
    the module's docstring."""
    from .generation import _check

    torch_input = type(input_features).__module__.split(".")[0] == "torch"
    settings = resolve(directory, kwargs, HANDLED, frozenset({"do_sample", "temperature"}))
    vocab = runners.vocab_size
    returned_eos = _one_id(settings["eos_token_id"])
    _check(settings, vocab)
    sampling = [k for k in ("do_sample", "temperature") if k in kwargs]
    if sampling:
        _fail(f"{sampling[0]}= is not supported by ferry's Whisper generate(), which decodes "
              "greedily (transformers' Whisper samples when temperature > 0, whatever "
              "do_sample says, and falls back over a list of temperatures); leave it unset", 4)
    if settings["return_timestamps"]:
        _fail("return_timestamps=True is not supported by ferry's Whisper generate(), which "
              "decodes without timestamps (<|notimestamps|>); leave it unset or False", 4)
    config = _config(directory)
    for key in ("decoder_start_token_id", "forced_decoder_ids"):  # config.json's, as a fallback
        if settings[key] is None:
            settings[key] = config.get(key)
    prompt = init_tokens(settings, vocab)
    begin = _id_list(settings["begin_suppress_tokens"], "begin_suppress_tokens", vocab)
    suppress = _id_list(settings["suppress_tokens"], "suppress_tokens", vocab)
    width = len(prompt)
    limit = runners.position_limit  # export.json's, as the runners enforce it
    if limit is not None and width >= limit:
        _fail(f"{width} init tokens leave no position for a new token: the decoder has {limit} "
              "(max_target_positions, export.json's generation.max_positions; transformers "
              "refuses it too)")
    new_tokens = settings["max_new_tokens"]
    if new_tokens is None:
        # transformers' Whisper counts max_length after the init tokens, up to
        # max_target_positions (_set_max_new_tokens_and_length)
        new_tokens = settings["max_length"] or _DEFAULT_MAX_LENGTH
        if limit is not None:
            new_tokens = min(new_tokens, limit - width)
    if limit is not None and width + new_tokens > limit:
        _fail(f"{width} init tokens and {new_tokens} new tokens need {width + new_tokens} "
              f"positions, past the decoder's {limit} (max_target_positions, export.json's "
              "generation.max_positions; transformers refuses it too): lower max_new_tokens")
    if settings["min_new_tokens"] is not None:
        settings["min_length"] = width + settings["min_new_tokens"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        _fail(f"seed must be an integer, not {seed!r}")

    batch = int(np.shape(input_features)[0]) if np.ndim(input_features) == 3 else 0
    if batch < 1:
        _fail(f"input_features must be [batch, num_mel_bins, frames] with at least one row, not "
              f"of shape {list(np.shape(input_features))}")
    if attention_mask is not None:
        frames = np.shape(input_features)[-1]
        mask = np.asarray(attention_mask.cpu() if hasattr(attention_mask, "cpu")
                          else attention_mask)
        if mask.shape != (batch, frames) or not np.isin(mask, (0, 1)).all():
            got = (f"of shape {list(mask.shape)}" if mask.shape != (batch, frames)
                   else "holding values other than 0 and 1")
            _fail(f"attention_mask must be the feature extractor's, 0 or 1 over [batch, frames] "
                  f"= {[batch, frames]}, not one {got}")
    check_fits(runners, batch, width, new_tokens, f"{width} init tokens")
    runners.set_features(input_features)
    ids = np.tile(np.asarray(prompt, np.int64), (batch, 1))
    pad, eos = settings["pad_token_id"], settings["eos_token_id"]
    logits = runners["prefill"](ids)
    sequences, unfinished = ids, np.ones(batch, dtype=bool)
    starts = np.zeros(batch, np.int64)
    for step in range(new_tokens):
        scores = logits[:, -1].astype(np.float32)
        masked = suppress + (begin if step == 0 else [])
        if masked:
            scores = scores.copy()
            scores[:, masked] = -np.inf
        scores = _process(scores, sequences, settings, starts)
        sequences = append_token(sequences, scores.argmax(-1), unfinished, eos, pad)
        if step == new_tokens - 1 or not unfinished.any():
            break
        logits = runners["decode"](sequences[:, -1:])
    generated = _as_transformers_returns(sequences[:, width:], pad, returned_eos)
    if torch_input:
        import torch

        return torch.from_numpy(generated)
    return generated
