"""Encoder-decoder exports (Whisper, T5; src/models/seq2seq.h): the runners of their decoders
(prefill, decode) plus their encoder, which makes each decoder layer's cross-attention keys and
values once an input; the decoders are fed them at every call (runners.cache.fixed). T5's
generate() is ferry.generation's over the decoder, after its encoder ran on the prompt; Whisper's
is ferry.whisper's."""

import numpy as np

from ._arrays import int_matrix
from ._lib import FerryError, _escape
from .runners import Runners, cross_source
from .vision_language import _Stage

# the roles of the encoder: ferry's; openvino-genai's WhisperPipeline layout's
ENCODER_ROLES = ("encoder", "encoder_model")


def _fail(message, status=1):
    raise FerryError(message, status=status)


def is_encoder_decoder(manifest):
    """Whether an export's components are an encoder-decoder's (an encoder, then decoders)."""
    return any(c.get("role") in ENCODER_ROLES for c in manifest.get("components", {}).values())


def runners_class(manifest):
    """The runners of an encoder-decoder export, by what its encoder takes."""
    from .whisper import WhisperRunners

    comps = manifest.get("components", {}).values()
    takes = {i.get("name") for c in comps if c.get("role") in ENCODER_ROLES
             for i in (c.get("metadata") or {}).get("inputs", [])}
    return WhisperRunners if "input_features" in takes else T5Runners


class Seq2SeqRunners(Runners):
    """Runners (prefill, decode) of an encoder-decoder export, plus its encoder (`encoder`, a
    stage called with {input: array}); encode() runs it and hands its outputs to the decoders
    for the sequence reset() started."""

    ENCODER_CALL = "generate()"  # what runs the encoder, as a message names it

    def __init__(self, directory, manifest, device=None, every_component=False):
        super().__init__(directory, manifest, device, every_component)
        self.cache.encoder_call = self.ENCODER_CALL
        comps = manifest.get("components", {})
        encoder = next((n for n, c in comps.items() if c.get("role") in ENCODER_ROLES), None)
        if encoder is None:
            _fail("this export has no encoder component: export it again with this ferry", 4)
        self.encoder = _Stage(directory, self.format, "encoder", comps[encoder], device)
        # the encoder output of each cross input: present.<l>.cross_key (present_<l>_cross_key
        # in torch's programs, which name their outputs as identifiers); the encoder's own
        # attention_mask for a decoder's encoder_attention_mask
        outputs = {o.replace("_", "."): o for o in self.encoder.outputs}
        self._sources = {n: outputs.get(cross_source(n).replace("_", "."))
                         for n in self.cache.layout.cross if n != "encoder_attention_mask"}
        missing = [n for n, source in self._sources.items() if source is None]
        if missing:
            _fail(f"the decoder takes {_escape(missing[0])}, which the encoder does not "
                  "output: export it again with this ferry", 3)

    def reset(self, batch):
        """Starts a new decoder sequence: over the same encoder outputs where the batch is
        theirs (encode() gives new ones), else over none yet."""
        fixed = self.cache.fixed if batch == self.cache.batch else {}
        super().reset(batch)
        self.cache.fixed = fixed

    def encode(self, feeds, extra=None):
        """Runs the encoder on `feeds` ({input: array}, batch first) and makes its cross cache
        (and `extra`, {decoder input: array}) the decoders' for a new sequence."""
        super().reset(next(iter(feeds.values())).shape[0])
        out = self.encoder(feeds)
        layout = self.cache.layout
        given = {name: _as_declared(out[source], layout.cross[name]["dtype"])
                 for name, source in self._sources.items()}
        given.update(extra or {})
        self.cache.fixed = {
            name: layout.wrap(np.ascontiguousarray(given[name]), spec["dtype"])
            for name, spec in layout.cross.items()}


def _as_declared(array, dtype):
    """An encoder output as the decoder's input `dtype` takes it: bfloat16 as its bits in
    uint16 (the runtimes' wrap reads them so), from the float32 a stage hands back (exact: a
    bfloat16 value is the top half of its float32)."""
    array = np.asarray(array)
    if dtype == "bfloat16" and array.dtype == np.float32:
        return (np.ascontiguousarray(array).view(np.uint32) >> 16).astype(np.uint16)
    return array


class T5Runners(Seq2SeqRunners):
    """A T5 export's runners: set_inputs() runs the encoder over the prompt."""

    ENCODER_CALL = "runners.set_inputs(input_ids, attention_mask), or generate(input_ids)"

    def set_inputs(self, input_ids, attention_mask=None):
        """Runs the encoder on the prompt (int64 [batch, sequence] and its mask, ones where
        None) for the next decoder sequence."""
        ids = int_matrix(input_ids, "input_ids")
        if ids.size == 0:
            _fail(f"input_ids of shape {list(ids.shape)}: the encoder needs at least one token "
                  "a row")
        mask = (np.ones_like(ids) if attention_mask is None
                else int_matrix(attention_mask, "attention_mask", mask=True))
        if mask.shape != ids.shape:
            _fail(f"attention_mask has shape {list(mask.shape)}, but input_ids "
                  f"{list(ids.shape)}: one mask entry a token")
        vocab = self.vocab_size
        if ids.min() < 0 or ids.max() >= vocab:
            _fail(f"input_ids holds token ids outside the vocabulary (0..{vocab - 1})")
        if not mask.any(-1).all():
            _fail("an attention_mask row is all zeros: the encoder needs a token a row")
        self.encode({"input_ids": ids, "attention_mask": mask},
                    {"encoder_attention_mask": mask})


def generate_t5(runners, directory, input_ids, attention_mask=None, **kwargs):
    """T5's generate(): the encoder over the prompt, then ferry.generation's search over the
    decoder from decoder_start_token_id, as transformers' generate() runs an encoder-decoder;
    the decoder's sequences [batch, 1 + new] (the start token first), as it returns them."""
    import json
    from pathlib import Path

    from .generation import generate

    torch_input = type(input_ids).__module__.split(".")[0] == "torch"
    runners.set_inputs(input_ids, attention_mask)
    config = {}
    for name in ("config.json", "generation_config.json"):
        try:
            config.update(json.loads((Path(directory) / name).read_text()))
        except (OSError, ValueError):
            pass
    start = kwargs.pop("decoder_start_token_id", None)
    start = config.get("decoder_start_token_id") if start is None else start
    if isinstance(start, bool) or not isinstance(start, int) or \
            not 0 <= start < runners.vocab_size:
        _fail(f"decoder_start_token_id must be a token id, not {_escape(repr(start))}")
    prompt = np.full((runners.cache.batch, 1), start, np.int64)
    out = generate(runners, directory, prompt, np.ones_like(prompt), **kwargs)
    if torch_input:
        import torch

        return torch.from_numpy(out)
    return out
