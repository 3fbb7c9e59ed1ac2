"""Interop with transformers' exporters (transformers.exporters, the pinned 5.x).

ferry -> transformers: `ExportedModel.from_pretrained(ferry_dir)(**inputs)` runs a ferry export
in transformers' own runners, called with a tokenizer's output as transformers' exports are,
and returns transformers' eager logits for the same call (1e-4), for every family, in ONNX,
OpenVINO and pt2, and the pytree specs ferry writes in C are byte for byte what torch's
treespec_dumps writes. Exports transformers cannot run say why in export.json
(test_transformers_loader.py has batch 1, left padding and --inputs).

transformers -> ferry: an export transformers' exporter wrote (made here by OnnxExporter /
OpenVINOExporter) is loaded by ferry's ExportedModel and listed by `ferry inspect`; malformed
ExportMetadata keys in it are refused with one line naming export.json, component and key.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

from conftest import (ARCHS, FIXTURE, FP32_ATOL, ROOT, assert_logits_close, ferry_builds, ferry_export,
                      make_checkpoint, make_inputs, output_class, reference_logits,
                      reference_model, run_ferry)

from transformers.exporters import ExportedModel as HfExportedModel  # noqa: E402

VOCAB = 160
# a plain export's inputs: a tokenizer's output, as transformers' exports take it
INPUTS = ["input_ids", "attention_mask"]
# batch 2 padded (row 1 left-padded by a third), one token, and batch 3 down to one real token
SHAPES = [(2, 7), (1, 1), (3, 12)]


def hf_call(exported, ids, mask, pos=None, arch="llama"):
    """transformers' ExportedModel called as the model is: keyword tensors in (position_ids only
    where given: a generation graph takes them), the ModelOutput `arch` returns out."""
    given = {} if pos is None else {"position_ids": torch.from_numpy(pos)}
    out = exported(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                   **given)
    assert type(out) is output_class(arch), type(out)
    return out.logits.numpy()


def treespec_dumps(tree):
    from torch.utils import _pytree

    return _pytree.treespec_dumps(_pytree.tree_flatten(tree)[1])


# ---------------------------------------------------------------------------------------------
# ferry's exports in transformers' loader


@pytest.fixture(scope="module", params=list(ARCHS))
def family(request, tmp_path_factory):
    arch = request.param
    base = tmp_path_factory.mktemp(f"interop-{arch}")
    ckpt = make_checkpoint(base / "ckpt", arch)
    return arch, ckpt, ferry_export(ckpt, base / "onnx", "--dynamic", "--quiet")


def test_transformers_runs_ferry_onnx(family):
    """Each family's dynamic ONNX export, through transformers' loader and ONNX Runtime runner,
    against transformers' eager model: batch 2 with left padding, 1x1, and batch 3."""
    arch, ckpt, out = family
    exported = HfExportedModel.from_pretrained(out, device="cpu")
    assert str(exported.export_format) == "onnx" and list(exported.components) == ["model"]
    assert exported.dtype == torch.float32
    assert type(exported.config).__name__ == type(reference_model(ckpt).config).__name__
    for batch, seq in SHAPES:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        want = reference_logits(ckpt, ids, mask, None)
        assert_logits_close(hf_call(exported, ids, mask, arch=arch), want, mask, FP32_ATOL,
                            f"{arch} {batch}x{seq}")


def test_specs_are_torch_treespecs(family):
    """in_spec and out_spec, written in C, are the text torch's treespec_dumps writes for the
    call's (args, kwargs) and for the family's ModelOutput holding the logits; the kwargs
    record the traced example."""
    arch, _, out = family
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["export_format"] == manifest["format"] == "onnx"
    assert "transformers" not in manifest
    meta = manifest["components"]["model"]["metadata"]
    leaf = torch.zeros(1)
    assert meta["in_spec"] == treespec_dumps(((), {name: leaf for name in INPUTS}))
    assert meta["out_spec"] == treespec_dumps(output_class(arch)(logits=leaf))
    assert meta["kwargs"] == {name: {"rank": 2, "shape": [1, 8], "dtype": "int64"}
                              for name in INPUTS}
    assert meta["export_dtype"] == "float32" and meta["export_device"] == "cpu"
    assert meta["in_constants"] == {} and meta["out_constants"] == []
    # ferry's own keys are still there, unchanged
    assert meta["precision"] == "fp32" and [i["name"] for i in meta["inputs"]] == INPUTS


def test_static_export_kwargs(tmp_path):
    """A static export's kwargs are its example shape, and transformers runs it at that shape."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen3")
    out = ferry_export(ckpt, tmp_path / "out", "--example-shape", "input_ids=2x6", "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["kwargs"]["attention_mask"] == {"rank": 2, "shape": [2, 6], "dtype": "int64"}
    ids, mask, _ = make_inputs(VOCAB, 2, 6)
    got = hf_call(HfExportedModel.from_pretrained(out, device="cpu"), ids, mask)
    assert_logits_close(got, reference_logits(ckpt, ids, mask, None), mask)


def test_transformers_runs_ferry_openvino(tmp_path):
    """OpenVINO: the plain export, and the stateful generation graph (one "decode" component,
    the cache in its variables; transformers' runner feeds beam_idx): prompt, then two steps,
    each against eager logits of the whole sequence so far."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    ids, mask, pos = make_inputs(VOCAB, 2, 10)
    want = reference_logits(ckpt, ids, mask, pos)
    # f32 compute asked for as a caller of transformers' runner asks: OpenVINO does not apply
    # the hint the export records (on a CPU with bf16 it would compute in bf16)
    f32 = {"INFERENCE_PRECISION_HINT": "f32"}
    plain = ferry_export(ckpt, tmp_path / "ov", "--format", "openvino", "--dynamic", "--quiet")
    got = hf_call(HfExportedModel.from_pretrained(plain, device="cpu", config=f32), ids, mask)
    assert_logits_close(got, reference_logits(ckpt, ids, mask, None), mask,
                        what="openvino plain")

    gen = ferry_export(ckpt, tmp_path / "ovgen", "--format", "openvino", "--dynamic",
                       "--for-generation", "--quiet")
    manifest = json.loads((gen / "export.json").read_text())
    assert manifest["export_format"] == "openvino" and list(manifest["components"]) == ["decode"]
    exported = HfExportedModel.from_pretrained(gen, device="cpu", config=f32)
    prompt = 8
    got = hf_call(exported, ids[:, :prompt], mask[:, :prompt], pos[:, :prompt])
    assert_logits_close(got, want[:, :prompt], mask[:, :prompt], what="stateful prompt")
    for step in range(prompt, 10):
        got = hf_call(exported, ids[:, step:step + 1], mask[:, :step + 1],
                      pos[:, step:step + 1])
        assert_logits_close(got, want[:, step:step + 1], mask[:, step:step + 1],
                            what=f"stateful step {step}")


def test_transformers_runs_ferry_pt2(family, tmp_path):
    """pt2 with --model-output: the program returns the family's ModelOutput, as transformers'
    DynamoExporter's programs do, so transformers' loader (export_format "dynamo") and its
    torch runner run it, every family, against eager logits; the specs export.json records
    are the program's own, and ferry's ExportedModel runs the same directory."""
    import ferry

    arch, ckpt, _ = family
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--model-output",
                       "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    assert manifest["format"] == "pt2" and manifest["export_format"] == "dynamo"
    assert "transformers" not in manifest
    meta = manifest["components"]["model"]["metadata"]
    exported = HfExportedModel.from_pretrained(out, device="cpu", trust_remote_code=True)
    assert str(exported.export_format) == "dynamo" and list(exported.components) == ["model"]
    program = exported.components["model"].program
    assert meta["in_spec"] == treespec_dumps(((), {name: torch.zeros(1) for name in INPUTS}))
    assert meta["out_spec"] == treespec_dumps(output_class(arch)(logits=torch.zeros(1)))
    from torch.utils import _pytree

    assert meta["in_spec"] == _pytree.treespec_dumps(program.call_spec.in_spec)
    assert meta["out_spec"] == _pytree.treespec_dumps(program.call_spec.out_spec)
    mine = ferry.ExportedModel.from_pretrained(out)
    for batch, seq in SHAPES:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        want = reference_logits(ckpt, ids, mask, None)
        assert_logits_close(hf_call(exported, ids, mask, arch=arch), want, mask, FP32_ATOL,
                            f"{arch} {batch}x{seq} in transformers")
        got = mine(input_ids=ids, attention_mask=mask)
        assert type(got) is output_class(arch)
        assert_logits_close(got.logits, want, mask, FP32_ATOL, f"{arch} {batch}x{seq} in ferry")


FRESH_GENERATE = """
import sys, numpy as np, ferry
tokens = ferry.ExportedModel.from_pretrained(sys.argv[1]).generate(
    np.array([[3, 7, 11, 5]]), attention_mask=np.ones((1, 4), dtype=np.int64), max_new_tokens=6,
    min_new_tokens=6)
assert "transformers.modeling_outputs" in sys.modules
print(" ".join(str(int(t)) for t in np.asarray(tokens)[0, 4:]))
"""


def test_model_output_in_a_fresh_process(tmp_path):
    """A generation export with --model-output records no out_spec (its
    components stay ferry's), so a process that had not imported transformers could not load
    it. ferry reads model_output from export_config, and falls back to importing the class
    when export.json says neither; `ferry validate` passes both exports, and generate() in a
    fresh interpreter equals transformers' greedy tokens."""
    from test_openvino import hf_greedy

    ckpt = make_checkpoint(tmp_path / "ckpt", "mistral")
    gen = ferry_export(ckpt, tmp_path / "gen", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "32",
                       "--model-output", "--quiet")
    plain = ferry_export(ckpt, tmp_path / "plain", "--format", "pt2", "--dynamic",
                         "--model-output", "--quiet")
    # an export.json that says nothing of what the program returns (transformers' keys gone,
    # as where it could not run the export)
    manifest = json.loads((plain / "export.json").read_text())
    meta = manifest["components"]["model"]["metadata"]
    for key in ("in_spec", "out_spec", "kwargs", "in_constants", "out_constants"):
        del meta[key]
    del meta["export_config"]["model_output"], manifest["export_format"]
    manifest["transformers"] = {"unsupported": "edited by hand"}
    (plain / "export.json").write_text(json.dumps(manifest))
    from test_validate import validate

    for out in (gen, plain):
        rc, text, err = validate(out)
        assert rc == 0 and "PASS" in text, (out, text, err)
    want = hf_greedy(ckpt, np.array([[3, 7, 11, 5]]), np.ones((1, 4), dtype=np.int64), 6)
    from test_validate import PYTHON_ENV

    proc = subprocess.run([sys.executable, "-c", FRESH_GENERATE, str(gen)], capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, **PYTHON_ENV))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(int(t)) for t in want[0]], (proc.stdout, want)


def test_round_trip_through_transformers(tmp_path):
    """Transformers' save_pretrained of a ferry --model-output export writes
    transformers' schema; ferry loads and runs that too."""
    import ferry

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--model-output",
                       "--quiet")
    HfExportedModel.from_pretrained(out, trust_remote_code=True).save_pretrained(tmp_path / "re")
    assert "format" not in json.loads((tmp_path / "re" / "export.json").read_text())
    ids, mask, _ = make_inputs(VOCAB, 2, 7)
    got = ferry.ExportedModel.from_pretrained(tmp_path / "re")(input_ids=ids, attention_mask=mask)
    assert_logits_close(got.logits, reference_logits(ckpt, ids, mask, None), mask, FP32_ATOL)


@pytest.mark.parametrize("edit,needle", [
    (lambda m: m.update(export_format="pt2"), "must be transformers' name of the format"),
    (lambda m: m.update(transformers={"unsupported": "x"}), "one of them was edited"),
    (lambda m: m["components"]["model"]["metadata"].pop("out_spec"),
     "component 'model': export_format says transformers loads the export, and its metadata "
     "has no in_spec and out_spec"),
], ids=["ferry-name", "contradiction", "no-specs"])
def test_export_format_checked(tmp_path, edit, needle):
    """Export.json's export_format must be transformers' name of the format
    ("pt2" is ferry's), and cannot sit beside a 'transformers' key saying it cannot run."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--model-output", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    edit(manifest)
    (out / "export.json").write_text(json.dumps(manifest))
    rc, _, err = run_ferry("inspect", out)
    assert rc != 0 and needle in err and "export.json" in err, err


def test_pt2_dict_says_why(tmp_path):
    """pt2's default program returns a dict, which transformers' torch runner would hand back
    as it is: export.json keeps transformers' keys out and says how to get them; inspect
    prints that, and the Python API's model_output gives an export transformers runs."""
    import ferry
    from ferry import DynamoConfig, DynamoExporter

    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen2")
    out = ferry_export(ckpt, tmp_path / "pt2", "--format", "pt2", "--dynamic", "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    assert "export_format" not in manifest
    why = manifest["transformers"]["unsupported"]
    assert "returns a dict" in why and "--model-output" in why and '"model_output"' in why, why
    rc, text, err = run_ferry("inspect", out)
    assert rc == 0, err
    assert f"transformers: ExportedModel.from_pretrained cannot run it: {why}" in text
    assert 'it returns {"logits": ...}' in text
    with pytest.raises(KeyError, match="export_format"):
        HfExportedModel.from_pretrained(out, trust_remote_code=True)

    saved = tmp_path / "api"
    DynamoExporter().export(ckpt, config=DynamoConfig(dynamic=True, model_output=True)) \
        .save_pretrained(saved)
    rc, text, err = run_ferry("inspect", saved)
    assert rc == 0, err
    assert "it returns transformers' CausalLMOutputWithPast" in text
    with pytest.raises(ferry.FerryError, match="model_output must be True or False"):
        DynamoConfig(model_output=1)
    assert "loads it (with trust_remote_code=True" in text
    ids, mask, pos = make_inputs(VOCAB, 2, 7)
    got = hf_call(HfExportedModel.from_pretrained(saved, trust_remote_code=True), ids, mask, pos)
    assert_logits_close(got, reference_logits(ckpt, ids, mask, pos), mask, FP32_ATOL, "api")


@pytest.mark.parametrize("flags,component,culprit", [
    (["--dynamic", "--for-generation"], "prefill", "present.0.key"),
    (["--dynamic", "--for-generation", "--static-cache", "--max-cache-len", "32"], "prefill",
     "input.past_key_values.0.cumulative_length"),
    (["--format", "openvino", "--dynamic", "--for-generation", "--config", "STATELESS"],
     "prefill", "present.0.key"),
], ids=["onnx-dynamic-cache", "onnx-static-cache", "openvino-stateless"])
def test_generation_exports_say_why(tmp_path, flags, component, culprit):
    """A generation export whose components pass the cache as inputs and outputs stays ferry's:
    transformers' runners name a cache by its pytree paths (cache.layers.<l>.keys), ferry by
    the guide's. export.json has no export_format, says why under "transformers", and inspect
    prints it; ferry still loads it."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    if "STATELESS" in flags:
        recipe = tmp_path / "stateless.json"
        recipe.write_text('{"stateful": false}')
        flags = [str(recipe) if f == "STATELESS" else f for f in flags]
    out = ferry_export(ckpt, tmp_path / "out", *flags, "--quiet")
    manifest = json.loads((out / "export.json").read_text())
    assert "export_format" not in manifest
    why = manifest["transformers"]["unsupported"]
    assert f"component '{component}'" in why and f"'{culprit}'" in why, why
    for meta in (c["metadata"] for c in manifest["components"].values()):
        assert "in_spec" not in meta and "kwargs" not in meta
    rc, text, err = run_ferry("inspect", out)
    assert rc == 0, err
    assert f"transformers: ExportedModel.from_pretrained cannot run it: {why}" in text
    with pytest.raises(KeyError, match="export_format"):
        HfExportedModel.from_pretrained(out)
    import ferry

    assert set(ferry.ExportedModel.from_pretrained(out).components) >= {component}


# ---------------------------------------------------------------------------------------------
# transformers' exports in ferry

HF_EXPORT = """
import sys, torch
torch.set_num_threads(1)
from transformers import AutoModelForCausalLM
from transformers.exporters import (DynamoConfig, DynamoExporter, OnnxConfig, OnnxExporter,
                                   OpenVINOConfig, OpenVINOExporter)
ckpt, out, fmt = sys.argv[1], sys.argv[2], sys.argv[3]
model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).eval()
inputs = {"input_ids": torch.arange(1, 11).reshape(2, 5),
          "attention_mask": torch.ones(2, 5, dtype=torch.long)}
exporter, config = {"onnx": (OnnxExporter, OnnxConfig), "openvino": (OpenVINOExporter, OpenVINOConfig),
                    "dynamo": (DynamoExporter, DynamoConfig),
                    "dynamo-gen": (DynamoExporter, DynamoConfig)}[fmt]
export = exporter().export_for_generation if fmt.endswith("-gen") else exporter().export
export(model, inputs, config(dynamic=False)).save_pretrained(out)
"""


@pytest.fixture(scope="module")
def hf_exports(tmp_path_factory):
    """{format: directory}: transformers' own static exports (batch 2 x 5) of a tiny Llama, made
    by its OnnxExporter, OpenVINOExporter and DynamoExporter in a child process (they patch
    torch)."""
    base = tmp_path_factory.mktemp("hf-exports")
    ckpt = make_checkpoint(base / "ckpt", "llama")
    made = {}
    for fmt in ("onnx", "openvino", "dynamo", "dynamo-gen"):
        proc = subprocess.run([sys.executable, "-c", HF_EXPORT, str(ckpt), str(base / fmt), fmt],
                              capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        made[fmt] = base / fmt
    return ckpt, made


@pytest.mark.parametrize("fmt,files", [("onnx", ["model.onnx", "model.onnx.data"]),
                                       ("openvino", ["openvino_model.xml",
                                                     "openvino_model.bin"]),
                                       ("dynamo", ["model.pt2"])])
def test_ferry_loads_transformers_export(hf_exports, fmt, files):
    """ferry's ExportedModel loads transformers' export (components by name, the manifest as
    written) and runs it: logits equal eager's on the traced shape (transformers' graph takes
    input_ids and attention_mask, positions from 0). Its torch program returns its cache too
    (registered from out_spec as transformers' loader registers it); a call returns the
    logits."""
    import ferry

    ckpt, made = hf_exports
    exported = ferry.ExportedModel.from_pretrained(made[fmt])
    assert exported.files == {"model": files[0]}
    assert exported.manifest["export_format"] == fmt
    ids = np.arange(1, 11, dtype=np.int64).reshape(2, 5) * 7 % VOCAB
    mask = np.ones_like(ids)
    with torch.no_grad():
        want = reference_model(ckpt)(input_ids=torch.from_numpy(ids),
                                     attention_mask=torch.from_numpy(mask)).logits.numpy()
    out = exported(input_ids=ids, attention_mask=mask)
    assert_logits_close(out.logits, want, mask, what=f"transformers' {fmt} export in ferry")
    # positions its graph cannot take were dropped without a word
    with pytest.warns(ferry.FerryWarning, match="takes no position_ids"):
        exported(input_ids=ids, attention_mask=mask, position_ids=np.zeros_like(ids))


def test_transformers_generation_export_says_why(hf_exports):
    """Calling transformers' own generation export, and generate() on it, each
    pointed at the other; both now say what ferry cannot drive (transformers' cache object)
    and what to use instead."""
    import ferry

    exported = ferry.ExportedModel.from_pretrained(hf_exports[1]["dynamo-gen"])
    ids = np.arange(1, 11, dtype=np.int64).reshape(2, 5)
    for call in (lambda: exported(input_ids=ids),
                 lambda: exported.generate(ids, attention_mask=np.ones_like(ids),
                                           max_new_tokens=2)):
        with pytest.raises(ferry.FerryError, match="transformers' own export: its stages pass "
                           "transformers' cache object"):
            call()


@pytest.mark.parametrize("binary", [b[1] for b in ferry_builds()],
                         ids=[b[0] for b in ferry_builds()])
@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_inspect_lists_transformers_export(hf_exports, fmt, binary):
    """`ferry inspect` of transformers' export: format, producer, each file with its size (the
    program and the sidecar transformers' loader reads), the traced kwargs and what out_spec
    returns; --json prints export.json as loaded."""
    _, made = hf_exports
    rc, text, err = run_ferry("inspect", made[fmt], binary=binary)
    assert rc == 0, err
    version = __import__("transformers").__version__
    assert f"format {fmt}, producer transformers {version}, architecture LlamaForCausalLM" in text
    files = (["model.onnx", "model.onnx.data"] if fmt == "onnx"
             else ["openvino_model.xml", "openvino_model.bin"])
    for name in files:
        line = next(line for line in text.splitlines() if line.strip().startswith(name))
        assert line.strip().endswith("KB"), line
    assert "component model (precision float32, traced on cpu)" in text
    for name in ("input_ids", "attention_mask"):
        assert any(line.split()[:3] == [name, "int64", "traced"] and line.endswith("[2, 5]")
                   for line in text.splitlines()), text
    assert ("returns: transformers.modeling_outputs.CausalLMOutputWithPast (logits, cache)"
            in text)
    rc, raw, err = run_ferry("inspect", made[fmt], "--json", binary=binary)
    assert rc == 0, err
    assert json.loads(raw) == json.loads((made[fmt] / "export.json").read_text())


def _corrupt(src, dst, edit):
    shutil.copytree(src, dst)
    manifest = json.loads((dst / "export.json").read_text())
    edit(manifest["components"]["model"]["metadata"])
    (dst / "export.json").write_text(json.dumps(manifest))
    return dst


def _spec_with_children_of_leaf(meta):
    spec = json.loads(meta["out_spec"])
    leaf = spec[1]["children_spec"][0]  # the logits
    leaf["children_spec"] = [dict(leaf)]
    meta["out_spec"] = json.dumps(spec)


MALFORMED = {
    "negative size": (lambda m: m["kwargs"]["input_ids"].update(shape=[2, -5]),
                      "metadata.kwargs: 'input_ids': shape holds a size that is not an integer"),
    "rank beyond shape": (lambda m: m["kwargs"]["attention_mask"].update(rank=3),
                          "'attention_mask': shape must be an array of rank (3) sizes"),
    "rank 1e9": (lambda m: m["kwargs"]["input_ids"].update(rank=10 ** 9),
                 "'input_ids': rank must be an integer from 0 to 64"),
    "spec not JSON": (lambda m: m.update(out_spec=m["out_spec"][:40]),
                      "metadata.out_spec: invalid JSON"),
    "spec protocol": (lambda m: m.update(in_spec=m["in_spec"].replace("[1,", "[7,", 1)),
                      "metadata.in_spec must be [1, node]"),
    "leaf with children": (_spec_with_children_of_leaf,
                           "metadata.out_spec: a leaf (type null) has children"),
    "constant past the leaves": (lambda m: m.update(out_constants=[[5, None]]),
                                 "leaf index 5 is out of order or not below out_spec's 5 "
                                 "leaves"),
    "constant not a pair": (lambda m: m.update(out_constants=[[0]]),
                            "metadata.out_constants: each entry must be"),
    "kwargs a list": (lambda m: m.update(kwargs=["input_ids"]),
                      "metadata.kwargs must be an object"),
    "dtype not a name": (lambda m: m.update(export_dtype="float32; rm"),
                         "metadata.export_dtype must be a name"),
}


@pytest.mark.parametrize("binary", [b[1] for b in ferry_builds()],
                         ids=[b[0] for b in ferry_builds()])
@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_interop_keys(hf_exports, tmp_path, case, binary):
    """Each malformed ExportMetadata key in transformers' export.json: `ferry inspect` exits 1
    with one line naming export.json, the component and the key; the binding raises FerryError
    with the same message."""
    import ferry

    _, made = hf_exports
    edit, needle = MALFORMED[case]
    bad = _corrupt(made["onnx"], tmp_path / "bad", edit)
    rc, text, err = run_ferry("inspect", bad, binary=binary)
    lines = err.splitlines()
    assert rc == 1 and text == "" and len(lines) == 1, (rc, text, err)
    assert lines[0].startswith("ferry: error: ") and "export.json: component 'model': " in err
    assert needle in lines[0], (needle, lines[0])
    with pytest.raises(ferry.FerryError, match="component 'model'") as raised:
        ferry.ExportedModel.from_pretrained(bad)
    assert needle in str(raised.value)


@pytest.mark.parametrize("fmt", ["onnx", "openvino"])
def test_validate_runs_transformers_export(hf_exports, fmt):
    """`ferry validate` reads a transformers export's format (export_format) as the loader does."""
    ckpt, made = hf_exports
    code, out, err = run_ferry("validate", made[fmt], "--model", ckpt, "--no-record",
                               env={"FERRY_PYTHON": sys.executable,
                                    "PYTHONPATH": str(ROOT / "python")})
    assert code == 0, out + err
    assert "PASS" in out and "FAIL" not in out, out


@pytest.mark.parametrize("model", [False, True], ids=["source", "model"])
def test_validate_refuses_transformers_dynamo_export_at_once(hf_exports, model):
    """transformers' DynamoExporter export cannot be validated (its program takes no
    position_ids, and ferry validates its own pt2 exports): exit 3 straight away, with or
    without --model (without it, ferry said "pass --model", which then exited
    3)."""
    ckpt, made = hf_exports
    code, out, err = run_ferry("validate", made["dynamo"], *(["--model", ckpt] if model else []),
                               "--no-record", env={"FERRY_PYTHON": sys.executable,
                                                   "PYTHONPATH": str(ROOT / "python")})
    assert code == 3 and "DynamoExporter export" in err and "--model" not in err, err


# ---------------------------------------------------------------------------------------------
# transformers' recipes in ferry


@pytest.mark.parametrize("name,kwargs,fmt", [
    ("OnnxConfig", dict(dynamic=True, opset_version=19), "onnx"),
    ("DynamoConfig", dict(dynamic=True, prefer_deferred_runtime_asserts_over_guards=True), "pt2"),
    ("OpenVINOConfig", dict(dynamic=True), "openvino"),
])
def test_transformers_recipe_drives_ferry(tmp_path, name, kwargs, fmt):
    """A recipe as transformers writes it (to_json_string: every field, the tracing options and
    nulls included) is a --config that ferry exports with, to the export its own flags make;
    the same dict (to_dict, less the quantizer object) is an AutoExportConfig."""
    import transformers.exporters as hf

    import ferry

    config = getattr(hf, name)(**kwargs)
    recipe = tmp_path / "recipe.json"
    recipe.write_text(config.to_json_string())
    flags = ["--dynamic", "--format", fmt] + (["--opset", "19"] if fmt == "onnx" else [])
    by_recipe = ferry_export(FIXTURE, tmp_path / "by-recipe", "--config", recipe, "-q")
    by_flags = ferry_export(FIXTURE, tmp_path / "by-flags", *flags, "-q")
    recorded = [[c["metadata"]["export_config"] for c in
                 json.loads((d / "export.json").read_text())["components"].values()]
                for d in (by_recipe, by_flags)]
    assert recorded[0] == recorded[1]
    for f in sorted(p.name for p in by_flags.iterdir()):
        assert (by_recipe / f).read_bytes() == (by_flags / f).read_bytes(), f
    as_dict = {k: v for k, v in config.to_dict().items() if k != "quantizer"}
    as_dict["export_format"] = str(getattr(as_dict["export_format"], "value",
                                           as_dict["export_format"]))
    assert ferry.AutoExportConfig.from_dict(as_dict).to_dict() == as_dict


@pytest.mark.parametrize("kwargs,needle", [
    (dict(strict=True), "strict=true asks for torch.export's strict tracer"),
    (dict(optimize=False), "optimize=false asks for the graph as traced"),
])
def test_transformers_recipe_ferry_cannot_follow(tmp_path, kwargs, needle):
    import transformers.exporters as hf

    recipe = tmp_path / "recipe.json"
    recipe.write_text(hf.OnnxConfig(dynamic=True, **kwargs).to_json_string())
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "out", "--config", recipe)
    assert rc == 1 and needle in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_transformers_config_with_dims(tmp_path):
    """A transformers config holding torch.export.Dims: its to_dict() is an AutoExportConfig
    and the config itself drives ferry's exporter, the Dims read as ferry's own config reads
    them (a TypeError before: Dim is not JSON). Its to_json_string() writes each Dim as text
    that can drop the range, so that recipe is refused, saying what to write instead."""
    import transformers.exporters as hf

    import ferry

    batch = torch.export.Dim("batch", min=1, max=4)
    seq = torch.export.Dim("seq", min=2, max=256)
    shapes = {"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}}
    theirs = hf.OnnxConfig(dynamic_shapes=shapes)
    ours = ferry.OnnxConfig(dynamic_shapes=shapes)
    read = ferry.AutoExportConfig.from_dict(theirs.to_dict())
    assert read.to_dict()["dynamic_shapes"] == ours.to_dict()["dynamic_shapes"]
    assert read.to_dict()["dynamic_shapes"]["input_ids"]["1"] == {"name": "seq", "min": 2,
                                                                  "max": 256}
    exported = ferry.OnnxExporter().export(FIXTURE, config=theirs)
    dims = exported.program.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["batch", "seq"]
    recipe = tmp_path / "recipe.json"
    recipe.write_text(theirs.to_json_string())
    rc, _, err = run_ferry("export", FIXTURE, tmp_path / "out", "--config", recipe)
    assert rc == 1 and "a torch.export.Dim as transformers' to_json_string writes it" in err, err
    assert not (tmp_path / "out").exists()
