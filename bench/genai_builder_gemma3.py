#!/usr/bin/env python3
"""onnxruntime-genai's model builder on a transformers 5 Gemma 3 checkpoint.

    python bench/genai_builder_gemma3.py BUILDER-ARGS...

The builder (0.18) reads Gemma 3's rope settings as transformers 4 held them:
config.rope_parameters["rope_type"] and config.rope_local_base_freq. transformers 5 keeps them
per layer type (rope_parameters.full_attention / .sliding_attention), and the builder stops
with KeyError 'rope_type'. This runs the builder unchanged, its config given those two
transformers 4 attributes from the per-layer-type sets (the full layers' type, the sliding
layers' theta), so that bench/gemma3_bench.py can measure it on the same checkpoint."""

import runpy
import sys

import transformers

_load = transformers.AutoConfig.from_pretrained.__func__


def _with_v4_rope(cls, *args, **kwargs):
    config = _load(cls, *args, **kwargs)
    text = getattr(config, "text_config", None) or config
    params = getattr(text, "rope_parameters", None)
    if isinstance(params, dict) and "sliding_attention" in params:
        params.setdefault("rope_type", params["full_attention"]["rope_type"])
        params.setdefault("rope_theta", params["full_attention"]["rope_theta"])
        text.rope_local_base_freq = params["sliding_attention"]["rope_theta"]
    return config


transformers.AutoConfig.from_pretrained = classmethod(_with_v4_rope)
sys.argv = ["builder", *sys.argv[1:]]
runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__")
