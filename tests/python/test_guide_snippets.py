"""The guide's ONNX and OpenVINO snippets (shared/seeds, transformers' "Exporters" page) as they
are written there, with `from ferry import ...` in place of `from transformers.exporters import
...` and a tiny checkpoint in place of Qwen/Qwen3-0.6B. The model is a loaded transformers model,
as in the guide; every result is compared with that model's own eager forward. The one change of
substance: the guide's static-cache decode loop binds CUDA buffers with CudaSession; here the same
loop binds CPU buffers with onnxruntime's IOBinding.
"""

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationConfig
from transformers.modeling_outputs import CausalLMOutputWithPast

from conftest import FP32_ATOL, make_checkpoint


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = make_checkpoint(tmp_path_factory.mktemp("guide") / "ckpt", "qwen3")
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@pytest.fixture
def inputs():
    """What `tokenizer(["Hello, world!", "Hi"], padding=True, return_tensors="pt")` returns
    for a left-padding tokenizer, token_type_ids included (the export does not take them)."""
    ids = torch.tensor([[5, 17, 33, 2, 91, 40], [0, 0, 0, 0, 7, 12]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 1, 1]])
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def eager_logits(model, inputs):
    """The model called as the export is, with the tokenizer's input_ids and attention_mask
    (positions then from 0 in every row, in both)."""
    with torch.no_grad():
        return model(input_ids=inputs["input_ids"],
                     attention_mask=inputs["attention_mask"]).logits


def assert_matches_eager(outputs, model, inputs):
    assert isinstance(outputs, CausalLMOutputWithPast), type(outputs)
    assert isinstance(outputs.logits, torch.Tensor)
    want = eager_logits(model, inputs)
    real = inputs["attention_mask"].bool()
    assert (outputs.logits[real] - want[real]).abs().max().item() <= FP32_ATOL


def test_export_save_load_run(model, inputs, tmp_path):
    from ferry import ExportedModel, OnnxConfig, OnnxExporter

    exporter = OnnxExporter()
    config = OnnxConfig(dynamic=True)
    exported = exporter.export(model, inputs, config=config)
    # run the exported graph directly (a fresh export runs on first call)
    assert_matches_eager(exported(**inputs), model, inputs)
    # save, then load and run on ONNX Runtime
    exported.save_pretrained(tmp_path / "qwen3-onnx")
    outputs = ExportedModel.from_pretrained(tmp_path / "qwen3-onnx")(**inputs)
    assert_matches_eager(outputs, model, inputs)


def test_program_components_and_metadata(model, inputs, tmp_path):
    import onnx

    from ferry import ExportedModel, OnnxConfig, OnnxExporter

    exported = OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True))
    program = exported.program  # the backend's program
    assert isinstance(program, onnx.ModelProto)
    assert [i.name for i in program.graph.input] == ["input_ids", "attention_mask"]
    component = exported.components["model"]
    assert component.program is not None and component.file == "model.onnx"
    assert component.metadata["precision"] == "fp32"
    # The weights stay in model.onnx.data until read: the program holds references only.
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in program.graph.initializer
               if t.dims and np.prod(t.dims) > 64)

    # Exports to several formats in subfolders of one directory, loaded with subfolder=; the
    # directory is made, as transformers' save_pretrained makes it.
    exported.save_pretrained(tmp_path / "exports" / "onnx")
    loaded = ExportedModel.from_pretrained(tmp_path / "exports", subfolder="onnx", device="cpu")
    assert_matches_eager(loaded(**inputs), model, inputs)


def test_auto_export_config_and_auto_hf_exporter(model, inputs):
    from ferry import AutoExportConfig, AutoHfExporter, OnnxExporter, OpenVINOExporter

    export_config_dict = {"export_format": "onnx", "dynamic": True}
    config = AutoExportConfig.from_dict(export_config_dict)
    exporter = AutoHfExporter.from_config(config)
    assert type(exporter) is OnnxExporter
    exported = exporter.export(model, inputs, config=config)
    assert_matches_eager(exported(**inputs), model, inputs)
    openvino = AutoHfExporter.from_config(AutoExportConfig.from_dict(
        {"export_format": "openvino"}))
    assert type(openvino) is OpenVINOExporter


def test_dynamic_shapes_with_torch_dims(model, inputs):
    from ferry import OnnxConfig, OnnxExporter

    batch = torch.export.Dim("batch", min=1, max=32)
    seq = torch.export.Dim("seq", min=1, max=2048)
    exporter = OnnxExporter()
    config = OnnxConfig(
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        # Emit data-dependent shape guards as runtime asserts instead of failing the export when a
        # guard wouldn't hold across the explicit symbolic range. Most LLMs need this under
        # fine-grained ``Dim(min=, max=)`` bounds. Not needed with ``dynamic=True`` /
        # ``Dim.AUTO``, where torch.export infers shape relations instead of verifying them
        # against user-stated bounds.
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    exported = exporter.export(model, inputs, config=config)
    assert_matches_eager(exported(**inputs), model, inputs)
    shape = [d.dim_param or d.dim_value for d in
             exported.program.graph.input[0].type.tensor_type.shape.dim]
    assert shape == ["batch", "seq"]
    # The same export at another batch and length, within the stated ranges.
    other = {"input_ids": inputs["input_ids"][:1, 2:], "attention_mask":
             inputs["attention_mask"][:1, 2:]}
    assert_matches_eager(exported(**other), model, other)


@pytest.mark.parametrize("name", ["Dynamo", "OpenVINO"])
def test_dynamic_shapes_snippet_of_the_other_exporters(model, inputs, name):
    """The same snippet as the guide gives it for DynamoExporter and OpenVINOExporter."""
    import ferry

    batch = torch.export.Dim("batch", min=1, max=32)
    seq = torch.export.Dim("seq", min=1, max=2048)
    exporter = getattr(ferry, f"{name}Exporter")()
    config = getattr(ferry, f"{name}Config")(
        dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}},
        prefer_deferred_runtime_asserts_over_guards=True,
    )
    exported = exporter.export(model, inputs, config=config)
    assert_matches_eager(exported(**inputs), model, inputs)
    other = {"input_ids": inputs["input_ids"][:1, 2:], "attention_mask":
             inputs["attention_mask"][:1, 2:]}
    assert_matches_eager(exported(**other), model, other)


def test_openvino_snippet(model, inputs, tmp_path):
    from ferry import ExportedModel, OpenVINOConfig, OpenVINOExporter

    exporter = OpenVINOExporter()
    config = OpenVINOConfig(dynamic=True)
    exported = exporter.export(model, inputs, config=config)
    exported.save_pretrained(tmp_path / "qwen3-openvino")
    # run on CPU (or "xpu" for an Intel GPU)
    assert_matches_eager(exported.to("cpu")(**inputs), model, inputs)
    import openvino

    assert isinstance(exported.program, openvino.Model)
    loaded = ExportedModel.from_pretrained(tmp_path / "qwen3-openvino")  # AUTO device
    assert loaded.device == "auto"
    assert_matches_eager(loaded(**inputs), model, inputs)


def test_devices_this_machine_lacks_are_refused_by_name(model, inputs):
    import onnxruntime

    from ferry import FerryError, OnnxExporter, OpenVINOExporter

    exported = OnnxExporter().export(model, inputs)
    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        with pytest.raises(FerryError, match="no CUDAExecutionProvider"):
            exported.to("cuda")
    with pytest.raises(FerryError, match="'tpu' is not one onnxruntime runs on"):
        exported.to("tpu")
    assert exported.to("cpu") is exported
    ov = OpenVINOExporter().export(model, inputs)
    with pytest.raises(FerryError, match="'quantum' is not an OpenVINO device"):
        ov.to("quantum")


def test_multi_token_decode_and_static_cache_loop(model, tmp_path):
    """export_for_generation with a static cache and multi-token decode, then the guide's
    decode loop: the prompt in one call, then one token a call, the cache bound in place."""
    import onnxruntime as ort

    from ferry import OnnxConfig, OnnxExporter

    prompt_ids = torch.tensor([[5, 17, 33, 2, 91]])
    prompt_len, max_cache_len, new_tokens = prompt_ids.shape[1], 32, 12
    exporter = OnnxExporter()
    gen_config = GenerationConfig(cache_implementation="static", max_cache_len=max_cache_len)
    exported = exporter.export_for_generation(
        model, {"input_ids": prompt_ids}, config=OnnxConfig(dynamic=True),
        generation_config=gen_config, multi_token_decode=True)
    assert list(exported.components) == ["decode"]

    def causal_mask(positions, cache_len):
        return (torch.arange(cache_len)[None, :] <= positions[:, None])[None, None]

    session = ort.InferenceSession(str(exported.components["decode"].path),
                                   providers=["CPUExecutionProvider"])
    binding = session.io_binding()
    cache = {}
    for i in session.get_inputs():
        if not i.name.startswith("input."):
            continue
        name = i.name[len("input."):]
        dims = [max_cache_len if isinstance(d, str) and not d.isdigit() else int(d)
                for d in i.shape]
        dtype = np.int64 if i.type == "tensor(int64)" else np.float32
        cache[name] = ort.OrtValue.ortvalue_from_numpy(np.zeros(dims, dtype))
        binding.bind_ortvalue_input(i.name, cache[name])
        binding.bind_ortvalue_output(f"output.{name}", cache[name])  # updated in place

    def step(input_ids, positions):
        for name, value in (("input_ids", input_ids), ("position_ids", positions[None]),
                            ("attention_mask", causal_mask(positions, max_cache_len))):
            binding.bind_cpu_input(name, np.ascontiguousarray(value.numpy()))
        binding.bind_output("logits")
        session.run_with_iobinding(binding)
        logits = torch.from_numpy(binding.copy_outputs_to_cpu()[-1])
        return logits[:, -1:].argmax(-1)

    next_token = step(prompt_ids, torch.arange(prompt_len))   # prefill: the whole prompt
    tokens = [next_token]
    for position in range(prompt_len, prompt_len + new_tokens - 1):   # decode, one at a time
        next_token = step(next_token, torch.tensor([position]))
        tokens.append(next_token)
    with torch.no_grad():
        want = model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                              max_new_tokens=new_tokens, do_sample=False,
                              pad_token_id=0)[:, prompt_len:]
    assert torch.equal(torch.cat(tokens, dim=1), want)
    # the cache was allocated for the example's batch: another is one error saying how to
    # export a symbolic one
    from ferry import FerryError

    with pytest.raises(FerryError, match=r"allocated for batch 1 \(the example's.*"
                                         r"--dim input_ids:0=batch"):
        exported.generate(prompt_ids.repeat(2, 1), max_new_tokens=2)


def test_static_cache_dynamo_decode_loop(model, tmp_path):
    """The guide's Dynamo decode loop as written (on the CPU where it says "cuda"): the
    StaticCache template from the program's own example_inputs, deep-copied and reset, passed
    as past_key_values= to the decode runner, which writes it in place; .logits of each call.
    Its tokens equal generate()'s, and the cache's counter ends at the tokens fed."""
    import copy

    from ferry import DynamoConfig, DynamoExporter, ExportedModel

    prompt_ids = torch.tensor([[5, 17, 33, 2, 91]])
    prompt_len, max_cache_len = prompt_ids.shape[1], 24
    exporter = DynamoExporter()
    gen_config = GenerationConfig(cache_implementation="static", max_cache_len=max_cache_len)
    exported = exporter.export_for_generation(
        model, {"input_ids": prompt_ids}, config=DynamoConfig(dynamic=True),
        generation_config=gen_config, multi_token_decode=True)
    exported.save_pretrained(tmp_path / "qwen3-static")

    exported = ExportedModel.from_pretrained(tmp_path / "qwen3-static", device="cpu")
    decode = exported.runners["decode"]
    # the program carries an initialized StaticCache template: reuse it (reset to empty)
    _, example_kwargs = exported.components["decode"].program.example_inputs
    past_key_values = copy.deepcopy(example_kwargs["past_key_values"])
    past_key_values.reset()

    def causal_mask(positions, cache_len):  # [1, 1, len(positions), cache_len]
        return (torch.arange(cache_len, device="cpu")[None, :] <= positions[:, None])[None, None]

    # prefill: the whole prompt in one call
    positions = torch.arange(prompt_len, device="cpu")
    logits = decode(input_ids=prompt_ids, attention_mask=causal_mask(positions, max_cache_len),
                    position_ids=positions[None], past_key_values=past_key_values).logits
    next_token = logits[:, -1:].argmax(-1)
    tokens = [next_token]
    # decode: query=1 buffers reused in place
    input_ids = torch.empty((1, 1), dtype=torch.long, device="cpu")
    position_ids = torch.empty((1, 1), dtype=torch.long, device="cpu")
    attention_mask = torch.empty((1, 1, 1, max_cache_len), dtype=torch.bool, device="cpu")
    slots = torch.arange(max_cache_len, device="cpu")
    for position in range(prompt_len, max_cache_len):
        input_ids.copy_(next_token)
        position_ids.fill_(position)
        attention_mask[0, 0, 0].copy_(slots <= position)
        logits = decode(input_ids=input_ids, attention_mask=attention_mask,
                        position_ids=position_ids, past_key_values=past_key_values).logits
        next_token = logits[:, -1:].argmax(-1)
        tokens.append(next_token)

    new_tokens = max_cache_len - prompt_len + 1
    with torch.no_grad():
        want = model.generate(prompt_ids, attention_mask=torch.ones_like(prompt_ids),
                              max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                              do_sample=False, pad_token_id=0)[:, prompt_len:]
    assert torch.equal(torch.cat(tokens, dim=1), want)
    assert all(int(layer.cumulative_length) == max_cache_len for layer in past_key_values.layers)
    # the template itself was not written: the loop ran on the caller's copy
    assert all(int(layer.cumulative_length) == 0
               for layer in example_kwargs["past_key_values"].layers)

    # a cache or a call the program cannot take is one error naming it, before anything runs
    from transformers import DynamicCache

    from ferry import FerryError

    def fresh():
        cache = copy.deepcopy(example_kwargs["past_key_values"])
        cache.reset()
        return cache

    half = fresh()
    for layer in half.layers:
        layer.keys, layer.values = layer.keys.half(), layer.values.half()
    full = fresh()
    for layer in full.layers:
        layer.cumulative_length.fill_(max_cache_len - 1)
    two = torch.arange(2)
    calls = [
        (dict(past_key_values=half), "holds float16, the program's cache is float32"),
        (dict(past_key_values=DynamicCache()), "must be a transformers StaticCache"),
        (dict(past_key_values=fresh(), input_ids=torch.tensor([[5, 17], [3, 4]]),
              position_ids=two[None].repeat(2, 1)), "input_ids has 2 rows, past_key_values 1"),
        (dict(past_key_values=fresh(), attention_mask=causal_mask(two, max_cache_len).long()),
         "attention_mask must be bool"),
        (dict(past_key_values=fresh(), attention_mask=causal_mask(two, 2 * max_cache_len)),
         "attention_mask must be bool"),
        (dict(past_key_values=full), "would not fit its 24 slots"),
    ]
    for given, message in calls:
        call = dict(input_ids=torch.tensor([[5, 17]]), position_ids=two[None],
                    attention_mask=causal_mask(two, max_cache_len))
        call.update(given)
        with pytest.raises(FerryError, match=message):
            decode(**call)
    assert int(full.layers[0].cumulative_length) == max_cache_len - 1  # nothing was written


@pytest.mark.parametrize("name", ["Dynamo", "Onnx", "OpenVINO"])
def test_export_for_generation_with_the_guides_defaults(model, tmp_path, name):
    """export_for_generation(model, inputs, config=XConfig(dynamic=True)), nothing else: a
    dynamic cache for every format (Dynamo's programs return it), OpenVINO's one stateful
    graph chosen by itself. Saved, loaded, and generate() equals transformers'."""
    import ferry

    inputs = {"input_ids": torch.tensor([[5, 17, 33, 2, 91]]),
              "attention_mask": torch.ones((1, 5), dtype=torch.long)}
    exporter = getattr(ferry, f"{name}Exporter")()
    config = getattr(ferry, f"{name}Config")(dynamic=True)
    exported = exporter.export_for_generation(model, inputs, config=config)
    exported.save_pretrained(tmp_path / "gen")
    loaded = ferry.ExportedModel.from_pretrained(tmp_path / "gen")
    assert loaded.manifest["components"]["decode"]["metadata"]["cache"]["implementation"] != \
        "static"
    got = loaded.generate(**inputs, max_new_tokens=10, min_new_tokens=10)
    with torch.no_grad():
        want = model.generate(**inputs, max_new_tokens=10, min_new_tokens=10, do_sample=False,
                              pad_token_id=0)
    assert torch.equal(torch.as_tensor(got), want)


def test_executorch_generation_default_says_what_to_write(model):
    """ExecuTorch's programs write their cache in place, so the guide's default (a dynamic
    cache) is one error that names the static cache to ask for instead."""
    from ferry import ExecutorchConfig, ExecutorchExporter, FerryError

    inputs = {"input_ids": torch.tensor([[5, 17, 33, 2, 91]])}
    with pytest.raises(FerryError, match=r"need a static cache \(--static-cache "
                                         r"--max-cache-len N; the recipe's generation_config "
                                         r"cache_implementation \"static\"\)"):
        ExecutorchExporter().export_for_generation(
            model, inputs, config=ExecutorchConfig(backend="xnnpack", dynamic=True))


def test_quantizers_by_the_guides_names(model, inputs):
    """NNCF weight compression, by the guide's class names (ferry's and transformers' own
    objects), is ferry's quantizer with the same bits, group size and symmetry: the export is
    the one the recipe's dict makes (quantized: not eager's fp32 logits). What ferry
    cannot honour (activation quantization, data-aware methods, mixed precision, per-channel
    int8, calibration data, another format's quantizer) is one error naming it."""
    from transformers.exporters.quantizers.quantizer_nncf import (
        NNCFOnnxQuantizer as TransformersNNCFOnnxQuantizer)
    from transformers.exporters.quantizers.quantizer_nncf import (
        NNCFWeightCompressionConfig as TransformersNNCFConfig)

    from ferry import (FerryError, NNCFOnnxQuantizer, NNCFOpenVINOQuantizer,
                       NNCFQuantizationConfig, NNCFWeightCompressionConfig, OnnxConfig,
                       OnnxExporter, OnnxRuntimeDynamicConfig, OnnxRuntimeQuantizer,
                       OpenVINOConfig, PT2EQuantizer, DynamoConfig)

    config = OnnxConfig(dynamic=True, quantizer=NNCFOnnxQuantizer(
        NNCFWeightCompressionConfig(mode="int4_asym", group_size=32, all_layers=True)))
    want = {"bits": 4, "block_size": 32, "symmetric": False, "quantize_embeddings": True,
            "quantize_lm_head": True}
    assert {k: config.to_dict()["quantizer"][k] for k in want} == want
    theirs = OnnxConfig(dynamic=True, quantizer=TransformersNNCFOnnxQuantizer(
        TransformersNNCFConfig(mode="int4_asym", group_size=32, all_layers=True)))
    assert theirs.to_dict()["quantizer"] == config.to_dict()["quantizer"]
    exported = OnnxExporter().export(model, inputs, config=config)
    by_dict = OnnxExporter().export(model, inputs, config=OnnxConfig(dynamic=True,
                                                                      quantizer=want))
    got, same = exported(**inputs).logits, by_dict(**inputs).logits
    assert torch.equal(got, same)  # (test_quantize* hold ferry's int4 against a reference)
    real = inputs["attention_mask"].bool()
    assert (got[real] - eager_logits(model, inputs)[real]).abs().max().item() > FP32_ATOL
    with pytest.warns(UserWarning, match="embeddings and lm_head stay float"):
        default = OpenVINOConfig(quantizer=NNCFOpenVINOQuantizer(
            NNCFWeightCompressionConfig(mode="INT4_SYM")))
    assert default.to_dict()["quantizer"]["block_size"] == 128  # NNCF's int4 default

    refusals = [
        (OnnxConfig, OnnxRuntimeQuantizer(OnnxRuntimeDynamicConfig()), "quantizes activations"),
        (OnnxConfig, OnnxRuntimeQuantizer(), "quantizes activations"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFQuantizationConfig()), "nncf.quantize"),
        (OnnxConfig, NNCFOnnxQuantizer(), "quantizes activations"),
        (DynamoConfig, PT2EQuantizer(), "PT2E quantizes activations"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int4_sym", awq=True)),
         "awq=True"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int4_sym", ratio=0.8)),
         "ratio=0.8"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int8_sym")),
         r"group_size -1 \(per channel"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="nf4")),
         "mode 'nf4'|mode nf4"),
        (OnnxConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int4_sym"),
                                       calibration_dataset=[inputs]), "calibration_dataset"),
        (OpenVINOConfig, NNCFOnnxQuantizer(NNCFWeightCompressionConfig(mode="int4_sym")),
         "NNCFOnnxQuantizer quantizes onnx exports, not openvino"),
    ]
    for config_class, quantizer, message in refusals:
        with pytest.raises(FerryError, match=message):
            config_class(quantizer=quantizer)


@pytest.mark.parametrize("name", ["Onnx", "Dynamo"])
def test_decompose_for_generation_loop(model, name):
    """The guide's loop over ferry.utils.decompose_for_generation as written: each entry's
    submodel runs eagerly on its captured kwargs, and exporter.export(submodel, subinputs,
    config) writes that component alone (decode with its cache inputs); the prefill program,
    run in its runtime on the captured prompt, gives the eager prefill's logits."""
    import ferry
    from ferry.utils import decompose_for_generation

    inputs = {"input_ids": torch.tensor([[5, 17, 33, 2, 91]]),
              "attention_mask": torch.ones((1, 5), dtype=torch.long)}
    exporter = getattr(ferry, f"{name}Exporter")()
    config = getattr(ferry, f"{name}Config")(dynamic=True)
    components = decompose_for_generation(model, inputs)
    assert list(components) == ["prefill", "decode"]

    exported, eager = {}, {}
    for name, (submodel, subinputs) in components.items():
        with torch.no_grad():
            eager_outputs = submodel(**subinputs)  # sanity-check the eager forward
        eager[name] = eager_outputs
        exported[name] = exporter.export(submodel, subinputs, config=config)
    for name, one in exported.items():
        assert list(one.components) == [name]
    decode_inputs = [i["name"] for i in exported["decode"].components["decode"].metadata["inputs"]]
    assert any(n.startswith("past_key_values") for n in decode_inputs), decode_inputs
    # the prefill program in its runtime, on the captured prompt, against the eager prefill
    ids = components["prefill"][1]["input_ids"]
    feeds = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "position_ids": torch.arange(ids.shape[1])[None]}
    path = str(exported["prefill"].components["prefill"].path)
    if exporter.export_format == "onnx":
        import onnxruntime as ort

        logits = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
            ["logits"], {k: v.numpy() for k, v in feeds.items()})[0]
    else:
        with torch.no_grad():
            logits = torch.export.load(path).module()(**feeds)["logits"].numpy()
    np.testing.assert_allclose(logits, eager["prefill"].logits.numpy(), atol=FP32_ATOL, rtol=0)
    with pytest.raises(ferry.FerryError, match="not this Linear: pass the submodel"):
        exporter.export(torch.nn.Linear(2, 2), components["decode"][1], config=config)
    # what would not reach the export is refused: a copy of the kwargs (which loses which
    # component they are, and holds a cache), or kwargs of another shape
    submodel, subinputs = components["decode"]
    with pytest.raises(ferry.FerryError, match=r"inputs hold a KV cache \(cache\)"):
        exporter.export(submodel, dict(subinputs), config=config)
    subinputs["input_ids"] = subinputs["input_ids"].repeat(3, 1)
    with pytest.raises(ferry.FerryError, match="input_ids changed shape since the capture"):
        exporter.export(submodel, subinputs, config=config)
