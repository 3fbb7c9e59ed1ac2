"""Errors of the Python binding that must be FerryErrors saying what to do, not bare Python
exceptions from inside ferry (issue 8)."""

import os

import pytest

from conftest import ROOT

FIXTURE = ROOT / "fixtures" / "tiny-llama"


@pytest.mark.parametrize("saved", [False, True], ids=["fresh", "loaded"])
@pytest.mark.parametrize("static", [False, True], ids=["dynamic-cache", "static-cache"])
def test_calling_a_generation_export(tmp_path, saved, static):
    """A generation export has prefill/decode (or decode alone), no "model": calling it names
    the components and says how to run them, instead of KeyError: 'model'."""
    import numpy as np

    from ferry import ExportedModel, FerryError, OnnxConfig, OnnxExporter

    gen = {"cache_implementation": "static", "max_cache_len": 32} if static else None
    exported = OnnxExporter().export_for_generation(
        FIXTURE, config=OnnxConfig(dynamic=True), generation_config=gen,
        multi_token_decode=static)
    if saved:
        exported.save_pretrained(tmp_path / "gen")
        exported = ExportedModel.from_pretrained(tmp_path / "gen")
    names = list(exported.components)
    assert "model" not in names and "decode" in names
    with pytest.raises(FerryError) as info:
        exported(input_ids=np.array([[1, 2, 3]]))
    message = str(info.value)
    assert info.value.status == 4
    for name in names:
        assert f"{name} (role {name}, {name}.onnx)" in message, message
    assert "onnxruntime.InferenceSession" in message and "metadata.cache" in message
    if saved:
        assert str(tmp_path / "gen") in message
    assert not list(tmp_path.glob("ferry-*")), "a temporary save was left"


# ---------------------------------------------------------------------------------------------
# Paths and revisions handed to the C library (issue 8, hostile review)


def test_nul_in_paths_is_refused(tmp_path):
    """A NUL ends a C string: `export(M + "\\0/etc")` exported M, and save_pretrained("out\\0x")
    wrote "out". Every path and the revision are refused with the NUL named instead."""
    from ferry import ExportedModel, FerryError, OnnxExporter, decompose_for_generation

    model = str(FIXTURE)
    calls = {
        "export": lambda: OnnxExporter().export(model + "\0/etc"),
        "export bytes": lambda: OnnxExporter().export(model.encode() + b"\0/etc"),
        "generation": lambda: OnnxExporter().export_for_generation(model + "\0x"),
        "decompose": lambda: decompose_for_generation(model + "\0x"),
        "revision": lambda: OnnxExporter().export("org/name", revision="main\0x"),
        "load": lambda: ExportedModel.from_pretrained(str(tmp_path) + "\0x"),
        "subfolder": lambda: ExportedModel.from_pretrained(tmp_path, subfolder="a\0b"),
    }
    for label, call in calls.items():
        with pytest.raises(FerryError) as info:
            call()
        assert "NUL byte" in str(info.value) and info.value.status == 1, (label, info.value)
    exported = OnnxExporter().export(FIXTURE)
    with pytest.raises(FerryError) as info:
        exported.save_pretrained(str(tmp_path / "out") + "\0x")
    assert "save_directory holds a NUL byte at byte" in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_bytes_and_pathlike_paths(tmp_path):
    """bytes paths went through str() first, so b"out" became the directory "b'out'"; they are
    now the file system's bytes as given, undecodable ones included."""
    from ferry import ExportedModel, FerryError, OnnxExporter

    exported = OnnxExporter().export(os.fsencode(str(FIXTURE)))
    out = os.fsencode(str(tmp_path)) + b"/out\xff"
    exported.save_pretrained(out)
    assert os.listdir(tmp_path) == [os.fsdecode(b"out\xff")]
    loaded = ExportedModel.from_pretrained(out)
    assert loaded.directory is not None and "model" in loaded.components
    exported.save_pretrained(tmp_path / "path")       # os.PathLike
    assert (tmp_path / "path" / "export.json").is_file()
    with pytest.raises(FerryError) as info:
        OnnxExporter().export(12)
    assert "must be a str, bytes or os.PathLike, not int" in str(info.value)


def test_empty_revision_as_the_cli(tmp_path):
    """revision="" was taken as no revision; the CLI's --revision "" is refused. The library
    now gets the empty string and refuses it the same way."""
    from ferry import FerryError, OnnxExporter

    from conftest import run_ferry

    with pytest.raises(FerryError) as info:
        OnnxExporter().export(FIXTURE, revision="")
    rc, _, stderr = run_ferry("export", FIXTURE, tmp_path / "out", "--revision", "")
    assert rc == 2 and str(info.value) in stderr, (str(info.value), stderr)
    assert "a revision ('')" in str(info.value)
    with pytest.raises(FerryError) as info:
        OnnxExporter().export("org/name", revision="")
    assert "revision '' is not a valid name or hash" in str(info.value)


def test_closed_export(tmp_path):
    """After close() the handle is gone; save_pretrained said "out of memory" (libferry's
    message for a NULL handle, which it takes for a failed allocation)."""
    from ferry import FerryError, OnnxExporter

    exported = OnnxExporter().export(FIXTURE)
    exported.close()
    for call in (lambda: exported.save_pretrained(tmp_path / "out"),
                 lambda: exported.manifest, lambda: exported.components):
        with pytest.raises(FerryError) as info:
            call()
        assert "was closed" in str(info.value) and "out of memory" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


@pytest.fixture(scope="module")
def dynamic_export():
    from ferry import OnnxConfig, OnnxExporter

    return OnnxExporter().export(FIXTURE, config=OnnxConfig(dynamic=True))


@pytest.mark.parametrize("inputs,needle", [
    # a one-row mask would be broadcast over both rows by the graph: wrong numbers, no error
    ({"input_ids": [[1, 5, 6], [3, 4, 1]], "attention_mask": [[0, 1, 1]]},
     "attention_mask is [1, 3] but input_ids is [2, 3]"),
    ({"input_ids": [[1.5, 2.0]]}, "input_ids must hold integers, not float64"),
    ({"input_ids": [1, 2, 3]}, "input_ids must be [batch, sequence], not of shape [3]"),
    ({"input_ids": [[1, -5]]}, "input_ids holds -5, outside the vocabulary [0, 512)"),
    ({"input_ids": [[1, 512]]}, "input_ids holds 512, outside the vocabulary [0, 512)"),
    ({"attention_mask": [[1, 1]]}, "missing input_ids"),
])
def test_call_checks_its_inputs_as_the_model_would(dynamic_export, inputs, needle):
    import numpy as np

    from ferry import FerryError

    with pytest.raises(FerryError) as info:
        dynamic_export(**{k: np.array(v) for k, v in inputs.items()})
    assert needle in str(info.value)


def test_config_and_exporter_mismatches_are_refused():
    import torch

    from ferry import AutoExportConfig, FerryError, OnnxConfig, OnnxExporter, OpenVINOConfig

    with pytest.raises(FerryError, match="dynamic must be True or False, not 'no'"):
        OnnxConfig(dynamic="no")
    with pytest.raises(FerryError, match="from_dict takes a dict of recipe keys, not str"):
        AutoExportConfig.from_dict("onnx")
    with pytest.raises(FerryError, match="OnnxExporter writes onnx, but its config is for "
                                         "openvino"):
        OnnxExporter().export(FIXTURE, config=OpenVINOConfig())
    assert OnnxConfig(dtype=torch.float16).to_dict()["dtype"] == "float16"
    with pytest.raises(FerryError, match="give the example inputs once"):
        OnnxExporter().export(FIXTURE, {"input_ids": torch.ones(1, 3, dtype=torch.long)},
                              sample_inputs={"input_ids": torch.ones(1, 3, dtype=torch.long)})
    static = OnnxExporter().export(FIXTURE,
                                   sample_inputs={"input_ids": torch.ones(2, 5, dtype=torch.long)})
    assert static.manifest["components"]["model"]["metadata"]["inputs"][0]["shape"] == [2, 5]
    with pytest.raises(FerryError, match="device is empty"):
        static.to("")
    assert static.to(" CPU ").device == "cpu"


def test_generate_seed_must_be_an_integer():
    from ferry import FerryError, OnnxConfig, OnnxExporter

    gen = OnnxExporter().export_for_generation(FIXTURE, config=OnnxConfig(dynamic=True))
    with pytest.raises(FerryError, match="seed must be an integer, not 'x'"):
        gen.generate([[1, 2, 3]], max_new_tokens=2, do_sample=True, seed="x")


def test_a_dict_config_as_transformers_takes_one():
    """Transformers' exporters take `config` as a config or a dict of its
    keys; ferry's raised AttributeError on a dict. A dict is that exporter's recipe (its
    export_format the exporter's unless it says another, which is refused as a config would
    be), and anything else is a FerryError naming the type."""
    from ferry import (DynamoExporter, FerryError, OnnxExporter, OpenVINOExporter,
                       decompose_for_generation)

    for exporter, fmt in ((OnnxExporter(), "onnx"), (OpenVINOExporter(), "openvino"),
                          (DynamoExporter(), "dynamo")):
        exported = exporter.export(FIXTURE, config={"dynamic": True})
        meta = exported.manifest["components"]["model"]["metadata"]
        assert meta["export_config"]["dynamic"] is True, (fmt, meta["export_config"])
        assert exported.manifest["format"] == {"dynamo": "pt2"}.get(fmt, fmt)
        gen = exporter.export_for_generation(
            FIXTURE, config={"dynamic": True},
            generation_config={"cache_implementation": "static", "max_cache_len": 16}
            if fmt == "dynamo" else None)
        assert gen.manifest["format"] == exported.manifest["format"]
        with pytest.raises(FerryError, match="dict of recipe keys, not list"):
            exporter.export(FIXTURE, config=["dynamic"])
    with pytest.raises(FerryError, match="OnnxExporter writes onnx, but its config is for "
                                         "dynamo"):
        OnnxExporter().export(FIXTURE, config={"export_format": "dynamo"})
    with pytest.raises(FerryError, match="no_such_key"):
        DynamoExporter().export(FIXTURE, config={"no_such_key": 1})
    assert "decode" in decompose_for_generation(FIXTURE, config={"dynamic": True})
    # found by a later review: a torch dtype in a dict was a TypeError; OpenVINOExporter wrote
    # OpenVINO from a config for another format
    import torch

    from ferry import DynamoConfig
    half = OnnxExporter().export(FIXTURE, config={"dtype": torch.float16})
    assert half.manifest["components"]["model"]["metadata"]["export_config"]["dtype"] == "fp16"
    for config in ({"export_format": "dynamo"}, DynamoConfig()):
        with pytest.raises(FerryError, match="OpenVINOExporter writes openvino, but its config "
                                             "is for dynamo"):
            OpenVINOExporter().export(FIXTURE, config=config)


def test_a_recipes_generation_options_count():
    """A recipe's generation_config (and multi_token_decode) were dropped
    without a word by export_for_generation, which read only its own generation_config, and
    by export, where they mean nothing. The first now takes the recipe's where it is given
    none, and refuses two that differ; the second refuses them."""
    from ferry import DynamoExporter, FerryError, OnnxExporter

    static = {"cache_implementation": "static", "max_cache_len": 16}
    for exporter in (OnnxExporter(), DynamoExporter()):
        gen = exporter.export_for_generation(FIXTURE, config={"dynamic": True,
                                                              "generation_config": static})
        cache = gen.manifest["components"]["decode"]["metadata"]["cache"]
        assert cache["max_cache_len"] == 16, cache
        same = exporter.export_for_generation(FIXTURE, config={"dynamic": True,
                                                               "generation_config": static},
                                              generation_config=static)
        assert same.manifest["components"]["decode"]["metadata"]["cache"] == cache
        with pytest.raises(FerryError, match="differ: give them once"):
            exporter.export_for_generation(
                FIXTURE, config={"dynamic": True, "generation_config": static},
                generation_config=dict(static, max_cache_len=32))
        with pytest.raises(FerryError, match="apply to generation exports"):
            exporter.export(FIXTURE, config={"dynamic": True, "generation_config": static})


def test_checkpoint_written_between_export_and_save(tmp_path):
    """Bytes of model.safetensors overwritten in place (same size) after
    export() and before save_pretrained() went into the export unnoticed, giving NaN logits.
    The save now compares each checkpoint file's size and modification time with those it was
    opened with, and fails naming the file, writing nothing. A file replaced by a rename is
    another file: the export reads the one it opened, whole."""
    import shutil
    import time

    from ferry import FerryError, OnnxExporter

    ckpt = tmp_path / "ckpt"
    shutil.copytree(FIXTURE, ckpt)
    exported = OnnxExporter().export(ckpt)
    time.sleep(0.01)  # past the file system's timestamp granularity
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.seek(-64, os.SEEK_END)
        f.write(b"\xff" * 64)
    with pytest.raises(FerryError, match=r"model\.safetensors: written to while the export read "
                                         r"it \(its modification time changed\)"):
        exported.save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()
    # replaced whole (as save_pretrained does): the export still holds the file it read
    exported = OnnxExporter().export(ckpt)
    shutil.copy(FIXTURE / "model.safetensors", tmp_path / "other")
    os.replace(tmp_path / "other", ckpt / "model.safetensors")
    exported.save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "model.onnx.data").stat().st_size > 0


# --- found by the review of the Python API (session of 2026-12-02) ---------------------------


def _onnx(tmp_path, name, **config):
    from ferry import OnnxConfig, OnnxExporter

    out = tmp_path / name
    OnnxExporter().export(FIXTURE, config=OnnxConfig(**config)).save_pretrained(out)
    return out


def test_threads_sharing_an_export_take_turns(tmp_path):
    """generate() from several threads on one ExportedModel: each gets its own answer (they
    used to read each other's cache: errors, or wrong tokens without one); calls on an
    OpenVINO export from several threads (its infer request was "busy")."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np

    from ferry import ExportedModel, OnnxConfig, OnnxExporter, OpenVINOExporter

    gen = OnnxExporter().export_for_generation(
        FIXTURE, config=OnnxConfig(dynamic=True),
        generation_config={"cache_implementation": "static", "max_cache_len": 64},
        multi_token_decode=True)
    gen.save_pretrained(tmp_path / "gen")
    model = ExportedModel.from_pretrained(tmp_path / "gen")
    prompts = [np.array([[3 + i, 40 + i, 7, 90 - i, 11]]) for i in range(4)]
    alone = [model.generate(p, max_new_tokens=15, eos_token_id=None) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda p: model.generate(p, max_new_tokens=15,
                                                          eos_token_id=None), prompts * 2))
    assert [t.tolist() for t in together] == [a.tolist() for a in alone * 2]

    OpenVINOExporter().export(FIXTURE).save_pretrained(tmp_path / "ov")
    ov = ExportedModel.from_pretrained(tmp_path / "ov", device="cpu")
    ids = np.array([[1, 2, 3, 4, 5, 6, 7, 8]])
    want = ov(input_ids=ids)["logits"]
    with ThreadPoolExecutor(6) as pool:
        for got in pool.map(lambda _: ov(input_ids=ids)["logits"], range(12)):
            assert np.array_equal(got, want)


@pytest.mark.parametrize("bad, words", [([[5, 6, -1]], "input_ids holds -1, outside"),
                                        ([[5, 6, 512]], "input_ids holds 512, outside"),
                                        ([[5.9, 6.9]], "must hold integers, not float64"),
                                        ([[5, 6], [7]], "cannot be read as an array")])
def test_runners_check_what_calls_check(tmp_path, bad, words):
    import numpy as np

    from ferry import ExportedModel, FerryError, OnnxConfig, OnnxExporter

    OnnxExporter().export_for_generation(FIXTURE, config=OnnxConfig(dynamic=True)) \
        .save_pretrained(tmp_path / "gen")
    runners = ExportedModel.from_pretrained(tmp_path / "gen").runners
    runners.reset(np.int64(1))  # a numpy integer is a batch size too
    with pytest.raises(FerryError, match=words):
        runners["prefill"](bad)


def test_calls_outside_the_exported_shapes(tmp_path):
    """A static export called at another shape, and a dynamic one past its dim's max, are one
    FerryError in every runtime (onnxruntime ran past the max without a word)."""
    import numpy as np

    from ferry import ExportedModel, FerryError

    static = ExportedModel.from_pretrained(_onnx(tmp_path, "static"))
    with pytest.raises(FerryError, match=r"input_ids is \[1, 3\], but its axis 1 is fixed at 8"):
        static(input_ids=np.array([[1, 2, 3]]))
    bounded = ExportedModel.from_pretrained(_onnx(
        tmp_path, "bounded", dynamic_shapes={"input_ids": {1: {"name": "seq", "max": 16}}}))
    assert bounded(input_ids=np.ones((1, 16), np.int64))["logits"].shape == (1, 16, 512)
    with pytest.raises(FerryError, match=r"input_ids is \[1, 17\], but its axis 1 \(seq\) takes "
                                         r"1 to 16"):
        bounded(input_ids=np.ones((1, 17), np.int64))
    with pytest.raises(FerryError, match=r"input_ids of shape \[0, 3\]: nothing to run"):
        bounded(input_ids=np.ones((0, 3), np.int64))
    # what the graph does not take is dropped unread, whatever it holds
    out = bounded(input_ids=[[1, 2, 3]], token_type_ids=[[1, 2], [3]])
    assert out["logits"].shape == (1, 3, 512)


def test_program_loaded_once(tmp_path):
    from ferry import ExportedModel

    model = ExportedModel.from_pretrained(_onnx(tmp_path, "plain", dynamic=True))
    assert model.program is model.program
    assert model.components is model.components
    model.program.doc_string = "mine"
    assert model.components["model"].program.doc_string == "mine"


def test_example_inputs_checked(tmp_path):
    import torch

    from ferry import FerryError, OnnxExporter

    exported = OnnxExporter().export(FIXTURE, {"input_ids": [[1, 2, 3]]})  # a list is a shape
    assert exported.components["model"].metadata["inputs"][0]["shape"] == [1, 3]
    with pytest.raises(FerryError, match="inputs must be a dict of the model's inputs"):
        OnnxExporter().export(FIXTURE, torch.ones(1, 3, dtype=torch.long))
    with pytest.raises(FerryError, match="inputs has no input_ids \\(it holds attention_mask\\)"):
        OnnxExporter().export(FIXTURE, {"attention_mask": torch.ones(1, 3, dtype=torch.long)})


@pytest.mark.parametrize("length", [-5, 2**64, 64.7, "64", True])
def test_max_cache_len_must_be_a_positive_integer(length):
    from ferry import FerryError, OnnxConfig, OnnxExporter

    with pytest.raises(FerryError, match="max_cache_len must be a positive integer"):
        OnnxExporter().export_for_generation(
            FIXTURE, config=OnnxConfig(dynamic=True),
            generation_config={"cache_implementation": "static", "max_cache_len": length})


def test_generate_takes_what_transformers_takes(tmp_path):
    """An eos_token_id tensor and a float 0/1 attention_mask, as transformers' generate()."""
    import torch

    from ferry import ExportedModel, OnnxConfig, OnnxExporter

    OnnxExporter().export_for_generation(FIXTURE, config=OnnxConfig(dynamic=True)) \
        .save_pretrained(tmp_path / "gen")
    model = ExportedModel.from_pretrained(tmp_path / "gen")
    ids = torch.tensor([[0, 5, 6, 7]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])
    want = model.generate(ids, attention_mask=mask.long(), max_new_tokens=5, eos_token_id=[9])
    got = model.generate(ids, attention_mask=mask, max_new_tokens=5,
                         eos_token_id=torch.tensor([9]))
    assert got.tolist() == want.tolist()


def test_warnings_point_at_the_caller_and_formats_are_named():
    import warnings

    import transformers.exporters as hf

    from ferry import AutoHfExporter, FerryError, FerryWarning, OpenVINOExporter

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        OpenVINOExporter().export(FIXTURE)
    files = {w.filename for w in caught if issubclass(w.category, FerryWarning)}
    assert files == {__file__}, files
    # transformers' ExecutorchConfig picks ferry's exporter, and its default backend, XNNPACK,
    # is ferry's default too
    exporter = AutoHfExporter.from_config(hf.ExecutorchConfig())
    assert type(exporter).__name__ == "ExecutorchExporter"
    exported = exporter.export(FIXTURE, config=hf.ExecutorchConfig())
    assert exported.manifest["components"]["model"]["metadata"]["delegates"] > 0
    with pytest.raises(FerryError, match=r"export_format 'mlx' has no exporter"):
        AutoHfExporter.from_config({"export_format": "mlx"})


def test_bf16_onnx_on_the_cpu_says_why(tmp_path):
    """Calls and generate() alike (the runners' sessions said onnxruntime's raw
    NOT_IMPLEMENTED for a Mul)."""
    import numpy as np

    from ferry import ExportedModel, FerryError, OnnxConfig, OnnxExporter

    for gen in (False, True):
        exporter = OnnxExporter()
        config = OnnxConfig(dynamic=True, dtype="bf16")
        exported = exporter.export_for_generation(FIXTURE, config=config) if gen else \
            exporter.export(FIXTURE, config=config)
        exported.save_pretrained(tmp_path / str(gen))
        model = ExportedModel.from_pretrained(tmp_path / str(gen))
        with pytest.raises(FerryError, match="no bfloat16 kernels for this bf16 export"):
            if gen:
                model.generate(np.array([[1, 2, 3]]), max_new_tokens=2)
            else:
                model(input_ids=np.array([[1, 2, 3]]))
