"""Running an export on example inputs for validation.py: a prompt of batch 2 with one row
left-padded, through the "model" graph of a plain export as ExportedModel calls it, or through
a generation export's runners (ferry.runners) — the prompt, then a few greedy decode steps with
the cache the runners carry from call to call — and transformers' eager model over the same
tokens.

Every call's logits are kept with the position of their first token, so that validation.py can
compare them with the eager logits at the same positions."""

import json
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._lib import CannotValidate, FerryError, FerryWarning, _escape
from .generation import rerun_length
from .runners import DECODE_ROLES, Runners, derive_position_ids
from .runtime import check_program_io, is_encoder_output, openvino_ports, runtime_reason

BATCH, SEQUENCE, STEPS, SEED = 2, 16, 8, 0
RUNTIMES = {"onnx": "onnxruntime", "openvino": "openvino", "pt2": "torch",
            "executorch": "executorch"}


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
    """The calls of one run and the whole sequence they saw: prompt plus fed tokens.
    `positions`: the export was given generate()'s position_ids, and so is the eager model;
    else it computed its own from 0, as the eager model does when given none."""

    calls: list
    input_ids: np.ndarray
    attention_mask: np.ndarray
    positions: bool = True
    # the sequence length at which the run ran the whole sequence again, as transformers'
    # generate() does (Phi-3's LongRoPE switch): positions before it are eager's over the
    # shorter prefix, those from it on eager's over the whole sequence
    rerun_at: int = None
    # an encoder-decoder's: what its encoder was given ({input: array}; the eager model's too)
    encoder_inputs: dict = None


# --- example inputs ---------------------------------------------------------------------------


def position_ids(mask):
    """position_ids as generate() computes them: cumsum(mask) - 1, padding set to 1."""
    return derive_position_ids(mask, mask.shape[1])


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
    if "inputs" in meta:
        dims = next(i["shape"] for i in meta["inputs"] if i["name"] == "input_ids")
    else:  # a transformers export records the shapes it traced (its kwargs), which it takes
        dims = ((meta.get("kwargs") or {}).get("input_ids") or {}).get("shape")
        if not dims or len(dims) != 2:
            raise CannotValidate(f"component {_escape(first)} records no [batch, sequence] "
                                 "input_ids shape to make an example of", status=4)
    batch = _size(dims[0], meta.get("symbols", {}), BATCH)
    length = _size(dims[1], meta.get("symbols", {}), SEQUENCE, cap)
    ids = np.random.default_rng(SEED).integers(0, vocab, size=(batch, length), dtype=np.int64)
    mask = np.ones_like(ids)
    if batch > 1 and length > 1:
        mask[1, :max(1, length // 3)] = 0
    return ids, mask, position_ids(mask)


# the encoders ferry exports, by architecture: transformers' class of each (export.json is not
# trusted to name another)
ENCODERS = {"BertModel": "AutoModel", "RobertaModel": "AutoModel",
            "XLMRobertaModel": "AutoModel", "DistilBertModel": "AutoModel",
            "BertForSequenceClassification": "AutoModelForSequenceClassification",
            "RobertaForSequenceClassification": "AutoModelForSequenceClassification"}


def is_encoder(manifest):
    meta = (manifest.get("components", {}).get("model") or {}).get("metadata") or {}
    return is_encoder_output(meta.get("output_class"))


def encoder_example(manifest):
    """Inputs of the encoder's "model", as its metadata declares them: ids within their
    value_range, a right-padded mask (row 1 of a batch of 2 loses a third), token types 1 over
    the second half, positions 0, 1, ...: int64 [batch, sequence]."""
    meta = manifest["components"]["model"]["metadata"]
    inputs = {i["name"]: i for i in meta["inputs"]}
    dims = inputs["input_ids"]["shape"]
    batch = _size(dims[0], meta.get("symbols", {}), BATCH)
    length = _size(dims[1], meta.get("symbols", {}), SEQUENCE)
    high = (inputs["input_ids"].get("value_range") or [0, 1])[1]
    rng = np.random.default_rng(SEED)
    ids = rng.integers(min(3, high), high + 1, size=(batch, length), dtype=np.int64)
    mask = np.ones_like(ids)
    if batch > 1 and length > 1:
        mask[1, length - max(1, length // 3):] = 0
    feeds = {"input_ids": ids, "attention_mask": mask}
    if "token_type_ids" in inputs:
        types = np.zeros_like(ids)
        types[:, length // 2:] = min(1, (inputs["token_type_ids"].get("value_range") or [0, 0])[1])
        feeds["token_type_ids"] = types
    if "position_ids" in inputs:
        feeds["position_ids"] = np.broadcast_to(np.arange(length), ids.shape).copy()
    return {k: v for k, v in feeds.items() if k in inputs}, mask


def run_encoder(loaded, manifest):
    """The encoder's "model" on its example on the CPU -> (feeds, mask, {output: float32},
    runtime name)."""
    fmt = check_format(manifest)
    if fmt in ("onnx", "openvino"):
        _read_program_files(fmt, loaded.directory, manifest["components"])
    feeds, mask = encoder_example(manifest)
    with _cannot_run(RUNTIMES[fmt]):
        loaded.to("cpu")
        out = loaded(**feeds)
    return feeds, mask, {k: np.asarray(out[k], dtype=np.float32) for k in out.keys()}, \
        RUNTIMES[fmt]


def reference_encoder(checkpoint, architecture, feeds, revision=None):
    """transformers' eager float32 outputs of the encoder {name: array} for `feeds`."""
    import torch
    import transformers

    auto = ENCODERS.get(architecture)
    if auto is None:
        raise CannotValidate(f"{_escape(architecture)} is not an encoder ferry validates",
                             status=4)
    transformers.utils.logging.disable_progress_bar()
    try:
        model = getattr(transformers, auto).from_pretrained(
            checkpoint, revision=revision, dtype=torch.float32, attn_implementation="eager",
            local_files_only=True).eval()
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FerryError(f"transformers cannot load the reference checkpoint "
                         f"{_escape(checkpoint)}: {_escape(first)}", status=2) from None
    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return {k: v.float().numpy() for k, v in out.items() if isinstance(v, torch.Tensor)}


def vocab_size(manifest, first, export_dir):
    """The last dim of the logits, from export.json, else config.json's vocab_size."""
    meta = manifest["components"][first]["metadata"]
    if "outputs" not in meta:  # a transformers export: its out_spec says logits, no shape
        dims = [None]
    else:
        dims = next((o["shape"] for o in meta["outputs"] if o["name"] == "logits"), None)
    if dims is None:
        raise CannotValidate(f"component {_escape(first)} has no logits output to validate",
                             status=4)
    if isinstance(dims[-1], int):
        return dims[-1]
    config = json.loads((Path(export_dir) / "config.json").read_text())
    return int(config.get("vocab_size") or config["text_config"]["vocab_size"])


# --- runs -------------------------------------------------------------------------------------


def _first_line(error):
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def _cannot_run(runtime):
    """The runtime failing to load or run the export (a kernel or type its CPU provider lacks:
    a bfloat16 ONNX export) and what the runners and ExportedModel refuse to run (status 1, a
    shape they cannot feed; 4, unsupported) as CannotValidate; a broken export stays FerryError,
    and so does a program torch cannot load or run (an ONNX or OpenVINO program that its reader
    cannot parse is found before: _read_program_files)."""
    try:
        yield
    except CannotValidate:
        raise
    except ImportError as e:  # the onnx package, which the runners read initializers with
        raise CannotValidate(f"running this export needs {_escape(e.name)}, which this Python "
                             f"cannot import: pip install {_escape(e.name)}", status=4) from None
    except FerryError as e:
        if e.status not in (1, 4):
            raise
        raise CannotValidate(f"{runtime} cannot run this export here: {e}", status=4) from None
    except Exception as e:
        if runtime == "torch":
            # torch runs every op and dtype a pt2 export holds on the CPU: a program it cannot
            # load or run is a broken export, not a runtime that lacks something here
            raise FerryError(f"torch cannot load or run this export: "
                             f"{_escape(_first_line(e))}", status=1) from None
        if type(e).__module__.split(".")[0] not in ("onnxruntime", "openvino") and \
                not isinstance(e, RuntimeError):
            raise
        raise CannotValidate(f"{runtime} (CPU) cannot run this export: "
                             f"{_escape(runtime_reason(e))}", status=4) from None


def _takes(manifest, component):
    """The token inputs `component` takes: export.json's inputs (ferry's), else the kwargs
    it was traced with (transformers')."""
    meta = manifest["components"][component].get("metadata") or {}
    names = [i.get("name") for i in meta.get("inputs") or [] if isinstance(i, dict)] \
        if "inputs" in meta else list(meta.get("kwargs") or {})
    return {n for n in names if n in _TOKEN_FEEDS}


_TOKEN_FEEDS = ("input_ids", "attention_mask", "position_ids")


def _plain(loaded, manifest):
    """The "model" graph over the prompt, run as ExportedModel calls it with the inputs the
    graph takes; the eager model is then called the same way (Run.positions)."""
    ids, mask, pos = example_prompt(manifest, "model",
                                    vocab_size(manifest, "model", loaded.directory))
    takes = _takes(manifest, "model") or set(_TOKEN_FEEDS)
    if "attention_mask" not in takes:
        # the graph attends to every token, as the eager model given no mask: nothing padded
        mask = np.ones_like(ids)
        pos = position_ids(mask)
    feeds = {"input_ids": ids, "attention_mask": mask, "position_ids": pos}
    with warnings.catch_warnings():
        # inputs the program does not take are dropped, as validation means them to be: no
        # reason to print Python's warning with its source line
        warnings.simplefilter("ignore", FerryWarning)
        out = loaded(**{k: v for k, v in feeds.items() if k in takes or k == "input_ids"})
    return Run([Call("logits", 0, np.asarray(out["logits"], dtype=np.float32))], ids, mask,
               positions="position_ids" in takes)


def _generation(loaded, manifest):
    """The prompt through runners["prefill"] (decode itself where the export has no prefill),
    then STEPS greedy steps through runners["decode"], the cache carried by the runners. An
    encoder-decoder's encoder first runs on seeded features (every decoder row unpadded, as its
    generate() feeds them)."""
    from .seq2seq import is_encoder_decoder, runners_class

    if is_encoder_decoder(manifest):
        return _seq2seq_generation(loaded, manifest, runners_class(manifest))
    runners = Runners(loaded.directory, manifest, "cpu", every_component=True)
    first = runners["prefill"].component
    cap = _prompt_cap(runners)
    ids, mask, _ = example_prompt(manifest, first, vocab_size(manifest, first, loaded.directory),
                                  cap)
    rerun_at = rerun_length(_read_config(loaded.directory))
    runners.reset(ids.shape[0])
    logits = runners["prefill"](ids, mask)
    calls = [Call(f"{first}: logits, prompt", 0, logits)]
    ran_again = None
    for _ in range(STEPS):
        token = logits[:, -1].astype(np.float64).argmax(-1).astype(np.int64)[:, None]
        ids = np.concatenate([ids, token], axis=1)
        mask = np.concatenate([mask, np.ones_like(token)], axis=1)
        if ids.shape[1] == rerun_at:   # as generate() and transformers' generate() do
            runners.reset(ids.shape[0])
            logits = runners["prefill"](ids, mask)[:, -1:]
            ran_again = rerun_at
        else:
            logits = runners["decode"](token, mask)
        calls.append(Call(f"decode: logits, {STEPS} steps", ids.shape[1] - 1, logits))
    return Run(calls, ids, mask, rerun_at=ran_again)


def _prompt_cap(runners):
    """The longest prompt a static cache leaves STEPS decode steps after (None: no bound)."""
    if runners.max_cache_len is None:
        return None
    cap = int(runners.max_cache_len) - STEPS
    if cap < 1:
        raise CannotValidate(f"max_cache_len {runners.max_cache_len} leaves no room for a "
                             f"prompt and {STEPS} decode steps", status=4)
    return cap


def _seq2seq_generation(loaded, manifest, runners_class):
    runners = runners_class(loaded.directory, manifest, "cpu", every_component=True)
    first = runners["prefill"].component
    cap = _prompt_cap(runners)
    ids, _, _ = example_prompt(manifest, first, vocab_size(manifest, first, loaded.directory),
                               cap)
    mask = np.ones_like(ids)
    rng = np.random.default_rng(SEED)
    if hasattr(runners, "set_features"):  # speech: seeded features of the encoder's window
        shape = runners.features["shape"]
        inputs = {"input_features": rng.standard_normal(
            (ids.shape[0], *shape[1:])).astype(np.float32)}
        runners.set_features(inputs["input_features"])
    else:  # text: a prompt of the decoder's length, the last row's end padded
        encoder_ids = rng.integers(0, runners.vocab_size, size=ids.shape, dtype=np.int64)
        encoder_mask = np.ones_like(encoder_ids)
        if len(encoder_ids) > 1 and encoder_ids.shape[1] > 1:
            encoder_mask[-1, -max(1, encoder_ids.shape[1] // 3):] = 0
        inputs = {"input_ids": encoder_ids, "attention_mask": encoder_mask}
        runners.set_inputs(encoder_ids, encoder_mask)
    if runners["prefill"].takes_prompts:
        logits = runners["prefill"](ids)
    else:  # a one-token decode over the prompt, token by token
        logits = np.concatenate([runners["prefill"](ids[:, i:i + 1])
                                 for i in range(ids.shape[1])], 1)
    calls = [Call(f"{first}: logits, prompt", 0, logits)]
    for _ in range(STEPS):
        token = logits[:, -1].astype(np.float64).argmax(-1).astype(np.int64)[:, None]
        ids = np.concatenate([ids, token], axis=1)
        mask = np.ones_like(ids)
        logits = runners["decode"](token)
        calls.append(Call(f"decode: logits, {STEPS} steps", ids.shape[1] - 1, logits))
    return Run(calls, ids, mask, positions=False, encoder_inputs=inputs)


def _read_config(directory):
    try:
        config = json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(config, dict):
        return {}
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


class _TooNew(Exception):
    """The program is newer than the reader installed here: not the export's fault."""


def _program_io(fmt, path):
    """(inputs, outputs[, state variables]) of the program at `path` as its format's reader
    checks it (onnx.checker for ONNX), as runtime.check_program_io takes them, or None where
    that reader is not installed (running it then says what is missing)."""
    if fmt == "openvino":
        try:
            import openvino
        except ImportError:
            return None
        return openvino_ports(openvino.Core().read_model(str(path)))
    try:
        import onnx
    except ImportError:
        return None
    model = onnx.load(str(path), load_external_data=False)
    known = onnx.defs.onnx_opset_version()
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx") and opset.version > known:
            raise _TooNew(f"opset {opset.version}: the onnx package installed here knows opsets "
                          f"up to {known}")
    onnx.checker.check_model(str(path))  # by path: the data files beside it are checked too

    def onnx_value(v):
        name = onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower()
        dims = [d.dim_value if d.HasField("dim_value") else None
                for d in v.type.tensor_type.shape.dim]
        return v.name, {"float": "float32", "double": "float64"}.get(name, name), dims

    weights = {t.name for t in model.graph.initializer}
    return ([onnx_value(v) for v in model.graph.input if v.name not in weights],
            [onnx_value(v) for v in model.graph.output])


def _read_program_files(fmt, directory, components):
    """Each ONNX or OpenVINO program as its format's reader checks it, before anything compiles
    or runs: one it refuses, or whose inputs or outputs (names, element types) are not the ones
    export.json lists, is a broken export, exit 1 (an edited .xml or .onnx
    exited 3, "cannot run here", which scripts take for "skip"; an input renamed in export.json
    alone passed, an output renamed ended in a traceback). A program newer than the reader here
    (an opset it does not know) and what fails later (a device, a kernel) stay "cannot run
    here"."""
    for name, component in components.items():
        where = f"component {_escape(name)} ({_escape(component['file'])})"
        try:
            io = _program_io(fmt, Path(directory) / component["file"])
        except _TooNew as e:
            raise CannotValidate(f"{fmt} cannot read {where} here: {_escape(e)}",
                                 status=4) from None
        except Exception as e:
            # OpenVINO names an opset it does not know so; it names every node "opsetN::Type"
            if fmt == "openvino" and "unsupported opset" in str(e):
                raise CannotValidate(f"openvino cannot read {where} here: "
                                     f"{_escape(runtime_reason(e))}", status=4) from None
            raise FerryError(f"{fmt} refuses {where}: {_escape(runtime_reason(e))}",
                             status=1) from None
        if io is not None:
            check_program_io(where, component.get("metadata"), *io)


def check_format(manifest):
    """CannotValidate for a format validation does not run, before anything else asks for what
    it would need (a transformers DynamoExporter export was told to pass
    --model, and then refused with it)."""
    fmt = manifest.get("format", manifest.get("export_format"))
    if fmt == "dynamo":
        raise CannotValidate("this is transformers' DynamoExporter export: ferry validates its "
                             "own pt2 exports, and ONNX and OpenVINO ones", status=4)
    if fmt not in RUNTIMES:
        raise CannotValidate(f"validating a {_escape(fmt)} export is not supported (onnx, "
                             "openvino, pt2, executorch)", status=4)
    from .vision_language import is_vision_language

    if is_vision_language(manifest):
        raise CannotValidate("validate checks decoder and encoder exports, not yet a "
                             "vision-language one (its image_encoder, language_model, lm_head "
                             "and decode); compare ExportedModel.generate() with transformers' "
                             "generate() on your images instead", status=4)
    return fmt


def run_export(loaded, manifest):
    """Runs the loaded export (an ExportedModel, its manifest given) on the CPU on the example
    inputs -> (Run, runtime name)."""
    fmt = check_format(manifest)
    components = manifest["components"]
    roles = {c.get("role") for c in components.values()}
    if "model" not in components and not roles & set(DECODE_ROLES):
        raise CannotValidate("validation runs a plain export's \"model\" or a generation "
                             f"export's \"decode\"; this export has "
                             f"{_escape(', '.join(components))}", status=4)
    if fmt in ("onnx", "openvino"):
        _read_program_files(fmt, loaded.directory, components)
    with _cannot_run(RUNTIMES[fmt]):
        loaded.to("cpu")
        run = _plain(loaded, manifest) if "model" in components else _generation(loaded, manifest)
    return run, RUNTIMES[fmt]


# --- the eager reference ----------------------------------------------------------------------


# the encoder-decoders ferry exports, by architecture: transformers' auto class of each
SEQ2SEQ = {"WhisperForConditionalGeneration": "AutoModelForSpeechSeq2Seq",
           "T5ForConditionalGeneration": "AutoModelForSeq2SeqLM"}


def load_reference(checkpoint, revision=None, architecture=None):
    """transformers' eager model in float32 from `checkpoint` (a directory, or a hub id found in
    the local cache: nothing is downloaded); an encoder-decoder's where `architecture` is one
    (export.json's)."""
    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()
    auto = (getattr(transformers, SEQ2SEQ[architecture]) if architecture in SEQ2SEQ
            else AutoModelForCausalLM)
    try:
        model = auto.from_pretrained(
            checkpoint, revision=revision, dtype=torch.float32, attn_implementation="eager",
            local_files_only=True)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise FerryError(f"transformers cannot load the reference checkpoint "
                         f"{_escape(checkpoint)}: {_escape(first)}", status=2) from None
    return model.eval()


def reference_seq2seq_logits(model, encoder_inputs, decoder_input_ids):
    """float32 logits [batch, sequence, vocab] of the eager encoder-decoder over its encoder's
    inputs and the decoder's tokens."""
    import torch

    with torch.no_grad():
        out = model(**{k: torch.from_numpy(v) for k, v in encoder_inputs.items()},
                    decoder_input_ids=torch.from_numpy(decoder_input_ids), use_cache=False)
    return out.logits.float().numpy()


def reference_logits(model, input_ids, attention_mask, positions=True):
    """float32 logits [batch, sequence, vocab] of the eager model, positions as generate()
    makes them (`positions`), else none given: the model's own, from 0 in every row."""
    import torch

    vocab = model.get_input_embeddings().num_embeddings
    if int(input_ids.max()) >= vocab:
        # the embedding's IndexError ended `ferry validate` in a traceback
        raise FerryError(f"the eager reference's vocabulary has {vocab} tokens, fewer than the "
                         f"export's (its example prompt holds token {int(input_ids.max())}): "
                         "the reference checkpoint (--model, or export.json's source) is "
                         "another model than the one exported", status=1)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)
    if rotary is not None and "dynamic" in str(getattr(rotary, "rope_type", "")):
        # dynamic NTK rope grows a cached length between calls: start from the fresh model's
        rotary.inv_freq = rotary.original_inv_freq.clone()
        rotary.max_seq_len_cached = rotary.original_max_seq_len
    with torch.no_grad():
        given = {"position_ids": torch.from_numpy(position_ids(attention_mask))} \
            if positions else {}
        out = model(input_ids=torch.from_numpy(input_ids),
                    attention_mask=torch.from_numpy(attention_mask), use_cache=False, **given)
    return out.logits.float().numpy()
