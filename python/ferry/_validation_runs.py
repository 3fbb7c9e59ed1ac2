"""Running an export on example inputs for validation.py: a prompt of batch 2 with one row
left-padded, through the "model" graph of a plain export, or through a generation export's
components — the prompt (prefill, or decode on an empty cache), then a few greedy decode steps
with the cache carried from call to call — and transformers' eager model over the same tokens.

Every call's logits are kept with the position of their first token, so that validation.py can
compare them with the eager logits at the same positions."""

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._lib import CannotValidate, FerryError, _escape

BATCH, SEQUENCE, STEPS, SEED = 2, 16, 8, 0


@dataclass
class Call:
    """One run of a component: `label` names it in the report ("decode: logits, 8 steps"),
    `start` is the position of its first token in the whole sequence, `logits` float32
    [batch, tokens, vocab]."""

    label: str
    start: int
    logits: np.ndarray


@dataclass
class Run:
    """The calls of one run and the whole sequence they saw: prompt plus fed tokens."""

    calls: list
    input_ids: np.ndarray
    attention_mask: np.ndarray


# --- example inputs ---------------------------------------------------------------------------


def position_ids(mask):
    """position_ids as generate() computes them: cumsum(mask) - 1, padding set to 1."""
    return np.where(mask == 1, np.cumsum(mask, axis=-1) - 1, 1).astype(np.int64)


def _size(dim, symbols, want, cap=None):
    """A dim of the example: fixed where the export is static, else `want` within the symbol's
    [min, max] (and at most `cap`)."""
    if isinstance(dim, int):
        return dim
    symbol = symbols.get(dim, {}) if isinstance(dim, str) else {}
    size = max(want, int(symbol.get("min") or 1))
    if symbol.get("max"):
        size = min(size, int(symbol["max"]))
    return min(size, cap) if cap else size


def example_prompt(manifest, first, vocab, cap=None):
    """Random token ids (seeded), a left-padded attention_mask (row 1 of a batch of 2 or more
    has a third of its tokens padding) and generate-style position_ids, all int64 [batch,
    sequence]: shaped as the first component's input_ids allow."""
    meta = manifest["components"][first]["metadata"]
    dims = next(i["shape"] for i in meta["inputs"] if i["name"] == "input_ids")
    batch = _size(dims[0], meta.get("symbols", {}), BATCH)
    length = _size(dims[1], meta.get("symbols", {}), SEQUENCE, cap)
    ids = np.random.default_rng(SEED).integers(0, vocab, size=(batch, length), dtype=np.int64)
    mask = np.ones_like(ids)
    if batch > 1 and length > 1:
        mask[1, :max(1, length // 3)] = 0
    return ids, mask, position_ids(mask)


def vocab_size(manifest, first, export_dir):
    """The last dim of the logits, from export.json, else config.json's vocab_size."""
    meta = manifest["components"][first]["metadata"]
    dims = next((o["shape"] for o in meta["outputs"] if o["name"] == "logits"), None)
    if dims is None:
        raise CannotValidate(f"component {_escape(first)} has no logits output to validate",
                             status=4)
    if isinstance(dims[-1], int):
        return dims[-1]
    config = json.loads((Path(export_dir) / "config.json").read_text())
    return int(config.get("vocab_size") or config["text_config"]["vocab_size"])


# --- runtimes -----------------------------------------------------------------------------------


class OnnxRuntime:
    """Each component in its own onnxruntime CPU session."""

    name = "onnxruntime"

    def __init__(self, export_dir, manifest):
        import onnxruntime

        self._ort, self._dir, self._manifest, self._sessions = onnxruntime, export_dir, manifest, {}

    def _session(self, component):
        if component not in self._sessions:
            options = self._ort.SessionOptions()
            options.log_severity_level = 3
            path = Path(self._dir) / self._manifest["components"][component]["file"]
            try:
                self._sessions[component] = self._ort.InferenceSession(
                    str(path), options, providers=["CPUExecutionProvider"])
            except Exception as e:  # its message says which kernel is missing
                first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise CannotValidate(f"onnxruntime (CPU) cannot run {_escape(path)}: "
                                     f"{_escape(first)}", status=4) from None
        return self._sessions[component]

    def zeros(self, shape, dtype):
        if dtype == "bfloat16":
            raise CannotValidate("onnxruntime's CPU provider cannot run a bfloat16 export",
                                     status=4)
        return np.zeros(shape, dtype=np.dtype(dtype))

    def run(self, component, feeds):
        session = self._session(component)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, _declared(session.get_inputs(), feeds,
                                                            component))))

    def reset(self, component):
        pass


class OpenVINORuntime:
    """Each component compiled for OpenVINO's CPU plugin (f32 inference precision for an fp32
    export: the plugin would otherwise compute in bf16 where the processor has it), with one
    infer request each, so that a stateful graph keeps its cache between calls."""

    name = "openvino"

    def __init__(self, export_dir, manifest):
        import openvino

        self._ov, self._dir, self._manifest = openvino, export_dir, manifest
        self._core, self._requests = openvino.Core(), {}

    def _request(self, component):
        if component not in self._requests:
            meta = self._manifest["components"][component]["metadata"]
            path = Path(self._dir) / self._manifest["components"][component]["file"]
            config = {"INFERENCE_PRECISION_HINT": "f32"} if meta.get("precision") == "fp32" else {}
            compiled = self._core.compile_model(self._core.read_model(str(path)), "CPU", config)
            self._requests[component] = compiled.create_infer_request()
        return self._requests[component]

    def zeros(self, shape, dtype):
        if dtype == "bfloat16":  # numpy has none; a copy of OpenVINO's bits would be read as f16
            raise CannotValidate("validating a bfloat16 OpenVINO export with its cache as inputs "
                                 "and outputs (stateful=False) is not supported; the stateful "
                                 "export is", status=4)
        return np.zeros(shape, dtype=np.dtype(dtype))

    def run(self, component, feeds):
        request = self._request(component)
        inputs = [p.get_any_name() for p in request.model_inputs]
        request.infer(_declared([_Named(n) for n in inputs], feeds, component))
        out = {}
        for port in request.model_outputs:
            tensor = request.get_tensor(port)
            value = np.array(tensor.data, copy=True)
            if tensor.element_type == self._ov.Type.bf16:
                if port.get_any_name() != "logits":
                    raise CannotValidate("validating a bfloat16 OpenVINO export with its cache as "
                                         "outputs (stateful=False) is not supported", status=4)
                value = (value.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            out[port.get_any_name()] = value
        return out

    def reset(self, component):
        self._request(component).reset_state()


class _Named:
    def __init__(self, name):
        self.name = name


def _declared(ports, feeds, component):
    """The feeds a graph declares; one it declares and the run does not make is an error."""
    names = [p.name for p in ports]
    missing = [n for n in names if n not in feeds]
    if missing:
        raise CannotValidate(f"component {_escape(component)} takes inputs validation does not "
                             f"know how to make: {_escape(', '.join(missing))}", status=4)
    return {n: feeds[n] for n in names}


RUNTIMES = {"onnx": OnnxRuntime, "openvino": OpenVINORuntime}


# --- runs -------------------------------------------------------------------------------------


def _greedy(logits):
    return logits[:, -1].astype(np.float64).argmax(-1).astype(np.int64)


def _plain(rt, manifest, prompt):
    ids, mask, pos = prompt
    logits = rt.run("model", {"input_ids": ids, "attention_mask": mask,
                              "position_ids": pos})["logits"]
    return Run([Call("logits", 0, logits)], ids, mask)


def _steps(step, ids, mask, first_logits):
    """STEPS greedy decode steps after a prompt call: `step(token [b,1], mask, position [b,1])`
    returns the step's logits. Returns (calls, the whole ids and mask)."""
    calls, logits = [], first_logits
    last_pos = position_ids(mask)[:, -1:]
    for k in range(STEPS):
        token = _greedy(logits)[:, None]
        ids = np.concatenate([ids, token], axis=1)
        mask = np.concatenate([mask, np.ones_like(token)], axis=1)
        last_pos = last_pos + 1
        logits = step(token, mask, last_pos)
        calls.append(Call(f"decode: logits, {STEPS} steps", ids.shape[1] - 1, logits))
    return calls, ids, mask


def _dynamic(rt, manifest, prompt):
    """prefill (or decode on an empty cache), then steps; present.* fed back as past_*."""
    ids, mask, pos = prompt
    components = manifest["components"]
    cache = components["decode"]["metadata"]["cache"]
    to_past = {p["output"]: p["input"] for p in cache["pairs"]}
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    if "prefill" in components:
        first = "prefill"
    else:
        first = "decode"
        empty = rt.zeros((ids.shape[0], cache["kv_heads"], 0, cache["head_dim"]), cache["dtype"])
        feeds.update({past: empty for past in to_past.values()})
    outs = rt.run(first, feeds)
    state = {"past": {to_past[n]: outs[n] for n in to_past}}

    def step(token, step_mask, step_pos):
        outs = rt.run("decode", {"input_ids": token, "attention_mask": step_mask,
                                 "position_ids": step_pos, **state["past"]})
        state["past"] = {to_past[n]: outs[n] for n in to_past}
        return outs["logits"]

    calls, ids, mask = _steps(step, ids, mask, outs["logits"])
    return Run([Call(f"{first}: logits, prompt", 0, outs["logits"])] + calls, ids, mask)


def _static(rt, manifest, prompt):
    """A fixed-size cache (input.<name> -> output.<name>): the prompt through prefill (or
    decode), then steps. The bool mask [batch, 1, tokens, max_cache_len] shows a query the
    cache slots up to its own that hold real tokens of its row."""
    ids, mask, pos = prompt
    components = manifest["components"]
    meta = components["decode"]["metadata"]
    length = int(meta["cache"]["max_cache_len"])
    batch = ids.shape[0]
    buffers = {}
    for i in meta["inputs"]:
        if i["name"].startswith("input."):
            dims = [batch if d == "batch" else length if d == "max_cache_len" else d
                    for d in i["shape"]]
            if not all(isinstance(d, int) for d in dims):
                raise CannotValidate(f"cannot size the cache input {_escape(i['name'])} "
                                     f"{_escape(dims)}", status=4)
            buffers[i["name"][len("input."):]] = rt.zeros(dims, i["dtype"])
    state = {"cache": buffers, "written": 0}

    def call(component, tokens, seen, positions):
        q, at = tokens.shape[1], state["written"]
        slots = np.zeros((batch, length), dtype=bool)
        slots[:, :seen.shape[1]] = seen == 1
        causal = np.arange(length)[None, :] <= (at + np.arange(q))[:, None]
        outs = rt.run(component, {"input_ids": tokens, "position_ids": positions,
                                  "attention_mask": (causal[None] & slots[:, None])[:, None],
                                  **{f"input.{n}": v for n, v in state["cache"].items()}})
        state["cache"] = {n: outs[f"output.{n}"] for n in state["cache"]}
        state["written"] = at + q
        return outs["logits"]

    first = "prefill" if "prefill" in components else "decode"
    logits = call(first, ids, mask, pos)
    calls, ids, mask = _steps(lambda t, m, p: call("decode", t, m, p), ids, mask, logits)
    return Run([Call(f"{first}: logits, prompt", 0, logits)] + calls, ids, mask)


def _stateful(rt, manifest, prompt):
    """OpenVINO's stateful decode: the cache stays in the request's variables; beam_idx keeps
    every row where it is."""
    ids, mask, pos = prompt
    beams = np.arange(ids.shape[0], dtype=np.int32)
    rt.reset("decode")

    def call(tokens, call_mask, positions):
        return rt.run("decode", {"input_ids": tokens, "attention_mask": call_mask,
                                 "position_ids": positions, "beam_idx": beams})["logits"]

    logits = call(ids, mask, pos)
    calls, ids, mask = _steps(call, ids, mask, logits)
    return Run([Call("decode: logits, prompt", 0, logits)] + calls, ids, mask)


def run_export(export_dir, manifest):
    """Runs the export at `export_dir` (its manifest given) on the example inputs -> (Run,
    runtime name)."""
    fmt = manifest.get("format")
    if fmt not in RUNTIMES:
        raise CannotValidate(f"validating a {_escape(fmt)} export is not supported (onnx, "
                             "openvino)", status=4)
    rt = RUNTIMES[fmt](export_dir, manifest)
    components = manifest["components"]
    if "model" in components:
        prompt = example_prompt(manifest, "model", vocab_size(manifest, "model", export_dir))
        return _plain(rt, manifest, prompt), rt.name
    if "decode" not in components:
        raise CannotValidate("validation runs a plain export's \"model\" or a generation "
                             f"export's \"decode\"; this export has "
                             f"{_escape(', '.join(components))}", status=4)
    first = "prefill" if "prefill" in components else "decode"
    meta = components["decode"]["metadata"]
    vocab = vocab_size(manifest, first, export_dir)
    if meta.get("stateful"):
        return _stateful(rt, manifest, example_prompt(manifest, first, vocab)), rt.name
    cache = meta.get("cache") or {}
    if cache.get("implementation") == "static":
        cap = int(cache["max_cache_len"]) - STEPS
        if cap < 1:
            raise CannotValidate(f"max_cache_len {cache['max_cache_len']} leaves no room for a "
                                 f"prompt and {STEPS} decode steps", status=4)
        return _static(rt, manifest, example_prompt(manifest, first, vocab, cap)), rt.name
    return _dynamic(rt, manifest, example_prompt(manifest, first, vocab)), rt.name


# --- the eager reference ----------------------------------------------------------------------


def load_reference(checkpoint, revision=None):
    """transformers' eager model in float32 from `checkpoint` (a directory, or a hub id found in
    the local cache: nothing is downloaded)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    try:
        model = AutoModelForCausalLM.from_pretrained(
            checkpoint, revision=revision, dtype=torch.float32, attn_implementation="eager",
            local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FerryError(f"transformers cannot load the reference checkpoint "
                         f"{_escape(checkpoint)}: {_escape(first)}", status=2) from None
    return model.eval()


def reference_logits(model, input_ids, attention_mask):
    """float32 logits [batch, sequence, vocab] of the eager model, positions as generate()
    makes them."""
    import torch

    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None and "dynamic" in str(getattr(rotary, "rope_type", "")):
        # dynamic NTK rope grows a cached length between calls: start from the fresh model's
        rotary.inv_freq = rotary.original_inv_freq.clone()
        rotary.max_seq_len_cached = rotary.original_max_seq_len
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(input_ids),
                    attention_mask=torch.from_numpy(attention_mask),
                    position_ids=torch.from_numpy(position_ids(attention_mask)), use_cache=False)
    return out.logits.float().numpy()
