"""The generation pipeline of a vision-language export (Qwen2-VL, Qwen2.5-VL), behind the same
"prefill" and "decode" calls generate() makes of a decoder's runners:

  prefill   embed_tokens(input_ids); the image tokens' rows replaced, in order, by
            image_encoder(pixel_values, image_grid_thw)'s features; position_ids as transformers'
            generate() makes them (a text row, then get_rope_index's temporal, height and width
            rows); language_model; lm_head on the last position
  decode    each row of the positions one further per token, the cache carried over

The images are given to set_images() before generate() runs: what the model's processor
returns (pixel_values, image_grid_thw, mm_token_type_ids).

OpenVINO's stateful export is laid out as openvino-genai's VLMPipeline loads it instead
(GenaiVisionLanguageRunners): the tower is two graphs (the patch embedding; the blocks and the
merger, given each patch's rotary angles and the attention masks, which this module computes as
the pipeline does), the text embedding, and one stateful language model from inputs_embeds."""

import json
from pathlib import Path

import numpy as np

from ._arrays import axis_refusal, widen_advice
from ._lib import FerryError, _escape
from .runners import position_table, static_mask
from .runtime import open_session

ROLES = ("image_encoder", "embed_tokens", "language_model", "lm_head", "decode")
GENAI_ROLES = ("vision_embeddings_model", "vision_embeddings_merger_model",
               "text_embeddings_model", "language_model")


def _fail(message, status=1):
    raise FerryError(message, status=status)


def is_vision_language(manifest):
    """Whether an export's components are a vision-language pipeline's."""
    return any(c.get("role") in ("image_encoder", "vision_embeddings_model")
               for c in manifest.get("components", {}).values())


def runners_class(manifest):
    """The runners of a vision-language export's layout."""
    roles = {c.get("role") for c in manifest.get("components", {}).values()}
    if "connector" in roles:
        from .smolvlm import SmolVLMRunners

        return SmolVLMRunners
    return (GenaiVisionLanguageRunners if "vision_embeddings_model" in roles
            else VisionLanguageRunners)


def patch_positions(t, h, w, merge):
    """Each patch's (h, w) in an image of t x h x w patches, in the image processor's order
    (merge x merge blocks in raster order, raster order within a block), every frame alike:
    int64 [t*h*w, 2] (transformers' get_vision_position_ids)."""
    hh, ww = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    blocks = (h // merge, merge, w // merge, merge)
    hh = hh.reshape(blocks).transpose(0, 2, 1, 3).ravel()
    ww = ww.reshape(blocks).transpose(0, 2, 1, 3).ravel()
    return np.tile(np.stack([hh, ww], 1), (t, 1))


def window_index(t, h, w, merge, window):
    """Qwen2.5-VL's window order of an image's merge units and the windows' lengths in patches
    (transformers' get_vision_window_index): frames in turn, windows of window x window units
    in raster order (cut at the right and bottom edges), units in raster order within one."""
    gh, gw = h // merge, w // merge
    index = np.arange(t * gh * gw).reshape(t, gh, gw)
    order, lengths = [], []
    for f in range(t):
        for r in range(0, gh, window):
            for c in range(0, gw, window):
                units = index[f, r:r + window, c:c + window].ravel()
                order.append(units)
                lengths.append(len(units) * merge * merge)
    return np.concatenate(order).astype(np.int64), lengths


def block_mask(lengths):
    """The additive mask [1, n, n] of consecutive segments of `lengths`: 0 within a segment,
    the lowest float elsewhere (as openvino-genai gives its vision merger)."""
    n = int(sum(lengths))
    mask = np.full((1, n, n), np.finfo(np.float32).min, np.float32)
    at = 0
    for size in lengths:
        mask[0, at:at + size, at:at + size] = 0
        at += size
    return mask


def rope_index(input_ids, attention_mask, token_types, grid, merge):
    """position_ids [4, b, s] as transformers' generate() gives Qwen2-VL and Qwen2.5-VL: row 0
    counts the real tokens; rows 1-3 are get_rope_index's (temporal, height, width): a run of
    text tokens counts on from the last position on all three rows; a run of image tokens takes
    the next image of `grid` and lays its merged patches out as (t, h, w) from there, after
    which text counts on from max(h, w) / merge further. Padding is 0 everywhere."""
    batch, width = input_ids.shape
    rope = np.zeros((3, batch, width), np.int64)
    images = iter([] if grid is None else np.asarray(grid).tolist())
    for b in range(batch):
        real = np.flatnonzero(attention_mask[b])
        types = token_types[b, real]
        rows, at, i = [], 0, 0
        while i < len(types):
            j = i
            while j < len(types) and types[j] == types[i]:
                j += 1
            if types[i] == 0:
                rows.append(np.broadcast_to(at + np.arange(j - i), (3, j - i)))
                at += j - i
            else:
                t, h, w = next(images, (0, 0, 0))
                ht, wd = h // merge, w // merge
                if t * ht * wd != j - i:
                    _fail(f"input_ids row {b} holds a run of {j - i} image tokens where the "
                          f"next image of image_grid_thw ({t}, {h}, {w}) has {t * ht * wd}: "
                          "the prompt and the images disagree")
                tt, hh, ww = np.meshgrid(np.arange(t), np.arange(ht), np.arange(wd),
                                         indexing="ij")
                rows.append(np.stack([tt.ravel(), hh.ravel(), ww.ravel()]) + at)
                at += max(h, w) // merge
            i = j
        if rows:
            rope[:, b, real] = np.concatenate(rows, axis=1)
    text = np.where(attention_mask != 0, np.cumsum(attention_mask, -1) - 1, 0)
    return np.concatenate([text[None].astype(np.int64), rope], 0)


class _Stage:
    """One component's session: called with {input: array}, returns {output: array}, after
    checking the feeds' shapes against what export.json says the graph takes."""

    def __init__(self, directory, fmt, role, entry, device):
        meta = entry.get("metadata", {})
        self.meta = meta
        self.role = role
        self.declared = {i.get("name"): i for i in meta.get("inputs", []) if isinstance(i, dict)}
        symbols = meta.get("symbols")
        self.symbols = symbols if isinstance(symbols, dict) else {}
        self.session = open_session(str(Path(directory) / entry["file"]), fmt,
                                    meta.get("precision"), device, meta)
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.inputs = [i.name for i in self.session.get_inputs()]

    def check(self, shapes):
        """Refuses inputs of `shapes` ({name: [extent or None (not known yet)]}) that the
        graph's fixed dims or symbol ranges do not take, naming the first."""
        for name, shape in shapes.items():
            declared = self.declared.get(name, {}).get("shape")
            if not isinstance(declared, list) or len(declared) != len(shape):
                continue
            for axis, (size, dim) in enumerate(zip(shape, declared)):
                why = None if size is None else axis_refusal(size, dim, self.symbols)
                if why:
                    shown = [("?" if n is None else n) for n in shape]
                    _fail(f"{self.role}: input {name} would be {shown}, but its axis {axis} "
                          f"{why}: " + widen_advice(
                              self.meta, "export with dynamic shapes (--dynamic, or a --dim "
                              "range) that cover it"))

    def __call__(self, feeds):
        self.check({name: list(np.shape(value)) for name, value in feeds.items()})
        return dict(zip(self.outputs, self.session.run(self.outputs, feeds)))


class _StatefulStage(_Stage):
    """An OpenVINO stateful graph: one infer request, whose variables hold the cache from call
    to call until reset()."""

    def __init__(self, directory, fmt, role, entry, device):
        super().__init__(directory, fmt, role, entry, device)
        self.request = self.session.infer_request()

    def reset(self):
        self.request.reset_state()

    def __call__(self, feeds):
        self.check({name: list(np.shape(value)) for name, value in feeds.items()})
        result = self.request.infer(feeds)
        return {o.get_any_name(): np.asarray(result[o]) for o in self.request.model_outputs}


class VisionLanguageRunners:
    """{"prefill", "decode"} over a vision-language export's components (see the module's
    docstring), with the attributes generate() reads of runners."""

    ROLES = ROLES
    # the stage that takes the pixel rows, and its input
    PIXELS = ("image_encoder", "pixel_values")
    # generate()'s keyword arguments that set_images() takes
    IMAGE_INPUTS = ("pixel_values", "image_grid_thw", "mm_token_type_ids", "video_grid_thw",
                    "pixel_values_videos")

    def __init__(self, directory, manifest, device=None):
        comps = manifest.get("components", {})
        roles = {c.get("role"): name for name, c in comps.items()}
        missing = [r for r in self.ROLES if r not in roles]
        if missing:
            _fail(f"this vision-language export has no {', '.join(missing)} component: "
                  "export it again with this ferry", status=4)
        fmt = manifest.get("format")
        self.stages = {role: self._stage(role)(directory, fmt, role, comps[roles[role]], device)
                       for role in self.ROLES}
        config = json.loads((Path(directory) / "config.json").read_text())
        text = config.get("text_config", config)
        self.vision = config.get("vision_config", {})
        self.vocab_size = int(text["vocab_size"])
        self.image_token = config.get("image_token_id")
        self.video_token = config.get("video_token_id")
        self.merge = int(self.vision.get("spatial_merge_size", 2))
        stage, name = self.PIXELS
        pixels = self.stages[stage].declared.get(name, {})
        if pixels.get("dtype") == "bfloat16":
            _fail("ferry's generate() does not run a bf16 vision-language export: numpy has no "
                  "bfloat16 to hand its image encoder the pixels in; export it in fp32 or fp16")
        self.pixel_dtype = np.dtype(pixels.get("dtype", "float32"))
        self.pixel_width = (pixels.get("shape") or [None, None])[-1]
        self.rotary_table_rows = None
        self.position_limit = position_table(manifest, config)
        # the cache the language model writes and decode carries on: a dynamic one's
        # past_key_values.* in, present.* out; a static one's input.*/output.* pairs over
        # buffers of max_cache_len slots (each call's outputs are the buffers after it)
        cache = self.stages[self.ROLES[-1]].meta.get("cache", {})
        self.static = cache.get("implementation") == "static"
        self.max_cache_len = cache.get("max_cache_len") if self.static else None
        if self.static:
            self._pairs = [(p["input"], p["output"]) for p in cache.get("pairs", [])]
        else:
            self._pairs = [(n, n.replace("past_key_values", "present"))
                           for n in self.stages[self.ROLES[-1]].inputs
                           if n.startswith("past_key_values")]
        self._past = [inp for inp, _ in self._pairs]
        self._images = {}
        self._cache, self._length, self._next = {}, 0, None
        self._runners = {"prefill": _Call(self._prefill, self._check_prefill),
                         "decode": _Call(self._decode, self._check_decode)}

    def set_images(self, pixel_values=None, image_grid_thw=None, mm_token_type_ids=None,
                   video_grid_thw=None, pixel_values_videos=None):
        """The processor's image inputs for the next generate() (None: a text-only prompt)."""
        if video_grid_thw is not None or pixel_values_videos is not None:
            _fail("videos are not exported: this export takes images "
                  "(pixel_values, image_grid_thw)")
        if (pixel_values is None) != (image_grid_thw is None):
            _fail("pixel_values and image_grid_thw come together (the image processor returns "
                  "both)")
        pixels = _array(pixel_values, "pixel_values")
        grid = _array(image_grid_thw, "image_grid_thw")
        if grid is not None:
            self._check_grid(pixels, grid)
            stage, name = self.PIXELS
            for t, h, w in grid.astype(np.int64).tolist():  # the encoder takes one a call
                self.stages[stage].check({name: [t * h * w, pixels.shape[1]],
                                          "image_grid_thw": [1, 3]})
            pixels = pixels.astype(self.pixel_dtype)  # the export's precision (fp16: float16)
            grid = grid.astype(np.int64)
        types = _array(mm_token_type_ids, "mm_token_type_ids")
        self._images = {"pixel_values": pixels, "image_grid_thw": grid,
                        "mm_token_type_ids": None if types is None else types.astype(np.int64)}

    def _check_grid(self, pixels, grid):
        """What the image encoder computes every patch's place from, checked against the
        pixels first (the graph trusts it): whole positive (t, h, w) rows whose h and w the
        merge divides, as many patches as pixel rows."""
        if not np.issubdtype(grid.dtype, np.integer) and not (
                np.issubdtype(grid.dtype, np.floating) and np.all(grid == np.round(grid))):
            _fail("image_grid_thw must hold whole numbers (the image processor's int64 rows)")
        if grid.ndim != 2 or grid.shape[1] != 3 or len(grid) == 0:
            _fail(f"image_grid_thw has shape {list(grid.shape)}: it is [images, 3], one (t, h, w) "
                  "row per image")
        if pixels.ndim != 2 or (isinstance(self.pixel_width, int) and
                                pixels.shape[1] != self.pixel_width):
            _fail(f"pixel_values has shape {list(pixels.shape)}: the export takes [patches, "
                  f"{self.pixel_width}] (the image processor's rows)")
        rows = grid.astype(np.int64)
        wrong = (rows <= 0).any(1) | (rows[:, 1:] % self.merge != 0).any(1)
        if wrong.any():
            bad = int(np.flatnonzero(wrong)[0])
            _fail(f"image_grid_thw row {bad} is {rows[bad].tolist()}: t, h and w must be "
                  f"positive, h and w multiples of spatial_merge_size ({self.merge})")
        if (rows > 1 << 20).any():
            _fail("image_grid_thw holds an extent past 2^20 patches: not an image processor's")
        patches = int((rows[:, 0] * rows[:, 1] * rows[:, 2]).sum())
        if patches != len(pixels):
            _fail(f"image_grid_thw describes {patches} patches, but pixel_values has "
                  f"{len(pixels)} rows")

    @staticmethod
    def _stage(role):
        return _Stage

    def reset(self, batch):
        self._cache, self._length, self._next = {}, 0, None
        if not self.static:
            return
        declared = self.stages["decode"].declared
        for name in self._past:
            spec = declared[name]
            dims = [batch if d == "batch" else self.max_cache_len if d == "max_cache_len" else d
                    for d in spec["shape"]]
            if not all(isinstance(d, int) for d in dims):
                _fail(f"decode's static cache input {_escape(name)} has shape "
                      f"{_escape(spec['shape'])}: export it again with this ferry", status=4)
            self._cache[name] = np.zeros(dims, dtype=np.dtype(spec["dtype"]))

    def _mask_shape(self, batch, query, past):
        if self.static:
            if past + query > self.max_cache_len:
                _fail(f"the static cache has {self.max_cache_len} slots (max_cache_len), but "
                      f"{past} cached + {query} new tokens need {past + query}")
            return [batch, 1, query, self.max_cache_len]
        return [batch, past + query]

    def _check_prefill(self, batch, query, past):
        self.stages["embed_tokens"].check({"input_ids": [batch, query]})
        self.stages["language_model"].check({
            "inputs_embeds": [batch, query, None],
            "attention_mask": self._mask_shape(batch, query, 0),
            "position_ids": self._positions(batch, query)})
        self.stages["lm_head"].check({"input": [batch, 1, None]})

    def _check_decode(self, batch, query, past):
        self.stages["decode"].check({
            "input_ids": [batch, query], "attention_mask": self._mask_shape(batch, query, past),
            "position_ids": self._positions(batch, query),
            **({} if self.static else
               {name: [batch, None, past, None] for name in self._past})})

    @staticmethod
    def _positions(batch, query):
        """The shape of the position_ids the language model and decode take: a text row, then
        M-RoPE's three."""
        return [4, batch, query]

    def _with_cache(self, stage, feeds, mask, query):
        """`feeds` with the attention mask as `stage` takes it and the cache it reads."""
        feeds["attention_mask"] = (static_mask(mask, self._length, query, self.max_cache_len)
                                   if self.static else mask)
        feeds.update({name: value for name, value in self._cache.items()
                      if name in self.stages[stage].declared})
        return feeds

    def _keep_cache(self, out, query):
        # a torch program writes its cache into the arrays it was handed (written_into_input),
        # returning none of it
        self._cache = {inp: out[o] if o in out else self._cache[inp] for inp, o in self._pairs}
        self._length += query

    def __getitem__(self, role):
        return self._runners[role]

    def _prefill(self, ids, mask):
        images = self._images
        grid, pixels = images.get("image_grid_thw"), images.get("pixel_values")
        # the image tokens are where input_ids hold image_token_id (transformers 5.24 without
        # mm_token_type_ids falls back to plain positions; ferry places the images either way)
        slots = ids == self.image_token
        types = images.get("mm_token_type_ids")
        if types is None:
            types = slots.astype(np.int64)
        if types.shape != ids.shape:
            _fail(f"mm_token_type_ids has shape {list(types.shape)}, input_ids "
                  f"{list(ids.shape)}")
        if ((types == 1) != slots).any():
            _fail("mm_token_type_ids marks other tokens as image tokens than input_ids' "
                  f"image_token_id ({self.image_token}) does")
        if (types == 2).any() or (self.video_token is not None and (ids == self.video_token).any()):
            _fail("the prompt holds video tokens: this export takes images")
        embeds = self._embed(ids)
        if grid is not None:
            features = self._features(pixels, grid)
            if len(features) != int(slots.sum()):
                _fail(f"the prompt holds {int(slots.sum())} image tokens, and the images "
                      f"(image_grid_thw) give {len(features)} features")
            embeds[slots] = features
        elif slots.any():
            _fail(f"the prompt holds {int(slots.sum())} image tokens but no pixel_values were "
                  "given")
        positions = rope_index(ids, mask, types, grid, self.merge)
        return self._run_prompt(embeds, mask, positions)

    def _embed(self, ids):
        return self.stages["embed_tokens"]({"input_ids": ids})["inputs_embeds"]

    def _run_prompt(self, embeds, mask, positions):
        """The logits of the prompt's last position, from its embeddings."""
        query = embeds.shape[1]
        out = self.stages["language_model"](self._with_cache(
            "language_model", {"inputs_embeds": embeds, "position_ids": positions}, mask, query))
        self._keep_cache(out, query)
        self._next = positions[..., -1:] + 1
        hidden = out["last_hidden_state"][:, -1:]
        return self.stages["lm_head"]({"input": hidden})["output"]

    def _features(self, pixels, grid):
        """The image encoder's features, one image a call: its attention spans the patches it
        is given (masked to each frame), so one call over every image would grow with their
        total squared."""
        sizes = grid[:, 0] * grid[:, 1] * grid[:, 2]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return np.concatenate([
            self.stages["image_encoder"]({"pixel_values": pixels[starts[i]:starts[i + 1]],
                                          "image_grid_thw": grid[i:i + 1]})["pooler_output"]
            for i in range(len(grid))])

    def _decode(self, ids, mask):
        query = ids.shape[1]
        out = self.stages["decode"](self._with_cache(
            "decode", {"input_ids": ids, "position_ids": self._next + np.arange(query)}, mask,
            query))
        self._keep_cache(out, query)
        self._next = self._next + query
        return out["logits"]


class GenaiVisionLanguageRunners(VisionLanguageRunners):
    """The runners of OpenVINO's stateful export, laid out as openvino-genai's VLMPipeline
    loads it (see the module's docstring): the same pipeline, with the tower's positions and
    masks computed here, and the cache in the language model's variables."""

    ROLES = GENAI_ROLES
    PIXELS = ("vision_embeddings_model", "hidden_states")

    def __init__(self, directory, manifest, device=None):
        super().__init__(directory, manifest, device)
        merger = self.stages["vision_embeddings_merger_model"]
        angles = merger.declared.get("rotary_pos_emb", {}).get("shape") or [None, None]
        self.angles = angles[-1]
        # VLMPipeline computes the angles with base 10000 whatever vision_config says; the
        # merger rescales them to its own rope_theta, so they are given the same way here
        self.theta = 10000.0
        self.windowed = "window_index" in merger.declared
        if self.windowed:  # merge units per window side, as get_vision_window_index counts
            self.window = (int(self.vision.get("window_size", 112)) // self.merge //
                           int(self.vision.get("patch_size", 14)))
        if not isinstance(self.angles, int) or self.angles % 2:
            _fail("the vision_embeddings_merger_model component's rotary_pos_emb has no fixed even "
                  "width: export it again with this ferry", status=4)

    @staticmethod
    def _stage(role):
        return _StatefulStage if role == "language_model" else _Stage

    def reset(self, batch):
        self.stages["language_model"].reset()
        self._next = None
        self._length = 0

    def _check_prefill(self, batch, query, past):
        self.stages["text_embeddings_model"].check({"input_ids": [batch, query]})
        self.stages["language_model"].check({
            "inputs_embeds": [batch, query, None], "attention_mask": [batch, query],
            "position_ids": [3, batch, query]})

    def _check_decode(self, batch, query, past):
        self.stages["language_model"].check({
            "inputs_embeds": [batch, query, None], "attention_mask": [batch, past + query],
            "position_ids": [3, batch, query]})

    def _embed(self, ids):
        return self.stages["text_embeddings_model"]({"input_ids": ids})["inputs_embeds"]

    def _features(self, pixels, grid):
        sizes = grid[:, 0] * grid[:, 1] * grid[:, 2]
        starts = np.concatenate([[0], np.cumsum(sizes)])
        return np.concatenate([self._image(pixels[starts[i]:starts[i + 1]], *grid[i].tolist())
                               for i in range(len(grid))])

    def _image(self, pixels, t, h, w):
        """One image's features: the patch embedding, then the blocks and the merger given each
        patch's rotary angles (its h angles, then its w angles) and the masks of its frames
        (and, Qwen2.5-VL, of its windows, over the units in window order)."""
        hidden = self.stages["vision_embeddings_model"]({"hidden_states": pixels})[
            "last_hidden_state"]
        half = self.angles // 2
        inv_freq = 1.0 / self.theta ** (np.arange(0, self.angles, 2, dtype=np.float32) /
                                        self.angles)
        positions = patch_positions(t, h, w, self.merge).astype(np.float32)
        angles = np.concatenate([positions[:, :1] * inv_freq[:half],
                                 positions[:, 1:] * inv_freq[:half]], 1).astype(np.float32)
        feeds = {"hidden_states": hidden, "rotary_pos_emb": angles,
                 "attention_mask": block_mask([h * w] * t)}
        if self.windowed:
            order, lengths = window_index(t, h, w, self.merge, self.window)
            feeds.update(window_index=order, window_attention_mask=block_mask(lengths))
        return self.stages["vision_embeddings_merger_model"](feeds)["last_hidden_state"]

    def _run_prompt(self, embeds, mask, positions):
        out = self._language(embeds, mask, positions[1:])
        self._next = positions[:, :, -1:] + 1
        return out[:, -1:]

    def _language(self, embeds, mask, positions):
        return self.stages["language_model"]({
            "inputs_embeds": embeds.astype(np.float32), "attention_mask": mask,
            "position_ids": np.ascontiguousarray(positions),
            "beam_idx": np.arange(len(embeds), dtype=np.int32)})["logits"]

    def _decode(self, ids, mask):
        positions = self._next + np.arange(ids.shape[1])
        out = self._language(self._embed(ids), mask, positions[1:])
        self._next = self._next + ids.shape[1]
        return out


class _Call:
    """A stage generate() calls: runner(ids, mask) -> logits, and the shape check it makes of
    the whole generation before the first call."""

    def __init__(self, fn, check):
        self._fn = fn
        self.check_shapes = check

    def __call__(self, ids, mask):
        return self._fn(np.ascontiguousarray(ids, np.int64), np.ascontiguousarray(mask, np.int64))


def _array(value, name):
    """`value` (a torch tensor of any dtype, an array, nested lists) as a numpy array."""
    if value is None:
        return None
    try:
        if hasattr(value, "detach"):
            value = value.detach().cpu()
            if str(value.dtype) == "torch.bfloat16":  # numpy has no bfloat16
                value = value.float()
            value = value.numpy()
        array = np.ascontiguousarray(value)
    except (TypeError, ValueError, RuntimeError):
        array = None
    if array is None or not (np.issubdtype(array.dtype, np.number) or array.dtype == bool):
        _fail(f"{name} of type {_escape(type(value).__name__)} is not an array of numbers")
    return array
