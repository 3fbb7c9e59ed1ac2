"""A .pt2 is checked and loaded from the same bytes: the data-only check (pt2_safety.py) reads
the archive once and torch.export.load is given that buffer, so an archive swapped for one
that runs code between the check and the load is never what torch reads. The swap is made
deterministic here: the check itself replaces the file on disk as soon as it has passed, which
is the moment a racing writer aims for."""

import ast
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, ferry_export, make_inputs, record_sizes
from test_pt2 import EVIL, VOCAB


def _pair(base, out, component):
    """(the export's checked archive kept aside, a payload archive made from it, its marker)"""
    good = base / f"good-{component}.pt2"
    shutil.copyfile(out / f"{component}.pt2", good)
    marker = base / f"ran-{component}"
    evil = base / f"evil-{component}.pt2"
    # example inputs that torch.export.load unpickles in full: the payload runs at load
    subprocess.run([sys.executable, "-c", EVIL, str(good), str(evil), str(marker), "sample"],
                   check=True, timeout=120)
    return good, evil, marker


@pytest.fixture(scope="module")
def archives(ckpts, tmp_path_factory):
    """{"model" | "decode": (export dir, component, checked archive, payload archive, marker)}:
    a plain export's model.pt2 and a static-cache generation export's decode.pt2."""
    base = tmp_path_factory.mktemp("pt2-race")
    plain = ferry_export(ckpts("llama"), base / "plain", "--format", "pt2", "--dynamic",
                         "--quiet")
    gen = ferry_export(ckpts("llama"), base / "gen", "--format", "pt2", "--dynamic",
                       "--for-generation", "--static-cache", "--max-cache-len", "16",
                       "--multi-token-decode", "--quiet")
    return {"model": (plain, "model", *_pair(base, plain, "model")),
            "decode": (gen, "decode", *_pair(base, gen, "decode"))}


def swap_after_check(monkeypatch, target, evil):
    """Makes every data-only check replace `target` with `evil` once it has passed."""
    import ferry.pt2_safety as safety
    import ferry.runtime as runtime

    original = safety.check_archive_is_data

    def check_then_swap(*args, **kwargs):
        result = original(*args, **kwargs)
        staged = target.with_name(target.name + ".swap")
        shutil.copyfile(evil, staged)
        os.replace(staged, target)
        return result

    monkeypatch.setattr(safety, "check_archive_is_data", check_then_swap)
    # where the loader took the check by name
    monkeypatch.setattr(runtime, "check_archive_is_data", check_then_swap, raising=False)


def restore(out, component, good):
    shutil.copyfile(good, out / f"{component}.pt2")
    record_sizes(out)


@pytest.mark.parametrize("path", ["call", "program", "runner"])
def test_archive_swapped_after_the_check_is_never_loaded(archives, monkeypatch, path):
    """ExportedModel's call, a component's .program and the generation runners: each loads
    the archive it checked, though the file on disk is by then one whose example inputs run
    code when unpickled."""
    from ferry import ExportedModel

    out, component, good, evil, marker = archives["decode" if path == "runner" else "model"]
    restore(out, component, good)
    if marker.exists():
        marker.unlink()
    swap_after_check(monkeypatch, out / f"{component}.pt2", evil)
    exported = ExportedModel.from_pretrained(out)
    ids, mask, pos = make_inputs(VOCAB, 1, 4)
    if path == "call":
        logits = exported(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        assert tuple(logits.shape[:2]) == (1, 4)
    elif path == "program":
        assert exported.components[component].program.graph_signature is not None
    else:
        assert exported.runners[component] is not None
    assert not marker.exists(), "torch read the archive swapped in after the check"
    assert (out / f"{component}.pt2").read_bytes() == evil.read_bytes(), \
        "the swap did not happen: the test proves nothing"
    restore(out, component, good)


def test_swapped_archive_is_refused_when_checked(archives):
    """The archive swapped in above is one the check refuses and torch alone runs: the swap
    test's payload is live."""
    from ferry import ExportedModel, FerryError

    out, component, good, evil, marker = archives["model"]
    shutil.copyfile(evil, out / "model.pt2")
    record_sizes(out)
    ids, mask, pos = make_inputs(VOCAB, 1, 4)
    with pytest.raises(FerryError, match="is a pickle the weights_only loader refuses"):
        ExportedModel.from_pretrained(out)(input_ids=ids, attention_mask=mask, position_ids=pos)
    if marker.exists():
        marker.unlink()
    subprocess.run([sys.executable, "-c", "import sys, torch; torch.export.load(sys.argv[1])",
                    str(evil)], capture_output=True, timeout=300)
    assert marker.exists(), "the payload does not run in torch: the swap test proves nothing"
    restore(out, component, good)


def test_every_pt2_load_goes_through_the_checked_reader():
    """No other call in the Python package hands torch a path or a file of its own: every
    .pt2 ferry loads (calls, .program, runners, validate, transformers' DynamoExporter
    exports) goes through runtime.load_program, which checks the bytes it then gives torch."""
    loads = []
    for source in sorted((ROOT / "python" / "ferry").glob("*.py")):
        for node in ast.walk(ast.parse(source.read_text())):
            if not isinstance(node, ast.Call):
                continue
            called = ast.unparse(node.func)
            if called.endswith(("export.load", "load_pt2", "PyTorchFileReader")):
                loads.append((source.name, ast.unparse(node)))
    assert loads and set(loads) == {("runtime.py", "torch.export.load(io.BytesIO(data))")}, loads
