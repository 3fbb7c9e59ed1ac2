"""Runners of a generation export: the components of export.json run in their runtime
(onnxruntime, OpenVINO stateless or stateful, or torch for a .pt2), each owning its session and sharing one KV
cache with the others, driven only by the manifest (roles, inputs, metadata.cache).

    runners = exported.runners                # {"prefill": Runner, "decode": Runner}
    runners.reset(batch)                      # a fresh, empty cache
    logits = runners["prefill"](input_ids, attention_mask)      # the prompt
    logits = runners["decode"](next_ids[:, None], attention_mask)  # mask one column longer

`attention_mask` is always the 2-D [batch, cached + new] mask generate() keeps (1 = a real
token); each runner makes what its graph takes from it (position_ids as generate() derives them;
a static cache's bool [batch, 1, query, max_cache_len] mask). runners["prefill"] is the runner
that takes prompts: when decode takes more than one token a call, it is runners["decode"]
itself and no prefill session is made, so the weights are loaded once. Where prefill and decode
are both needed (a single-token decode), their onnxruntime sessions get the same memory-mapped
initializers (SessionOptions.add_initializer over one mapping of the data file) and do not
prepack them, which would give each session a packed copy (bench/runner_memory.py measures it).
A static cache is one set of buffers bound in place (IOBinding) to every session; a .pt2
program is handed the same torch tensors every call and writes the new rows into them (with a
dynamic cache it returns the whole cache, which the next call is handed back)."""

import json
import re
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from ._arrays import axis_refusal, check_token_ids, int_matrix, widen_advice
from ._lib import FerryError, _escape
from ._onnx_weights import external_initializers
from .static_cache import cache_inputs
from .runtime import (checked_program, executorch_device, is_transformers_manifest,
                      onnxruntime_session, openvino_compiled, program_errors, torch_device)

_CACHE_LAYOUT = "[batch, kv_heads, length, head_dim]"
# the roles of the component that decodes: ferry's; openvino-genai's WhisperPipeline layout's
DECODE_ROLES = ("decode", "decoder_model")
_FEEDS = ("input_ids", "attention_mask", "position_ids")
# ONNX element types whose bits numpy holds in another type: bfloat16 as uint16
_NUMPY = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16,
          "float64": np.float64, "int64": np.int64, "int32": np.int32, "bool": np.bool_}
_ONNX_TYPE = {"float32": 1, "float16": 10, "bfloat16": 16, "float64": 11, "int64": 7,
              "int32": 6, "bool": 9, "uint8": 2, "int8": 3, "uint16": 4}
_ONNX_NUMPY = {1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
               7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32,
               13: np.uint64, 16: np.uint16}
_ONNX_4BIT = {21, 22}  # UINT4, INT4: two elements a byte


def _fail(message, status=4):
    raise FerryError(message, status=status)


def _bf16_to_f32(bits):
    return (np.asarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def derive_position_ids(attention_mask, query):
    """The last `query` columns of generate()'s position_ids: cumsum(mask) - 1, padding 1."""
    mask = np.asarray(attention_mask, dtype=np.int64)
    pos = np.cumsum(mask, axis=-1) - 1
    pos[mask == 0] = 1
    return np.ascontiguousarray(pos[:, mask.shape[1] - query:])


def static_mask(attention_mask, start, query, slots):
    """The static cache's bool mask [batch, 1, query, slots]: a query at column start + i sees
    the slots up to its own column whose token is real (slot = column of the padded sequence);
    the graph applies a sliding window on top."""
    mask = np.asarray(attention_mask) != 0
    real = np.zeros((mask.shape[0], slots), dtype=bool)
    real[:, :mask.shape[1]] = mask
    causal = np.arange(slots)[None, :] <= (start + np.arange(query))[:, None]
    return np.ascontiguousarray((causal[None] & real[:, None, :])[:, None])


# --- the cache a sequence keeps, shared by the runners ---------------------------------------


class _Cache:
    """Batch and length of the sequence in progress (None before the first reset), plus what
    the runtime keeps between calls: `values` (dynamic: input name -> the last call's output)
    or `buffers` (static: name -> one buffer, the same for every call; `epoch` counts resets so
    that a runner rebinds new buffers)."""

    def __init__(self, layout):
        self.layout, self.batch, self.length, self.epoch = layout, None, 0, 0
        self.values, self.buffers = {}, {}
        # inputs every call is fed as they are (an encoder-decoder's cross cache, which its
        # encoder made for this sequence): name -> the runtime's value, set after reset();
        # `encoder_call` is the call that makes them, for a message
        self.fixed = {}
        self.encoder_call = "generate()"
        # the rows of the decoder's learned position table (position_table), or None
        self.position_limit = None

    def reset(self, batch):
        self.batch, self.length, self.epoch = batch, 0, self.epoch + 1
        self.values, self.buffers = self.layout.empty(batch)
        self.fixed = {}


class _CacheLayout:
    """What export.json says of the cache (decode's metadata.cache and inputs), and how to make
    an empty one. `wrap(array, dtype name)` turns a numpy array into the runtime's value."""

    def __init__(self, decode_name, decode_meta, wrap, stateful):
        cache = decode_meta.get("cache")
        if not cache:
            _fail(f"component {_escape(decode_name)} has no metadata.cache in export.json")
        if cache.get("layout") != _CACHE_LAYOUT:
            _fail(f"component {_escape(decode_name)}: cache layout {_escape(cache.get('layout'))}"
                  f" is not {_CACHE_LAYOUT}, the one the runners know")
        self.static = cache.get("implementation") == "static"
        self.max_cache_len = cache.get("max_cache_len") if self.static else None
        self.kv_heads, self.head_dim = cache["kv_heads"], cache["head_dim"]
        self.dtype = cache.get("dtype")
        self.pairs = [(p["input"], p["output"]) for p in cache["pairs"]]
        self.to_input = {out: inp for inp, out in self.pairs}
        if self.static and not all(p["in_place"] for p in cache["pairs"]):
            _fail(f"component {_escape(decode_name)}: a static cache whose pairs are not all "
                  "in place; the runners bind each pair to one buffer")
        inputs = {i["name"]: i for i in decode_meta["inputs"]}
        # a stateful graph keeps its cache in variables: nothing to feed
        self.specs = {} if stateful else {inp: inputs[inp] for inp, _ in self.pairs}
        # an encoder-decoder's cross cache (or the encoder's output it is made of): made once
        # per sequence by its encoder, read by every decoder call (cache.fixed)
        self.cross = {name: spec for name, spec in inputs.items() if _is_cross(name)}
        self.wrap = wrap

    def empty(self, batch):
        """(values, buffers) of an empty cache for `batch` rows."""
        made = {}
        for name, spec in self.specs.items():
            if len(spec["shape"]) == 4:
                length = self.max_cache_len if self.static else 0
                dims = [batch, self.kv_heads, length, self.head_dim]
            elif self.static and all(isinstance(d, int) for d in spec["shape"]):
                dims = spec["shape"]  # the position counter, [1]
            else:
                _fail(f"cache input {_escape(name)} has shape {_escape(spec['shape'])}, which "
                      f"is neither {_CACHE_LAYOUT} nor a static cache's fixed counter")
            array = np.zeros(dims, dtype=_NUMPY[spec["dtype"]])
            made[name] = (array, self.wrap(array, spec["dtype"]))
        if self.static:
            return {}, made
        return {name: value for name, (_, value) in made.items()}, {}


_CROSS = re.compile(r"past_key_values[._](\d+)[._]cross_(key|value)")


def cross_source(name):
    """The encoder output an encoder-decoder's decoder input is fed, or None for any other
    input: past_key_values.<l>.cross_key (past_key_values_<l>_cross_key in torch's programs)
    is present.<l>.cross_key; encoder_hidden_states (a decoder that makes its own cross keys,
    as openvino-genai's layout has it) is last_hidden_state; encoder_attention_mask (T5's) is
    the encoder's attention_mask."""
    if name == "encoder_hidden_states":
        return "last_hidden_state"
    if name == "encoder_attention_mask":  # the encoder's own input
        return "attention_mask"
    match = _CROSS.fullmatch(name)
    return f"present.{match[1]}.cross_{match[2]}" if match else None


def _is_cross(name):
    return cross_source(name) is not None


# --- runners ---------------------------------------------------------------------------------


class Runner:
    """One component of a generation export in its runtime. Call it with the new tokens
    [batch, query] and the 2-D attention mask over the cached and new tokens; it returns the
    logits [batch, query, vocab] (float32) and advances the cache it shares with the other
    runners. A first call without reset() starts a sequence of input_ids' batch."""

    def __init__(self, name, meta, cache):
        self.component, self._cache = name, cache
        self._inputs = {i["name"]: i for i in meta["inputs"]}
        self._symbols = meta.get("symbols", {})
        self._widen = widen_advice(meta, "a generation loop needs an export with dynamic "
                                         "shapes covering them")
        self.query = self._inputs["input_ids"]["shape"][1]
        self.takes_prompts = self.query != 1
        self._layout = cache.layout
        # each distinct declared length of the cache inputs, with an input that has it: a
        # static-shape decode's is fixed, and check_shapes compares every call with them
        self._cache_lengths = {}
        for spec in self._layout.specs:
            declared = self._inputs.get(spec, {}).get("shape")
            if declared and len(declared) == 4:
                self._cache_lengths.setdefault(str(declared[2]), (spec, declared))
        logits = next((o for o in meta["outputs"] if o["name"] == "logits"), None)
        if logits is None:
            _fail(f"component {_escape(name)} has no logits output", 3)
        self._vocab, self._logits_dtype = logits["shape"][-1], logits["dtype"]
        self._from_cache = [p for p in self._layout.pairs if p[0] in self._inputs]
        own = [p["output"] for p in meta.get("cache", {}).get("pairs", [])]
        if self._layout.specs and not set(own) <= set(self._layout.to_input):
            _fail(f"component {_escape(name)}'s cache outputs are not the ones decode takes "
                  "back (export.json's metadata.cache pairs)", 3)
        known = (set(_FEEDS) | set(self._layout.specs) | set(self._layout.cross) |
                 self._extra_inputs())
        unknown = [n for n in self._inputs if n not in known]
        if unknown:
            _fail(f"component {_escape(name)} takes {', '.join(map(_escape, unknown))}, which "
                  "the runners do not know how to feed")

    @property
    def _cache_free(self):
        """A dynamic prefill: no past inputs, it starts a sequence."""
        return not any(n in self._inputs for n in self._layout.specs)

    def _extra_inputs(self):
        return set()

    def __call__(self, input_ids, attention_mask=None, position_ids=None, *,
                 past_key_values=None):
        if past_key_values is not None:
            _fail(f"{self.component}: past_key_values= is the guide's Dynamo loop, for a .pt2 "
                  "static-cache export; this runner keeps its own cache (reset() starts a "
                  "sequence), and the guide's onnxruntime loop binds the cache buffers itself "
                  "(IOBinding)", 1)
        # checked as ExportedModel's calls check them (-1 was read as the last
        # token, 5.9 as 5, and ids past the vocabulary gave OpenVINO finite garbage)
        ids = int_matrix(input_ids, "input_ids")
        if ids.size == 0:
            _fail(f"input_ids of shape {list(ids.shape)}: nothing to run", 1)
        check_token_ids(ids, self._vocab)
        batch, query = ids.shape
        cache = self._cache
        if cache.batch is None:
            cache.reset(batch)
        if batch != cache.batch:
            _fail(f"{self.component}: input_ids has {batch} rows but the cache holds "
                  f"{cache.batch}: call reset({batch}) to start a new sequence", 1)
        if self._cache_free and cache.length:
            _fail(f"{self.component} starts a sequence, but the cache holds {cache.length} "
                  "tokens: call reset() first", 1)
        self.check_shapes(batch, query, cache.length)
        mask = (np.ones((batch, cache.length + query), np.int64) if attention_mask is None
                else int_matrix(attention_mask, "attention_mask", mask=True))
        if mask.shape != (batch, cache.length + query):
            _fail(f"{self.component}: attention_mask has shape {list(mask.shape)}, not "
                  f"[{batch}, {cache.length + query}] (the cached {cache.length} tokens and "
                  f"the {query} new ones)" +
                  ("; reset() starts a new sequence" if cache.length else ""), 1)
        pos = (derive_position_ids(mask, query) if position_ids is None
               else int_matrix(position_ids, "position_ids"))
        if pos.shape != ids.shape:
            _fail(f"{self.component}: position_ids has shape {list(pos.shape)}, not "
                  f"input_ids' {list(ids.shape)}", 1)
        logits = self._run(ids, mask, pos)
        cache.length += query
        return logits

    def check_shapes(self, batch, query, past):
        """Refuses a call the graph's fixed dims or symbol ranges do not allow (a static-shape
        export takes only the shapes it was traced at)."""
        want = {"input_ids": [batch, query], "position_ids": [batch, query],
                "attention_mask": [batch, past + query]}
        fixed = self._inputs.get("input_ids", {}).get("shape", [None])[0]
        if self._layout.static and isinstance(fixed, int) and batch != fixed:
            _fail(f"{self.component}: {batch} rows, but the static cache was allocated for "
                  f"batch {fixed} (the example's, as a StaticCache is): export with a symbolic "
                  "batch (--dim input_ids:0=batch, or dynamic_shapes={'input_ids': {0: "
                  "Dim('batch')}}) to run other batches", 1)
        if self._layout.static:
            slots = self._layout.max_cache_len
            if past + query > slots:
                _fail(f"{self.component}: the static cache has {slots} slots (max_cache_len), "
                      f"but {past} cached + {query} new tokens need {past + query}", 1)
            want["attention_mask"] = [batch, 1, query, slots]
        if not self._layout.static:
            # a static-shape decode's cache length is fixed: checked here, where a decoder that
            # takes no attention_mask (Whisper, T5) has nothing else that says it
            for name, declared in self._cache_lengths.values():
                if axis_refusal(past, declared[2], self._symbols):
                    _fail(f"{self.component}: cache input {_escape(name)} would hold {past} "
                          f"positions, but the graph takes {_escape(declared)} (symbols "
                          f"{_escape(self._symbols)}); {self._widen}", 1)
        limit = self._cache.position_limit
        if limit is not None and past + query > limit:
            _fail(f"{self.component}: {past} cached + {query} new tokens need {past + query} "
                  f"positions, past the {limit} rows of the decoder's position table "
                  "(export.json's generation.max_positions): start a new sequence (reset())", 1)
        for name, dims in want.items():
            declared = self._inputs.get(name, {}).get("shape", dims)
            if any(axis_refusal(got, dim, self._symbols) for got, dim in zip(dims, declared)):
                _fail(f"{self.component}: input {name} would be {dims}, but the graph "
                      f"takes {_escape(declared)} (symbols {_escape(self._symbols)}); "
                      f"{self._widen}", 1)

    def _run(self, ids, mask, pos):
        raise NotImplementedError

    def _feeds(self, ids, mask, pos):
        """The per-call inputs the graph takes ({name: array}): the tokens, the mask and
        positions where it takes them (an encoder-decoder's decoder makes its own), and the
        cross cache (the runtime's values)."""
        feeds = {name: value for name, value in (("input_ids", ids), ("attention_mask", mask),
                                                 ("position_ids", pos))
                 if name in self._inputs}
        cross = [n for n in self._inputs if n in self._layout.cross]
        missing = [n for n in cross if n not in self._cache.fixed]
        if missing:
            _fail(f"{self.component} takes the cross-attention cache "
                  f"({_escape(missing[0])}, ...), which the encoder makes: run the encoder for "
                  f"this sequence first ({self._cache.encoder_call})", 1)
        feeds.update({n: self._cache.fixed[n] for n in cross})
        return feeds

    def _logits(self, array):
        return _bf16_to_f32(array) if self._logits_dtype == "bfloat16" else \
            np.asarray(array, dtype=np.float32)


class _OnnxRunner(Runner):
    """An onnxruntime session. Dynamic cache: the previous call's present.* OrtValues are fed
    back as past_key_values.* (run_with_ort_values, no copy through numpy). Static cache: every
    input.<name>/output.<name> pair bound to the cache's one OrtValue (IOBinding), so the
    graph's in-place writes land in the same buffers call after call."""

    def __init__(self, name, meta, cache, session):
        super().__init__(name, meta, cache)
        self.session = session
        self._cache_outputs = [o.name for o in session.get_outputs()
                               if o.name in self._layout.to_input]
        self._binding, self._bound_epoch = None, None

    def _run(self, ids, mask, pos):
        import onnxruntime as ort

        cache, layout = self._cache, self._layout
        if layout.static:
            return self._run_static(ids, mask, pos)
        binding = self.session.io_binding()
        for name, value in self._feeds(ids, mask, pos).items():
            binding.bind_ortvalue_input(name, value if isinstance(value, ort.OrtValue)
                                        else ort.OrtValue.ortvalue_from_numpy(value))
        for inp, _ in self._from_cache:
            binding.bind_ortvalue_input(inp, cache.values[inp])
        logits = self._bind_logits(binding, *ids.shape)
        for name in self._cache_outputs:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        values = binding.get_outputs()[1:]  # in the order bound: logits, then the cache
        cache.values = {layout.to_input[n]: v for n, v in zip(self._cache_outputs, values)}
        return self._logits(logits)

    def _bind_logits(self, binding, batch, query):
        """Binds "logits" to a numpy array of ours (bfloat16 as uint16 bits, which onnxruntime
        cannot hand to numpy itself) and returns the array."""
        logits = np.empty((batch, query, self._vocab), dtype=_NUMPY[self._logits_dtype])
        binding.bind_ortvalue_output("logits", self._layout.wrap(logits, self._logits_dtype))
        return logits

    def _run_static(self, ids, mask, pos):
        cache, layout = self._cache, self._layout
        if self._bound_epoch != cache.epoch:
            self._binding = self.session.io_binding()
            for inp, out in layout.pairs:
                self._binding.bind_ortvalue_input(inp, cache.buffers[inp][1])
                self._binding.bind_ortvalue_output(out, cache.buffers[inp][1])
            self._bound_epoch = cache.epoch
        batch, query = ids.shape
        if "attention_mask" in self._inputs:
            mask = static_mask(mask, cache.length, query, layout.max_cache_len)
        for name, value in self._feeds(ids, mask, pos).items():
            if hasattr(value, "device_name"):  # an OrtValue: the cross cache
                self._binding.bind_ortvalue_input(name, value)
            else:
                self._binding.bind_cpu_input(name, value)
        logits = self._bind_logits(self._binding, batch, query)
        self.session.run_with_iobinding(self._binding)
        return self._logits(logits)


class _OpenVINORunner(Runner):
    """An OpenVINO infer request of a stateless component: the cache goes in and out as numpy
    arrays (a static cache's outputs replace its buffers)."""

    def __init__(self, name, meta, cache, compiled):
        super().__init__(name, meta, cache)
        self.compiled, self.request = compiled, compiled.create_infer_request()
        self._output_names = {o.get_any_name() for o in compiled.outputs}

    def _run(self, ids, mask, pos):
        cache, layout = self._cache, self._layout
        if layout.static:
            mask = static_mask(mask, cache.length, ids.shape[1], layout.max_cache_len)
            feeds = {inp: cache.buffers[inp][0] for inp, _ in self._from_cache}
        else:
            feeds = {inp: cache.values[inp] for inp, _ in self._from_cache}
        feeds.update(self._feeds(ids, mask, pos))
        self.request.infer(feeds)
        out = {n: np.array(self.request.get_tensor(n).data) for _, n in layout.pairs
               if n in self._output_names}
        if layout.static:
            cache.buffers = {inp: (out[o], out[o]) for inp, o in layout.pairs}
        else:
            cache.values = {layout.to_input[n]: v for n, v in out.items()}
        return _openvino_logits(self.compiled, self.request)


class _StatefulRunner(Runner):
    """OpenVINO's stateful graph: the cache lives in the model's variables, reset with
    reset_state() when a sequence starts; beam_idx keeps every row where it is."""

    def __init__(self, name, meta, cache, compiled):
        self.compiled, self.request = compiled, compiled.create_infer_request()
        super().__init__(name, meta, cache)

    @property
    def _cache_free(self):
        return False

    def _extra_inputs(self):
        return {"beam_idx"}

    def _run(self, ids, mask, pos):
        if self._cache.length == 0:
            self.request.reset_state()
        self.request.infer({**self._feeds(ids, mask, pos),
                            "beam_idx": np.arange(ids.shape[0], dtype=np.int32)})
        return _openvino_logits(self.compiled, self.request)


class _TorchRunner(Runner):
    """A torch.export program's module. Static cache: every call is handed the same cache
    tensors, which the program writes into (index_copy_ and copy_ on its inputs), so only the
    logits come back. Dynamic cache: the program returns the whole cache (present_<l>_key),
    which the next call is handed back as its past_key_values_<l>_key."""

    def __init__(self, name, meta, cache, module, device):
        super().__init__(name, meta, cache)
        self.module, self.device = module, device
        self._cache_inputs = cache_inputs(meta)  # what the guide's loop hands from its cache

    def __call__(self, input_ids, attention_mask=None, position_ids=None, *,
                 past_key_values=None):
        """With `past_key_values` (a static-cache export), the guide's Dynamo loop: the caller
        keeps a transformers StaticCache (the program's example_inputs hold one) and gives the
        graph's own inputs (the 4-D bool mask over max_cache_len slots, position_ids); the
        program writes the new rows into that cache's tensors, and the call returns
        CausalLMOutputWithPast(logits, past_key_values). Without it, ferry's loop
        (Runner.__call__): the 2-D mask, the runners' own cache, the logits as numpy."""
        if past_key_values is None:
            return super().__call__(input_ids, attention_mask, position_ids)
        return self._call_with_cache(input_ids, attention_mask, position_ids, past_key_values)

    def _call_with_cache(self, input_ids, attention_mask, position_ids, past_key_values):
        import torch
        from transformers.modeling_outputs import CausalLMOutputWithPast

        from .static_cache import feeds

        if not self._layout.static:
            _fail(f"{self.component}: past_key_values= is for a static-cache export (the "
                  "program writes into the caller's StaticCache); this one returns its cache, "
                  "which the runner carries: call it without past_key_values", 1)
        missing = [name for name, value in (("attention_mask", attention_mask),
                                            ("position_ids", position_ids))
                   if value is None and name in self._inputs]
        if missing:
            _fail(f"{self.component}: with past_key_values, give {' and '.join(missing)} as "
                  "the graph takes them (the guide's causal mask [batch, 1, query, "
                  "max_cache_len] and positions)", 1)
        given = {"input_ids": input_ids, "attention_mask": attention_mask,
                 "position_ids": position_ids}
        program_feeds = feeds(past_key_values, self._cache_inputs, self.component)
        for name, value in given.items():
            if name not in self._inputs:
                continue
            tensor = value if torch.is_tensor(value) else torch.as_tensor(np.asarray(value))
            spec = self._inputs[name]
            if tensor.dim() != len(spec["shape"]):
                _fail(f"{self.component}: {name} has shape {list(tensor.shape)}, the graph "
                      f"takes {_escape(spec['shape'])}", 1)
            program_feeds[name] = tensor.to(self.device)
        self._check_cache_call(program_feeds, past_key_values)
        with torch.no_grad():
            out = self.module(**program_feeds)
        return CausalLMOutputWithPast(logits=out["logits"], past_key_values=past_key_values)

    def _check_cache_call(self, program_feeds, cache):
        """A call the program would refuse with torch's own words, or run past the cache's end
        (index_copy_ then wrote part of a layer before failing), refused first, by name: the
        cache's dtype and batch, the mask's dtype and slots, the tokens that fit."""
        import torch

        ids = program_feeds["input_ids"]
        batch, query = ids.shape
        keys = cache.layers[0].keys
        if any(layer.keys.dtype != keys.dtype for layer in cache.layers):
            _fail(f"{self.component}: past_key_values' layers hold different dtypes", 1)
        want = {"float32": torch.float32, "float16": torch.float16,
                "bfloat16": torch.bfloat16}.get(self._layout.dtype)
        if want is not None and keys.dtype != want:
            _fail(f"{self.component}: past_key_values holds "
                  f"{str(keys.dtype).replace('torch.', '')}, the program's cache is "
                  f"{self._layout.dtype}", 1)
        if keys.shape[0] != batch:
            _fail(f"{self.component}: input_ids has {batch} rows, past_key_values {keys.shape[0]}"
                  " (the cache is allocated for one batch)", 1)
        slots = keys.shape[2]
        mask = program_feeds.get("attention_mask")
        if mask is not None and (mask.dtype != torch.bool or mask.shape[-1] != slots):
            _fail(f"{self.component}: attention_mask must be bool [batch, 1, query, "
                  f"max_cache_len={slots}] (the guide's causal mask over the cache's slots), "
                  f"not {str(mask.dtype).replace('torch.', '')} {list(mask.shape)}", 1)
        held = int(cache.layers[0].cumulative_length)
        if held + query > slots:
            _fail(f"{self.component}: past_key_values holds {held} tokens and {query} more "
                  f"would not fit its {slots} slots (max_cache_len): reset() it to start a "
                  "new sequence", 1)

    def _run(self, ids, mask, pos):
        import torch

        cache, layout = self._cache, self._layout
        if layout.static:
            mask = static_mask(mask, cache.length, ids.shape[1], layout.max_cache_len)
            feeds = {inp: cache.buffers[inp][1] for inp, _ in self._from_cache}
        else:
            feeds = {inp: cache.values[inp] for inp, _ in self._from_cache}
        for name, value in self._feeds(ids, mask, pos).items():
            feeds[name] = (value if torch.is_tensor(value)
                           else torch.from_numpy(np.ascontiguousarray(value)).to(self.device))
        with torch.no_grad():
            out = self.module(**feeds)
        if not layout.static:
            cache.values = {layout.to_input[name]: value for name, value in out.items()
                            if name in layout.to_input}
        return out["logits"].to("cpu", torch.float32).numpy()


class _ExecutorchRunner(Runner):
    """An ExecuTorch program's method (a .pte generation export has a static cache, which the
    program writes into its cache inputs and lists among its outputs: the N cache tensors, the
    logits, the N cache tensors again). The Python runtime copies each call's inputs into the
    program's memory, so the cache is fed from the shared buffers and read back from the
    outputs every call, as the guide says of its Python runtime."""

    def __init__(self, name, meta, cache, method):
        super().__init__(name, meta, cache)
        recipe = meta.get("export_config") or {}
        if recipe.get("alloc_mutable_buffers") is False or \
                recipe.get("alloc_graph_input") is False:
            _fail(f"component {_escape(name)} leaves its inputs or cache out of the program's "
                  "memory plan (alloc_graph_input / alloc_mutable_buffers false): the runtime "
                  "then writes the caller's own buffers, which only ExecuTorch's C++ runtime "
                  "binds (Method::set_output_data_ptr); its Python runtime keeps buffers of its "
                  "own and would not see a new sequence. Export with those options at their "
                  "defaults to generate from Python", 4)
        self.method = method
        self._order = [i["name"] for i in meta["inputs"]]
        outputs = meta.get("method_outputs") or []
        cached = [n for n in self._order if n in self._layout.specs]
        n = len(cached)
        if outputs[:n] != cached or outputs[-n:] != cached or outputs[n] != "logits":
            _fail(f"component {_escape(name)}: export.json's method_outputs "
                  f"({_escape(outputs)}) are not the cache, logits and the cache again", 3)
        self._cached, self._logits_at = cached, n

    def _run(self, ids, mask, pos):
        import torch

        cache, layout = self._cache, self._layout
        feeds = self._feeds(ids, static_mask(mask, cache.length, ids.shape[1],
                                             layout.max_cache_len), pos)
        args = [cache.buffers[name][1] if name in cache.buffers
                else feeds[name] if torch.is_tensor(feeds[name])
                else torch.from_numpy(np.ascontiguousarray(feeds[name])) for name in self._order]
        out = self.method.execute(args)
        for k, name in enumerate(self._cached):
            cache.buffers[name][1].copy_(out[k])
        return out[self._logits_at].float().numpy()   # float32 already: torch has bf16


def _executorch_runners(files, metas, cache):
    """Each component's program loaded by executorch.runtime, its method "forward" run."""
    from .runtime import executorch_method  # imports executorch only when one is run

    return {name: _ExecutorchRunner(name, metas[name], cache,
                                    executorch_method(path, metas[name])[0])
            for name, path in files.items()}


def _openvino_logits(compiled, request):
    """The request's logits as float32 (numpy has no bfloat16: OpenVINO hands its bits over as
    float16)."""
    import openvino

    data = request.get_tensor("logits").data
    if compiled.output("logits").get_element_type() == openvino.Type.bf16:
        return _bf16_to_f32(data)
    return np.array(data, dtype=np.float32)


# --- the set of runners of an export ---------------------------------------------------------


TRANSFORMERS_GENERATION = (
    "this is transformers' own export: its stages pass transformers' cache object between "
    "calls (cache.layers.<l>.keys), which ferry does not drive; generate with "
    "transformers.exporters.ExportedModel, or export with ferry's --for-generation")


# The config key of the learned position table a decoder reads, for the families that have one:
# an export.json written before ferry recorded generation.max_positions does not say it.
_TABLE_KEYS = {"gpt2": "n_positions", "whisper": "max_target_positions"}


def _positive(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def read_config(directory):
    """config.json of an export directory as a dict; {} where it is missing or not an object."""
    try:
        top = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return top if isinstance(top, dict) else {}


def position_table(manifest, top):
    """The rows of the decoder's learned position table, where it has one: a longer sequence
    has no positions (onnxruntime then fails inside the graph, OpenVINO's Gather reads zeros
    and runs on with wrong logits), so the runners refuse it. export.json's
    generation.max_positions, which ferry writes from the checkpoint (a malformed one is
    refused), and the table's size in config.json (`top`, parsed), the smaller where both say;
    None: no such table."""
    gen = manifest.get("generation")
    gen = gen if isinstance(gen, dict) else {}
    rows = gen.get("max_positions")
    if "max_positions" in gen and not _positive(rows):
        _fail(f"export.json: generation.max_positions must be a positive integer, not "
              f"{_escape(repr(rows))}; export the model again")
    config = top
    if isinstance(config.get("text_config"), dict):
        config = config["text_config"]
    key = _TABLE_KEYS.get(config.get("model_type", top.get("model_type")))
    table = config.get(key) if key else None
    known = [v for v in (rows, table) if _positive(v)]
    return min(known) if known else None


class Runners(Mapping):
    """{"prefill": Runner, "decode": Runner} of a saved generation export (`directory` and its
    parsed export.json); see the module's docstring. `components` lists the components loaded
    (one when decode takes prompts, unless `every_component`: then a prefill the export has
    takes the prompts, as validation runs it to check each graph)."""

    @staticmethod
    def check_generation(manifest):
        """Refuses an export that has no decode component to generate with (a
        vision-language export's stateful language model decodes)."""
        from .vision_language import is_vision_language

        comps = manifest.get("components", {})
        if is_transformers_manifest(manifest):
            _fail(TRANSFORMERS_GENERATION)
        if "generation" not in manifest or not (
                any(c.get("role") in DECODE_ROLES for c in comps.values()) or
                is_vision_language(manifest)):
            listed = ", ".join(f"{_escape(n)} (role {_escape(c.get('role'))})"
                               for n, c in comps.items())
            _fail(f"this export has no generation components (its components: {listed}): "
                  "call it instead, or export with export_for_generation (the CLI's "
                  "--for-generation) to generate")

    def __init__(self, directory, manifest, device=None, every_component=False):
        self.check_generation(manifest)
        self.directory = Path(directory)
        comps = manifest.get("components", {})
        roles = {c.get("role"): name for name, c in comps.items()}
        self.format = manifest.get("format", manifest.get("export_format"))
        decode_name = next(roles[r] for r in DECODE_ROLES if r in roles)
        decode_meta = comps[decode_name]["metadata"]
        stateful = bool(decode_meta.get("stateful"))
        wrap = {"openvino": _wrap_numpy, "pt2": _torch_wrapper(device),
                "executorch": _torch_wrapper(None)}.get(self.format, _wrap_ortvalue)
        self.cache = _Cache(_CacheLayout(decode_name, decode_meta, wrap, stateful))
        self.cache.position_limit = position_table(manifest, read_config(directory))
        decode_query = next((i["shape"][1] for i in decode_meta["inputs"]
                             if i["name"] == "input_ids"), 1)
        names = [decode_name]
        if (decode_query == 1 or every_component and "prefill" in roles) and not stateful:
            if "prefill" not in roles:
                _fail("this export's decode takes one token a call and it has no prefill "
                      "component to take the prompt")
            names.insert(0, roles["prefill"])
        self.components = names
        metas = {n: comps[n]["metadata"] for n in names}
        files = {n: self.directory / comps[n]["file"] for n in names}
        self._weights = {}  # the data files' mappings, alive as long as the sessions using them
        if self.format == "openvino":
            made = _openvino_runners(files, metas, self.cache, stateful, device)
        elif self.format == "onnx":
            made = _onnx_runners(self.directory, files, metas, self.cache, self._weights, device)
        elif self.format == "pt2":
            made = _torch_runners(files, metas, self.cache, device)
        elif self.format == "executorch":
            executorch_device(device)
            made = _executorch_runners(files, metas, self.cache)
        else:
            _fail(f"the runners run ONNX, OpenVINO, pt2 and ExecuTorch exports, not "
                  f"{_escape(self.format)}")
        decode = made[decode_name]
        self._runners = {"prefill": made[names[0]], "decode": decode}
        self.vocab_size = decode._vocab
        self.max_cache_len = self.cache.layout.max_cache_len
        recipe = decode_meta.get("export_config") or {}
        fused = self.format == "onnx" and recipe.get("ort_fusions") not in (None, "none")
        self._tabled = list(files.values()) if fused else []
        self._table_rows = None

    @property
    def position_limit(self):
        """The rows of the decoder's learned position table (export.json's max_positions), the
        most positions a sequence may take; None where it has none."""
        return self.cache.position_limit

    @property
    def rotary_table_rows(self):
        """The rows of the cos/sin tables a fused ONNX export's graphs rotate with
        (GroupQueryAttention rotating inside, onnxruntime's RotaryEmbedding): positions past
        them are refused by onnxruntime. None where there are none (plain rotary ops compute
        any position). Read from the graphs once."""
        if self._table_rows is None:
            rows = [r for r in map(_rotary_rows, self._tabled) if r is not None]
            self._table_rows = min(rows) if rows else 0
        return self._table_rows or None

    def reset(self, batch):
        """Starts a new sequence of `batch` rows on an empty cache."""
        if not isinstance(batch, (int, np.integer)) or isinstance(batch, bool) or batch < 1:
            _fail(f"reset() takes a batch size of at least 1, not {_escape(repr(batch))}", 1)
        self.cache.reset(int(batch))

    @property
    def cache_length(self):
        """Tokens (columns, padding included) the cache holds."""
        return self.cache.length

    def __getitem__(self, role):
        return self._runners[role]

    def __iter__(self):
        return iter(self._runners)

    def __len__(self):
        return len(self._runners)


def _rotary_rows(path):
    """Rows of the cos/sin tables the ONNX graph at `path` rotates with, or None."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    tables = set()
    for node in model.graph.node:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "GroupQueryAttention" and attrs.get("do_rotary") and \
                len(node.input) > 7:
            tables.add(node.input[7])
        elif node.op_type == "RotaryEmbedding" and len(node.input) > 2:
            tables.add(node.input[2])
    rows = [t.dims[0] for t in model.graph.initializer if t.name in tables and t.dims]
    return min(rows) if rows else None


def _wrap_numpy(array, dtype):
    return array


def _wrap_ortvalue(array, dtype):
    import onnxruntime as ort

    if dtype == "bfloat16":
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, _ONNX_TYPE[dtype])
    return ort.OrtValue.ortvalue_from_numpy(array)


def _onnx_runners(directory, files, metas, cache, maps, device=None):
    """onnxruntime sessions of `files` on `device` (ExportedModel.to(); CPU by default). One
    session: onnxruntime's defaults (it maps the data file and prepacks the weights). Two: each
    external initializer is handed to both as the same OrtValue over one copy-on-write mapping
    of its data file, and prepacking and the memory
    arena are off, since each session would otherwise keep its own packed copy of every weight
    and its own pool of temporaries; except for MatMulNBits (onnxruntime's fused quantized
    linear), whose packed 4- or 8-bit copies are small and without which it runs ~20x slower
    (bench/runner_memory.py, int4: 192 MiB and 16 ms a token with default sessions, 232 MiB and
    464 ms shared)."""
    import onnxruntime as ort

    config = next(iter(metas.values())).get("export_config", {})
    packs_small = bool(config.get("quantizer")) and bool(config.get("ort_fusions"))
    shared, made = len(files) > 1 and not packs_small, {}
    for name, path in files.items():
        options = ort.SessionOptions()
        if shared:
            options.add_session_config_entry("session.disable_prepacking", "1")
            # Each session's arena would keep its own high-water mark of temporaries, which a
            # quantized graph's dequantized weights make as large as the weights themselves
            # (int4 DequantizeLinear + MatMul: 350 MiB with arenas, 234 without, bench model).
            options.enable_cpu_mem_arena = False
            with program_errors(path, "onnx"):  # onnx's DecodeError, named as one line
                initializers = external_initializers(path)
            for init in initializers:
                options.add_initializer(init["name"], _mapped(directory, init, maps))
        session = onnxruntime_session(path, device, options, metas[name].get("precision"),
                                      metas[name])
        made[name] = _OnnxRunner(name, metas[name], cache, session)
    return made


def _mapped(directory, init, maps):
    """The OrtValue of one external initializer over the mapping of its data file (made once
    per file; a tensor at the same place in the same file gets the same OrtValue)."""
    import onnxruntime as ort

    location = init["location"]
    if location not in maps:
        maps[location] = {"map": np.memmap(Path(directory) / location, dtype=np.uint8,
                                           mode="c"), "values": {}}
    mapping = maps[location]
    count = int(np.prod(init["dims"], dtype=np.int64))
    if init["data_type"] in _ONNX_4BIT:
        numpy_type, size = np.uint8, (count + 1) // 2
    elif init["data_type"] in _ONNX_NUMPY:
        numpy_type = _ONNX_NUMPY[init["data_type"]]
        size = count * np.dtype(numpy_type).itemsize
    else:
        _fail(f"initializer {_escape(init['name'])} has ONNX element type {init['data_type']}, "
              "which the runners do not map")
    length = size if init["length"] is None else init["length"]
    key = (init["offset"], length, init["data_type"], tuple(init["dims"]))
    if key not in mapping["values"]:
        end = init["offset"] + length
        if length != size or end > len(mapping["map"]):
            _fail(f"initializer {_escape(init['name'])}: {length} bytes at offset "
                  f"{init['offset']} of {_escape(location)} do not hold its "
                  f"{init['dims']} elements", 3)
        data = mapping["map"][init["offset"]:end]
        if init["data_type"] in _ONNX_4BIT:
            # numpy has no 4-bit type: a view with the tensor's shape over its packed bytes
            # (strides 0, so it spans exactly them); onnxruntime takes the shape and reads
            # ceil(count / 2) bytes from the data pointer
            array = np.lib.stride_tricks.as_strided(data, shape=init["dims"],
                                                    strides=[0] * len(init["dims"]))
        else:
            array = data.view(numpy_type).reshape(init["dims"])
        value = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(array, init["data_type"])
        if value.data_ptr() != data.ctypes.data:
            _fail(f"initializer {_escape(init['name'])}: onnxruntime copied it instead of "
                  "using the mapping", 8)
        mapping["values"][key] = value
    return mapping["values"][key]


def _openvino_runners(files, metas, cache, stateful, device=None):
    """Compiled OpenVINO models on `device` (ExportedModel.to(); AUTO by default), at the
    precision runtime.openvino_compile_config gives."""
    made = {}
    for name, path in files.items():
        compiled = openvino_compiled(path, metas[name].get("precision"), device, metas[name])
        runner = _StatefulRunner if stateful else _OpenVINORunner
        made[name] = runner(name, metas[name], cache, compiled)
    return made


def _torch_wrapper(device):
    """wrap() for a .pt2 export's cache: a torch tensor over the numpy buffer (on the CPU, the
    same memory), bfloat16 viewed from its uint16 bits."""
    def wrap(array, dtype):
        import torch

        tensor = torch.from_numpy(array)
        if dtype == "bfloat16":
            tensor = tensor.view(torch.bfloat16)
        return tensor.to(torch_device(device))
    return wrap


def _torch_runners(files, metas, cache, device=None):
    """Each component's program loaded with torch.export.load and run as its module on
    `device`. A prefill and a decode hold the same weights: each of decode's parameters that
    equals prefill's is made prefill's tensor (load_state_dict(assign=True)), so its own copy is
    freed; one that differs stays its own, so that each program runs with the weights it holds
    (decode ran with prefill's always, and a decode.pt2 edited since the export
    passed `ferry validate`)."""
    import torch

    made, first = {}, None
    for name, path in files.items():
        module = checked_program(path, torch_device(device), metas[name]).module()
        if first is None:
            first = module
        else:
            own = module.state_dict()
            same = {key: tensor for key, tensor in first.state_dict().items()
                    if key in own and own[key].dtype == tensor.dtype and
                    own[key].shape == tensor.shape and torch.equal(own[key], tensor)}
            module.load_state_dict(same, strict=False, assign=True)
        made[name] = _TorchRunner(name, metas[name], cache, module, torch_device(device))
    return made
