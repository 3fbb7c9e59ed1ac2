"""Errors of the Python binding that must be FerryErrors saying what to do, not bare Python
exceptions from inside ferry (issue 8)."""

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
