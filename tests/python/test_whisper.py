"""Whisper (WhisperForConditionalGeneration) exported for generation: its encoder (with each
decoder layer's cross-attention keys and values) and its prefill/decode, in every backend and
cache layout, run in their runtimes (onnxruntime, OpenVINO's CPU plugin, torch.export.load,
ExecuTorch's runtime) against transformers' eager model on the same weights, and ferry's
generate() against transformers' WhisperForConditionalGeneration.generate()."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import FP32_ATOL, ferry_export, run_ferry

VOCAB, NO_TIMESTAMPS = 96, 95
MEL, FRAMES = 16, 24          # num_mel_bins, max_source_positions (48 mel frames a window)
NEW_TOKENS = 24
GENERATION = dict(decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0,
                  max_length=32, suppress_tokens=[5, 6], begin_suppress_tokens=[7, 2],
                  no_timestamps_token_id=NO_TIMESTAMPS, forced_decoder_ids=[[1, NO_TIMESTAMPS]],
                  is_multilingual=False)
DYNAMIC = ("--dynamic", "--for-generation", "--quiet")
# a static cache is allocated for the example's batch unless a dim names the axis
STATIC = ("--static-cache", "--max-cache-len", "40", "--dim", "input_ids:0=batch")
FORMATS = {"onnx": ("--format", "onnx"),
           "onnx-fused": ("--format", "onnx", "--ort-fusions", "cpu"),
           "onnx-single-token": ("--format", "onnx", "--single-token-decode"),
           "onnx-static": ("--format", "onnx", *STATIC),
           # openvino-genai's WhisperPipeline layout: encoder_model, a stateful decoder_model
           "openvino": ("--format", "openvino"),
           "openvino-stateless": ("--format", "openvino", "--disable-stateful"),
           "pt2-dynamic": ("--format", "pt2"),
           "pt2": ("--format", "pt2", *STATIC),
           "executorch": ("--format", "executorch", *STATIC)}


def _init(model, seed):
    """Values of O(1) (transformers' init makes a tiny model emit one token forever): norms
    U(0.5, 1.5), biases N(0, 0.2), embeddings N(0, 1), matrices and kernels of unit gain over
    their fan-in. The encoder's sinusoidal table stays as transformers makes it."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "encoder.embed_positions" in name:
                continue
            if p.dim() == 1 and "layer_norm" in name and name.endswith("weight"):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "embed" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = int(np.prod(p.shape[1:]))
                p.copy_(torch.randn(p.shape, generator=gen) * 1.2 / fan_in ** 0.5)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    from transformers import (GenerationConfig, WhisperConfig, WhisperFeatureExtractor,
                              WhisperForConditionalGeneration)

    config = WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=64, decoder_ffn_dim=48, num_mel_bins=MEL,
                           max_source_positions=FRAMES, max_target_positions=40,
                           decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
                           bos_token_id=1)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    _init(model, 1)
    model.generation_config = GenerationConfig(**GENERATION)
    path = tmp_path_factory.mktemp("whisper") / "ckpt"
    model.save_pretrained(path)
    WhisperFeatureExtractor(feature_size=MEL).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model(ckpt):
    from transformers import WhisperForConditionalGeneration

    return WhisperForConditionalGeneration.from_pretrained(ckpt).eval()


@pytest.fixture(scope="module", params=list(FORMATS))
def export(request, ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"whisper-{request.param}") / "out"
    ferry_export(ckpt, out, *FORMATS[request.param], *DYNAMIC)
    return request.param, out


def features(batch, seed=0):
    return torch.randn(batch, MEL, 2 * FRAMES, generator=torch.Generator().manual_seed(seed))


def test_components_match_eager(export, model):
    """The encoder's last_hidden_state and cross keys/values, then the decoder's logits over
    the init tokens and two decoded tokens (through the runners every layout is driven by, its
    cache carried in its runtime), each within FP32_ATOL of transformers' eager model."""
    from ferry import ExportedModel

    fmt, out = export
    exported = ExportedModel.from_pretrained(out)
    runners = exported.runners
    feats = features(2, seed=3)
    with torch.no_grad():
        hidden = model.model.encoder(feats).last_hidden_state
    encoder_out = runners.encoder({"input_features": feats.numpy()})
    np.testing.assert_allclose(encoder_out["last_hidden_state"], hidden.numpy(), atol=FP32_ATOL,
                               rtol=0)
    layer = model.model.decoder.layers[1].encoder_attn
    with torch.no_grad():
        key = layer.k_proj(hidden).view(2, FRAMES, 4, 8).transpose(1, 2)
    cross = [v for k, v in encoder_out.items() if k.replace("_", ".") == "present.1.cross.key"]
    # openvino-genai's layout: the decoder makes its cross keys from last_hidden_state
    assert len(cross) == (0 if fmt == "openvino" else 1), list(encoder_out)
    for value in cross:
        np.testing.assert_allclose(value, key.numpy(), atol=FP32_ATOL, rtol=0)

    runners.reset(2)
    runners.set_features(feats)
    ids = torch.tensor([[1, NO_TIMESTAMPS, 9], [1, NO_TIMESTAMPS, 40]])
    steps = [ids, torch.tensor([[11], [3]]), torch.tensor([[50], [17]])]
    seen = torch.empty(2, 0, dtype=torch.long)
    for i, step in enumerate(steps):
        seen = torch.cat([seen, step], 1)
        with torch.no_grad():
            want = model(encoder_outputs=(hidden,), decoder_input_ids=seen).logits[:, -step.shape[1]:]
        if i == 0 and not runners["prefill"].takes_prompts:
            got = np.concatenate([runners["prefill"](step[:, k:k + 1].numpy())
                                  for k in range(step.shape[1])], 1)
        else:
            got = runners["prefill" if i == 0 else "decode"](step.numpy())
        np.testing.assert_allclose(got, want.numpy(), atol=FP32_ATOL, rtol=0,
                                   err_msg=f"{fmt}: step {i}")


@pytest.mark.parametrize("batch", [1, 2])
def test_generate_matches_transformers(export, model, batch):
    """Greedy 24 tokens: the init tokens from forced_decoder_ids, begin_suppress_tokens at the
    first token and suppress_tokens at every one, as WhisperForConditionalGeneration.generate()
    applies them, and its result: the new tokens alone."""
    from ferry import ExportedModel

    fmt, out = export
    feats = features(batch, seed=batch)
    with torch.no_grad():
        want = model.generate(feats, max_new_tokens=NEW_TOKENS)
    got = ExportedModel.from_pretrained(out).generate(input_features=feats,
                                                      max_new_tokens=NEW_TOKENS)
    assert isinstance(got, torch.Tensor)
    assert got.tolist() == want.tolist(), fmt
    # a tiny random decoder settles into repeating a token; the rows still differ
    assert len(set(got.flatten().tolist())) >= 2 * batch, "one token repeated throughout"


def test_saved_files(export, ckpt):
    fmt, out = export
    manifest = json.loads((out / "export.json").read_text())
    roles = {c["role"] for c in manifest["components"].values()}
    assert roles == ({"encoder_model", "decoder_model"} if fmt == "openvino" else
                     {"encoder", "decode"} | ({"prefill"} if len(roles) == 3 else set()))
    assert (out / "preprocessor_config.json").read_text() == \
        (ckpt / "preprocessor_config.json").read_text()
    assert json.loads((out / "generation_config.json").read_text())["suppress_tokens"] == [5, 6]
    if fmt == "onnx-single-token":  # the reason is the one-token decode, not the shapes
        assert "decode takes one token" in manifest["onnxruntime_genai"]["unsupported"]
    if fmt == "openvino":
        rc, stdout, _ = run_ferry("inspect", out)
        assert rc == 0 and "openvino-genai's WhisperPipeline runs this directory" in stdout, stdout


@pytest.fixture(scope="module")
def onnx_export(ckpt, tmp_path_factory):
    out = tmp_path_factory.mktemp("whisper-errors") / "out"
    ferry_export(ckpt, out, "--format", "onnx", *DYNAMIC)
    from ferry import ExportedModel

    return ExportedModel.from_pretrained(out)


@pytest.mark.parametrize("call,needle", [
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES + 2)),
     "input_features has 50 frames, but the encoder takes exactly 48 (longer audio"),
    (dict(input_features=torch.zeros(1, MEL - 1, 2 * FRAMES)), "15 mel bins"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES), return_timestamps=True),
     "return_timestamps=True is not supported"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES), num_beams=2),
     "num_beams=2 (keyword argument) is not supported"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES), do_sample=True),
     "do_sample= is not supported by ferry's Whisper generate()"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES), language="en"),
     "has no lang_to_id"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES), max_new_tokens=39),
     "past the decoder's 40 (max_target_positions"),
    (dict(input_ids=torch.ones(1, 2, dtype=torch.long)), "takes input_features"),
    (dict(input_features=torch.zeros(1, MEL, 2 * FRAMES),
          attention_mask=torch.ones(1, 2 * FRAMES - 1, dtype=torch.long)),
     "attention_mask must be the feature extractor's, 0 or 1 over [batch, frames] = [1, 48]"),
], ids=["too-long", "mel-bins", "timestamps", "beams", "sampling", "language", "past-positions",
        "ids", "mask-shape"])
def test_generate_refusals(onnx_export, call, needle):
    from ferry import FerryError

    with pytest.raises(FerryError) as e:
        onnx_export.generate(**call)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_transformers_runner_reason_names_the_encoder(onnx_export):
    """transformers' ExportedModel cannot run a Whisper export: export.json says it is the
    encoder (its generate() runs the torch model's), not a cache naming that input_features has
    nothing to do with."""
    manifest = json.loads((Path(onnx_export.directory) / "export.json").read_text())
    why = manifest["transformers"]["unsupported"]
    assert why.startswith("component 'encoder': transformers' generate() over an export runs "
                          "the torch model's encoder"), why


def test_unknown_option_answered_with_what_whisper_takes(onnx_export):
    """The list an unknown keyword is answered with holds Whisper's own options and not the
    sampling ones its generate() refuses."""
    from ferry import FerryError

    with pytest.raises(FerryError) as e:
        onnx_export.generate(input_features=torch.zeros(1, MEL, 2 * FRAMES), beam_width=2)
    supported = str(e.value).split("(supported: ")[1]
    assert "language" in supported and "max_new_tokens" in supported
    assert "temperature" not in supported and "do_sample" not in supported


def test_feature_extractor_attention_mask_taken(onnx_export, model):
    """generate(**feature_extractor(audio, return_attention_mask=True)) runs as transformers'
    does: within the encoder's window its Whisper reads the mask for nothing, the same tokens."""
    feats = features(2, seed=5)
    mask = torch.ones(2, feats.shape[-1], dtype=torch.int32)
    mask[1, 30:] = 0  # the second clip's audio ends early, padded as the extractor pads it
    with torch.no_grad():
        want = model.generate(feats, attention_mask=mask, max_new_tokens=NEW_TOKENS)
    got = onnx_export.generate(input_features=feats, attention_mask=mask,
                               max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want.tolist()


def test_static_cache_shorter_than_the_init_tokens_refused(ckpt, tmp_path):
    """A static cache with fewer slots than the decoder prompt generate() starts from could never
    generate a token: refused when exporting, by name, not at the first generate()."""
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--for-generation", "--dynamic",
                              "--static-cache", "--max-cache-len", "1", "--quiet")
    assert rc == 2
    assert "--max-cache-len 1 is shorter than the 2-token decoder prompt" in stderr
    assert "give at least 2" in stderr
    assert not (tmp_path / "out").exists()


def test_plain_export_refused(ckpt, tmp_path):
    rc, _, stderr = run_ferry("export", ckpt, tmp_path / "out", "--quiet")
    assert rc != 0
    assert "export it for generation" in stderr and "encoder, prefill and decode" in stderr
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def window_ckpt(tmp_path_factory):
    """A tiny Whisper over the real 30 s window (3000 mel frames, which onnxruntime-genai
    requires), without suppress lists (genai's whisper search applies none)."""
    from transformers import GenerationConfig, WhisperConfig, WhisperForConditionalGeneration

    config = WhisperConfig(vocab_size=VOCAB, d_model=32, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4,
                           encoder_ffn_dim=64, decoder_ffn_dim=48, num_mel_bins=MEL,
                           max_source_positions=1500, max_target_positions=40,
                           decoder_start_token_id=1, pad_token_id=0, eos_token_id=2,
                           bos_token_id=1)
    torch.manual_seed(0)
    model = WhisperForConditionalGeneration(config).eval()
    _init(model, 9)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=1, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        no_timestamps_token_id=NO_TIMESTAMPS, forced_decoder_ids=[[1, NO_TIMESTAMPS]],
        is_multilingual=False, max_length=40)
    path = tmp_path_factory.mktemp("whisper-window") / "ckpt"
    model.save_pretrained(path)
    return path, model


@pytest.mark.parametrize("fusions", ["none", "cpu"])
def test_onnxruntime_genai_runs_it_as_is(window_ckpt, tmp_path, fusions):
    """genai's whisper model type over ferry's files (its genai_config.json names ferry's
    inputs and outputs; the encoder hands the cross cache to the decoder): the same greedy
    tokens as transformers' generate()."""
    og = pytest.importorskip("onnxruntime_genai")
    ckpt, model = window_ckpt
    out = ferry_export(ckpt, tmp_path / "out", "--format", "onnx", "--ort-fusions", fusions,
                       *DYNAMIC)
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["onnxruntime_genai"] == {"config": "genai_config.json",
                                             "processor_config": "audio_processor_config.json"}
    steps = json.loads((out / "audio_processor_config.json").read_text())
    assert steps["feature_extraction"]["sequence"][-1]["operation"]["attrs"]["n_mel"] == MEL
    feats = torch.randn(1, MEL, 3000, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        want = model.generate(feats, max_new_tokens=20)[0].tolist()
    generator_model = og.Model(str(out))
    params = og.GeneratorParams(generator_model)
    params.set_search_options(max_length=22, do_sample=False, batch_size=1)
    generator = og.Generator(generator_model, params)
    inputs = og.NamedTensors()
    inputs["input_features"] = feats.numpy()
    inputs["input_ids"] = np.array([[1, NO_TIMESTAMPS]], np.int32)
    generator.set_inputs(inputs)
    while not generator.is_done():
        generator.generate_next_token()
    got = [int(t) for t in generator.get_sequence(0)][2:]
    eos = next((i for i, t in enumerate(want) if t == 2), len(want))
    assert got[:eos] == want[:eos]
    assert len(set(want)) > 2


@pytest.mark.parametrize("call", [dict(language="fr", task="translate"), dict(language="en"),
                                  dict(language="english", task="transcribe")],
                         ids=["fr-translate", "en", "english-transcribe"])
def test_multilingual_init_tokens(ckpt, model, tmp_path, call):
    """A multilingual generation config (lang_to_id, task_to_id): the language and task tokens
    after decoder_start_token_id as transformers' _retrieve_init_tokens places them, from a
    code, a token or a language's name."""
    import shutil

    from ferry import ExportedModel
    from transformers import GenerationConfig

    multi = tmp_path / "ckpt"
    shutil.copytree(ckpt, multi)
    settings = dict(GENERATION, is_multilingual=True, forced_decoder_ids=[[1, None], [2, 92]],
                    lang_to_id={"<|en|>": 90, "<|fr|>": 91},
                    task_to_id={"transcribe": 92, "translate": 93})
    GenerationConfig(**settings).save_pretrained(multi)
    out = ferry_export(multi, tmp_path / "out", "--format", "onnx", *DYNAMIC)
    feats = features(2, seed=7)
    reference = type(model).from_pretrained(multi).eval()
    with torch.no_grad():
        want = reference.generate(feats, max_new_tokens=12, **call)
    exported = ExportedModel.from_pretrained(out)
    assert exported.generate(input_features=feats, max_new_tokens=12, **call).tolist() == \
        want.tolist()
    if call == dict(language="en"):
        from ferry import FerryError

        with pytest.raises(FerryError, match="would detect the language first"):
            exported.generate(input_features=feats, max_new_tokens=12)


@pytest.mark.parametrize("flags", [("--format", "onnx"), ("--format", "onnx", "--quantize", "int4"),
                                   ("--format", "openvino"),
                                   ("--format", "pt2", *STATIC)],
                         ids=["onnx", "onnx-int4", "openvino", "pt2"])
def test_validate(export_env, ckpt, tmp_path, flags):
    """`ferry validate`: seeded features through the encoder, a prompt and 8 greedy steps
    through the decoders, against the eager model's logits; an int4 export's encoder is
    float (export.json's float_weights) and its decoders int4."""
    out = ferry_export(ckpt, tmp_path / "out", *flags, *DYNAMIC)
    rc, stdout, stderr = run_ferry("validate", out, env=export_env)
    assert rc == 0, stdout + stderr
    assert "PASS" in stdout and "decode: logits, 8 steps" in stdout, stdout
    manifest = json.loads((out / "export.json").read_text())
    floats = {n for n, c in manifest["components"].items()
              if c["metadata"].get("float_weights")}
    assert floats == ({"encoder"} if "--quantize" in flags else set())


@pytest.fixture(scope="module")
def export_env():
    """`ferry validate` runs this Python, with the package from the source tree."""
    import os
    import sys

    from conftest import ROOT

    return {"FERRY_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join([str(ROOT / "python"),
                                           os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("max_length", [5, 10])
def test_max_length_counts_after_the_init_tokens(onnx_export, model, max_length):
    """transformers' Whisper reads max_length as the new tokens' count (it adds the init
    tokens), up to max_target_positions."""
    feats = features(2, seed=11)
    with torch.no_grad():
        want = model.generate(feats, max_length=max_length)
    assert onnx_export.generate(input_features=feats, max_length=max_length).tolist() == \
        want.tolist()


@pytest.mark.parametrize("as_list", [False, True], ids=["one-id", "list"])
def test_eos_in_the_returned_rows(onnx_export, model, as_list):
    """A row's final eos: transformers' Whisper drops it when eos_token_id is one id and keeps
    it for a list (its comparison of the last token with a list never holds)."""
    feats = features(2, seed=5)
    with torch.no_grad():
        free = model.generate(feats, max_new_tokens=NEW_TOKENS, eos_token_id=None).tolist()
    stop = free[0][3]  # a token row 0 makes, so that it ends there
    eos = [stop, 2] if as_list else stop
    with torch.no_grad():
        want = model.generate(feats, max_new_tokens=NEW_TOKENS, eos_token_id=eos).tolist()
    got = onnx_export.generate(input_features=feats, max_new_tokens=NEW_TOKENS,
                               eos_token_id=eos).tolist()
    assert got == want
    assert (stop in want[0]) == as_list  # the case the test is about happened


def test_generation_config_do_sample_stays_greedy(ckpt, model, tmp_path):
    """do_sample in generation_config.json: transformers' Whisper samples only for a
    temperature given to generate(), so it decodes greedily; so must ferry."""
    import shutil

    from ferry import ExportedModel

    out = tmp_path / "out"
    ferry_export(ckpt, out, "--format", "onnx", *DYNAMIC)
    saved = json.loads((out / "generation_config.json").read_text())
    sampling = dict(do_sample=True, temperature=0.9, top_k=3)
    (out / "generation_config.json").write_text(json.dumps({**saved, **sampling}))
    feats = features(2, seed=6)
    with torch.no_grad():
        greedy = model.generate(feats, max_new_tokens=NEW_TOKENS).tolist()
        sampler = type(model.generation_config).from_dict({**saved, **sampling})
        want = model.generate(feats, generation_config=sampler,
                              max_new_tokens=NEW_TOKENS).tolist()
    assert want == greedy
    got = ExportedModel.from_pretrained(out).generate(input_features=feats,
                                                      max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want
    shutil.rmtree(out)


def test_static_shapes_take_the_init_tokens(ckpt, model, tmp_path):
    """Without --dynamic the decoder's prompt axis is the generation config's init tokens (not
    the 8-token default example), so a static-shape export with a static cache runs
    generate()."""
    from ferry import ExportedModel

    out = tmp_path / "out"
    ferry_export(ckpt, out, "--format", "onnx", "--for-generation", "--quiet", *STATIC)
    feats = features(1, seed=8)
    with torch.no_grad():
        want = model.generate(feats, max_new_tokens=NEW_TOKENS)
    got = ExportedModel.from_pretrained(out).generate(input_features=feats,
                                                      max_new_tokens=NEW_TOKENS)
    assert got.tolist() == want.tolist()


def test_runner_refuses_positions_past_the_table(onnx_export):
    """The decoder's learned positions stop at max_target_positions (40): a runner call past
    them is refused by name (onnxruntime failed inside the graph, OpenVINO's Gather read zeros
    and ran on); export.json carries the table's rows, written by ferry from config.json."""
    from ferry import FerryError

    manifest = json.loads((Path(onnx_export.directory) / "export.json").read_text())
    assert manifest["generation"]["max_positions"] == 40
    runners = onnx_export.runners
    runners.set_features(features(1).numpy())
    runners["prefill"](np.array([[1, NO_TIMESTAMPS]]))
    for _ in range(38):
        runners["decode"](np.array([[9]]))
    with pytest.raises(FerryError) as e:
        runners["decode"](np.array([[9]]))
    assert "40 cached + 1 new tokens need 41 positions, past the 40" in str(e.value)


def test_static_shapes_without_a_static_cache_refused_before_running(ckpt, tmp_path):
    """A static-shape decode takes a cache of exactly the prompt's length: a longer generation
    is refused by name before anything runs (it failed inside onnxruntime at the second step:
    Whisper's decode takes no attention_mask, which is what the check read)."""
    from ferry import ExportedModel, FerryError

    out = tmp_path / "out"
    ferry_export(ckpt, out, "--format", "onnx", "--for-generation", "--quiet")
    with pytest.raises(FerryError) as e:
        ExportedModel.from_pretrained(out).generate(input_features=features(1), max_new_tokens=4)
    assert "past what the export takes" in str(e.value) and "cache input" in str(e.value)
    # the prompt fills the cache: one decode step after it, two new tokens in all
    assert "(max_new_tokens=2 fits)" in str(e.value) and "\n" not in str(e.value)


def _variant(ckpt, tmp_path, generation=None, config=None):
    """A copy of the checkpoint with generation_config.json / config.json keys replaced (a
    value None: the key removed)."""
    import shutil

    path = tmp_path / "ckpt"
    shutil.copytree(ckpt, path)
    for name, changes in (("generation_config.json", generation), ("config.json", config)):
        data = json.loads((path / name).read_text())
        for key, value in (changes or {}).items():
            data.pop(key, None) if value is None else data.__setitem__(key, value)
        (path / name).write_text(json.dumps(data))
    return path


def test_forced_decoder_ids_from_config_json(ckpt, tmp_path):
    """No forced_decoder_ids in generation_config.json: transformers' Whisper takes
    config.json's, and so does ferry (the prompt and, static, the prompt's shape)."""
    from transformers import WhisperForConditionalGeneration

    from ferry import ExportedModel

    path = _variant(ckpt, tmp_path, generation={"forced_decoder_ids": None},
                    config={"forced_decoder_ids": [[1, 9], [2, NO_TIMESTAMPS]]})
    model = WhisperForConditionalGeneration.from_pretrained(path).eval()
    feats = features(1, seed=12)
    with torch.no_grad():
        want = model.generate(feats, max_new_tokens=8).tolist()
    for flags in (DYNAMIC, ("--for-generation", "--quiet", *STATIC)):
        out = tmp_path / f"out-{len(flags)}"
        ferry_export(path, out, "--format", "onnx", *flags)
        got = ExportedModel.from_pretrained(out).generate(input_features=feats,
                                                          max_new_tokens=8)
        assert got.tolist() == want, flags


def test_init_tokens_filling_the_positions_refused(ckpt, tmp_path):
    from ferry import ExportedModel, FerryError

    # start, 38 forced, <|notimestamps|>: 40 init tokens, max_target_positions
    forced = [[i, 9] for i in range(1, 39)]
    path = _variant(ckpt, tmp_path, generation={"forced_decoder_ids": forced})
    out = tmp_path / "out"
    ferry_export(path, out, "--format", "onnx", *DYNAMIC)
    with pytest.raises(FerryError) as e:
        ExportedModel.from_pretrained(out).generate(input_features=features(1))
    assert "40 init tokens leave no position for a new token: the decoder has 40" in str(e.value)
