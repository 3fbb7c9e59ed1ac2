"""BERT-family encoders (BertModel, RobertaModel, XLMRobertaModel, DistilBertModel and the
sequence-classification heads of BERT and RoBERTa) in every format, against transformers'
eager model on the same random weights.

Each family's export runs in its real runtime (onnxruntime standard and with onnxruntime's
fused kernels for cpu and for cuda, OpenVINO, torch.export.load) through ferry's
ExportedModel, and its outputs (last_hidden_state at real positions, pooler_output, or a
head's logits) equal eager's to 1e-4
at fp32: batch 1, and batch 3 right-padded, sequences 1, 7 and 33; from fp32 and bf16
checkpoints. transformers' own loader runs the exports too. What the families do not support
fails with one line naming the key.
"""

import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import torch

from conftest import ROOT, ferry_export, run_ferry

ATOL = 1e-4
VOCAB, MAX_POSITIONS = 96, 48
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             vocab_size=VOCAB, max_position_embeddings=MAX_POSITIONS)
# name: (config class, model class, config overrides)
FAMILIES = {
    "bert": ("BertConfig", "BertModel", {}),
    "bert-classifier": ("BertConfig", "BertForSequenceClassification", {"num_labels": 3}),
    "roberta": ("RobertaConfig", "RobertaModel", {"pad_token_id": 1}),
    "roberta-classifier": ("RobertaConfig", "RobertaForSequenceClassification",
                           {"pad_token_id": 1, "num_labels": 2}),
    "xlm-roberta": ("XLMRobertaConfig", "XLMRobertaModel", {"pad_token_id": 1}),
    "distilbert": ("DistilBertConfig", "DistilBertModel",
                   {"dim": 32, "hidden_dim": 64, "n_layers": 2, "n_heads": 4}),
}
FORMATS = {
    "onnx": ["--format", "onnx"],
    "onnx-fused-cpu": ["--format", "onnx", "--ort-fusions", "cpu"],
    "onnx-fused": ["--format", "onnx", "--ort-fusions", "cuda"],  # its kernels have CPU ones
    "openvino": ["--format", "openvino"],
    "pt2": ["--format", "pt2"],
}
SHAPES = [(1, 1), (1, 7), (3, 7), (3, 33)]


def build(path, family, dtype=torch.float32, **extra):
    import transformers

    cfg_name, model_name, overrides = FAMILIES[family]
    kwargs = dict(SMALL) if family != "distilbert" else {
        "vocab_size": VOCAB, "max_position_embeddings": MAX_POSITIONS}
    kwargs.update(overrides)
    kwargs.update(extra)
    torch.manual_seed(3)
    model = getattr(transformers, model_name)(getattr(transformers, cfg_name)(**kwargs)).eval()
    with torch.no_grad():  # weights far from their init, so that every one of them counts
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.to(dtype).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("encoders")
    return {family: build(root / family, family) for family in FAMILIES}


def eager(ckpt, feeds):
    import transformers

    model = transformers.AutoModel if "Classification" not in json.loads(
        (ckpt / "config.json").read_text())["architectures"][0] else \
        transformers.AutoModelForSequenceClassification
    m = model.from_pretrained(ckpt, dtype=torch.float32).eval()
    with torch.no_grad():
        return m(**{k: torch.from_numpy(v) for k, v in feeds.items()})


def feeds_for(family, batch, seq, seed=0):
    """Token ids away from the padding index, a right-padded mask (row 1 loses a third, row 2
    all but one token), and token types 1 over each row's second half (BERT's alone)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, VOCAB, (batch, seq), dtype=np.int64)
    mask = np.ones((batch, seq), np.int64)
    if batch > 1:
        mask[1, seq - max(1, seq // 3):] = 0
        mask[2, 1:] = 0
    pad = 1 if "roberta" in family else 0
    ids[mask == 0] = pad
    out = {"input_ids": ids, "attention_mask": mask}
    if family.startswith("bert"):
        types = np.zeros_like(ids)
        types[:, seq // 2:] = 1
        out["token_type_ids"] = types
    return out


def assert_close(got, want, mask, what):
    for name in ("last_hidden_state", "pooler_output", "logits"):
        ref = getattr(want, name, None)
        if ref is None:
            continue
        value = np.asarray(got[name], dtype=np.float32)
        ref = ref.float().numpy()
        assert value.shape == ref.shape, (what, name, value.shape, ref.shape)
        if name == "last_hidden_state":
            value, ref = value[mask.astype(bool)], ref[mask.astype(bool)]
        diff = float(np.abs(value - ref).max())
        assert diff <= ATOL, f"{what}: {name} max |d| {diff:.3g}"


@pytest.mark.parametrize("fmt", list(FORMATS))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_encoder_matches_eager(checkpoints, tmp_path, family, fmt):
    import ferry
    import transformers.modeling_outputs as outputs

    out = ferry_export(checkpoints[family], tmp_path / "out", "--dynamic", *FORMATS[fmt],
                       "--quiet")
    exported = ferry.ExportedModel.from_pretrained(out)
    for batch, seq in SHAPES:
        feeds = feeds_for(family, batch, seq)
        got = exported(**feeds)
        want = eager(checkpoints[family], feeds)
        assert type(got) is type(want), (type(got), type(want))
        assert isinstance(got, outputs.ModelOutput)
        assert_close(got, want, feeds["attention_mask"], f"{family} {fmt} {batch}x{seq}")


@pytest.mark.parametrize("family", ["bert", "roberta-classifier", "distilbert"])
def test_bf16_checkpoint_matches_eager(tmp_path, family):
    """A bf16 checkpoint exports to fp32 weights (the default) that hold its values exactly."""
    import ferry

    ckpt = build(tmp_path / "ckpt", family, dtype=torch.bfloat16)
    for fmt in ("onnx", "openvino", "pt2"):
        out = ferry_export(ckpt, tmp_path / fmt, "--dynamic", "--format", fmt, "--quiet")
        feeds = feeds_for(family, 3, 7)
        assert_close(ferry.ExportedModel.from_pretrained(out)(**feeds), eager(ckpt, feeds),
                     feeds["attention_mask"], f"bf16 {family} {fmt}")


def test_inputs_and_their_defaults(checkpoints, tmp_path):
    """BERT's tokenizer returns token types, RoBERTa's and DistilBERT's do not: each export
    takes what its tokenizer returns. A call without token types is one of type 0 (the
    forward's default); position_ids are an input only when asked, and then read."""
    import ferry

    def inputs(out):
        meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
        return [i["name"] for i in meta["inputs"]]

    bert = ferry_export(checkpoints["bert"], tmp_path / "bert", "--dynamic", "--quiet")
    assert inputs(bert) == ["input_ids", "attention_mask", "token_type_ids"]
    feeds = feeds_for("bert", 3, 7)
    feeds.pop("token_type_ids")
    assert_close(ferry.ExportedModel.from_pretrained(bert)(**feeds),
                 eager(checkpoints["bert"], feeds), feeds["attention_mask"], "no token types")
    for family in ("roberta", "distilbert"):
        out = ferry_export(checkpoints[family], tmp_path / family, "--dynamic", "--quiet")
        assert inputs(out) == ["input_ids", "attention_mask"]
    with_positions = ferry_export(checkpoints["roberta"], tmp_path / "positions", "--dynamic",
                                  "--inputs", "input_ids,attention_mask,position_ids",
                                  "--quiet")
    feeds = feeds_for("roberta", 1, 7)
    feeds["position_ids"] = np.arange(2, 16, 2, dtype=np.int64)[None]  # stride 2
    assert_close(ferry.ExportedModel.from_pretrained(with_positions)(**feeds),
                 eager(checkpoints["roberta"], feeds), feeds["attention_mask"], "positions")


def test_values_past_the_tables_are_refused(checkpoints, tmp_path):
    """An id past the vocabulary, a token type past type_vocab_size, a sequence longer than the
    position table: one FerryError each (OpenVINO's gather would read zeros)."""
    import ferry

    out = ferry_export(checkpoints["bert"], tmp_path / "ov", "--dynamic", "--format", "openvino",
                       "--quiet")
    exported = ferry.ExportedModel.from_pretrained(out)
    feeds = feeds_for("bert", 1, 7)
    for name, value, needle in [("input_ids", VOCAB, f"outside [0, {VOCAB - 1}]"),
                                ("token_type_ids", 2, "outside [0, 1]")]:
        bad = dict(feeds)
        bad[name] = feeds[name].copy()
        bad[name][0, 3] = value
        with pytest.raises(ferry.FerryError, match=re.escape(f"{name} holds {value}, {needle}")):
            exported(**bad)
    with pytest.raises(ferry.FerryError, match=rf"takes 1 to {MAX_POSITIONS}"):
        exported(**feeds_for("bert", 1, MAX_POSITIONS + 1))
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["symbols"]["sequence"]["max"] == MAX_POSITIONS
    # RoBERTa's positions start after its padding index: two fewer tokens fit
    roberta = ferry_export(checkpoints["roberta"], tmp_path / "rob", "--dynamic", "--quiet")
    meta = json.loads((roberta / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["symbols"]["sequence"]["max"] == MAX_POSITIONS - 2


def test_checkpoint_layouts(tmp_path):
    """A base model stored under its head's prefix ("bert.") loads as transformers loads it;
    one without a pooler exports last_hidden_state alone, and says so."""
    import ferry
    from safetensors.torch import load_file, save_file

    ckpt = build(tmp_path / "prefixed", "bert")
    weights = load_file(ckpt / "model.safetensors")
    save_file({f"bert.{k}": v for k, v in weights.items()}, ckpt / "model.safetensors",
              metadata={"format": "pt"})
    out = ferry_export(ckpt, tmp_path / "out", "--dynamic", "--quiet")
    feeds = feeds_for("bert", 3, 7)
    assert_close(ferry.ExportedModel.from_pretrained(out)(**feeds), eager(ckpt, feeds),
                 feeds["attention_mask"], "prefixed")

    import transformers

    bare = tmp_path / "no-pooler"
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**SMALL),
                           add_pooling_layer=False).save_pretrained(bare)
    rc, _, err = run_ferry("export", bare, tmp_path / "bare", "--dynamic")
    assert rc == 0, err
    assert "has no pooler" in err and "last_hidden_state alone" in err, err
    meta = json.loads((tmp_path / "bare" / "export.json").read_text())
    assert [o["name"] for o in meta["components"]["model"]["metadata"]["outputs"]] == \
        ["last_hidden_state"]


@pytest.mark.parametrize("key,value,needle", [
    ("is_decoder", True, "is_decoder true"),
    ("add_cross_attention", True, "add_cross_attention true"),
    ("position_embedding_type", "relative_key", "position_embedding_type 'relative_key'"),
    ("hidden_act", "swish", "hidden_act 'swish'"),
])
def test_unsupported_variants_fail_naming_the_key(checkpoints, tmp_path, key, value, needle):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(checkpoints["bert"], ckpt)
    config = json.loads((ckpt / "config.json").read_text())
    config[key] = value
    (ckpt / "config.json").write_text(json.dumps(config))
    rc, _, err = run_ferry("export", ckpt, tmp_path / "out")
    assert rc == 1 and needle in err and len(err.strip().splitlines()) == 1, (rc, err)
    assert not (tmp_path / "out").exists()


def test_refusals_are_one_line(checkpoints, tmp_path):
    for family, flags, needle in [
        ("bert", ["--for-generation"], "BertModel is an encoder: it has no generation components"),
        ("distilbert", ["--for-generation"],
         "DistilBertModel is an encoder: it has no generation components"),
        ("distilbert", ["--inputs", "input_ids,token_type_ids"],
         "DistilBertModel has no input token_type_ids"),
        ("bert", ["--example-shape", f"input_ids=1x{MAX_POSITIONS + 1}"],
         f"longer than BertModel takes ({MAX_POSITIONS} positions"),
        ("bert", ["--dim", "input_ids:1=seq:1:1000"], f"past the {MAX_POSITIONS} positions"),
    ]:
        rc, _, err = run_ferry("export", checkpoints[family], tmp_path / "out", *flags)
        assert rc == 2 and needle in err and len(err.strip().splitlines()) == 1, (flags, err)
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fmt", ["onnx", "openvino", "pt2"])
def test_transformers_loader_runs_encoder_exports(checkpoints, tmp_path, fmt):
    """transformers' ExportedModel.from_pretrained(dir)(**tokenizer_output), the guide's call,
    returns the family's output class with eager's values."""
    from transformers.exporters import ExportedModel as HfExportedModel

    flags = ["--format", fmt] + (["--model-output"] if fmt == "pt2" else [])
    out = ferry_export(checkpoints["bert"], tmp_path / "out", "--dynamic", *flags, "--quiet")
    kwargs = {"onnx": {}, "openvino": {"config": {"INFERENCE_PRECISION_HINT": "f32"}},
              "pt2": {"trust_remote_code": True}}[fmt]
    loaded = HfExportedModel.from_pretrained(out, device="cpu", **kwargs)
    feeds = feeds_for("bert", 3, 7)
    got = loaded(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    want = eager(checkpoints["bert"], feeds)
    assert type(got).__name__ == type(want).__name__
    assert_close({k: got[k].numpy() for k in ("last_hidden_state", "pooler_output")}, want,
                 feeds["attention_mask"], f"transformers' loader, {fmt}")


def test_inspect_names_the_output_class(checkpoints, tmp_path):
    out = ferry_export(checkpoints["roberta-classifier"], tmp_path / "out", "--dynamic",
                       "--format", "pt2", "--model-output", "--quiet")
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "transformers' SequenceClassifierOutput (.logits;" in stdout, stdout
    assert "example inputs: in the archive" in stdout, stdout


def _validate(out, ckpt, *args):
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    return run_ferry("validate", out, "--model", ckpt, "--no-record", *args, env=env)


@pytest.mark.parametrize("family,fmt", [("bert", "onnx"), ("roberta-classifier", "openvino"),
                                        ("distilbert", "pt2"), ("bert", "onnx-fused")])
def test_validate_runs_encoders(checkpoints, tmp_path, family, fmt):
    """`ferry validate` compares each output with transformers' eager model: PASS; and FAIL on
    an export whose weights were changed (export.json's sizes and CRCs set to match, as a
    writer who means it would)."""
    out = ferry_export(checkpoints[family], tmp_path / "out", "--dynamic", *FORMATS[fmt],
                       "--quiet")
    rc, stdout, stderr = _validate(out, checkpoints[family])
    outputs = {"bert": ["last_hidden_state", "pooler_output"], "distilbert":
               ["last_hidden_state"], "roberta-classifier": ["logits"]}[family]
    assert rc == 0 and stdout.rstrip().endswith("PASS"), (stdout, stderr)
    for name in outputs:
        assert any(line.startswith(name) and line.rstrip().endswith("PASS")
                   for line in stdout.splitlines()), stdout
    if fmt != "onnx":
        return
    import onnx
    from conftest import record_sizes

    model = onnx.load(str(out / "model.onnx"), load_external_data=False)
    (tensor,) = [t for t in model.graph.initializer
                 if t.name == "encoder.layer.1.output.dense.weight"]
    place = {e.key: int(e.value) for e in tensor.external_data if e.key in ("offset", "length")}
    data = np.fromfile(out / "model.onnx.data", dtype=np.uint8)
    data[place["offset"]:place["offset"] + place["length"]].view(np.float32)[:] *= -1
    data.tofile(out / "model.onnx.data")
    record_sizes(out)
    rc, stdout, stderr = _validate(out, checkpoints[family])
    assert rc == 1 and stdout.rstrip().endswith("FAIL"), (stdout, stderr)


def test_validate_says_quantized_encoders_are_not_validated_yet(checkpoints, tmp_path):
    out = ferry_export(checkpoints["bert"], tmp_path / "q", "--dynamic", "--quantize", "int8",
                       "--quiet")
    rc, stdout, stderr = _validate(out, checkpoints["bert"])
    assert rc == 3 and stdout == "" and "a quantized encoder is not validated yet" in stderr, \
        (stdout, stderr)


def test_inputs_the_export_does_not_read_are_said(checkpoints, tmp_path):
    """An encoder's positions follow its own rule, never generate()'s: an export taking
    position_ids is not fed derived ones; position_ids or token types given to an export that
    does not take them are dropped with a warning (their values change eager's outputs)."""
    import ferry

    taking = ferry_export(checkpoints["roberta"], tmp_path / "takes", "--dynamic", "--inputs",
                          "input_ids,attention_mask,position_ids", "--quiet")
    feeds = feeds_for("roberta", 1, 7)
    with pytest.raises(ferry.FerryError, match="missing position_ids"):
        ferry.ExportedModel.from_pretrained(taking)(**feeds)
    plain = ferry.ExportedModel.from_pretrained(
        ferry_export(checkpoints["bert"], tmp_path / "plain", "--dynamic", "--inputs",
                     "input_ids,attention_mask", "--quiet"))
    feeds = feeds_for("bert", 1, 7)
    with pytest.warns(ferry.FerryWarning, match="takes no token_type_ids"):
        plain(**feeds)
    feeds.pop("token_type_ids")
    with pytest.warns(ferry.FerryWarning, match="takes no position_ids"):
        plain(**feeds, position_ids=np.arange(10, 17)[None])


@pytest.mark.parametrize("fusions,want,unwanted", [
    (None, {"LayerNormalization", "Gelu"}, {"MultiHeadAttention", "SkipLayerNormalization"}),
    ("cpu", {"LayerNormalization", "Gelu", "MultiHeadAttention"}, {"SkipLayerNormalization"}),
    ("cuda", {"LayerNormalization", "Gelu", "MultiHeadAttention", "SkipLayerNormalization"},
     set()),
])
def test_fused_kernels_are_onnxruntimes(checkpoints, tmp_path, fusions, want, unwanted):
    """The standard graph uses opset 21's LayerNormalization and Gelu; --ort-fusions adds the
    encoder kernels onnxruntime has: MultiHeadAttention with a key padding mask, and on cuda
    SkipLayerNormalization (on cpu its kernel is slower than the add and LayerNormalization:
    bench/encoder_bench.py)."""
    import onnx

    flags = ["--ort-fusions", fusions] if fusions else []
    out = ferry_export(checkpoints["bert"], tmp_path / "out", "--dynamic", *flags, "--quiet")
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    ops = {n.op_type for n in graph.node}
    assert want <= ops and not ops & unwanted, sorted(ops)
    layers = SMALL["num_hidden_layers"]
    assert sum(n.op_type == "MultiHeadAttention" for n in graph.node) == (layers if fusions
                                                                           else 0)
    if fusions is None:
        assert {n.domain for n in graph.node} <= {""}, "a contrib op in a standard graph"


def test_openvino_outputs_keep_their_declared_names(tmp_path):
    """OpenVINO's CPU plugin may fuse the nodes around an output (an encoder's last LayerNorm)
    and leave the output tensor several names, its Div's among them: the runtime names each
    output as export.json declares it, whatever the fusion (this config's fused tensor lists the
    Div's name first)."""
    import ferry
    import transformers

    torch.manual_seed(0)
    ckpt = tmp_path / "ckpt"
    transformers.BertModel(transformers.BertConfig(**dict(SMALL, vocab_size=128,
                                                          max_position_embeddings=64))
                           ).save_pretrained(ckpt)
    out = ferry_export(ckpt, tmp_path / "ov", "--dynamic", "--format", "openvino", "--quiet")
    feeds = {k: v for k, v in feeds_for("bert", 3, 7).items()}
    got = ferry.ExportedModel.from_pretrained(out)(**feeds)
    assert set(got.keys()) == {"last_hidden_state", "pooler_output"}, list(got.keys())
    assert_close(got, eager(ckpt, feeds), feeds["attention_mask"], "openvino names")


def _module_classes(program):
    """{module fqn: class} over every node's nn_module_stack."""
    return {fqn: cls for n in program.graph.nodes
            for fqn, cls in (n.meta.get("nn_module_stack") or {}).values()}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_pt2_module_stack_matches_torch_export(checkpoints, tmp_path, family):
    """Each node records the modules the family declared it came from, as torch.export records
    them for the same checkpoint (its dropouts, the identity at inference, make no node here);
    each aten.linear sits in the Linear whose weight it reads, and unflatten rebuilds the
    tree, which runs to the program's own outputs."""
    import transformers

    out = ferry_export(checkpoints[family], tmp_path / "out", "--dynamic", "--format", "pt2",
                       "--quiet")
    program = torch.export.load(str(out / "model.pt2"))
    config = transformers.AutoConfig.from_pretrained(checkpoints[family])
    auto = transformers.AutoModelForSequenceClassification if "Classification" in \
        config.architectures[0] else transformers.AutoModel
    model = auto.from_pretrained(checkpoints[family]).eval()
    feeds = {k: torch.from_numpy(v) for k, v in feeds_for(family, 3, 7).items()}
    traced = torch.export.export(model, (), feeds)
    want = {fqn: cls for fqn, cls in _module_classes(traced).items()
            if cls != "torch.nn.modules.dropout.Dropout"}
    assert _module_classes(program) == want
    calls = [e.fqn for e in program.module_call_graph]
    assert calls[0] == "" and set(calls[1:]) == set(want) - {""} | {
        fqn for fqn in (e.fqn for e in traced.module_call_graph) if fqn.endswith(".layer")}
    signature = program.graph_signature.inputs_to_parameters
    linears = 0
    for node in program.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.linear.default:
            fqn, cls = list(node.meta["nn_module_stack"].values())[-1]
            assert cls == "torch.nn.modules.linear.Linear", node.name
            assert signature[node.args[1].name] == f"{fqn}.weight", (node.name, fqn)
            linears += 1
    assert linears >= 6 * SMALL["num_hidden_layers"]
    tree = torch.export.unflatten(program)
    want_out, got_out = program.module()(**feeds), tree(**feeds)
    for name in want_out:
        assert torch.equal(want_out[name], got_out[name]), name


@pytest.mark.parametrize("family,head", [("bert-classifier", "classifier.weight"),
                                         ("roberta-classifier", "classifier.out_proj.weight")])
def test_float_head_keeps_the_classifier_float(checkpoints, tmp_path, family, head):
    """--float-lm-head keeps the model's head float: the linear its family declares as the head
    (a classifier's output layer), whatever it is named; every other linear is quantized."""
    import onnx

    out = ferry_export(checkpoints[family], tmp_path / "out", "--dynamic", "--quantize", "int8",
                       "--float-lm-head", "--quiet")
    graph = onnx.load(out / "model.onnx", load_external_data=False).graph
    floats = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.FLOAT}
    quantized = {t.name for t in graph.initializer if t.data_type == onnx.TensorProto.UINT8}
    assert head in floats, sorted(floats)
    assert not any(name.startswith(head.rsplit(".", 1)[0]) for name in quantized), quantized
    assert any("attention.self.query" in name for name in quantized), sorted(quantized)
