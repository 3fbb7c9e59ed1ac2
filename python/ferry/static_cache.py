"""The guide's Dynamo decode loop over a .pt2 static-cache export: a transformers StaticCache
whose tensors are the program's cache inputs.

The guide reuses "the program's own example inputs": `_, kwargs =
components["decode"].program.example_inputs` holds an initialized StaticCache, which the caller
deep-copies, reset()s and passes as `past_key_values=` to runners["decode"]. ferry's program
takes its cache as plain tensors (past_key_values_<l>_key, _value and _cumulative_length), so
the template is made here from export.json's cache metadata, and each call hands the program
the StaticCache's own tensors: the program's in-place writes land in the caller's cache, as
torch.export's USER_INPUT_MUTATIONs do for transformers' programs.

Every layer is a full StaticLayer of max_cache_len slots: ferry's sliding-window layers keep a
full cache and apply the window in the mask (the guide: "Sliding-window layers export with a
full key-value cache").
"""

import re

from ._lib import FerryError, _escape

_CACHE_INPUT = re.compile(r"past_key_values_(\d+)_(key|value|cumulative_length)")
_DTYPES = ("float32", "float16", "bfloat16")


def cache_inputs(metadata):
    """{input name: (layer, kind, spec)} of a static-cache component's cache inputs."""
    found = {}
    for spec in metadata.get("inputs", []):
        match = _CACHE_INPUT.fullmatch(spec["name"])
        if match:
            found[spec["name"]] = (int(match[1]), match[2], spec)
    return found


def template(metadata, device="cpu"):
    """An initialized, empty StaticCache shaped as the component's cache inputs (the example
    batch, every layer's kv heads and head_dim, max_cache_len slots)."""
    import torch
    from transformers.cache_utils import StaticCache, StaticLayer

    cache_meta = metadata["cache"]
    slots, layers = int(cache_meta["max_cache_len"]), int(cache_meta["layers"])
    keys = {layer: spec for layer, kind, spec in cache_inputs(metadata).values()
            if kind == "key"}
    if sorted(keys) != list(range(layers)):
        raise FerryError(f"the decode program's cache inputs name layers {sorted(keys)}, but "
                         f"export.json's cache has {layers}", status=3)
    # a symbolic batch (the program takes any): the batch it was traced at, as transformers'
    # example StaticCache is allocated for the example's batch
    batch = keys[0]["shape"][0]
    if not isinstance(batch, int):
        batch = (keys[0].get("traced_shape") or [1])[0]
    # StaticCache(config=...) would make the config's sliding layers ring buffers of the
    # window's length; ferry's cache is max_cache_len slots in every layer
    cache = StaticCache.__new__(StaticCache)
    super(StaticCache, cache).__init__(layers=[StaticLayer(max_cache_len=slots)
                                               for _ in range(layers)])
    if cache_meta["dtype"] not in _DTYPES:
        raise FerryError(f"export.json's cache dtype {_escape(cache_meta['dtype'])} is not one "
                         f"of {', '.join(_DTYPES)}", status=3)
    dtype = getattr(torch, cache_meta["dtype"])
    cache.early_initialization(batch, [keys[k]["shape"][1] for k in range(layers)],
                               [keys[k]["shape"][3] for k in range(layers)], dtype,
                               torch.device(device))
    return cache


def example_inputs(metadata, device="cpu"):
    """(args, kwargs) as the guide reads them from `program.example_inputs`: the traced
    input_ids, a causal attention_mask and position_ids, and an empty StaticCache."""
    import torch

    traced = {spec["name"]: spec.get("traced_shape") for spec in metadata.get("inputs", [])}
    cache = template(metadata, device)
    ids_shape = traced.get("input_ids") or [cache.layers[0].keys.shape[0], 1]
    batch, query = int(ids_shape[0]), int(ids_shape[1])
    slots = cache.layers[0].keys.shape[2]
    positions = torch.arange(query, device=device)
    mask = (torch.arange(slots, device=device)[None, :] <= positions[:, None])[None, None]
    return (), {"input_ids": torch.zeros((batch, query), dtype=torch.long, device=device),
                "attention_mask": mask.expand(batch, 1, query, slots).contiguous(),
                "position_ids": positions[None].expand(batch, query).contiguous(),
                "past_key_values": cache}


def feeds(cache, wanted, component):
    """The program's cache inputs (`wanted`: cache_inputs of its metadata) from the StaticCache
    `cache`: each layer's keys and values,
    and its cumulative_length viewed as the program's [1] counter (the same storage, so the
    program's write of the counter advances the cache's)."""
    import torch
    from transformers.cache_utils import Cache

    from transformers.cache_utils import StaticLayer

    if not isinstance(cache, Cache) or not cache.layers or \
            not all(isinstance(layer, StaticLayer) for layer in cache.layers):
        raise FerryError(f"{component}: past_key_values must be a transformers StaticCache (the "
                         f"program's example_inputs hold one), not "
                         f"{_escape(type(cache).__name__)}", status=1)
    layers = 1 + max((layer for layer, _, _ in wanted.values()), default=-1)
    if len(cache.layers) != layers:
        raise FerryError(f"{component}: past_key_values has {len(cache.layers)} layers, the "
                         f"program's cache {layers}", status=1)
    made = {}
    for name, (layer, kind, spec) in wanted.items():
        held = cache.layers[layer]
        if not getattr(held, "is_initialized", False):
            raise FerryError(f"{component}: past_key_values layer {layer} is not initialized: "
                             "start from the program's example_inputs cache (copy.deepcopy, "
                             "then reset())", status=1)
        if kind == "cumulative_length":
            counter = held.cumulative_length
            if not torch.is_tensor(counter) or counter.numel() != 1:
                raise FerryError(f"{component}: past_key_values layer {layer} keeps no tensor "
                                 "cumulative_length: a StaticCache's layers do", status=1)
            made[name] = counter.view(1)
            continue
        tensor = held.keys if kind == "key" else held.values
        want = [d if isinstance(d, int) else None for d in spec["shape"]]
        if any(w is not None and w != got for w, got in zip(want, tensor.shape)) or \
                tensor.dim() != len(want):
            raise FerryError(f"{component}: past_key_values layer {layer}'s {kind}s have shape "
                             f"{list(tensor.shape)}, the program takes {_escape(spec['shape'])}",
                             status=1)
        made[name] = tensor
    return made
