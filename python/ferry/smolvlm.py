"""SmolVLM's generation pipeline (SmolVLMForConditionalGeneration), behind generate()'s
"prefill" and "decode" calls as ferry.vision_language's Qwen pipeline is:

  prefill   embed_tokens(input_ids); the image tokens' rows replaced, in order, by
            connector(image_encoder(tiles)) of every real tile (the processor's all-zero
            padding tiles dropped, as transformers drops them); language_model over the prompt
            with generate()'s positions (cumsum of the mask - 1, padding 1); lm_head on the last
            position
  decode    the same positions one further per token, the cache carried over

set_images() takes what the processor returns: pixel_values [batch, tiles, C, S, S] and
pixel_attention_mask [batch, tiles, S, S]. The export's tower takes whole tiles (its patch mask
all ones): a tile the mask cuts is refused."""

import numpy as np

from .runners import derive_position_ids
from .vision_language import VisionLanguageRunners, _array, _fail

ROLES = ("image_encoder", "connector", "embed_tokens", "language_model", "lm_head", "decode")


class SmolVLMRunners(VisionLanguageRunners):
    ROLES = ROLES
    PIXELS = ("image_encoder", "pixel_values")
    IMAGE_INPUTS = ("pixel_values", "pixel_attention_mask", "image_grid_thw",
                    "mm_token_type_ids", "video_grid_thw", "pixel_values_videos")

    def __init__(self, directory, manifest, device=None):
        super().__init__(directory, manifest, device)
        self.tile = self.stages["image_encoder"].declared.get("pixel_values", {}).get("shape")

    def set_images(self, pixel_values=None, pixel_attention_mask=None, **others):
        """The processor's image inputs for the next generate() (None: a text-only prompt)."""
        unknown = sorted(k for k, v in others.items() if v is not None)
        if unknown:
            _fail(f"{', '.join(unknown)}: not an input of SmolVLM's export (it takes "
                  "pixel_values and pixel_attention_mask)")
        pixels = _array(pixel_values, "pixel_values")
        mask = _array(pixel_attention_mask, "pixel_attention_mask")
        if pixels is None:
            if mask is not None:
                _fail("pixel_attention_mask without pixel_values")
            self._images = {}
            return
        if pixels.ndim != 5 or list(pixels.shape[2:]) != list(self.tile[1:]):
            _fail(f"pixel_values has shape {list(pixels.shape)}: the export takes [batch, tiles, "
                  f"{', '.join(map(str, self.tile[1:]))}] (the image processor's tiles)")
        tiles = pixels.reshape(-1, *pixels.shape[2:])
        # the processor pads a batch's rows to the same count of tiles with all-zero ones
        real = ~(tiles == 0).all(axis=(1, 2, 3))
        if mask is not None:
            if mask.shape != pixels.shape[:2] + pixels.shape[3:]:
                _fail(f"pixel_attention_mask has shape {list(mask.shape)}, where pixel_values' "
                      f"tiles make it {list(pixels.shape[:2] + pixels.shape[3:])}")
            cut = real & ~(mask.reshape(len(tiles), -1) != 0).all(axis=1)
            if cut.any():
                _fail(f"pixel_attention_mask masks part of tile {int(np.flatnonzero(cut)[0])}: "
                      "the export's tower takes whole tiles (the image processor's, resized "
                      "and split to the tile size)")
        self._images = {"tiles": tiles[real].astype(self.pixel_dtype)}
        count, *tile = self._images["tiles"].shape
        for start, stop in self._calls(max(count, 1)):  # the calls _features will make
            self.stages["image_encoder"].check({"pixel_values": [min(stop, count) - start,
                                                                 *tile]})

    def _calls(self, count):
        """[(start, stop)] of the image encoder's calls over `count` tiles."""
        chunk = self._chunk() or count
        return [(start, min(start + chunk, count)) for start in range(0, count, chunk)]

    def _chunk(self):
        """The most tiles one call of the image encoder takes (None: any): each tile attends
        within itself, so more are run that many a call (an ExecuTorch program is planned
        for a bounded count)."""
        dim = (self.tile or [None])[0]
        if isinstance(dim, int) and not isinstance(dim, bool):
            return dim
        bounds = self.stages["image_encoder"].symbols.get(dim) if isinstance(dim, str) else None
        high = bounds.get("max") if isinstance(bounds, dict) else None
        return high if isinstance(high, int) and high > 0 else None

    @staticmethod
    def _positions(batch, query):
        return [batch, query]

    def _features(self, tiles):
        features = []
        for start, stop in self._calls(len(tiles)):
            hidden = self.stages["image_encoder"]({"pixel_values": tiles[start:stop]})
            features.append(self.stages["connector"](
                {"image_hidden_states": hidden["last_hidden_state"]})["image_features"])
        features = np.concatenate(features)
        return features.reshape(-1, features.shape[-1])

    def _prefill(self, ids, mask):
        slots = ids == self.image_token
        embeds = self._embed(ids)
        tiles = self._images.get("tiles")
        if tiles is not None and len(tiles):
            features = self._features(tiles)
            if len(features) != int(slots.sum()):
                _fail(f"the prompt holds {int(slots.sum())} image tokens, and the "
                      f"{len(tiles)} tiles give {len(features)} features")
            embeds[slots] = features
        elif slots.any():
            _fail(f"the prompt holds {int(slots.sum())} image tokens but no pixel_values were "
                  "given")
        return self._run_prompt(embeds, mask, derive_position_ids(mask, ids.shape[1]))

    def _decode(self, ids, mask):
        query = ids.shape[1]
        out = self.stages["decode"](self._with_cache(
            "decode", {"input_ids": ids, "position_ids": derive_position_ids(mask, query)},
            mask, query))
        self._keep_cache(out, query)
        return out["logits"]
