"""ExecuTorch's .pte (--format executorch, the guide's ExecutorchExporter) against the oracle:
the ExecuTorch runtime of the pinned wheel (executorch.runtime) loads the model.pte ferry wrote
and runs its method, and transformers' eager model runs the same checkpoint. fp32 logits and
hidden states agree within 1e-4 at every real position for every decoder family (batch 1 and 2,
left-padded, sequence 1, 7 and 33, dynamic and static) and every encoder family (batch 1 and 3,
right-padded); fp16 and bf16 programs within the ONNX oracle's bounds.

Generation (a static cache the program writes into its cache inputs, which it lists among its
outputs: [cache x N, logits, cache x N]) equals transformers' greedy generate() for every family,
prompts of 1, 5 and 40 tokens and a left-padded batch, in the Python runtime (the cache fed and
read back each call) and through ferry's generate(); and the guide's C++ decode loop, built
against the wheel's runtime, binds the caller's buffers in place and gives the same tokens.

Both backends: "xnnpack" (the default: fp32 linears, norms, elementwise arithmetic, rotary and
attention in XNNPACK graphs) and "portable" (the runtime's own kernels for every op) meet the
same bounds.

The program's structure is read back with the wheel's own flatbuffer decoder, never ferry's:
every tensor is a constant inside the constant segment, planned inside the arena, or an input
or output the options leave to the caller; no two planned tensors whose lifetimes meet share a
byte (the lifetimes derived here from the instructions, delegate calls included); every kernel
is one the runtime registers; the extended header locates the segments. Each XNNPACK graph,
decoded with the wheel's flatc and its schema, has as external values its call's arguments
(same sizes, inputs first), nodes that read only what is an input, a constant or made before,
fully connected layers whose filters fit their inputs, and weights that are named data of the
right size inside the file, each stored once. What the format cannot write yet (quantized weights, 3-D
convolutions) fails with one line and writes nothing."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import (ARCHS, FERRY_BIN, FP32_ATOL, assert_logits_close, check_export_error,
                      ferry_builds, ferry_export, layer_linears, make_checkpoint, make_inputs,
                      model_linears,
                      reference_logits, reference_model, run_ferry)
from test_encoders import FAMILIES as ENCODERS, assert_close, build as build_encoder, eager, \
    feeds_for
from test_oracle_onnx import BF16_ATOL, FP16_ATOL
from test_openvino import check_calls, eos_ids, hf_greedy, left_pad, pick, prompts

VOCAB = 160
SHAPES = [(1, 1), (1, 7), (1, 33), (2, 1), (2, 7), (2, 33)]


def runtime():
    from executorch.runtime import Runtime

    return Runtime.get()


def method(out, component="model"):
    return runtime().load_program(str(out / f"{component}.pte")).load_method("forward")


def run(m, ids, mask):
    (logits,) = m.execute([torch.from_numpy(ids), torch.from_numpy(mask)])
    return logits.float().numpy()


def check_decoder(ckpt, m, shapes, atol=FP32_ATOL):
    for batch, seq in shapes:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        assert_logits_close(run(m, ids, mask), reference_logits(ckpt, ids, mask, None), mask,
                            atol=atol, what=f"{batch}x{seq}")


# --- the program as the wheel's decoder reads it -------------------------------------------


def decode(path):
    """The Program of `path` as JSON, by executorch's own flatbuffer reader."""
    from executorch.exir._serialize._flatbuffer import _program_flatbuffer_to_json

    return json.loads(_program_flatbuffer_to_json(path.read_bytes()))


ELEMENT = {"BYTE": 1, "CHAR": 1, "SHORT": 2, "INT": 4, "LONG": 8, "HALF": 2, "FLOAT": 4,
           "DOUBLE": 8, "BOOL": 1, "BFLOAT16": 2}


def nbytes(t):
    return int(np.prod(t["sizes"], dtype=np.int64)) * ELEMENT[t["scalar_type"]]


def xnn_graph(blob):
    """An XNNPACK delegate's graph as JSON, by the wheel's flatc and the delegate's schema."""
    import importlib.util
    import tempfile

    from executorch.exir._serialize._flatbuffer import _flatc_decompile

    assert blob[4:8] == b"XH00" and int.from_bytes(blob[8:10], "little") == 30
    at, size = int.from_bytes(blob[10:14], "little"), int.from_bytes(blob[14:18], "little")
    assert at + size <= len(blob) and blob[at + 4:at + 8] == b"XN01"
    et = Path(importlib.util.find_spec("executorch").submodule_search_locations[0])
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "graph.bin").write_bytes(blob[at:at + size])
        _flatc_decompile(tmp, str(et / "backends/xnnpack/serialization/schema.fbs"),
                         str(Path(tmp) / "graph.bin"), ["--raw-binary"])
        return json.loads((Path(tmp) / "graph.json").read_text())


INVALID = 0xFFFFFFFF
ONE_INPUT = {"XNNSoftmax", "XNNSigmoid", "XNNFloor", "XNNConvert", "XNNSquareRoot", "XNNNegate",
             "XNNSquare", "XNNAbs", "XNNReciprocalSquareRoot", "XNNLog", "XNNTanh", "XNNExp",
             "XNNSin", "XNNCos"}
TWO_INPUTS = {"XNNAdd", "XNNSubtract", "XNNMultiply", "XNNDiv", "XNNMaximum", "XNNMinimum",
              "XNNBatchMatrixMultiply"}
MOVES = {"XNNStaticTranspose", "XNNStaticReshape", "XNNStaticSlice"}
CONCATS = {"XNNConcatenate2": 2, "XNNConcatenate3": 3, "XNNConcatenate4": 4,
           "XNNConcatenate5": 5}


def xnn_tensors(graph):
    """id -> (tensor value, quantized value or None)"""
    out = {}
    for v in graph["xvalues"]:
        u = v["xvalue_union"]
        t = u.get("tensor_value", u)
        out[t["id_out"]] = (t, u if "tensor_value" in u else None)
    return out


def check_delegates(prog, raw, base):
    """Each delegate call: an XNNPACK graph over its arguments (inputs first, each external
    value at its argument's place and of its tensor's bounds), every node reading only what
    is an input, a constant or made by a node before it, every output made; its fully
    connected layers' filters [out, in] against their inputs; its weights named data inside
    the file, each stored once, its other constants inside its blob. The tensors that live
    only inside a graph are Nones of the program, read by no instruction. Returns the
    graphs."""
    (plan,) = prog["execution_plan"]
    values, segments = plan["values"], prog.get("segments") or []
    named = {d["key"]: segments[d["segment_index"]] for d in prog.get("named_data") or []}
    assert len(named) == len(prog.get("named_data") or []), "a key named twice"
    spans = sorted((s["offset"], s["offset"] + s["size"]) for s in named.values())
    assert all(b <= a for (_, b), (a, _) in zip(spans, spans[1:])), "a weight stored twice"
    assert all(base + end <= len(raw) for _, end in spans)
    calls = [i["instr_args"] for i in plan["chains"][0]["instructions"]
             if i["instr_args_type"] == "DelegateCall"]
    assert sorted(c["delegate_index"] for c in calls) == list(range(len(plan["delegates"])))
    graphs = []
    for call in calls:
        delegate = plan["delegates"][call["delegate_index"]]
        assert delegate["id"] == "XnnpackBackend" and delegate["processed"]["location"] == "INLINE"
        blob = bytes(prog["backend_delegate_data"][delegate["processed"]["index"]]["data"])
        graph = xnn_graph(blob)
        graphs.append(graph)
        consts_at = int.from_bytes(blob[18:22], "little")
        consts_len = int.from_bytes(blob[22:30], "little")
        assert consts_at + consts_len == len(blob)
        tensors = xnn_tensors(graph)
        args = call["args"]
        ins, outs = graph["input_ids"], graph["output_ids"]
        assert graph["num_externs"] == len(args) == len(ins) + len(outs) and outs
        for ext, i in enumerate(ins + outs):
            t, _ = tensors[i]
            assert t["external_id"] == ext and t["flags"] == (1 if ext < len(ins) else 2)
            assert t["datatype"] == "xnn_datatype_fp32"
            assert values[args[ext]]["val_type"] == "Tensor"
            assert t["dims"] == values[args[ext]]["val"]["sizes"], (ext, t["dims"])
        externals = set(ins + outs)
        assert all(t["external_id"] == INVALID and not t.get("flags")
                   for i, (t, _) in tensors.items() if i not in externals)
        made = set(ins)
        constants = {i for i, (t, _) in tensors.items() if t.get("constant_buffer_idx")}
        weights = []
        for node in graph["xnodes"]:
            kind, n = node["xnode_union_type"], node["xnode_union"]
            if kind == "XNNFullyConnected":
                reads = [n["input1_id"], n["filter_id"]] + (
                    [n["bias_id"]] if n["bias_id"] != INVALID else [])
            elif kind in TWO_INPUTS:
                reads = [n["input1_id"], n["input2_id"]]
            elif kind in CONCATS:
                reads = [n[f"input{i}_id"] for i in range(1, CONCATS[kind] + 1)]
                assert n.get("axis", 0) < len(tensors[n["output_id"]][0]["dims"])
            elif kind in MOVES:
                reads = [n["input_id"]]
                x, y = tensors[n["input_id"]][0], tensors[n["output_id"]][0]
                if kind == "XNNStaticTranspose":
                    assert sorted(n["perm"]) == list(range(len(x["dims"])))
                    assert [x["dims"][i] for i in n["perm"]] == y["dims"]
                elif kind == "XNNStaticReshape":
                    # at most one extent inferred (0); the others the result's
                    shape = n["new_shape"]
                    assert shape.count(0) <= 1 and len(shape) == len(y["dims"])
                    assert all(d in (0, e) for d, e in zip(shape, y["dims"]))
                    assert np.prod(x["dims"]) == np.prod(y["dims"])
                else:
                    assert all(o + z <= e for o, z, e in zip(n["offsets"], n["sizes"],
                                                             x["dims"]))
            else:
                assert kind in ONE_INPUT, kind
                reads = [n["input_id"]]
            for r in reads:
                assert r in made or r in constants, f"{kind} reads {r} before it is made"
            assert n["output_id"] not in made | constants, f"{kind} writes {n['output_id']} twice"
            made.add(n["output_id"])
            if kind != "XNNFullyConnected":
                continue
            x, w, y = (tensors[i][0] for i in (n["input1_id"], n["filter_id"], n["output_id"]))
            out, k = w["dims"]
            assert x["dims"][-1] == k and y["dims"][-1] == out
            q = tensors[n["filter_id"]][1]
            if q:
                # 8da4w: the input quantized per token, feeding an int4 filter with bf16 scales
                xq = tensors[n["input1_id"]][1]
                assert x["datatype"] == "xnn_datatype_qdint8"
                assert xq["quant_params_type"] == "PerTokenDynamicQuant"
                assert w["datatype"] == "xnn_datatype_qbint4"
                assert q["quant_params_type"] == "PerChannelGroupQuant"
                group = q["quant_params"]["group_size"]
                assert k % group == 0 and q["quant_params"]["num_scales"] == out * k // group
                weights += [(w["constant_buffer_idx"], out * k // 2),
                            (q["quant_params"]["scale_buffer_idx"], 2 * out * k // group)]
            else:
                assert x["datatype"] == w["datatype"] == "xnn_datatype_fp32"
                weights.append((w["constant_buffer_idx"], 4 * out * k))
            if n["bias_id"] != INVALID:
                bias = tensors[n["bias_id"]][0]
                assert bias["datatype"] == "xnn_datatype_fp32" and bias["dims"] == [out]
                weights.append((bias["constant_buffer_idx"], 4 * out))
        assert set(outs) <= made, "an output no node makes"
        for index, size in weights:
            assert index > 0
            entry = graph["constant_data"][index]
            if entry.get("named_key"):
                assert entry["offset"] == 2 ** 64 - 1 and entry["size"] == size
                assert named[entry["named_key"]]["size"] == size, entry["named_key"]
            else:
                assert entry["offset"] + entry["size"] <= consts_len
        for entry in graph["constant_data"][1:]:
            if entry.get("named_key"):
                assert named[entry["named_key"]]["size"] == entry["size"], entry["named_key"]
            else:
                assert entry["offset"] % 16 == 0 and entry["offset"] + entry["size"] <= consts_len
    return graphs


def check_program(path, planned_inputs=True, planned_outputs=True):
    """The structure checks of the module docstring; returns the decoded program."""
    raw = path.read_bytes()
    prog = decode(path)
    assert raw[4:8] == b"ET12" and prog["version"] == 0
    (plan,) = prog["execution_plan"]
    assert plan["non_const_buffer_sizes"][0] == 0
    arena = plan["non_const_buffer_sizes"][1]
    values = plan["values"]
    # the segments: the extended header says where they start and how long they are; the
    # constant segment first, then each named datum (inside it where a kernel reads it too)
    seg = prog.get("segments") or []
    base = 0
    if seg:
        assert raw[8:12] == b"eh00"
        base = int.from_bytes(raw[24:32], "little")
        size = int.from_bytes(raw[32:40], "little")
        assert base % 128 == 0 and base + size == len(raw) and seg[0]["offset"] == 0
        assert all(s["offset"] % 64 == 0 and s["offset"] + s["size"] <= size for s in seg)
    check_delegates(prog, raw, base)
    offsets = prog["constant_segment"]["offsets"]
    registered = set(runtime().operator_registry.operator_names)
    for op in plan["operators"]:
        name = op["name"] + ("." + op["overload"] if op["overload"] else "")
        assert name in registered, f"{name}: no such kernel in the runtime"
    # lifetimes, from the instructions alone
    end = len(plan["chains"][0]["instructions"])
    first, last = {}, {}

    def touch(k, at):
        v = values[k]
        if v["val_type"] == "Tensor":
            first.setdefault(k, at)
            last[k] = at
        elif v["val_type"] in ("TensorList", "OptionalTensorList"):
            for item in v["val"]["items"]:
                if item >= 0:
                    touch(item, at)

    for k in plan["inputs"]:
        first[k] = 0
        last[k] = 0
    for at, ins in enumerate(plan["chains"][0]["instructions"]):
        assert ins["instr_args_type"] in ("KernelCall", "DelegateCall")
        for a in ins["instr_args"]["args"]:
            assert 0 <= a < len(values)
            touch(a, at)
    for k in plan["outputs"]:
        last[k] = end
    placed = []
    for k, v in enumerate(values):
        if v["val_type"] != "Tensor":
            continue
        t = v["val"]
        assert t["dim_order"] == list(range(len(t["sizes"])))
        alloc = t.get("allocation_info")
        if t["data_buffer_idx"]:
            assert alloc is None, f"value {k}: a constant with a place in the arena"
            assert offsets[t["data_buffer_idx"]] + nbytes(t) <= seg[0]["size"]
            continue
        if alloc is None:
            assert (k in plan["inputs"] and not planned_inputs) or \
                (k in plan["outputs"] and not planned_outputs), f"value {k}: no memory at all"
            continue
        assert alloc["memory_id"] == 1
        at = alloc["memory_offset_low"] + (alloc.get("memory_offset_high", 0) << 32)
        assert at + nbytes(t) <= arena, f"value {k}: past the arena"
        if k in first:
            placed.append((first[k], last[k], at, at + nbytes(t), k))
    placed.sort()
    for i, (f1, l1, a1, b1, k1) in enumerate(placed):
        for f2, l2, a2, b2, k2 in placed[i + 1:]:
            if f2 > l1:
                break
            assert b1 <= a2 or b2 <= a1, \
                f"values {k1} and {k2} are alive together and share bytes [{a1}, {b1}) [{a2}, {b2})"
    return prog


# --- decoders --------------------------------------------------------------------------------


BACKENDS = ["xnnpack", "portable"]


@pytest.fixture(scope="module")
def decoder_ckpts(tmp_path_factory):
    made = {}

    def get(arch):
        if arch not in made:
            made[arch] = make_checkpoint(tmp_path_factory.mktemp(f"pte-{arch}") / "ckpt", arch)
        return made[arch]

    return get


@pytest.fixture(scope="module", params=[(a, b) for a in ARCHS for b in BACKENDS],
                ids=[f"{a}-{b}" for a in ARCHS for b in BACKENDS])
def family(request, decoder_ckpts, tmp_path_factory):
    arch, backend = request.param
    ckpt = decoder_ckpts(arch)
    out = ferry_export(ckpt, tmp_path_factory.mktemp(f"pte-{arch}-{backend}") / "pte",
                       "--format", "executorch", "--et-backend", backend, "--dynamic",
                       "--quiet")
    return arch, backend, ckpt, out


def test_decoder_matches_eager(family):
    arch, _, ckpt, out = family
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "export.json", "generation_config.json", "model.pte"]
    check_decoder(ckpt, method(out), SHAPES)


def test_program_is_well_formed(family):
    arch, backend, ckpt, out = family
    prog = check_program(out / "model.pte")
    manifest = json.loads((out / "export.json").read_text())
    meta = manifest["components"]["model"]["metadata"]
    plan = prog["execution_plan"][0]
    assert meta["planned_memory_bytes"] == plan["non_const_buffer_sizes"][1]
    assert meta["instructions"] == len(plan["chains"][0]["instructions"])
    assert sorted(meta["operators"]) == sorted(
        o["name"] + "." + o["overload"] for o in plan["operators"])
    # the dynamic axes have their bounds, which export.json states: max_seq_len's default
    # (128), or the position table's length where the model has one (GPT-2's n_positions)
    positions = reference_model(ckpt).config.n_positions if arch == "gpt2" else 128
    assert meta["symbols"]["batch"]["max"] == 4
    assert meta["symbols"]["sequence"]["max"] == positions
    assert meta["export_config"]["backend"] == backend
    assert meta["delegates"] == len(plan["delegates"])
    if backend == "portable":
        assert plan["delegates"] == [] and "aten::linear.out" in meta["operators"]
    else:
        # every linear of the 2 layers, and the head (tied or not, stored once)
        linears = model_linears(arch, ckpt) + 1
        assert meta["delegated_linears"] == linears
        assert "aten::linear.out" not in meta["operators"]
        # the norms and the feed-forward's arithmetic run there too, in graphs of many nodes
        assert linears < meta["delegate_nodes"]
        assert not {"aten::sigmoid.out", "aten::rsqrt.out", "aten::mean.out"} & set(
            meta["operators"])


def test_bounds_are_the_programs(family, tmp_path):
    """max_seq_len / max_batch_size bound the dynamic axes: the program takes up to them, and
    ExportedModel refuses past them by name, before the runtime's own error."""
    import ferry

    arch, backend, ckpt, _ = family
    if arch != "llama" or backend != "xnnpack":
        pytest.skip("one family shows it")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--max-seq-len", "16", "--max-batch-size", "2", "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["symbols"]["sequence"]["max"] == 16 and meta["symbols"]["batch"]["max"] == 2
    check_decoder(ckpt, method(out), [(2, 16), (1, 1)])
    model = ferry.ExportedModel.from_pretrained(out)
    for shape, needle in (((1, 17), "axis 1 (sequence) takes 1 to 16"),
                          ((3, 4), "axis 0 (batch) takes 1 to 2")):
        with pytest.raises(ferry.FerryError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            model(input_ids=np.zeros(shape, np.int64))


@pytest.mark.parametrize("flags,want", [
    # below the traced example: the example moves into range
    (["--dynamic", "--max-seq-len", "4"], {"batch": (1, 4), "sequence": (1, 4)}),
    # the batch is the inputs' first axis, whatever its symbol is called
    (["--dim", "input_ids:0=b", "--dim", "input_ids:1=s", "--max-batch-size", "2",
      "--max-seq-len", "16"], {"b": (1, 2), "s": (1, 16)}),
    # given, a bound caps the max a --dim has
    (["--dim", "input_ids:1=s:2:64", "--max-seq-len", "16"], {"s": (2, 16)}),
])
def test_bounds_options(tmp_path, flags, want):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--quiet", *flags)
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    got = {k: (v["min"], v["max"]) for k, v in meta["symbols"].items()}
    assert got == want
    assert all(v["traced"] <= v["max"] for v in meta["symbols"].values())
    top = {k: v[1] for k, v in want.items()}
    batch = top.get("batch", top.get("b", 1))
    check_decoder(ckpt, method(out), [(batch, top.get("sequence", top.get("s"))), (1, 2)])


def test_encoder_positions_capped(tmp_path):
    """An encoder's sequence is bounded by its position table; max_seq_len, given, caps it."""
    ckpt = build_encoder(tmp_path / "ckpt", "bert")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--max-seq-len", "16", "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["symbols"]["sequence"]["max"] == 16


def test_static_export(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen3")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--example-shape",
                       "input_ids=2x7", "--quiet")
    prog = check_program(out / "model.pte")
    dynamism = {v["val"]["shape_dynamism"] for v in prog["execution_plan"][0]["values"]
                if v["val_type"] == "Tensor"}
    assert dynamism == {"STATIC"}
    check_decoder(ckpt, method(out), [(2, 7)])


@pytest.mark.parametrize("dtype,atol", [("fp16", FP16_ATOL), ("bf16", BF16_ATOL)])
def test_half_programs(tmp_path, dtype, atol):
    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--dtype", dtype, "--quiet")
    check_program(out / "model.pte")
    check_decoder(ckpt, method(out), [(1, 7), (2, 33)], atol=atol)


def test_bf16_generation_steps_see_float_logits(tmp_path, monkeypatch):
    """A bf16 static-cache program through generate(): each step's scores are the vocabulary's
    float logits (the runtime's bf16 tensor converted once, not read again as raw bits), the
    first step's within the bf16 bound of the fp32 reference."""
    import ferry
    import ferry.generation as generation

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dtype", "bf16",
                       "--for-generation", "--static-cache", "--max-cache-len", "32",
                       "--dynamic", "--quiet")
    seen = []
    process = generation._process

    def capture(scores, *rest):
        seen.append(np.array(scores))
        return process(scores, *rest)

    monkeypatch.setattr(generation, "_process", capture)
    ids, mask = left_pad(prompts([6]))
    ferry.ExportedModel.from_pretrained(out).generate(ids, attention_mask=mask,
                                                      max_new_tokens=4, do_sample=False)
    vocab = reference_model(ckpt).config.vocab_size
    assert [s.shape for s in seen] == [(1, vocab)] * 4
    with torch.no_grad():
        want = reference_model(ckpt)(input_ids=torch.from_numpy(ids),
                                     attention_mask=torch.from_numpy(mask)).logits[:, -1]
    np.testing.assert_allclose(seen[0], want.numpy(), atol=BF16_ATOL)


def test_inputs_and_outputs_left_to_the_caller(tmp_path):
    """alloc_graph_input / alloc_graph_output false: no place in the plan (the runtime reads the
    caller's inputs where they are, the pybinding binds the outputs), the same numbers."""
    ckpt = make_checkpoint(tmp_path / "ckpt", "mistral")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--no-alloc-graph-input", "--no-alloc-graph-output", "--quiet")
    prog = check_program(out / "model.pte", planned_inputs=False, planned_outputs=False)
    plan = prog["execution_plan"][0]
    for k in plan["inputs"] + plan["outputs"]:
        assert "allocation_info" not in plan["values"][k]["val"]
    check_decoder(ckpt, method(out), [(1, 7), (2, 33)])
    planned = ferry_export(ckpt, tmp_path / "planned", "--format", "executorch", "--dynamic",
                           "--quiet")
    assert plan["non_const_buffer_sizes"][1] <= \
        decode(planned / "model.pte")["execution_plan"][0]["non_const_buffer_sizes"][1]


@pytest.mark.parametrize("label,build", ferry_builds()[1:], ids=[b[0] for b in ferry_builds()[1:]])
def test_sanitizer_builds_write_the_program(tmp_path, label, build):
    """The sanitizer builds write the program cleanly (a memory error or a leak exits 86): the
    same bytes as the release build from gcc's ASan build; from clang's, a program that is well
    formed and computes the same numbers (the two compilers order some of the IR's nodes
    differently, in every format)."""
    from conftest import ROOT

    for name, ckpt in (("llama", ROOT / "fixtures" / "tiny-llama"),
                       ("bert", build_encoder(tmp_path / "bert-ckpt", "bert"))):
        outs = {}
        for which, binary in (("release", FERRY_BIN), (label, build)):
            out = outs[which] = tmp_path / f"{name}-{which}"
            rc, _, err = run_ferry("export", ckpt, out, "--format", "executorch", "--dynamic",
                                   "--quiet", binary=binary)
            assert rc == 0, err
        release, sanitized = (outs[w] / "model.pte" for w in ("release", label))
        if label == "asan":
            assert release.read_bytes() == sanitized.read_bytes(), name
            continue
        check_program(sanitized)
        feeds = [torch.from_numpy(v) for v in make_inputs(60, 2, 7)[:2]]
        if name == "bert":
            feeds.append(torch.zeros_like(feeds[0]))
        got = [method(outs[w]).execute(feeds) for w in ("release", label)]
        for a, b in zip(*got):
            assert torch.allclose(a, b, atol=1e-6), name


# --- generation ---------------------------------------------------------------------------

MAX_CACHE_LEN = 80
NEW_TOKENS = 32


def et_greedy(out, rows, new_tokens=NEW_TOKENS, suppressed=()):
    """The guide's static-cache loop in the Python runtime, over export.json: the cache inputs
    fed to every call and read back from its outputs (the first N, the cache tensors the program
    wrote), the prompt through "prefill" (or "decode" alone when it takes prompts), then a token
    a call. Checks the outputs' layout and that every layer's position ends at the tokens fed.
    -> (ids, mask, tokens, calls)."""
    manifest = json.loads((out / "export.json").read_text())
    comps = manifest["components"]
    methods = {n: method(out, n) for n in comps}
    decode = comps["decode"]["metadata"]
    max_len = decode["cache"]["max_cache_len"]
    ids, mask = left_pad(rows)
    batch, width = ids.shape
    pos = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
    pads = (mask == 0).sum(-1)
    dtypes = {"float32": torch.float32, "int64": torch.int64}
    cache = {i["name"]: torch.zeros([batch if d == "batch" else max_len if d == "max_cache_len"
                                     else d for d in i["shape"]], dtype=dtypes[i["dtype"]])
             for i in decode["inputs"] if i["name"] not in ("input_ids", "attention_mask",
                                                            "position_ids")}
    slots, calls = np.arange(max_len), []

    def call(component, tokens, first, positions):
        meta = comps[component]["metadata"]
        order = [i["name"] for i in meta["inputs"]]
        cached = [n for n in order if n in cache]
        assert meta["method_outputs"] == cached + ["logits"] + cached
        query = first + np.arange(tokens.shape[1])
        visible = (slots[None, None, :] <= query[None, :, None]) & \
            (slots[None, None, :] >= pads[:, None, None])
        feeds = {"input_ids": torch.from_numpy(tokens),
                 "attention_mask": torch.from_numpy(np.ascontiguousarray(visible[:, None])),
                 "position_ids": torch.from_numpy(np.ascontiguousarray(positions)), **cache}
        result = methods[component].execute([feeds[n] for n in order])
        for k, name in enumerate(cached):
            assert not torch.equal(cache[name], result[k]), f"{name} not written"
            assert torch.equal(result[k], result[len(cached) + 1 + k])
            cache[name] = result[k].clone()
        calls.append((first, result[len(cached)].float().numpy()))

    call("prefill" if "prefill" in methods else "decode", ids, 0, pos)
    tokens = []
    for k in range(new_tokens):
        tokens.append(pick(calls[-1][1], list(suppressed)))
        if k < new_tokens - 1:
            call("decode", tokens[-1][:, None], width + k, pos[:, -1:] + k + 1)
    counters = {int(t.reshape(-1)[0]) for n, t in cache.items() if n.endswith("cumulative_length")}
    assert counters == {width + new_tokens - 1}, counters
    return ids, mask, np.stack(tokens, 1), calls


@pytest.fixture(scope="module", params=[(a, b) for a in ARCHS for b in BACKENDS],
                ids=[f"{a}-{b}" for a in ARCHS for b in BACKENDS])
def generation(request, ckpts, tmp_path_factory):
    """The guide's single-graph generation: a static cache and a multi-token decode, on each
    backend."""
    arch, backend = request.param
    ckpt = ckpts(arch)
    out = ferry_export(ckpt, tmp_path_factory.mktemp("pte-gen") / "pte", "--format",
                       "executorch", "--et-backend", backend, "--dynamic", "--for-generation",
                       "--static-cache", "--max-cache-len", str(MAX_CACHE_LEN),
                       "--multi-token-decode", "--quiet")
    return ckpt, out


@pytest.mark.parametrize("rows", [[1], [5], [40], [7, 3]], ids=["p1", "p5", "p40", "b2"])
def test_static_greedy_equals_generate(generation, rows, record_property):
    ckpt, out = generation
    assert sorted(p.name for p in out.glob("*.pte")) == ["decode.pte"]
    ids, mask, tokens, calls = et_greedy(out, prompts(rows), suppressed=eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, NEW_TOKENS))
    record_property("max_abs_error", check_calls(ckpt, ids, mask, tokens, calls))


def test_generation_program_and_generate(generation):
    """The decode program is well formed, and ferry's generate() runs it to transformers'
    tokens (a left-padded batch)."""
    import ferry

    ckpt, out = generation
    check_program(out / "decode.pte")
    ids, mask = left_pad(prompts([6, 2]))
    got = ferry.ExportedModel.from_pretrained(out).generate(
        torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
        min_new_tokens=12)
    np.testing.assert_array_equal(got[:, ids.shape[1]:].numpy(), hf_greedy(ckpt, ids, mask, 12))


def test_prefill_decode_pair(ckpts, tmp_path):
    """The static cache's default components, prefill and decode (on the portable kernels: the
    generation fixture's are XNNPACK's), in the loop and through ferry's generate(); `ferry
    validate` runs them."""
    import os
    import sys

    import ferry
    from conftest import ROOT

    ckpt = ckpts("qwen2")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--et-backend",
                       "portable", "--dynamic", "--for-generation", "--static-cache",
                       "--max-cache-len", "64", "--quiet")
    assert sorted(p.name for p in out.glob("*.pte")) == ["decode.pte", "prefill.pte"]
    ids, mask, tokens, calls = et_greedy(out, prompts([7, 3]), 16, eos_ids(ckpt))
    np.testing.assert_array_equal(tokens, hf_greedy(ckpt, ids, mask, 16))
    check_calls(ckpt, ids, mask, tokens, calls)
    got = ferry.ExportedModel.from_pretrained(out).generate(
        torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=16,
        min_new_tokens=16)
    np.testing.assert_array_equal(got[:, ids.shape[1]:].numpy(), tokens)
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, stdout, stderr = run_ferry("validate", out, "--model", ckpt, "--no-record", env=env)
    assert rc == 0 and stdout.rstrip().endswith("PASS"), (stdout, stderr)


NO_ALLOC = ["--no-alloc-graph-input", "--no-alloc-graph-output", "--no-alloc-mutable-buffers"]


def test_guide_cpp_decode_loop(ckpts, tmp_path):
    """The guide's C++ decode loop (tests/python/data/guide_decode_loop.cpp), built against the
    wheel's headers and runtime library: the caller's cache buffers set as inputs and bound onto
    the program's last N outputs (set_output_data_ptr), the prompt in one call, then a token a
    call, each layer one XNNPACK graph around its cache writes. Its greedy tokens are transformers' and the write
    positions in the caller's own buffers count every token fed: the writes landed there, in
    place."""
    import shutil
    import subprocess

    import importlib.util

    from conftest import ROOT

    compiler = shutil.which("g++")
    assert compiler, "g++ is needed to build the guide's C++ loop (make test installs it)"
    # the wheel's headers and runtime libraries (executorch is a namespace package)
    et = Path(importlib.util.find_spec("executorch").submodule_search_locations[0])
    binary = tmp_path / "guide_decode_loop"
    subprocess.run([compiler, "-std=c++17", "-O1", "-DC10_USING_CUSTOM_GENERATED_MACROS",
                    f"-I{et / 'include'}",
                    f"-I{et / 'include/executorch/runtime/core/portable_type/c10'}",
                    str(ROOT / "tests/python/data/guide_decode_loop.cpp"), "-o", str(binary),
                    f"-L{et / 'lib'}", "-Wl,--no-as-needed", "-lexecutorch",
                    "-lexecutorch_kernels_optimized", "-lexecutorch_kernels_quantized",
                    "-lexecutorch_backend_xnnpack", "-Wl,--as-needed",
                    f"-Wl,-rpath,{et / 'lib'}"], check=True, capture_output=True, timeout=300)
    ckpt = ckpts("llama")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dim",
                       "input_ids:1=sequence:1:32", "--for-generation", "--static-cache",
                       "--max-cache-len", "32", "--multi-token-decode", *NO_ALLOC, "--quiet")
    # a layer is one XNNPACK graph around its two cache writes: its norms, linears, rotary,
    # scores, softmax and feed-forward; the first layer's is cut twice more, where the
    # positions become floats and where the mask's bias is made (portable kernels, once for
    # every layer); no portable kernel does their arithmetic
    plan = check_program(out / "decode.pte", planned_inputs=False,
                         planned_outputs=False)["execution_plan"][0]
    kernels = {o["name"] for o in plan["operators"]}
    assert not kernels & {"aten::bmm", "aten::_softmax", "aten::mul", "aten::linear",
                          "aten::mean", "aten::sigmoid", "aten::rsqrt", "aten::permute_copy",
                          "aten::cat", "aten::slice_copy", "aten::neg"}, kernels
    assert len(plan["delegates"]) <= reference_model(ckpt).config.num_hidden_layers + 3
    prompt = prompts([6])[0]
    proc = subprocess.run([str(binary), str(out / "decode.pte"), ",".join(map(str, prompt)),
                           "12"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    ids, mask = left_pad([prompt])
    want = hf_greedy(ckpt, ids, mask, 12)[0].tolist()
    assert [int(t) for t in lines[0].split()] == want
    assert lines[1:] == [f"counter {len(prompt) + 11}"] * 2, lines
    # the Python runtime cannot bind the caller's cache: ferry's runners say so
    import ferry

    with pytest.raises(ferry.FerryError, match="only ExecuTorch's C\\+\\+ runtime"):
        ferry.ExportedModel.from_pretrained(out).generate(torch.from_numpy(ids),
                                                          max_new_tokens=2)
    # int4 with the table quantized too: the loop linked with the wheel's quantized kernels
    q4 = ferry_export(ckpt, tmp_path / "q4", "--format", "executorch", "--dim",
                      "input_ids:1=sequence:1:32", "--for-generation", "--static-cache",
                      "--max-cache-len", "32", "--multi-token-decode", *NO_ALLOC, "--quantize",
                      "int4", "--quantize-embeddings", "--quiet")
    proc = subprocess.run([str(binary), str(q4 / "decode.pte"), ",".join(map(str, prompt)),
                           "12"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    with torch.no_grad():
        want = int4_reference(ckpt, embeddings=True).generate(
            torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
            min_new_tokens=12, do_sample=False, pad_token_id=2)[0, ids.shape[1]:].tolist()
    assert [int(t) for t in proc.stdout.splitlines()[0].split()] == want


# --- int4: XNNPACK's 8da4w ----------------------------------------------------------------------


def bf16(x):
    return torch.from_numpy(np.ascontiguousarray(x, np.float32)).to(torch.bfloat16).float().numpy()


def int4_xnnpack(w, block=32):
    """w [out, in] as XNNPACK's int4 holds it, computed here from the rules alone: per block the
    extreme v (the larger magnitude, ties negative), scale v / 7 for a positive v and v / -8 for
    a negative one (positive either way), 1 for an all-zero block, rounded to bf16; codes
    round(x / scale) to nearest, ties away from zero, in [-8, 7]. -> the dequantized matrix."""
    out, k = w.shape
    b = w.astype(np.float32).reshape(out, k // block, block)
    lo, hi = b.min(-1), b.max(-1)
    v = np.where(np.abs(hi) > np.abs(lo), hi, lo)
    scale = bf16(np.where(v == 0, 1.0, np.where(v > 0, v / np.float32(7), v / np.float32(-8))))
    t = b * (np.float32(1) / scale)[..., None]
    q = np.clip(np.sign(t) * np.floor(np.abs(t) + 0.5), -8, 7)
    return (q * scale[..., None]).reshape(out, k)


def per_token_int8(x):
    """What XNNPACK's qd8 convert does to a linear's input: each row quantized to int8 over
    its range (widened to hold 0), then read back."""
    lo = torch.clamp(x.amin(-1, keepdim=True), max=0)
    hi = torch.clamp(x.amax(-1, keepdim=True), min=0)
    scale = torch.where(hi > lo, (hi - lo) / 255, torch.ones_like(hi))
    zero = torch.clamp(torch.round(-128 - lo / scale), -128, 127)
    return (torch.clamp(torch.round(x / scale + zero), -128, 127) - zero) * scale


def int4_reference(ckpt, embeddings=False):
    """transformers' model of `ckpt` computing what the 8da4w program does, from numpy's int4
    weights (every linear's, the head too: its own copy where tied) and int8 activations; with
    `embeddings`, the table as onnxruntime's symmetric int4 blocks of 32 dequantize it (what
    embedding_4bit reads)."""
    from transformers import AutoModelForCausalLM

    from quant_ref import ort_dequantized

    # a copy of its own: reference_model's is shared
    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32,
                                                 attn_implementation="eager").eval()
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            deq = torch.from_numpy(int4_xnnpack(module.weight.detach().numpy()))
            module.weight = torch.nn.Parameter(deq)
            module.register_forward_pre_hook(lambda m, a: (per_token_int8(a[0]),))
    if embeddings:
        table = model.get_input_embeddings()
        table.weight = torch.nn.Parameter(torch.from_numpy(
            ort_dequantized(table.weight.detach().numpy(), 4, 32, True).astype(np.float32)))
    return model


def check_int4_logits(m, model, shapes):
    """The program `m`'s logits against reference `model`'s at real positions (rounding of an
    activation can land on the other side of a tie, so a few positions may differ by one step:
    the median is exact) -> the largest difference."""
    worst = 0.0
    for batch, seq in shapes:
        ids, mask, _ = make_inputs(VOCAB, batch, seq)
        got = run(m, ids, mask)
        with torch.no_grad():
            want = model(input_ids=torch.from_numpy(ids),
                         attention_mask=torch.from_numpy(mask)).logits.numpy()
        real = mask == 1
        diff = np.abs(got - want).max(-1)[real]
        assert np.median(diff) < 1e-4 and diff.max() < 0.25, (batch, seq, diff.max())
        assert (got.argmax(-1)[real] == want.argmax(-1)[real]).mean() >= 0.95
        worst = max(worst, float(diff.max()))
    return worst


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma"])
def test_int4_matches_numpy_reference(decoder_ckpts, tmp_path, arch, record_property):
    """--quantize int4: each linear an XNNPACK 8da4w graph; the logits agree with the
    reference built from the rules in numpy (rounding of an activation can land on the other
    side of a tie, so a few positions may differ by one step: the median is exact)."""
    ckpt = decoder_ckpts(arch)
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--quantize", "int4", "--quiet")
    prog = check_program(out / "model.pte")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["int4_linears"] == meta["delegated_linears"] == 15
    m, model = method(out), int4_reference(ckpt)
    # half a byte a weight, a bf16 scale a block of 32, and the fp32 biases; the norms' fp32
    # weights, and rotary's one [head_dim, head_dim] rotation: nothing else
    linears = [x for x in model.modules() if isinstance(x, torch.nn.Linear)]
    norms = [p for name, p in model.named_parameters() if "norm" in name]
    head_dim = model.config.hidden_size // model.config.num_attention_heads
    assert meta["delegate_weight_bytes"] == sum(
        x.weight.numel() // 2 + x.weight.numel() // 16 + (4 * x.bias.numel() if x.bias is not None
                                                          else 0) for x in linears) + sum(
        4 * p.numel() for p in norms) + 4 * head_dim ** 2
    record_property("max_abs_error", check_int4_logits(m, model, [(1, 1), (1, 7), (2, 33)]))
    # each linear's input quantized once, however many linears read it (q, k and v: one)
    graphs = [xnn_graph(bytes(d["data"])) for d in prog["backend_delegate_data"]]
    kinds = [n["xnode_union_type"] for g in graphs for n in g["xnodes"]]
    assert kinds.count("XNNConvert") == 2 * 4 + 1


def test_int4_generation(decoder_ckpts, tmp_path):
    """An int4 generation program (static cache, multi-token decode): ferry's generate() gives
    the numpy reference's greedy tokens, a left-padded batch."""
    import ferry

    ckpt = decoder_ckpts("qwen3")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "48",
                       "--multi-token-decode", "--quantize", "int4", "--quiet")
    ids, mask = left_pad(prompts([6, 2]))
    got = ferry.ExportedModel.from_pretrained(out).generate(
        torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
        min_new_tokens=12)
    with torch.no_grad():
        want = int4_reference(ckpt).generate(
            torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=12,
            min_new_tokens=12, do_sample=False, pad_token_id=2)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_int4_embeddings_match_numpy_reference(tmp_path, tied, record_property):
    """--quantize-embeddings: the table read by quantized_decomposed::embedding_4bit (codes
    high nibble first, fp32 scales), quantized by onnxruntime's symmetric rule as the ONNX
    export's is; a tied head still reads it as XNNPACK's int4. The logits agree with
    transformers' model holding onnxruntime's dequantized table and numpy's int4 linears."""
    from quant_ref import ort_dequantized

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama", tie_word_embeddings=tied)
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--quantize", "int4", "--quantize-embeddings", "--quiet")
    import executorch.kernels.quantized  # noqa: F401  (registers embedding_4bit)

    check_program(out / "model.pte")
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert meta["int4_embeddings"] == 1 and meta["int4_linears"] == 15
    assert "quantized_decomposed::embedding_4bit.out" in meta["operators"]
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "embedding table: int4 blocks" in stdout, stdout
    model = int4_reference(ckpt, embeddings=True)
    # in place of the float table (160 x 64 fp32), half a byte a value and an fp32 scale a
    # block of 32 (give or take the 64-byte alignment of two constants, and the two calls)
    plain = ferry_export(ckpt, tmp_path / "plain", "--format", "executorch", "--dynamic",
                         "--quantize", "int4", "--quiet")
    saved = (plain / "model.pte").stat().st_size - (out / "model.pte").stat().st_size
    assert abs(saved - (160 * 64 * 4 - 160 * 32 - 160 * 2 * 4)) <= 1024, saved
    m = method(out)
    record_property("max_abs_error", check_int4_logits(m, model, [(1, 7), (2, 33)]))
    # embedding_4bit reads any row an id names: the program checks the ids first, and an id
    # outside the vocabulary stops the method as the float table's lookup does
    for bad in (VOCAB, -1, 10**9):
        ids = torch.tensor([[1, 2, bad]])
        with pytest.raises(Exception, match="0x12"):
            m.execute([ids, torch.ones_like(ids)])


def test_sanitized_builds_write_the_same_program(build, tmp_path_factory):
    """Each build of ferry (the release one, and under ASan/UBSan where `make test` builds them)
    writes a generation program with int4 linears and an int4 table without a memory or
    undefined-behaviour report, byte for byte the release build's."""
    import subprocess

    from conftest import SANITIZER_ENV

    base = tmp_path_factory.getbasetemp() / "sanitized-pte"
    ckpt = base / "ckpt"
    if not (ckpt / "config.json").exists():
        make_checkpoint(ckpt, "qwen3", tie_word_embeddings=True)
    flags = ["--format", "executorch", "--dynamic", "--for-generation", "--static-cache",
             "--max-cache-len", "32", "--multi-token-decode", "--quantize", "int4",
             "--quantize-embeddings", "--quiet"]
    out = base / f"out-{Path(build).parent.name}"
    proc = subprocess.run([str(build), "export", str(ckpt), str(out), *flags],
                          capture_output=True, text=True, env=SANITIZER_ENV, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    release = base / "release"
    if not release.exists():
        ferry_export(ckpt, release, *flags)
    assert (out / "decode.pte").read_bytes() == (release / "decode.pte").read_bytes()


# --- encoders --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def encoders(tmp_path_factory):
    root = tmp_path_factory.mktemp("pte-encoders")
    return {family: build_encoder(root / family, family) for family in ENCODERS}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", list(ENCODERS))
def test_encoder_matches_eager(encoders, tmp_path, family, backend):
    import ferry
    import transformers.modeling_outputs as outputs

    out = ferry_export(encoders[family], tmp_path / "out", "--dynamic", "--format",
                       "executorch", "--et-backend", backend, "--quiet")
    check_program(out / "model.pte")
    exported = ferry.ExportedModel.from_pretrained(out)
    for batch, seq in [(1, 1), (1, 7), (3, 7), (3, 33)]:
        feeds = feeds_for(family, batch, seq)
        got = exported(**feeds)
        want = eager(encoders[family], feeds)
        assert type(got) is type(want) and isinstance(got, outputs.ModelOutput)
        assert_close(got, want, feeds["attention_mask"], f"{family} pte {batch}x{seq}")


# --- the Python API and the CLI ----------------------------------------------------------------


def test_python_api(tmp_path):
    import ferry
    from executorch.runtime import Program
    from transformers.modeling_outputs import CausalLMOutputWithPast

    ckpt = make_checkpoint(tmp_path / "ckpt", "gemma")
    config = ferry.ExecutorchConfig(dynamic=True, max_seq_len=40)
    assert ferry.AutoHfExporter.from_config(config).__class__ is ferry.ExecutorchExporter
    assert ferry.AutoExportConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    exported = ferry.ExecutorchExporter().export(str(ckpt), config=config)
    exported.save_pretrained(tmp_path / "out")
    loaded = ferry.ExportedModel.from_pretrained(tmp_path / "out")
    assert loaded.format == "executorch" and isinstance(loaded.program, Program)
    ids, mask, _ = make_inputs(VOCAB, 2, 9)
    got = loaded(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    assert isinstance(got, CausalLMOutputWithPast)
    assert_logits_close(got.logits.numpy(), reference_logits(ckpt, ids, mask, None), mask)
    assert json.loads((tmp_path / "out" / "export.json").read_text())["components"]["model"][
        "metadata"]["export_config"]["backend"] == "xnnpack"
    with pytest.raises(ferry.FerryError, match="backend"):
        ferry.ExecutorchConfig(backend="vulkan")
    with pytest.raises(ferry.FerryError, match="XNNPACK delegate only"):
        ferry.ExecutorchConfig(backend="portable", quantizer="int4")
    # transformers' own config, as the guide writes it (its portable backend)
    import transformers.exporters as hf

    theirs = hf.ExecutorchConfig(backend="portable", dynamic=True)
    exporter = ferry.AutoHfExporter.from_config(theirs)
    exporter.export(str(ckpt), config=theirs).save_pretrained(tmp_path / "theirs")
    got = ferry.ExportedModel.from_pretrained(tmp_path / "theirs")(
        input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    assert_logits_close(got.logits.numpy(), reference_logits(ckpt, ids, mask, None), mask)
    with pytest.raises(ferry.FerryError, match="device cuda"):
        ferry.ExportedModel.from_pretrained(tmp_path / "out", device="cuda")(
            input_ids=torch.from_numpy(ids))


def test_inspect_and_validate(tmp_path):
    import os
    import sys

    from conftest import ROOT

    ckpt = make_checkpoint(tmp_path / "ckpt", "qwen2")
    out = ferry_export(ckpt, tmp_path / "pte", "--format", "executorch", "--dynamic", "--quiet")
    rc, stdout, _ = run_ferry("inspect", out)
    assert rc == 0 and "ExecuTorch program: method forward" in stdout, stdout
    meta = json.loads((out / "export.json").read_text())["components"]["model"]["metadata"]
    assert f"backend xnnpack, {meta['delegates']} delegate calls" in stdout, stdout
    assert "max 128" in stdout, stdout
    assert f"XnnpackBackend: {meta['delegates']} graphs of {meta['delegate_nodes']} nodes in " \
        "all (15 of them linears" in stdout, stdout
    env = {"FERRY_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")])}
    rc, stdout, stderr = run_ferry("validate", out, "--model", ckpt, "--no-record", env=env)
    assert rc == 0 and stdout.rstrip().endswith("PASS") and "executorch" in stdout, \
        (stdout, stderr)


@pytest.mark.parametrize("flags,needles,code", [
    (["--et-backend", "vulkan"], ["--et-backend", "vulkan", "xnnpack", "portable"], 2),
    (["--et-backend", "portable", "--quantize", "int4"], ["int4", "XNNPACK delegate only"], 1),
    (["--quantize", "int8"], ["int8", "int4 weights only"], 1),
    (["--quantize", "int4", "--asymmetric"], ["asymmetric", "symmetric"], 1),
    # embedding_4bit's groups must divide each 64-wide row
    (["--quantize", "int4", "--block-size", "128", "--quantize-embeddings"],
     ["embed_tokens", "blocks of 128", "--block-size"], 1),
    # the MLP's 96 inputs are not whole blocks of 64: found while writing, nothing kept
    (["--quantize", "int4", "--block-size", "64"], ["mlp.down_proj.weight", "blocks of 64",
                                                     "--block-size"], 1),
    # XNNPACK's int4: blocks of multiples of 32 (16 fails when the method loads), fp32
    (["--quantize", "int4", "--block-size", "16"], ["block size 16", "32, 64, 128 or 256"], 1),
    (["--quantize", "int4", "--dtype", "fp16"], ["fp32", "--dtype fp16"], 1),
    (["--quantize", "int4", "--accuracy-level", "1"], ["accuracy_level", "executorch"], 2),
    (["--dynamic", "--for-generation"], ["executorch", "static cache", "--static-cache"], 1),
    (["--max-seq-len", "16"], ["max_seq_len", "--dynamic"], 2),
    (["--dim", "input_ids:1=s:0:16"], ["the dynamic axis s has min 0", "a min of 1"], 2),
    # a grouped-query attention's rows (2 query heads a key head) pass 2^31 first
    (["--dynamic", "--max-seq-len", "2147483647"], ["32-bit integers", "max_seq_len"], 1),
    (["--dynamic", "--max-seq-len", "1073741823"], ["the memory plan needs more than 1 TiB",
                                                    "max_seq_len"], 1),
])
def test_refusals_write_nothing(tmp_path, flags, needles, code):
    check_export_error(make_checkpoint(tmp_path / "ckpt", "llama"), tmp_path / "out",
                       ["--format", "executorch", *flags], needles, code)


# --- a real model ------------------------------------------------------------------------------


def test_real_model_chat(smollm2, tmp_path):
    """SmolLM2-135M-Instruct (30 layers, tied embeddings) as the guide's generation program on
    XNNPACK: each chat's greedy answer through ferry's generate() is transformers' text."""
    import ferry
    from transformers import AutoTokenizer

    from conftest import reference_model
    from test_onnxruntime_genai import CHATS

    out = ferry_export(smollm2, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "96",
                       "--multi-token-decode", "--quiet")
    meta = json.loads((out / "export.json").read_text())["components"]["decode"]["metadata"]
    assert meta["delegated_linears"] == 30 * 7 + 1
    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    model, exported = reference_model(smollm2), ferry.ExportedModel.from_pretrained(out)
    for chat in CHATS:
        ids = tokenizer.apply_chat_template(chat, add_generation_prompt=True,
                                            return_tensors="pt", return_dict=True)["input_ids"]
        with torch.no_grad():
            want = model.generate(ids, max_new_tokens=24, do_sample=False)
        got = exported.generate(ids, max_new_tokens=24)
        assert tokenizer.decode(got[0, ids.shape[1]:]) == \
            tokenizer.decode(want[0, ids.shape[1]:]), chat


def test_real_model_int4_agreement(smollm2, tmp_path, record_property):
    """SmolLM2 at int4 (block 32) on real text: the .pte's (XNNPACK 8da4w) next-token agreement
    with the fp32 model, reported next to ferry's int4 ONNX export's (weight-only int4 in
    onnxruntime) on the same 256 tokens; the activations' int8 costs it little."""
    from real_models import perplexity_text, token_ids, top1_agreement
    from test_quantize_quality import logits_of

    ids = np.array(token_ids(smollm2, perplexity_text())[:256], np.int64)[None]
    with torch.no_grad():
        fp32 = reference_model(smollm2)(torch.from_numpy(ids)).logits[0].numpy()
    pte = ferry_export(smollm2, tmp_path / "pte", "--format", "executorch", "--dynamic",
                       "--max-seq-len", "256", "--max-batch-size", "1", "--quantize", "int4",
                       "--quiet")
    onnx = ferry_export(smollm2, tmp_path / "onnx", "--dynamic", "--quantize", "int4", "--quiet")
    # the tied table too: embedding_4bit for the lookup, XNNPACK's int4 for the head
    pte_e = ferry_export(smollm2, tmp_path / "pte-e", "--format", "executorch", "--dynamic",
                         "--max-seq-len", "256", "--max-batch-size", "1", "--quantize", "int4",
                         "--quantize-embeddings", "--quiet")
    import executorch.kernels.quantized  # noqa: F401  (registers embedding_4bit)

    top1 = {"pte": top1_agreement(run(method(pte), ids, np.ones_like(ids))[0][:-1], fp32[:-1]),
            "pte_embeddings": top1_agreement(run(method(pte_e), ids, np.ones_like(ids))[0][:-1],
                                             fp32[:-1]),
            "onnx": top1_agreement(logits_of(onnx / "model.onnx", ids)[:-1], fp32[:-1])}
    for name, value in top1.items():
        record_property(f"top1_agreement_{name}", round(value, 4))
    assert top1["pte"] >= 0.55 and top1["pte"] >= top1["onnx"] - 0.05, top1
    assert top1["pte_embeddings"] >= top1["pte"] - 0.05, top1
    assert (pte_e / "model.pte").stat().st_size < (pte / "model.pte").stat().st_size * 0.75


def test_int4_refuses_non_finite_weights(tmp_path):
    """A NaN in a weight makes its int4 block's scale NaN, which XNNPACK refuses when the method
    loads: the export refuses it instead, naming the weight, and writes nothing."""
    from safetensors.numpy import load_file, save_file

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    for f in ckpt.glob("*.safetensors"):
        tensors = load_file(f)
        name = "model.layers.1.mlp.up_proj.weight"
        if name in tensors:
            tensors[name][3, 5] = np.nan
            save_file(tensors, f, metadata={"format": "pt"})
    check_export_error(ckpt, tmp_path / "out", ["--format", "executorch", "--quantize", "int4"],
                       ["model.layers.1.mlp.up_proj.weight", "NaN or infinite", "--quantize"], 1)
