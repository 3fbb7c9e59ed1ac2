"""The guide-shaped Python API (python/ferry) over libferry: export, save, load, run."""

import json

import numpy as np
import pytest
import torch

from conftest import FIXTURE, assert_logits_close, make_checkpoint, make_inputs, reference_logits


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_checkpoint(tmp_path_factory.mktemp("api") / "ckpt", "qwen2")


def test_version_matches_header():
    import ferry
    from conftest import ferry_header_version

    assert ferry.version() == ferry_header_version()


def test_export_save_load_run(ckpt, tmp_path):
    from ferry import ExportedModel, OnnxConfig, OnnxExporter

    exported = OnnxExporter().export(ckpt, config=OnnxConfig(dynamic=True))
    assert exported.files == {"model": "model.onnx"}
    assert exported.directory is None
    assert exported.manifest["components"]["model"]["metadata"]["precision"] == "fp32"
    exported.save_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "model.onnx.data").exists()
    on_disk = json.loads((tmp_path / "out" / "export.json").read_text())
    assert on_disk == exported.manifest

    loaded = ExportedModel.from_pretrained(tmp_path / "out")
    ids, mask, pos = make_inputs(160, 3, 7)
    # torch tensors like a tokenizer returns, plus an input the graph does not take; the
    # graph computes its positions, from 0, as transformers' forward does given none
    out = loaded(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                 token_type_ids=torch.zeros_like(torch.from_numpy(ids)))
    assert_logits_close(out.logits, reference_logits(ckpt, ids, mask, None), mask)
    assert np.array_equal(out["logits"], out.logits)


def test_save_refuses_existing_unless_forced(ckpt, tmp_path):
    from ferry import FerryError, OnnxExporter

    exported = OnnxExporter().export(ckpt)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine\n")
    with pytest.raises(FerryError, match="out"):
        exported.save_pretrained(tmp_path / "out")
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["notes.txt"]
    # Not an export: force does not make it one (test_force_safety.py).
    with pytest.raises(FerryError, match="not replacing"):
        exported.save_pretrained(tmp_path / "out", force=True)
    (tmp_path / "out" / "notes.txt").unlink()
    # Empty: nothing to lose, the destination without force (test_force_safety.py).
    exported.save_pretrained(tmp_path / "out")
    before = (tmp_path / "out" / "export.json").stat().st_ino
    exported.save_pretrained(tmp_path / "out", force=True)
    assert (tmp_path / "out" / "export.json").stat().st_ino != before


def test_fresh_export_runs_on_first_call(ckpt):
    from ferry import OnnxExporter

    ids, mask, pos = make_inputs(160, 1, 8, pads=[2])
    # static, traced at 1x8; the graph takes the example's inputs, a tokenizer's output
    exported = OnnxExporter().export(ckpt, {"input_ids": ids, "attention_mask": mask})
    meta = exported.manifest["components"]["model"]["metadata"]
    assert meta["inputs"][0]["shape"] == [1, 8]
    out = exported(input_ids=ids, attention_mask=mask, position_ids=pos)
    assert_logits_close(out.logits, reference_logits(ckpt, ids, mask, None), mask)


def test_auto_export_config_from_dict(ckpt, tmp_path):
    from ferry import AutoExportConfig, OnnxExporter

    names = ["input_ids", "attention_mask", "position_ids"]
    config = AutoExportConfig.from_dict({
        "export_format": "onnx", "input_names": names,
        "dynamic_shapes": {n: {0: {"name": "batch", "min": 1, "max": 4}, 1: "sequence"}
                           for n in names}})
    exported = OnnxExporter().export(ckpt, config=config)
    meta = exported.manifest["components"]["model"]["metadata"]
    assert meta["symbols"]["batch"]["max"] == 4
    assert meta["inputs"][1]["shape"] == ["batch", "sequence"]
    assert [i["name"] for i in meta["inputs"]] == names
    # a dim on an input the export does not take would say nothing: refused by name
    from ferry import FerryError

    with pytest.raises(FerryError, match="this export takes no position_ids"):
        OnnxExporter().export(ckpt, config=AutoExportConfig.from_dict({
            "export_format": "onnx", "dynamic_shapes": {"position_ids": {0: "batch"}}}))


def test_config_errors_name_the_key():
    from ferry import AutoExportConfig, FerryError, OnnxConfig

    with pytest.raises(FerryError, match="dynamc"):
        AutoExportConfig.from_dict({"export_format": "onnx", "dynamc": True})
    with pytest.raises(FerryError, match="export_format 'mlx'"):
        AutoExportConfig.from_dict({"export_format": "mlx"})
    with pytest.raises(FerryError, match="dtype|int3"):
        OnnxConfig(dtype="int3")


def test_export_errors_carry_library_message(tmp_path):
    from ferry import FerryError, OnnxExporter

    ckpt = make_checkpoint(tmp_path / "ckpt", "llama")
    (ckpt / "config.json").unlink()
    with pytest.raises(FerryError, match=r"config\.json") as err:
        OnnxExporter().export(ckpt)
    assert err.value.status is not None and err.value.status != 0


@pytest.mark.parametrize("multi_token_decode, axis", [(None, "sequence"), (False, 1),
                                                      (True, "sequence")])
def test_generation_decode_query_axis(ckpt, tmp_path, multi_token_decode, axis):
    """multi_token_decode=None (the default) gives decode a symbolic query axis with dynamic
    shapes, so onnxruntime-genai can run the export; False is the guide's one-token decode."""
    import onnx

    from ferry import OnnxConfig, OnnxExporter

    exported = OnnxExporter().export_for_generation(ckpt, config=OnnxConfig(dynamic=True),
                                                    multi_token_decode=multi_token_decode)
    exported.save_pretrained(tmp_path / "gen")
    graph = onnx.load(str(tmp_path / "gen" / "decode.onnx"), load_external_data=False).graph
    dim = next(i for i in graph.input if i.name == "input_ids").type.tensor_type.shape.dim[1]
    assert (dim.dim_param or dim.dim_value) == axis
    assert (tmp_path / "gen" / "genai_config.json").exists() == (axis == "sequence")
    for component in exported.manifest["components"].values():
        recorded = component["metadata"]["export_config"]["multi_token_decode"]
        assert recorded is (axis == "sequence")


def test_warnings_reach_python(tmp_path):
    """What the CLI prints as `ferry: warning:` reaches Python as a FerryWarning: here, a
    generation export over static shapes whose cache holds only the example prompt."""
    import ferry

    with pytest.warns(ferry.FerryWarning, match="decode's cache holds exactly 8 positions"):
        ferry.OnnxExporter().export_for_generation(FIXTURE)


def test_dynamic_shapes_as_torch_takes_them():
    """dynamic_shapes as torch.export takes them too: a tuple of dims by position, None for an
    input that stays static; from ferry's config and from a transformers config alike."""
    import torch
    import transformers.exporters as hf

    import ferry

    b, s = torch.export.Dim("b", min=1, max=4), torch.export.Dim("s", min=1, max=64)
    shapes = {"input_ids": (b, s), "attention_mask": {0: b, 1: s}, "position_ids": None}
    want = {"input_ids": {"0": {"name": "b", "min": 1, "max": 4},
                          "1": {"name": "s", "min": 1, "max": 64}},
            "attention_mask": {"0": {"name": "b", "min": 1, "max": 4},
                               "1": {"name": "s", "min": 1, "max": 64}}}
    assert ferry.OnnxConfig(dynamic_shapes=shapes).to_dict()["dynamic_shapes"] == want
    read = ferry.AutoExportConfig.from_dict(hf.OnnxConfig(dynamic_shapes=shapes).to_dict())
    assert read.to_dict()["dynamic_shapes"] == want
