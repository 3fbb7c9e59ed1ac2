#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/seeds/<target>/) from the test fixtures.

Standard library only. The seeds are committed; rerun this after changing a fixture:

    python3 tests/fuzz/make_seeds.py --ferry build/ferry

- safetensors: fixtures/tiny-llama/model.safetensors with its tensors shrunk to a few elements
  (same names, dtypes and ranks, so the header keeps its real shape but the file stays small),
  the real header over a truncated data area, and the layouts the C tests use (mixed dtypes,
  scalars, empty tensors, metadata).
- config: fixtures/tiny-llama/config.json and variants per family and rope type, in the
  transformers 4 and 5 spellings the tests use.
- manifest: export.json of the fixture exported plain, static, and for generation (static and
  dynamic cache) by the ferry binary given with --ferry, and one in transformers' schema.
- recipe: recipes with every key, and --dim strings.
- index: model.safetensors.index.json files for fuzz_index's scratch checkpoint.
"""

import argparse
import copy
import json
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FIXTURE = ROOT / "fixtures" / "tiny-llama"
DTYPE_SIZE = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
              "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}


def safetensors_bytes(header, data):
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def layout(tensors, metadata=None):
    """[(name, dtype, shape)] -> a valid safetensors file with consecutive ranges."""
    header = {"__metadata__": metadata} if metadata is not None else {}
    offset = 0
    for name, dtype, shape in tensors:
        n = DTYPE_SIZE[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    return safetensors_bytes(header, bytes((i * 37) & 0xFF for i in range(offset)))


def safetensors_seeds():
    raw = (FIXTURE / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", None)
    shrunk = [(k, v["dtype"], [min(d, 2) for d in v["shape"]]) for k, v in sorted(header.items())]
    yield "tiny-llama-shrunk", layout(shrunk, meta)
    yield "tiny-llama-header-only", raw[:8 + n] + raw[8 + n:8 + n + 64]
    yield "mixed-dtypes", layout([("a.f32", "F32", [2, 3]), ("b.f16", "F16", [4]),
                                  ("c.bf16", "BF16", [2, 2]), ("d.i64", "I64", [3]),
                                  ("e.bool", "BOOL", [5]), ("f.scalar", "F32", []),
                                  ("g.empty", "F32", [0, 4]), ("h.u8", "U8", [1, 1, 1, 1]),
                                  ("i.f8", "F8_E4M3", [3])], {"format": "pt"})
    yield "empty", safetensors_bytes({}, b"")
    yield "metadata-only", safetensors_bytes({"__metadata__": {"format": "pt", "k": "v"}}, b"")
    yield "utf8-names", layout([("caf\u00e9.\U0001F600", "F32", [1]), ("x", "BF16", [2])])


def config_seeds():
    base = json.loads((FIXTURE / "config.json").read_text())
    yield "tiny-llama", base

    def variant(**changes):
        c = copy.deepcopy(base)
        for k, v in changes.items():
            if v is None:
                c.pop(k, None)
            else:
                c[k] = v
        return c

    yield "llama3-t5", variant(rope_parameters={
        "rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    yield "llama3-t4", variant(rope_parameters=None, rope_theta=500000.0, rope_scaling={
        "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}, torch_dtype="bfloat16", dtype=None)
    yield "yarn", variant(rope_parameters={
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "beta_fast": 32, "beta_slow": 1,
        "original_max_position_embeddings": 4096, "mscale": 1.0, "mscale_all_dim": 1.0,
        "truncate": False})
    yield "dynamic", variant(rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                              "rope_theta": 10000.0})
    yield "linear", variant(rope_parameters=None, rope_scaling={"rope_type": "linear",
                                                                "factor": 2.0})
    yield "mistral", variant(architectures=["MistralForCausalLM"], model_type="mistral",
                             sliding_window=4096, head_dim=None)
    yield "qwen2", variant(architectures=["Qwen2ForCausalLM"], model_type="qwen2",
                           use_sliding_window=False, sliding_window=4096, max_window_layers=1,
                           layer_types=["full_attention", "full_attention"])
    yield "qwen3", variant(architectures=["Qwen3ForCausalLM"], model_type="qwen3",
                           tie_word_embeddings=True, sliding_window=64,
                           layer_types=["sliding_attention", "full_attention"],
                           rope_parameters={"full_attention": {"rope_type": "default",
                                                               "rope_theta": 1e6},
                                            "sliding_attention": {"rope_type": "default"}})


def recipe_seeds():
    yield "plain", b'{"export_format": "onnx", "dynamic": true}'
    yield "all-keys", json.dumps({
        "export_format": "onnx", "dynamic": False,
        "dynamic_shapes": {"input_ids": {"0": "batch", "1": {"name": "sequence", "min": 1,
                                                             "max": 4096}},
                           "attention_mask": {"1": {"name": "sequence", "max": None}}},
        "dtype": "bf16", "opset": 18, "example_shapes": {"input_ids": [2, 16]},
        "ort_fusions": None, "quantizer": None, "backend": None, "optimize": None}).encode()
    yield "generation-static", json.dumps({
        "for_generation": True, "multi_token_decode": True, "dynamic": True,
        "generation_config": {"cache_implementation": "static", "max_cache_len": 128},
        "dtype": "fp16"}).encode()
    yield "generation-dynamic", json.dumps({
        "for_generation": True, "generation_config": {"cache_implementation": "dynamic"},
        "dtype": "float32", "opset": 23}).encode()
    yield "dim", b"input_ids:1=sequence:1:2048"
    yield "dim-short", b"attention_mask:0=batch"


def index_seeds():
    a, b = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
    yield "sharded", {"metadata": {"total_size": 12}, "weight_map": {
        "model.embed_tokens.weight": a, "model.norm.weight": a, "lm_head.weight": b}}
    yield "linked", {"weight_map": {"lm_head.weight": "linked.safetensors",
                                    "model.norm.weight": a}}
    yield "partial", {"weight_map": {"model.norm.weight": a}}


LEAF_SPEC = {"type": None, "context": None, "children_spec": []}


def treespec(node_type, keys, leaves):
    """A torch pytree spec as treespec_dumps writes it: [protocol, node], the context JSON text."""
    node = {"type": node_type, "context": json.dumps(keys), "children_spec": [LEAF_SPEC] * leaves}
    return json.dumps([1, node])


def transformers_manifest():
    """export.json as transformers' ExportedModel.save_pretrained writes it (5.24, a tiny Llama
    exported to ONNX; packages and export_config abridged), its files those fuzz_manifest makes."""
    kwarg = {"rank": 2, "shape": [2, 5], "dtype": "int64"}
    meta = {"architecture": "LlamaForCausalLM", "packages": {"transformers": "5.24.0"},
            "export_config": {"dynamic": True, "export_format": "onnx"},
            "export_dtype": "float32", "export_device": "cpu",
            "kwargs": {"input_ids": kwarg, "attention_mask": kwarg,
                       "cache": {"container": "DynamicCache"},
                       "pixels": {"leaves": {"0": kwarg}}},
            "in_spec": json.dumps([1, {"type": "builtins.tuple", "context": "null",
                                       "children_spec": [
                                           {"type": "builtins.tuple", "context": "null",
                                            "children_spec": []},
                                           json.loads(treespec("builtins.dict",
                                                               ["input_ids", "attention_mask"],
                                                               2))[1]]}]),
            "out_spec": treespec("transformers.modeling_outputs.CausalLMOutputWithPast",
                                 ["logits", "loss"], 2),
            "in_constants": {"use_cache": True}, "out_constants": [[1, None]]}
    return {"schema_version": 1, "export_format": "onnx",
            "components": {"model": {"file": "model.onnx", "metadata": meta}}}


def manifest_seeds(ferry):
    yield "transformers-onnx", json.dumps(transformers_manifest(), indent=2).encode()
    # components whose file is not their format's program (manifest_check_program): a JSON
    # file, a data file, and an .xml whose .bin is absent
    yield "not-a-program", json.dumps(
        {"schema_version": 1, "format": "onnx",
         "components": {"prefill": {"file": "export.json", "role": "prefill"},
                        "decode": {"file": "model.onnx.data", "role": "decode"}}},
        indent=2).encode()
    yield "openvino-no-bin", json.dumps(
        {"export_format": "openvino",
         "components": {"model": {"file": "openvino_model.xml", "metadata": {}}}},
        indent=2).encode()
    runs = {"dynamic": ["--dynamic"],
            "static-dim": ["--dim", "input_ids:1=sequence:1:64", "--dtype", "fp16"],
            "generation-static": ["--for-generation", "--static-cache", "--max-cache-len", "64"],
            "generation-dynamic": ["--for-generation", "--dynamic", "--multi-token-decode"]}
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in runs.items():
            out = Path(tmp) / name
            subprocess.run([str(ferry), "export", str(FIXTURE), str(out), "-q", *flags],
                           check=True)
            yield name, (out / "export.json").read_bytes()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ferry", default=str(ROOT / "build" / "ferry"),
                        help="ferry binary used to make the export.json seeds")
    args = parser.parse_args()
    seeds = HERE / "seeds"
    if seeds.exists():
        shutil.rmtree(seeds)
    corpora = {
        "safetensors": dict(safetensors_seeds()),
        "config": {k: json.dumps(v, indent=2).encode() for k, v in config_seeds()},
        "recipe": dict(recipe_seeds()),
        "index": {k: json.dumps(v, indent=2).encode() for k, v in index_seeds()},
        "manifest": dict(manifest_seeds(args.ferry)),
    }
    for target, files in corpora.items():
        (seeds / target).mkdir(parents=True)
        for name, data in files.items():
            (seeds / target / name).write_bytes(data)
        print(f"{target}: {len(files)} seeds, {sum(map(len, files.values()))} bytes")


if __name__ == "__main__":
    main()
