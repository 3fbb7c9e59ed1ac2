#!/usr/bin/env python3
"""onnxruntime or OpenVINO CPU latency of one vision-language export (Qwen2-VL): the image
encoder on one image, the prompt (language model + head), then one-token decode steps.

    python bench/vlm_latency.py --kind ferry-onnx|ferry-openvino|ferry-openvino-stateful|
        tf-onnx|tf-openvino \
        --dir OUT [--encoder-dir ENC_OUT] [--features NPZ] --inputs INPUTS.npz --ckpt CKPT \
        --json result.json [--logits L.npz] [--threads N] [--steps 32] [--reps 2] \
        [--encoder-reps 3] [--encoder-only]

One process per export (bench/vlm_bench.py measures its peak RSS). INPUTS.npz is what
bench/peer_transformers_vlm.py --mode inputs wrote: transformers' own processor inputs for one
image (pixel_values, image_grid_thw, input_ids, mm_token_type_ids), generate()'s position_ids
[4, 1, S] and the tower's cu_seqlens / vision_position_ids, so every export gets the same
arrays. The same settings for all: onnxruntime CPUExecutionProvider, intra_op_num_threads =
--threads, inter_op 1, sequential, ORT_ENABLE_ALL (bench/ort_latency.session_options);
OpenVINO CPU, INFERENCE_PRECISION_HINT f32, INFERENCE_NUM_THREADS = --threads. Batch 1.

The stages, one after the other, each stage's graphs loaded, timed and released before the
next's are loaded (so a run holds one stage's weights at a time, as the exports allow):
  encoder  ferry's image_encoder(pixel_values, image_grid_thw), or transformers' tower
           (--encoder-dir: model.onnx / openvino_model.xml) fed hidden_states = pixel_values,
           grid_thw, and the cu_seqlens / position_ids its export takes precomputed;
           one warm-up, then the median of --encoder-reps calls. -> the image features
           (pooler_output). A transformers export without a tower uses --features (ferry's).
  prompt   the embeddings of input_ids (ferry: its embed_tokens graph; transformers has no
           such graph: the checkpoint's own table rows), the image tokens' rows replaced by the
           features; then language_model(inputs_embeds, position_ids[, attention_mask]) and
           lm_head on the last position: one warm-up, the median of --reps (the timing covers
           language_model + lm_head, not the embedding).
  decode   from the prompt's cache: 4 untimed one-token steps, then back to the prompt's cache
           and --steps timed steps (mean). position_ids: every row one further a step, as
           generate() does. onnxruntime: each step's output caches bound as the next step's
           inputs through IOBinding (no copy). OpenVINO: ferry's --disable-stateful graph gets
           the previous step's outputs (two infer requests in turn, shared tensors);
           transformers' stateful decode gets its variables set to the prompt's cache. The
           tokens are fixed (seeded), not sampled.
ferry-openvino-stateful is ferry's default OpenVINO export, laid out as openvino-genai's
VLMPipeline loads it, run as the pipeline runs it:
  encoder  openvino_vision_embeddings_model (the patch embedding), then
           openvino_vision_embeddings_merger_model given each patch's rotary angles and the
           frame mask, computed in numpy as the pipeline computes them (ferry.vision_language's
           helpers); the timing covers the numpy and both graphs.
  prompt   openvino_text_embeddings_model, the image rows replaced, then the stateful
           openvino_language_model (position_ids: M-RoPE's three rows; beam_idx [0]) from a
           reset state: its logits (the head is in the graph).
  decode   each step the token's embedding (openvino_text_embeddings_model) and one
           openvino_language_model call, both timed, the cache in the graph's variables: 4
           untimed steps, the prompt again from a reset state, then --steps timed steps.
The features, the prompt's last logits and the last step's logits go to --logits (npz) so the
harness can check that the exports compute the same function.
"""

import gc
import json
import re
import statistics
import struct
import time
from pathlib import Path

import sys

import numpy as np

from latency_args import latency_parser
from ort_latency import CACHE_IN, CACHE_OUT, cache_slot, session_options

KINDS = ("ferry-onnx", "ferry-openvino", "ferry-openvino-stateful", "tf-onnx", "tf-openvino")
OV_STATE = re.compile(r"cache\.layers\.(\d+)\.(keys|values)")


class Graph:
    """One graph in its runtime: .inputs {name: numpy dtype}, .outputs [names], run(feeds)."""

    def __init__(self, path, engine, threads):
        self.engine = engine
        if engine == "ort":
            import onnxruntime as ort

            self.session = ort.InferenceSession(str(path), session_options(threads),
                                                providers=["CPUExecutionProvider"])
            types = {"tensor(float)": np.float32, "tensor(int64)": np.int64,
                     "tensor(int32)": np.int32, "tensor(float16)": np.float16}
            self.inputs = {i.name: types.get(i.type, np.float32)
                           for i in self.session.get_inputs()}
            self.outputs = [o.name for o in self.session.get_outputs()]
        else:
            import openvino as ov

            self.compiled = ov.Core().compile_model(
                str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                   "INFERENCE_NUM_THREADS": threads})
            self.inputs = {i.get_any_name(): i.get_element_type().to_dtype()
                           for i in self.compiled.inputs}
            self.outputs = [o.get_any_name() for o in self.compiled.outputs]
            self.request = self.compiled.create_infer_request()

    def run(self, feeds):
        feeds = {k: np.ascontiguousarray(v, self.inputs[k]) for k, v in feeds.items()
                 if k in self.inputs}
        if self.engine == "ort":
            return dict(zip(self.outputs, self.session.run(self.outputs, feeds)))
        result = self.request.infer(feeds)
        return {o.get_any_name(): np.array(result[o]) for o in self.compiled.outputs}


def embed_table_rows(ckpt, ids):
    """Rows of the checkpoint's model.embed_tokens.weight (bf16 -> float32) for `ids`."""
    path = Path(ckpt) / "model.safetensors"
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    entry = header["model.embed_tokens.weight"]
    rows, width = entry["shape"]
    dtype = {"BF16": np.uint16, "F32": np.float32}[entry["dtype"]]
    table = np.memmap(path, dtype=dtype, mode="r", offset=8 + n + entry["data_offsets"][0],
                      shape=(rows, width))
    out = np.asarray(table[ids.reshape(-1)])
    if dtype == np.uint16:
        out = (out.astype(np.uint32) << 16).view(np.float32)
    return out.reshape(*ids.shape, width)


def stateful_openvino(a, x, cfg, steps_ids, result, saved):
    """ferry's VLMPipeline layout, stage by stage as the pipeline runs it (the module's
    docstring); fills `result` and `saved`."""
    ids, positions = x["input_ids"], x["position_ids"]
    encode = stateful_encoder(a.dir, a.threads, x, cfg, result)
    ms, all_ms, features = timed(encode, a.encoder_reps)
    result.update(encoder_ms=ms, encoder_ms_all=all_ms)
    saved["features"] = np.asarray(features, np.float32)
    del encode
    gc.collect()

    prompt, run_steps = stateful_steps(a.dir, a.threads, ids, positions, features,
                                       cfg["image_token_id"], steps_ids, result)
    ms, all_ms, logits = timed(prompt, a.reps)
    result.update(prefill_ms=ms, prefill_ms_all=all_ms)
    saved["prefill_last"] = np.asarray(logits[0, -1], np.float32)
    past = ids.shape[1]
    decode_figures(run_steps, a.steps, past, result, saved)


def prompt_stage(path, engine, ferry, threads, ckpt, ids, positions, slots, features, reps,
                 result):
    """The prompt (the module's docstring), timed over `reps` into `result`: -> (its logits at
    the last position, its cache {slot: array}). `path(component)` names a graph's file."""
    t = time.perf_counter()
    if ferry:
        embed = Graph(path("embed_tokens"), engine, threads)
        embeds = embed.run({"input_ids": ids})["inputs_embeds"]
        del embed
    else:
        embeds = embed_table_rows(ckpt, ids)
    result["embed_s"] = time.perf_counter() - t
    if len(features) != int(slots.sum()):
        raise SystemExit(f"{len(features)} image features for {int(slots.sum())} image tokens")
    embeds = np.array(embeds, np.float32)
    embeds[slots] = features
    t = time.perf_counter()
    lm = Graph(path("language_model"), engine, threads)
    head = Graph(path("lm_head"), engine, threads)
    result["prefill_load_s"] = time.perf_counter() - t
    lm_feeds = {"inputs_embeds": embeds, "position_ids": positions,
                "attention_mask": np.ones(ids.shape, np.int64)}

    def prefill():
        out = lm.run(lm_feeds)
        logits = head.run({"input": out["last_hidden_state"][:, -1:]})["output"]
        return out, logits

    ms, all_ms, (out, logits) = timed(prefill, reps)
    result.update(prefill_ms=ms, prefill_ms_all=all_ms)
    cache = {cache_slot(n, CACHE_OUT): v for n, v in out.items() if n != "last_hidden_state"}
    if None in cache:
        raise SystemExit(f"language_model outputs this runner does not know: {list(out)}")
    del lm, head, out
    gc.collect()
    return logits, cache


def decode_steps(dec, engine, cache, past, positions, steps_ids):
    """run_steps(count) -> (each step's ms, the last step's logits): `count` one-token steps of
    the decode graph `dec` from the prompt's `cache` ({slot: array}, `past` positions), the
    tokens steps_ids[k] (the module's docstring)."""
    names = dec.inputs
    extra = {}
    if "mm_token_type_ids" in names:
        extra["mm_token_type_ids"] = np.zeros((1, 1), names["mm_token_type_ids"])
    if "beam_idx" in names:
        extra["beam_idx"] = np.zeros(1, names["beam_idx"])
    known = {"input_ids", "attention_mask", "position_ids", *extra}
    cache_inputs = {n: cache_slot(n, CACHE_IN) for n in names if n not in known}
    if any(v is None for v in cache_inputs.values()):
        raise SystemExit(f"decode inputs this runner does not know: {list(names)}")

    def small_feeds(k, length):
        f = {"input_ids": steps_ids[k], "position_ids": positions[:, :, -1:] + 1 + k, **extra}
        if "attention_mask" in names:
            f["attention_mask"] = np.ones((1, length + 1), np.int64)
        return {n: np.ascontiguousarray(v, names[n]) for n, v in f.items() if n in names}

    if engine == "ort":
        session = dec.session

        def run_steps(count):
            values, times, logits = None, [], None
            for k in range(count):
                t = time.perf_counter()
                binding = session.io_binding()
                for n, v in small_feeds(k, past + k).items():
                    binding.bind_cpu_input(n, v)
                for n, slot in cache_inputs.items():
                    if values is None:
                        binding.bind_cpu_input(n, cache[slot])
                    else:
                        binding.bind_ortvalue_input(n, values[slot])
                for n in dec.outputs:
                    binding.bind_output(n, "cpu")
                session.run_with_iobinding(binding)
                outs = dict(zip(dec.outputs, binding.get_outputs()))
                times.append(1e3 * (time.perf_counter() - t))
                logits = outs.pop("logits")
                values = {cache_slot(n, CACHE_OUT): v for n, v in outs.items()}
            return times, np.asarray(logits.numpy()[0, -1], np.float32)
    elif cache_inputs:  # OpenVINO, the cache as inputs and outputs: two requests in turn
        requests = [dec.compiled.create_infer_request() for _ in range(2)]
        outputs = dec.compiled.outputs

        def run_steps(count):
            prev, times, logits = None, [], None
            for k in range(count):
                t = time.perf_counter()
                feeds = small_feeds(k, past + k)
                for n, slot in cache_inputs.items():
                    feeds[n] = cache[slot] if prev is None else prev[slot]
                req = requests[k % 2]
                res = req.infer(feeds, share_inputs=True, share_outputs=True)
                times.append(1e3 * (time.perf_counter() - t))
                prev = {cache_slot(o.get_any_name(), CACHE_OUT): res[o] for o in outputs
                        if o.get_any_name() != "logits"}
                logits = res["logits"]
            return times, np.array(logits[0, -1], np.float32)
    else:  # OpenVINO, a stateful decode: its variables set to the prompt's cache
        req = dec.request
        states = req.query_state()
        slot_of = {}
        for s in states:
            m = OV_STATE.search(s.name)
            if not m:
                raise SystemExit(f"a state this runner does not know: {s.name}")
            slot_of[s.name] = (int(m.group(1)), {"keys": "key", "values": "value"}[m.group(2)])

        def run_steps(count):
            import openvino as ov

            req.reset_state()
            for s in req.query_state():
                s.state = ov.Tensor(np.ascontiguousarray(cache[slot_of[s.name]]))
            times, logits = [], None
            for k in range(count):
                t = time.perf_counter()
                res = req.infer(small_feeds(k, past + k), share_inputs=True, share_outputs=True)
                times.append(1e3 * (time.perf_counter() - t))
                logits = res["logits"]
            return times, np.array(logits[0, -1], np.float32)

    return run_steps


def stateful_steps(directory, threads, ids, positions, features, image_token_id, steps_ids,
                   result):
    """ferry's stateful OpenVINO language model from its prompt: -> (prompt() -> the prompt's
    logits from a reset state, run_steps(count) -> (each step's ms, the last step's logits),
    the prompt run first, untimed); load times into `result`."""
    def graph(name):
        return Graph(directory / f"openvino_{name}_model.xml", "ov", threads)

    t = time.perf_counter()
    text = graph("text_embeddings")
    result["embed_s"] = time.perf_counter() - t
    embeds = np.array(text.run({"input_ids": ids})["inputs_embeds"], np.float32)
    embeds[ids == image_token_id] = features
    t = time.perf_counter()
    lm = graph("language")
    result["prefill_load_s"] = result["decode_load_s"] = time.perf_counter() - t
    beam = np.zeros(1, np.int32)
    past = ids.shape[1]

    def prompt():
        lm.request.reset_state()
        return lm.run({"inputs_embeds": embeds, "position_ids": positions[1:],
                       "attention_mask": np.ones(ids.shape, np.int64),
                       "beam_idx": beam})["logits"]

    def run_steps(count):
        prompt()
        times, logits = [], None
        for k in range(count):
            t = time.perf_counter()
            embed = text.run({"input_ids": steps_ids[k]})["inputs_embeds"]
            logits = lm.run({"inputs_embeds": embed,
                             "position_ids": positions[1:, :, -1:] + 1 + k,
                             "attention_mask": np.ones((1, past + k + 1), np.int64),
                             "beam_idx": beam})["logits"]
            times.append(1e3 * (time.perf_counter() - t))
        return times, np.array(logits[0, -1], np.float32)

    return prompt, run_steps


def stateful_encoder(directory, threads, x, cfg, result):
    """encode() -> the image features of ferry's VLMPipeline layout: the patch embedding, the
    rotary angles and frame mask in numpy, the merger (the module's docstring); the load time
    into `result`."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "python"))
    from ferry.vision_language import block_mask, patch_positions

    grid, pixels = x["image_grid_thw"], x["pixel_values"]
    merge = int(cfg["vision_config"].get("spatial_merge_size", 2))
    if len(grid) != 1:
        raise SystemExit("the stateful runner takes one image")
    t_, h, w = grid[0].tolist()

    def graph(name):
        return Graph(directory / f"openvino_{name}_model.xml", "ov", threads)

    t = time.perf_counter()
    patch, merger = graph("vision_embeddings"), graph("vision_embeddings_merger")
    result["encoder_load_s"] = time.perf_counter() - t
    if "window_index" in merger.inputs:
        raise SystemExit("the stateful runner computes Qwen2-VL's merger inputs, not 2.5's")
    width = merger.compiled.input("rotary_pos_emb").get_partial_shape()[1].get_length()
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, width, 2, dtype=np.float32) / width)

    def encode():
        hidden = patch.run({"hidden_states": pixels})["last_hidden_state"]
        rows = patch_positions(t_, h, w, merge).astype(np.float32)
        angles = np.concatenate([rows[:, :1] * inv_freq[:width // 2],
                                 rows[:, 1:] * inv_freq[:width // 2]], 1)
        return merger.run({"hidden_states": hidden, "rotary_pos_emb": angles,
                           "attention_mask": block_mask([h * w] * t_)})["last_hidden_state"]

    return encode


def graph_encoder(kind, directory, encoder_dir, x, threads, result):
    """encode() -> the image features of ferry's image_encoder graph, or of transformers' tower
    (`encoder_dir`) fed what its export takes; None where there is neither. The load time into
    `result`."""
    engine = "ort" if kind.endswith("onnx") else "ov"
    if kind.startswith("ferry"):
        path = directory / ("image_encoder.onnx" if engine == "ort"
                            else "openvino_image_encoder.xml")
        feeds = {"pixel_values": x["pixel_values"], "image_grid_thw": x["image_grid_thw"]}
    elif encoder_dir:
        path = encoder_dir / ("model.onnx" if engine == "ort" else "openvino_model.xml")
        feeds = {"hidden_states": x["pixel_values"], "grid_thw": x["image_grid_thw"],
                 "cu_seqlens": x["cu_seqlens"], "position_ids": x["vision_position_ids"]}
    else:
        return None
    t = time.perf_counter()
    enc = Graph(path, engine, threads)
    result["encoder_load_s"] = time.perf_counter() - t
    missing = [n for n in enc.inputs if n not in feeds]
    if missing:
        raise SystemExit(f"the encoder takes inputs this runner does not feed: {missing}")
    return lambda: enc.run(feeds)["pooler_output"]


def decode_figures(run_steps, steps, past, result, saved):
    """4 untimed steps, then `steps` timed ones: their mean and median into `result`, the last
    step's logits into `saved`."""
    run_steps(4)
    times, last = run_steps(steps)
    result.update(decode_ms_mean=statistics.fmean(times), decode_ms_median=statistics.median(times),
                  decode_past=past)
    saved["decode_last"] = last


def write_results(a, result, saved):
    """The figures to --json (and stdout), the compared arrays to --logits."""
    if a.logits:
        np.savez(a.logits, **saved)
    a.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if not k.endswith("_all")}))


def timed(fn, reps, warmup=1):
    """-> (median ms over `reps` calls after `warmup` untimed ones, all ms, the last result)."""
    times, result = [], None
    for k in range(warmup + reps):
        t = time.perf_counter()
        result = fn()
        if k >= warmup:
            times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times), times, result


def main():
    p = latency_parser(__doc__)
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--encoder-dir", type=Path, help="transformers' tower export")
    p.add_argument("--features", type=Path,
                   help="an npz whose `features` stand in for an export without an encoder")
    p.add_argument("--inputs", type=Path, required=True)
    p.add_argument("--ckpt", type=Path, required=True)
    p.add_argument("--logits", type=Path)
    p.add_argument("--encoder-reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--encoder-only", action="store_true",
                   help="the encoder stage alone (transformers' tower without its generation "
                        "export)")
    p.set_defaults(steps=32, reps=2)
    a = p.parse_args()

    ferry = a.kind.startswith("ferry")
    engine = "ort" if a.kind.endswith("onnx") else "ov"
    cfg = json.loads((a.ckpt / "config.json").read_text())
    x = dict(np.load(a.inputs))
    ids, grid, pixels = x["input_ids"], x["image_grid_thw"], x["pixel_values"]
    positions = x["position_ids"]
    slots = ids == cfg["image_token_id"]
    vocab = cfg["text_config"]["vocab_size"]
    steps_ids = np.random.default_rng(a.seed).integers(
        0, min(vocab, 151643), size=(a.steps + 4, 1, 1)).astype(np.int64)

    def path(component):
        if engine == "ort":
            return a.dir / f"{component}.onnx"
        return a.dir / f"openvino_{component}.xml"

    result = dict(kind=a.kind, threads=a.threads, image_grid_thw=grid.tolist(),
                  patches=int(len(pixels)), prompt=int(ids.shape[1]),
                  image_tokens=int(slots.sum()), steps=a.steps)
    saved = {}
    if engine == "ort":
        import onnxruntime as ort

        result["onnxruntime"] = ort.__version__
    else:
        import openvino as ov

        result["openvino"] = ov.__version__

    if a.kind == "ferry-openvino-stateful":
        stateful_openvino(a, x, cfg, steps_ids, result, saved)
        write_results(a, result, saved)
        return

    # --- encoder
    encode = graph_encoder(a.kind, a.dir, a.encoder_dir, x, a.threads, result)
    if encode:
        ms, all_ms, features = timed(encode, a.encoder_reps)
        result.update(encoder_ms=ms, encoder_ms_all=all_ms)
        del encode
        gc.collect()
    elif a.features:
        features = np.load(a.features)["features"]
        result["features_from"] = str(a.features)
    else:
        raise SystemExit("no image encoder and no --features")
    saved["features"] = np.asarray(features, np.float32)
    if a.encoder_only:
        write_results(a, result, saved)
        return

    # --- prompt
    logits, cache = prompt_stage(path, engine, ferry, a.threads, a.ckpt, ids, positions, slots,
                                 features, a.reps, result)
    saved["prefill_last"] = np.asarray(logits[0, -1], np.float32)
    past = ids.shape[1]

    # --- decode
    t = time.perf_counter()
    dec = Graph(path("decode"), engine, a.threads)
    result["decode_load_s"] = time.perf_counter() - t
    run_steps = decode_steps(dec, engine, cache, past, positions, steps_ids)
    decode_figures(run_steps, a.steps, past, result, saved)
    write_results(a, result, saved)


if __name__ == "__main__":
    main()
