"""generate(): greedy search and sampling over an export's runners (runners.py), with the
generation settings transformers' generate() would use for the same checkpoint: the call's
keyword arguments, else the export's generation_config.json (token ids also from its
config.json), else transformers' defaults (20 new tokens, at most max_position_embeddings in
all; when sampling, top_k 50).

Supported: max_new_tokens / max_length, min_new_tokens / min_length, do_sample, temperature,
top_k, top_p, min_p, repetition_penalty, eos_token_id (one id or a list; None given: none),
pad_token_id, and `seed` (numpy's Generator; sampling cannot reproduce torch's draws). A row
that produced an eos is padded with pad_token_id after it; generation stops when every row has
finished. Any other setting that would change the tokens (num_beams > 1, no_repeat_ngram_size,
...) is refused by name, from the call or from generation_config.json. Where transformers'
generate() runs the whole sequence again mid-generation (Phi-3 crossing
original_max_position_embeddings, where LongRoPE changes factors), so does this one."""

import json
from pathlib import Path

import numpy as np

from ._arrays import int_matrix
from ._lib import FerryError, _escape

# What transformers' generate() uses where neither the call nor the checkpoint says
# (GenerationConfig._get_default_generation_params; its max_length of 20 counts new tokens when
# no one set it, _prepare_generated_length).
_DEFAULT_NEW_TOKENS = 20
_DEFAULTS = {"max_length": None, "min_length": 0, "do_sample": False, "temperature": 1.0,
             "top_k": 50, "top_p": 1.0, "min_p": None, "repetition_penalty": 1.0,
             "max_new_tokens": None, "min_new_tokens": None, "eos_token_id": None,
             "pad_token_id": None}
SUPPORTED = frozenset(_DEFAULTS)

# Settings that cannot change the tokens of greedy search or sampling of a decoder-only model
# without an assistant: outputs asked for, the cache (the export fixed it), beam-only and
# encoder-only settings, and renormalize_logits (sampling from softmax(log_softmax(x)) is
# sampling from softmax(x)).
_NO_EFFECT = frozenset({
    "transformers_version", "_from_model_config", "use_cache", "cache_implementation",
    "cache_config", "max_cache_len", "output_attentions", "output_hidden_states",
    "output_scores", "output_logits", "return_dict_in_generate", "bos_token_id",
    "decoder_start_token_id", "length_penalty", "early_stopping", "renormalize_logits",
    "encoder_repetition_penalty", "encoder_no_repeat_ngram_size", "compile_config",
    "disable_compile", "low_memory", "is_assistant", "num_assistant_tokens",
    "num_assistant_tokens_schedule", "assistant_confidence_threshold", "assistant_lookbehind",
    "target_lookbehind", "continuous_batching_config", "prefill_chunk_size"})

# Settings generate() does not implement; accepted only at the value that turns them off.
_OFF = {"num_beams": (None, 1), "num_beam_groups": (None, 1), "num_return_sequences": (None, 1),
        "diversity_penalty": (None, 0.0), "typical_p": (None, 1.0),
        "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0),
        "no_repeat_ngram_size": (None, 0), "remove_invalid_values": (None, False),
        "guidance_scale": (None, 1.0)}
for _key in ("penalty_alpha", "dola_layers", "top_h", "bad_words_ids", "force_words_ids",
             "constraints", "sequence_bias", "forced_bos_token_id", "forced_eos_token_id",
             "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
             "watermarking_config", "stop_strings", "max_time", "token_healing", "use_mtp",
             "prompt_lookup_num_tokens", "max_matching_ngram_size", "assistant_early_exit",
             "speculation_type", "assistant_ensemble_weight"):
    _OFF[_key] = (None,)


def _fail(message, status=1):
    raise FerryError(message, status=status)


def _refused(key, value, where):
    return (f"{key}={_escape(repr(value))} ({where}) is not supported by ferry's generate(), "
            f"which does greedy search and sampling only; "
            f"supported: {', '.join(sorted(SUPPORTED | {'seed', 'generation_config'}))}")


def _read_json(path):
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        _fail(f"{_escape(path)}: {_escape(e)}", 3)
    return data if isinstance(data, dict) else {}


def resolve(directory, kwargs, handled=frozenset(), refused=frozenset()):
    """The settings of one generate() call: {key of SUPPORTED: value}, plus the keys of
    `handled` (a model's own settings, which its generate() applies: Whisper's suppress lists)
    as the call, the generation_config argument or the export's file give them (else None).
    `refused`: keys of SUPPORTED the model's generate() refuses itself, left out of the list
    an unknown keyword is answered with."""
    given = dict(kwargs)
    passed = given.pop("generation_config", None)
    if passed is not None and not isinstance(passed, dict):
        passed = passed.to_dict() if hasattr(passed, "to_dict") else None
        if passed is None:
            _fail("generation_config must be a dict or a transformers GenerationConfig")
    unknown = [k for k in given if k not in SUPPORTED and k not in _OFF and k not in handled]
    if unknown:
        listed = (SUPPORTED - refused) | handled | {"seed", "generation_config"}
        _fail(f"generate() got unknown keyword arguments: {', '.join(map(_escape, unknown))} "
              f"(supported: {', '.join(sorted(listed))})")
    saved = _read_json(Path(directory) / "generation_config.json")
    layers = [(given, "keyword argument"), ({k: v for k, v in (passed or {}).items()
                                             if v is not None}, "generation_config argument"),
              (saved, "the export's generation_config.json")]
    for layer, where in layers:
        for key, value in layer.items():
            if key in _OFF and key not in handled and value not in _OFF[key]:
                _fail(_refused(key, value, where), 4)
    settings = {**dict(_DEFAULTS), **{k: None for k in handled}}
    for layer, _ in reversed(layers):
        settings.update({k: v for k, v in layer.items()
                         if (k in SUPPORTED or k in handled) and v is not None})
    top = _read_json(Path(directory) / "config.json")
    config = top.get("text_config", top) if isinstance(top.get("text_config"), dict) else top
    for key in ("eos_token_id", "pad_token_id"):  # as ferry's genai_config.json reads them
        if key in given and given[key] is None:
            # transformers' generate() takes an explicit None as "none" (the
            # checkpoint's eos still stopped the rows), where other keys' None means unset
            settings[key] = None
        elif settings[key] is None:
            # the top level first, then the text config (GenerationConfig.from_model_config)
            settings[key] = top.get(key) if top.get(key) is not None else config.get(key)
    # GPT-2's config.json names its position table n_positions, which transformers' config
    # also answers to max_position_embeddings
    settings["max_position_embeddings"] = config.get("max_position_embeddings",
                                                     config.get("n_positions"))
    settings["recompute_at"] = rerun_length(config)
    return settings


def rerun_length(config):
    """The sequence length at which transformers' generate() drops the cache and runs the
    whole sequence again, or None. Phi3ForCausalLM.prepare_inputs_for_generation does so once,
    when the sequence first reaches original_max_position_embeddings + 1 with a cache of at
    most original_max_position_embeddings: LongRoPE then switches from the short factors to the
    long ones, and every cached key is rotated anew with them."""
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or architectures[:1] != ["Phi3ForCausalLM"]:
        return None
    original = config.get("original_max_position_embeddings", 4096)   # Phi3Config's default
    if isinstance(original, bool) or not isinstance(original, int):
        return None
    return original + 1


def _eos_list(eos):
    if eos is None:
        return []
    if hasattr(eos, "tolist"):  # a tensor or array, as transformers takes it too
        eos = eos.tolist()
    ids = [eos] if isinstance(eos, (int, np.integer)) else list(eos)
    if not all(isinstance(i, (int, np.integer)) and not isinstance(i, bool) and i >= 0
               for i in ids):
        _fail(f"eos_token_id must be a token id or a list of them, not {_escape(repr(eos))}")
    return [int(i) for i in ids]


def _check(settings, vocab):
    """Type and range checks, one clear error each."""
    def positive_int(key, minimum):
        value = settings[key]
        if value is not None and (not isinstance(value, (int, np.integer)) or
                                  isinstance(value, bool) or value < minimum):
            _fail(f"{key} must be an integer >= {minimum}, not {_escape(repr(value))}")

    for key, minimum in (("max_new_tokens", 1), ("max_length", 1), ("min_new_tokens", 0),
                         ("min_length", 0), ("top_k", 0)):
        positive_int(key, minimum)
    if not isinstance(settings["do_sample"], bool):
        _fail(f"do_sample must be True or False, not {_escape(repr(settings['do_sample']))}")
    ranges = [("repetition_penalty", 0.0, None, False)]
    if settings["do_sample"]:  # transformers ignores the warpers' settings without sampling
        ranges += [("temperature", 0.0, None, False), ("top_p", 0.0, 1.0, False),
                   ("min_p", 0.0, 1.0, True)]
    for key, low, high, closed in ranges:
        value = settings[key]
        if value is None and key == "min_p":
            continue
        if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                not (value >= low if closed else value > low) or \
                (high is not None and value > high):
            bound = f"in ({low}, {high}]" if high is not None else f"> {low}"
            _fail(f"{key} must be a number {bound}, not {_escape(repr(value))}")
    settings["eos_token_id"] = eos = _eos_list(settings["eos_token_id"])
    pad = settings["pad_token_id"]
    if pad is None and eos:
        settings["pad_token_id"] = pad = eos[0]  # what transformers does, with a warning
    for token in eos + ([] if pad is None else [pad]):
        if not 0 <= token < vocab:
            _fail(f"token id {token} (eos_token_id or pad_token_id) is outside the "
                  f"vocabulary (0..{vocab - 1})")


def _as_numpy(value, what):
    """An int64 [batch, sequence] array; a mask may be 0/1 floats, as transformers takes it."""
    return None if value is None else int_matrix(value, what, mask=what == "attention_mask")


def _process(scores, sequences, settings, prompt_starts):
    """transformers' logits processors for these settings, in its order, on float32 scores
    [batch, vocab]: repetition penalty (not on a row's left padding), then eos masked while
    fewer than min_length tokens exist."""
    penalty = settings["repetition_penalty"]
    if penalty != 1.0:
        seen = np.zeros(scores.shape, dtype=bool)
        for row in range(scores.shape[0]):
            seen[row, sequences[row, prompt_starts[row]:]] = True
        penalized = np.where(scores < 0, scores * np.float32(penalty),
                             scores / np.float32(penalty))
        scores = np.where(seen, penalized, scores)
    if settings["eos_token_id"] and sequences.shape[1] < settings["min_length"]:
        scores = scores.copy()
        scores[:, settings["eos_token_id"]] = -np.inf
    return scores


def _warp(scores, settings):
    """transformers' sampling warpers, in its order: temperature, top_k, top_p, min_p."""
    scores = scores.astype(np.float64)
    if settings["temperature"] != 1.0:
        scores = scores / settings["temperature"]
    top_k = settings["top_k"]
    if top_k:
        k = min(top_k, scores.shape[-1])
        kth = np.partition(scores, -k, axis=-1)[:, -k:].min(-1, keepdims=True)
        scores = np.where(scores < kth, -np.inf, scores)
    if settings["top_p"] < 1.0:
        order = np.argsort(scores, axis=-1, kind="stable")
        ascending = np.take_along_axis(scores, order, -1)
        cumulative = np.cumsum(_softmax(ascending), -1)
        drop = cumulative <= 1 - settings["top_p"]
        drop[:, -1] = False
        removed = np.zeros_like(drop)
        np.put_along_axis(removed, order, drop, -1)
        scores = np.where(removed, -np.inf, scores)
    if settings["min_p"] is not None:
        probs = _softmax(scores)
        drop = probs < settings["min_p"] * probs.max(-1, keepdims=True)
        drop[np.arange(len(drop)), probs.argmax(-1)] = False
        scores = np.where(drop, -np.inf, scores)
    return scores


def _softmax(scores):
    shifted = np.exp(scores - scores.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _sample(scores, rng):
    probs = _softmax(scores)
    cumulative = np.cumsum(probs, -1)
    draw = rng.random((scores.shape[0], 1)) * cumulative[:, -1:]
    return np.minimum((cumulative <= draw).sum(-1), scores.shape[-1] - 1)


def _check_rotary_table(runners, trained, width, new_tokens):
    """A fused ONNX export whose graphs rotate from cos/sin tables, of
    max(max_position_embeddings, max_cache_len) rows, cannot run past them: onnxruntime refuses
    (its raw "cos_cache dimension 0 shall not be less than
    total_sequence_length" mid-generation), where transformers only warns past
    max_position_embeddings. The graphs are read only when a run could pass them (a graph that
    rotates with plain ops has no such limit)."""
    last = width + new_tokens - 1
    trained = trained if isinstance(trained, int) and not isinstance(trained, bool) else 0
    if last <= max(trained, runners.max_cache_len or 0):
        return  # within every table ferry makes
    rows = runners.rotary_table_rows
    if rows is not None and last > rows:
        _fail(f"a {width}-token prompt and {new_tokens} new tokens need {last} positions, past "
              f"the {rows} of this fused export's rotary tables "
              "(max(max_position_embeddings, max_cache_len) rows): lower max_new_tokens, or "
              "export a static cache with a larger max_cache_len")



def check_fits(runners, batch, width, new_tokens, prompt):
    """Refuses, before anything runs, a generation whose prompt (`width` tokens, called
    `prompt` in the message) or last step the export's shapes do not take."""
    runners["prefill"].check_shapes(batch, width, 0)

    def refusal(n):  # n new tokens: the last step's decode takes the n - 1 before it
        try:
            if n > 1:
                runners["decode"].check_shapes(batch, 1, width + n - 2)
            return None
        except FerryError as e:
            return e

    last = refusal(new_tokens)
    if last is not None:
        low, high = 1, new_tokens - 1  # the most that fit: n = 1 does, new_tokens does not
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if refusal(mid) is None else (low, mid - 1)
        # the last step's reason: say it is the prompt and max_new_tokens that ask for it
        raise FerryError(f"{prompt} and {new_tokens} new tokens would take generation to "
                         f"{width + new_tokens - 1} positions, past what the export takes "
                         f"(max_new_tokens={low} fits); its last step would fail: {last}",
                         status=last.status)


def append_token(sequences, token, unfinished, eos, pad):
    """`sequences` with a column of this step's tokens (pad where a row had finished); rows that
    made an eos leave `unfinished` (a bool array, updated in place)."""
    if eos:
        token = np.where(unfinished, token, pad)
    sequences = np.concatenate([sequences, token[:, None].astype(np.int64)], axis=1)
    if eos:
        unfinished &= ~np.isin(token, eos)
    return sequences

def generate(runners, directory, input_ids, attention_mask=None, seed=None, **kwargs):
    """Token ids [batch, prompt + new] (numpy int64, or a torch tensor when input_ids is one);
    see the module's docstring."""
    torch_input = type(input_ids).__module__.split(".")[0] == "torch"
    settings = resolve(directory, kwargs)
    _check(settings, runners.vocab_size)
    ids = _as_numpy(input_ids, "input_ids")
    batch, width = ids.shape
    if width == 0 or batch == 0:
        _fail(f"input_ids of shape {list(ids.shape)}: generate() needs at least one token a row")
    if ids.min() < 0 or ids.max() >= runners.vocab_size:
        _fail(f"input_ids holds token ids outside the vocabulary (0..{runners.vocab_size - 1})")
    pad, eos = settings["pad_token_id"], settings["eos_token_id"]
    mask = _as_numpy(attention_mask, "attention_mask")
    if mask is None:  # transformers' rule: pad ids are padding unless pad is also eos
        infer = pad is not None and pad not in eos and bool((ids == pad).any())
        mask = (ids != pad).astype(np.int64) if infer else np.ones_like(ids)
    if mask.shape != ids.shape:
        _fail(f"attention_mask has shape {list(mask.shape)}, input_ids {list(ids.shape)}")
    empty = np.flatnonzero(~mask.any(-1))
    if len(empty):
        # a row of padding alone is an empty prompt: nothing to continue, and each layout's
        # attention over no token gives other numbers
        _fail(f"attention_mask row {int(empty[0])} is all zeros, an empty prompt: generate() "
              "needs at least one token a row")
    new_tokens = settings["max_new_tokens"]
    if new_tokens is None and settings["max_length"] is None:
        new_tokens = _DEFAULT_NEW_TOKENS
        limit = settings["max_position_embeddings"]
        if isinstance(limit, int):
            new_tokens = min(new_tokens, limit - width)
            if new_tokens < 1:
                _fail(f"the {width}-token prompt already fills max_position_embeddings "
                      f"({limit}) of config.json: pass max_new_tokens")
    elif new_tokens is None:
        new_tokens = settings["max_length"] - width
        if new_tokens < 1:
            _fail(f"max_length {settings['max_length']} leaves no room for new tokens after "
                  f"the {width}-token prompt: pass max_new_tokens")
    if settings["min_new_tokens"] is not None:
        settings["min_length"] = width + settings["min_new_tokens"]
    # Refuse before running what the graphs or the static cache cannot take.
    table = runners.position_limit  # export.json's, as the runners enforce it
    if table is not None and width + new_tokens > table:
        _fail(f"a {width}-token prompt and {new_tokens} new tokens need {width + new_tokens} "
              f"positions, past the {table} rows of the decoder's position table (export.json's "
              "generation.max_positions, config.json's n_positions; transformers fails there "
              "too): lower max_new_tokens")
    check_fits(runners, batch, width, new_tokens, f"a {width}-token prompt")
    _check_rotary_table(runners, settings["max_position_embeddings"], width, new_tokens)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise FerryError(f"seed must be an integer, not {seed!r}", status=1)
    rng = np.random.default_rng(seed) if settings["do_sample"] else None
    prompt_starts = (mask != 0).argmax(-1)

    runners.reset(batch)
    logits = runners["prefill"](ids, mask)
    sequences, unfinished = ids, np.ones(batch, dtype=bool)
    for step in range(new_tokens):
        scores = _process(logits[:, -1].astype(np.float32), sequences, settings, prompt_starts)
        if rng is not None:
            token = _sample(_warp(scores, settings), rng)
        else:
            token = scores.argmax(-1)
        sequences = append_token(sequences, token, unfinished, eos, pad)
        if step == new_tokens - 1 or not unfinished.any():
            break
        mask = np.concatenate([mask, np.ones((batch, 1), np.int64)], axis=1)
        if sequences.shape[1] == settings["recompute_at"]:  # transformers drops its cache here
            runners.reset(batch)
            logits = runners["prefill"](sequences, mask)
            continue
        logits = runners["decode"](sequences[:, -1:], mask)
    if torch_input:
        import torch

        return torch.from_numpy(sequences)
    return sequences
