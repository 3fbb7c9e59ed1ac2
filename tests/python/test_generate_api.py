"""ExportedModel.generate() and .runners against transformers' generate() on the same checkpoint.

Every family of conftest's ARCHS (Mistral with a sliding window of 8, crossed while generating)
is exported in every generation layout ferry writes: ONNX prefill + single-token decode, the
default multi-token decode, static cache (prefill + decode) and static cache in one graph;
OpenVINO stateful, and stateless in the same four layouts. Greedy generate() must equal
model.generate(do_sample=False) token for token, batch 1 and a left-padded batch 2. Sampling:
the warpers equal transformers' on the same scores, the first sampled token follows the
reference distribution, seeds reproduce and differ, top_k=1 is greedy. eos stops and pads a
row, min_new_tokens and repetition_penalty match transformers, generation_config.json is read,
and what generate() does not do is refused by name. The runners load the weights once: the
decode graph takes prompts where it can, and two onnxruntime sessions share one mapping (peak
RSS measured in a subprocess against the single-graph export's)."""

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from conftest import ARCHS, FERRY_BUILD, ROOT, ferry_export, make_checkpoint, reference_model

NEW_TOKENS = 24
MAX_CACHE_LEN = 64
SLIDING_WINDOW = 8

GEN = ["--dynamic", "--for-generation"]
# a static cache is allocated for the example's batch unless a dim names the axis
STATIC = [*GEN, "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN), "--dim",
          "input_ids:0=batch"]
OV = ["--format", "openvino"]
# layout -> (export flags, the components the runners load)
LAYOUTS = {
    "prefill_decode": ([*GEN, "--single-token-decode"], ["prefill", "decode"]),
    "multi_token_decode": (GEN, ["decode"]),
    "static": (STATIC, ["prefill", "decode"]),
    "static_one_graph": ([*STATIC, "--multi-token-decode"], ["decode"]),
    "openvino_stateful": ([*OV, *GEN], ["decode"]),
    "openvino_prefill_decode": ([*OV, *GEN, "--disable-stateful", "--single-token-decode"],
                                ["prefill", "decode"]),
    "openvino_stateless": ([*OV, *GEN, "--disable-stateful"], ["decode"]),
    "openvino_static": ([*OV, *STATIC, "--disable-stateful"], ["prefill", "decode"]),
    "openvino_static_one_graph": ([*OV, *STATIC, "--disable-stateful", "--multi-token-decode"],
                                  ["decode"]),
}


class Family:
    """One family's tiny checkpoint, its exports (loaded once) and generate()'s references."""

    def __init__(self, root, arch):
        overrides = {"sliding_window": SLIDING_WINDOW} if arch == "mistral" else {}
        self.root, self.arch = root, arch
        self.ckpt = make_checkpoint(root / "ckpt", arch, seed=11, **overrides)
        self._exports, self._loaded = {}, {}

    def export(self, layout):
        if layout not in self._exports:
            self._exports[layout] = ferry_export(self.ckpt, self.root / layout,
                                                 *LAYOUTS[layout][0], "--quiet")
        return self._exports[layout]

    def loaded(self, layout):
        from ferry import ExportedModel

        if layout not in self._loaded:
            self._loaded[layout] = ExportedModel.from_pretrained(self.export(layout))
        return self._loaded[layout]

    def reference(self, ids, mask, **kwargs):
        model = reference_model(self.ckpt)
        kwargs.setdefault("pad_token_id", 0)
        with torch.no_grad():
            return model.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                  **kwargs).numpy()


@pytest.fixture(scope="module")
def families(tmp_path_factory):
    made = {}

    def get(arch):
        if arch not in made:
            made[arch] = Family(tmp_path_factory.mktemp(f"generate-{arch}"), arch)
        return made[arch]

    return get


def prompt(batch, width=11, seed=5):
    """Random ids [batch, width]; row 1 left-padded to 4 real tokens (pad id 0 underneath)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, 160, (batch, width)).astype(np.int64)
    mask = np.ones_like(ids)
    if batch > 1:
        mask[1, :width - 4] = 0
        ids[1, :width - 4] = 0
    return ids, mask


def first_difference(got, want):
    if got.shape != want.shape:
        return f"shapes {got.shape} vs {want.shape}"
    row, col = map(int, np.argwhere(got != want)[0])
    return f"row {row} column {col}:\nferry    {got[row].tolist()}\ngenerate {want[row].tolist()}"


# ---------------------------------------------------------------------------------------------
# greedy: every family x every layout x batch 1 and left-padded batch 2


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("arch", list(ARCHS))
def test_greedy_equals_transformers(families, arch, layout, batch):
    fam = families(arch)
    exported = fam.loaded(layout)
    ids, mask = prompt(batch)
    got = exported.generate(ids, mask, max_new_tokens=NEW_TOKENS)
    want = fam.reference(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    assert got.dtype == np.int64 and want.shape == (batch, ids.shape[1] + NEW_TOKENS)
    assert np.array_equal(got, want), f"{arch} {layout}: {first_difference(got, want)}"
    assert exported.runners.components == LAYOUTS[layout][1]
    runners = exported.runners
    if LAYOUTS[layout][1] == ["decode"]:  # prompts go through decode: no prefill session
        assert runners["prefill"] is runners["decode"]
    assert runners.cache_length == ids.shape[1] + NEW_TOKENS - 1


def test_torch_in_torch_out_and_fresh_export(families):
    """A torch prompt gives a torch tensor; an export not yet saved is saved aside first."""
    from ferry import OnnxConfig, OnnxExporter

    fam = families("qwen3")
    exported = OnnxExporter().export_for_generation(fam.ckpt, config=OnnxConfig(dynamic=True))
    assert exported.directory is None
    ids, mask = prompt(2)
    got = exported.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                            max_new_tokens=8)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64
    assert exported.directory is not None
    assert np.array_equal(got.numpy(), fam.reference(ids, mask, max_new_tokens=8,
                                                     do_sample=False))


# ---------------------------------------------------------------------------------------------
# the runners


def test_static_cache_is_updated_in_place(families):
    """After generate() the cache's own numpy buffers (bound to both sessions through IOBinding)
    hold the counters and exactly the written slots: nothing was copied back."""
    fam = families("llama")
    exported = fam.loaded("static")
    ids, mask = prompt(2)
    exported.generate(ids, mask, max_new_tokens=NEW_TOKENS)
    written = ids.shape[1] + NEW_TOKENS - 1
    buffers = {n: array for n, (array, _) in exported.runners.cache.buffers.items()}
    counters = [int(a[0]) for n, a in buffers.items() if n.endswith("cumulative_length")]
    assert counters == [written] * 2, counters
    for name, array in buffers.items():
        if not name.endswith("cumulative_length"):
            filled = np.flatnonzero(np.any(array[0] != 0, axis=(0, 2))).tolist()
            assert filled == list(range(written)), (name, filled)


def test_runners_driven_by_hand_equal_generate(families):
    """runners["prefill"] then runners["decode"], fed by the caller: generate()'s tokens."""
    fam = families("qwen2")
    exported = fam.loaded("prefill_decode")
    runners = exported.runners
    ids, mask = prompt(2)
    runners.reset(2)
    logits = runners["prefill"](ids, mask)
    assert logits.shape == (2, ids.shape[1], 160) and logits.dtype == np.float32
    tokens = []
    for _ in range(6):
        tokens.append(logits[:, -1].argmax(-1))
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
        logits = runners["decode"](tokens[-1][:, None], mask)
    want = exported.generate(ids, prompt(2)[1], max_new_tokens=6)
    assert np.array_equal(np.stack(tokens, 1), want[:, ids.shape[1]:])


def test_runner_errors(families):
    from ferry import FerryError

    runners = families("qwen2").loaded("prefill_decode").runners
    ids, mask = prompt(2)
    runners.reset(2)
    runners["prefill"](ids, mask)
    with pytest.raises(FerryError, match="starts a sequence.*reset"):
        runners["prefill"](ids, mask)
    with pytest.raises(FerryError, match="3 rows but the cache holds 2"):
        runners["decode"](np.zeros((3, 1), np.int64))
    with pytest.raises(FerryError, match=r"attention_mask has shape \[2, 5\], not \[2, 12\]"):
        runners["decode"](np.zeros((2, 1), np.int64), np.ones((2, 5), np.int64))
    with pytest.raises(FerryError, match="input_ids would be"):  # single-token decode
        runners["decode"](np.zeros((2, 2), np.int64))


def test_shared_int4_weights_equal_onnxruntime_loading_them(families, tmp_path):
    """An int4 export's two sessions get the packed 4-bit initializers from our mapping (numpy
    has no 4-bit type): the tokens equal a loop over two default sessions, where onnxruntime
    reads model.onnx.data itself."""
    import onnxruntime as ort

    from ferry import ExportedModel

    fam = families("qwen3")
    out = ferry_export(fam.ckpt, tmp_path / "int4", *LAYOUTS["prefill_decode"][0], "--quantize",
                       "int4", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    assert "quantizer" in manifest["components"]["decode"]["metadata"]["export_config"]
    ids, mask = prompt(2)
    got = ExportedModel.from_pretrained(out).generate(ids, mask, max_new_tokens=12)
    pairs = manifest["components"]["decode"]["metadata"]["cache"]["pairs"]
    to_past = {p["output"]: p["input"] for p in pairs}
    prefill, decode = (ort.InferenceSession(str(out / f"{name}.onnx"),
                                            providers=["CPUExecutionProvider"])
                       for name in ("prefill", "decode"))
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    names = [o.name for o in prefill.get_outputs()]
    outs = dict(zip(names, prefill.run(names, {"input_ids": ids, "attention_mask": mask,
                                               "position_ids": pos})))
    tokens = []
    for _ in range(12):
        tokens.append(outs["logits"][:, -1].argmax(-1))
        mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
        names = [o.name for o in decode.get_outputs()]
        outs = dict(zip(names, decode.run(names, {
            "input_ids": tokens[-1][:, None], "attention_mask": mask,
            "position_ids": mask.sum(-1, keepdims=True) - 1,
            **{to_past[n]: outs[n] for n in to_past}})))
    assert np.array_equal(got[:, ids.shape[1]:], np.stack(tokens, 1))


def _peak_rss_mib(export, script):
    """Peak RSS (MiB) of a fresh Python process that imports ferry and runs `script` on the
    export (without torch or transformers). Read from VmHWM: a child's ru_maxrss would start
    at this (large) process's, which it inherits across exec."""
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "python")!r})
        import numpy as np
        from ferry import ExportedModel
        exported = ExportedModel.from_pretrained({str(export)!r})
        ids = np.arange(3, 35, dtype=np.int64)[None]
        {script}
        print(next(int(line.split()[1]) for line in open("/proc/self/status")
                   if line.startswith("VmHWM:")) // 1024)
        """)
    env = {"FERRY_LIB": str(FERRY_BUILD / "libferry.so"), "OMP_NUM_THREADS": "1",
           "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[-1])


def test_prefill_and_decode_sessions_share_the_weights(tmp_path):
    """A single-token-decode export needs two onnxruntime sessions; with the weights shared
    (one mapping, no per-session prepacked copy) its peak RSS stays within 10% of running
    the single-graph export of the same checkpoint (two default sessions: ~1.4x here)."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", hidden_size=256, intermediate_size=704,
                           num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                           head_dim=64, vocab_size=32000)
    plain = ferry_export(ckpt, tmp_path / "plain", "--dynamic", "--quiet")
    gen = ferry_export(ckpt, tmp_path / "gen", *GEN, "--single-token-decode", "--quiet")
    weights = (plain / "model.onnx.data").stat().st_size >> 20
    assert weights >= 60
    single = _peak_rss_mib(plain, "exported(input_ids=ids)")
    two = _peak_rss_mib(gen, "exported.generate(ids, max_new_tokens=8)")
    assert two <= 1.1 * single, (f"generation runners peak {two} MiB vs the single graph's "
                                 f"{single} MiB ({weights} MiB of weights)")


# ---------------------------------------------------------------------------------------------
# settings: eos, pad, min_new_tokens, repetition_penalty, generation_config.json


def _eos_candidate(fam, ids, mask):
    """(a token row 0 first emits at step >= 3 of greedy generation and row 1 never emits, so
    that as eos it stops row 0 while row 1 continues; that step; a token neither row emits)."""
    greedy = fam.reference(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False)
    new = greedy[:, ids.shape[1]:]
    unused = max(set(range(160)) - set(new.ravel().tolist()))
    for step in range(3, NEW_TOKENS - 2):
        if new[0, step] not in new[0, :step] and new[0, step] not in new[1]:
            return int(new[0, step]), step, unused
    raise AssertionError(f"no token of row 0 is absent from row 1: {new.tolist()}")


@pytest.mark.parametrize("layout", ["multi_token_decode", "static", "openvino_stateful"])
def test_eos_stops_a_row_and_pads_it(families, layout):
    fam = families("qwen3")
    ids, mask = prompt(2)
    eos, step, unused = _eos_candidate(fam, ids, mask)
    got = fam.loaded(layout).generate(ids, mask, max_new_tokens=NEW_TOKENS,
                                      eos_token_id=[unused, eos], pad_token_id=7)
    want = fam.reference(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                         eos_token_id=[unused, eos], pad_token_id=7)
    assert np.array_equal(got, want), first_difference(got, want)
    row = got[0, ids.shape[1]:]
    assert row[step] == eos and (row[step + 1:] == 7).all() and len(row) > step + 1


def test_eos_and_pad_from_generation_config_json(families, tmp_path):
    """The export's generation_config.json gives eos and pad; a keyword argument wins; when
    every row has finished generation stops (a shorter result, as transformers')."""
    from ferry import ExportedModel

    fam = families("llama")
    ids, mask = prompt(2)
    eos, _, _ = _eos_candidate(fam, ids, mask)
    out = shutil.copytree(fam.export("multi_token_decode"), tmp_path / "export")
    config = json.loads((out / "generation_config.json").read_text())
    config.update(eos_token_id=eos, pad_token_id=5)
    (out / "generation_config.json").write_text(json.dumps(config))
    exported = ExportedModel.from_pretrained(out)
    got = exported.generate(ids[:1], mask[:1], max_new_tokens=NEW_TOKENS)
    want = fam.reference(ids[:1], mask[:1], max_new_tokens=NEW_TOKENS, do_sample=False,
                         eos_token_id=eos, pad_token_id=5)
    assert np.array_equal(got, want) and got.shape[1] < ids.shape[1] + NEW_TOKENS
    got = exported.generate(ids, mask, max_new_tokens=NEW_TOKENS, pad_token_id=9)
    want = fam.reference(ids, mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                         eos_token_id=eos, pad_token_id=9)
    assert np.array_equal(got, want), first_difference(got, want)
    assert 9 in got[0] and 5 not in got[0, ids.shape[1]:]
    # an explicit None is "no eos", as transformers' generate() takes it (the
    # export's eos still stopped the row)
    got = exported.generate(ids[:1], mask[:1], max_new_tokens=NEW_TOKENS, eos_token_id=None)
    want = fam.reference(ids[:1], mask[:1], max_new_tokens=NEW_TOKENS, do_sample=False,
                         eos_token_id=None)
    assert np.array_equal(got, want), first_difference(got, want)
    assert got.shape[1] == ids.shape[1] + NEW_TOKENS and eos in got[0, ids.shape[1]:]


def test_min_new_tokens_and_repetition_penalty_match_transformers(families):
    fam = families("mistral")
    exported = fam.loaded("prefill_decode")
    ids, mask = prompt(2)
    eos, step, _ = _eos_candidate(fam, ids, mask)
    for kwargs in ({"eos_token_id": eos, "min_new_tokens": step + 4,
                    "max_new_tokens": NEW_TOKENS},
                   {"repetition_penalty": 1.8, "max_new_tokens": NEW_TOKENS},
                   {"repetition_penalty": 0.6, "max_new_tokens": NEW_TOKENS},
                   {"eos_token_id": eos, "min_length": ids.shape[1] + step + 2},
                   {"max_length": ids.shape[1] + 10}, {}):  # {}: 20 new tokens
        got = exported.generate(ids, mask, **kwargs)
        want = fam.reference(ids, mask, **kwargs, do_sample=False)
        assert np.array_equal(got, want), f"{kwargs}: {first_difference(got, want)}"
    plain = exported.generate(ids, mask, max_new_tokens=NEW_TOKENS)
    assert not np.array_equal(plain, exported.generate(ids, mask, max_new_tokens=NEW_TOKENS,
                                                       repetition_penalty=1.8))


# ---------------------------------------------------------------------------------------------
# sampling


def test_warpers_equal_transformers():
    """temperature, top_k, top_p and min_p remove the tokens transformers' warpers remove and
    scale the rest alike, in transformers' order."""
    from transformers.generation.logits_process import (MinPLogitsWarper,
                                                        TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    from ferry.generation import _DEFAULTS, _warp

    rng = np.random.default_rng(0)
    scores = (rng.standard_normal((4, 160)) * 3).astype(np.float32)
    for temperature, top_k, top_p, min_p in [(1.0, 0, 1.0, None), (0.7, 20, 1.0, None),
                                             (1.3, 0, 0.8, None), (0.5, 50, 0.9, 0.05),
                                             (1.0, 1, 1.0, None), (2.0, 0, 1.0, 0.2)]:
        settings = dict(_DEFAULTS, temperature=temperature, top_k=top_k, top_p=top_p,
                        min_p=min_p)
        got = _warp(scores, settings)
        want = torch.from_numpy(scores)
        warpers = [TemperatureLogitsWarper(temperature)]
        warpers += [TopKLogitsWarper(top_k)] if top_k else []
        warpers += [TopPLogitsWarper(top_p)] if top_p < 1 else []
        warpers += [MinPLogitsWarper(min_p)] if min_p is not None else []
        for warper in warpers:
            want = warper(None, want)
        want = want.numpy()
        assert np.array_equal(np.isfinite(got), np.isfinite(want)), (temperature, top_k, top_p)
        kept = np.isfinite(want)
        assert np.allclose(got[kept], want[kept], rtol=1e-5), (temperature, top_k, top_p)
        assert 0 < kept.sum() < kept.size or (top_k, top_p, min_p) == (0, 1.0, None)


def test_sampled_first_token_follows_the_reference_distribution(families):
    """4096 rows of one prompt, one sampled token each: the frequencies are transformers'
    softmax(top_k(logits / temperature)) of the eager model within a total variation of 0.05
    (the sampling error expected here is ~0.015; with the temperature ignored the distance
    would be ~0.25, and a token outside the top k fails at once)."""
    from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper

    fam = families("qwen3")
    ids, _ = prompt(1)
    rows = np.repeat(ids, 4096, axis=0)
    got = fam.loaded("multi_token_decode").generate(rows, do_sample=True, temperature=0.4,
                                                    top_k=6, max_new_tokens=1, seed=3)
    with torch.no_grad():
        logits = reference_model(fam.ckpt)(torch.from_numpy(ids)).logits[:, -1]
    want = TopKLogitsWarper(6)(None, TemperatureLogitsWarper(0.4)(None, logits))
    want = torch.softmax(want, -1)[0].numpy()
    freq = np.bincount(got[:, -1], minlength=want.size) / len(rows)
    assert set(np.flatnonzero(freq)) <= set(np.flatnonzero(want))
    assert 0.5 * np.abs(freq - want).sum() < 0.05, (freq[want > 0], want[want > 0])


@pytest.mark.parametrize("layout", ["multi_token_decode", "static", "openvino_stateful"])
def test_sampling_seeds(families, layout):
    fam = families("gemma")
    exported = fam.loaded(layout)
    ids, mask = prompt(2)
    sample = dict(do_sample=True, temperature=1.5, top_k=0, max_new_tokens=16)
    first = exported.generate(ids, mask, seed=1, **sample)
    assert np.array_equal(first, exported.generate(ids, mask, seed=1, **sample))
    assert not np.array_equal(first, exported.generate(ids, mask, seed=2, **sample))
    greedy = exported.generate(ids, mask, max_new_tokens=16)
    assert np.array_equal(greedy, exported.generate(ids, mask, do_sample=True, top_k=1, seed=4,
                                                    max_new_tokens=16))
    assert not np.array_equal(greedy, first)


def test_sampling_from_generation_config_json(families, tmp_path):
    """do_sample and its settings come from the export's generation_config.json (as transformers
    reads a checkpoint's); do_sample=False in the call wins."""
    from ferry import ExportedModel

    fam = families("qwen2")
    out = shutil.copytree(fam.export("multi_token_decode"), tmp_path / "export")
    config = json.loads((out / "generation_config.json").read_text())
    config.update(do_sample=True, temperature=2.0, top_k=0, top_p=1.0)
    (out / "generation_config.json").write_text(json.dumps(config))
    exported = ExportedModel.from_pretrained(out)
    ids, mask = prompt(2)
    greedy = fam.loaded("multi_token_decode").generate(ids, mask, max_new_tokens=12)
    sampled = exported.generate(ids, mask, max_new_tokens=12, seed=0)
    assert not np.array_equal(sampled, greedy)
    assert np.array_equal(exported.generate(ids, mask, max_new_tokens=12, do_sample=False),
                          greedy)


# ---------------------------------------------------------------------------------------------
# errors


def test_generate_on_a_plain_export(families, tmp_path):
    from ferry import ExportedModel, FerryError

    fam = families("llama")
    plain = ExportedModel.from_pretrained(ferry_export(fam.ckpt, tmp_path / "plain", "--dynamic",
                                                       "--quiet"))
    with pytest.raises(FerryError, match="no generation components.*model \\(role model\\)"):
        plain.generate(prompt(1)[0], max_new_tokens=4)
    with pytest.raises(FerryError, match="no generation components"):
        plain.runners


def test_unsupported_settings_are_refused_by_name(families, tmp_path):
    from ferry import ExportedModel, FerryError

    fam = families("llama")
    exported = fam.loaded("multi_token_decode")
    ids, _ = prompt(1)
    with pytest.raises(FerryError, match="unknown keyword arguments: foo, output_scores"):
        exported.generate(ids, max_new_tokens=4, foo=1, output_scores=True)
    with pytest.raises(FerryError, match="num_beams=4 \\(keyword argument\\) is not supported"):
        exported.generate(ids, max_new_tokens=4, num_beams=4)
    assert exported.generate(ids, max_new_tokens=4, num_beams=1).shape == (1, ids.shape[1] + 4)
    with pytest.raises(FerryError, match="top_p must be a number in \\(0.0, 1.0\\]"):
        exported.generate(ids, max_new_tokens=4, do_sample=True, top_p=1.5)
    with pytest.raises(FerryError, match="max_new_tokens must be an integer >= 1"):
        exported.generate(ids, max_new_tokens=0)
    with pytest.raises(FerryError, match="max_length 20 leaves no room"):
        exported.generate(np.ones((1, 25), np.int64), max_length=20)
    with pytest.raises(FerryError, match="outside the vocabulary"):
        exported.generate(ids + 1000, max_new_tokens=4)
    out = shutil.copytree(fam.export("multi_token_decode"), tmp_path / "export")
    config = json.loads((out / "generation_config.json").read_text())
    config.update(no_repeat_ngram_size=3)
    (out / "generation_config.json").write_text(json.dumps(config))
    with pytest.raises(FerryError, match="no_repeat_ngram_size=3 \\(the export's "
                                         "generation_config.json\\)"):
        ExportedModel.from_pretrained(out).generate(ids, max_new_tokens=4)


def test_shapes_the_export_cannot_take(families, tmp_path):
    from ferry import ExportedModel, FerryError

    fam = families("qwen3")
    ids, _ = prompt(1)
    # the prompt and max_new_tokens named, as what asks for more (only the
    # last step's numbers, which read as if the cache held them already), and the most that fit:
    # the prompt and all but the last new token in the cache's slots
    with pytest.raises(FerryError, match=f"a {ids.shape[1]}-token prompt and {MAX_CACHE_LEN} new "
                       f"tokens would take .* \\(max_new_tokens="
                       f"{MAX_CACHE_LEN - ids.shape[1] + 1} fits\\).*static cache has "
                       f"{MAX_CACHE_LEN} slots"):
        fam.loaded("static").generate(ids, max_new_tokens=MAX_CACHE_LEN)
    traced = ExportedModel.from_pretrained(ferry_export(fam.ckpt, tmp_path / "traced",
                                                        "--for-generation", "--quiet"))
    with pytest.raises(FerryError, match="needs an export with dynamic shapes"):
        traced.generate(ids, max_new_tokens=4)
