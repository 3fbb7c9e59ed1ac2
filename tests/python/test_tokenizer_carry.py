"""The tokenizer an export carries beyond the checkpoint's own files (issue 37):
- an OpenVINO export holds openvino-tokenizers' conversion of the tokenizer
  (openvino_tokenizer.xml/.bin, openvino_detokenizer.xml/.bin), listed in export.json, so that
  openvino-genai's LLMPipeline runs the directory as it is, from the Python API and from the
  `ferry` command pip installs (its console script, which names the Python that converts); the
  C command alone writes none; --force replaces an export holding them, and refuses, naming
  them, one completed by hand;
- a loaded model object's export carries the tokenizer files of the directory it came from,
  and its errors name the model, not the temporary directory it was saved to."""
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from conftest import FERRY_BIN, ROOT, make_checkpoint, run_ferry

CONVERTED = ["openvino_tokenizer.xml", "openvino_tokenizer.bin", "openvino_detokenizer.xml",
             "openvino_detokenizer.bin"]
NEW_TOKENS = 12
PROMPT = "the quick brown fox"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(a tiny Llama whose vocabulary is a byte-level BPE trained here, saved with it; the
    tokenizer)"""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.train_from_iterator(["the quick brown fox jumps over the lazy dog, twice"] * 50,
                           trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                               initial_alphabet=pre_tokenizers.ByteLevel
                                               .alphabet()))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|endoftext|>")
    eos = tok.convert_tokens_to_ids("<|endoftext|>")
    ckpt = make_checkpoint(tmp_path_factory.mktemp("ckpt") / "ckpt", "llama", seed=3,
                           vocab_size=len(tok), bos_token_id=eos, eos_token_id=eos)
    tok.save_pretrained(ckpt)
    assert (ckpt / "tokenizer.json").is_file()
    return ckpt, tok


@pytest.fixture(scope="module")
def want(checkpoint):
    """transformers' greedy continuation of PROMPT, decoded."""
    import torch
    from transformers import AutoModelForCausalLM

    ckpt, tok = checkpoint
    model = AutoModelForCausalLM.from_pretrained(ckpt).eval()
    enc = tok(PROMPT, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             do_sample=False)
    return tok.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)


def pipeline_text(out):
    ovg = pytest.importorskip("openvino_genai")
    pipe = ovg.LLMPipeline(str(out), "CPU", INFERENCE_PRECISION_HINT="f32")
    config = ovg.GenerationConfig()
    config.max_new_tokens, config.do_sample, config.ignore_eos = NEW_TOKENS, False, True
    config.apply_chat_template = False
    return str(pipe.generate(PROMPT, config))


def listed(out):
    return json.loads((Path(out) / "export.json").read_text())["tokenizer_files"]


@pytest.fixture(scope="module")
def python_export(checkpoint, tmp_path_factory):
    import ferry

    out = tmp_path_factory.mktemp("py") / "ov"
    ferry.OpenVINOExporter().export_for_generation(str(checkpoint[0])).save_pretrained(out)
    return out


def test_python_api_export_runs_in_llm_pipeline(python_export, want):
    assert listed(python_export) == ["tokenizer.json", "tokenizer_config.json", *CONVERTED]
    assert {p.name for p in python_export.iterdir()} >= set(CONVERTED)
    got = pipeline_text(python_export)
    assert got == want, (got, want)
    rc, stdout, _ = run_ferry("inspect", python_export)
    assert rc == 0 and "LLMPipeline runs this directory with the converted tokenizer" in stdout


def _installed_layout(tmp_path):
    """ferry's package as pip lays it out (ferry/bin/ferry, ferry/lib/libferry.so), from this
    tree's build, for its console script to run."""
    package = tmp_path / "site" / "ferry"
    shutil.copytree(ROOT / "python" / "ferry", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (package / "bin").mkdir()
    (package / "lib").mkdir()
    (package / "bin" / "ferry").symlink_to(FERRY_BIN)
    (package / "lib" / "libferry.so").symlink_to(Path(FERRY_BIN).parent / "libferry.so")
    env = {k: v for k, v in os.environ.items()
           if k not in ("FERRY_LIB", "FERRY_PYTHON", "FERRY_TOKENIZER_PYTHON")}
    env["PYTHONPATH"] = str(tmp_path / "site")
    return env


def test_console_script_export_runs_in_llm_pipeline(checkpoint, want, tmp_path):
    """`ferry export` as pip installs it (python -m ferry._cli runs the C command with this
    Python named to convert) writes the converted tokenizer; the C command alone does not, and
    its --help says which command does. --force replaces an export holding them."""
    ckpt, _ = checkpoint
    env = _installed_layout(tmp_path)
    out = tmp_path / "ov"
    args = [sys.executable, "-m", "ferry._cli", "export", ckpt, out, "--format", "openvino",
            "--dynamic", "--for-generation"]
    proc = subprocess.run(list(map(str, args)), capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert listed(out)[-4:] == CONVERTED
    got = pipeline_text(out)
    assert got == want, (got, want)
    proc = subprocess.run(list(map(str, args + ["--force", "--quiet"])), capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert listed(out)[-4:] == CONVERTED and not list(tmp_path.glob(".ov.ferry-tmp-*"))
    # the C command alone
    plain = tmp_path / "plain"
    rc, _, err = run_ferry("export", ckpt, plain, "--format", "openvino", "--quiet",
                           env={"FERRY_TOKENIZER_PYTHON": ""})
    assert rc == 0 and not set(CONVERTED) & {p.name for p in plain.iterdir()}, err
    rc, usage, _ = run_ferry("export", "--help")
    assert rc == 0 and "the `ferry` command pip installs also writes" in usage


def test_force_replaces_an_export_holding_them(python_export, checkpoint, tmp_path):
    import ferry

    out = tmp_path / "ov"
    shutil.copytree(python_export, out)
    exported = ferry.OpenVINOExporter().export(str(checkpoint[0]))
    with pytest.raises(ferry.FerryError, match="already exists"):
        exported.save_pretrained(out)
    exported.save_pretrained(out, force=True)
    assert listed(out)[-4:] == CONVERTED
    assert "decode" not in json.loads((out / "export.json").read_text())["components"]


def test_force_refuses_an_export_completed_by_hand(python_export, checkpoint, tmp_path):
    """An export written before ferry carried the converted files, then completed with them by
    hand: export.json does not list them, so ferry cannot tell it wrote them; --force refuses,
    naming them and saying what to do, and leaves the directory as it was."""
    ckpt, _ = checkpoint
    out = tmp_path / "ov"
    rc, _, err = run_ferry("export", ckpt, out, "--format", "openvino", "--quiet",
                           env={"FERRY_TOKENIZER_PYTHON": ""})
    assert rc == 0, err
    for name in CONVERTED:
        shutil.copyfile(python_export / name, out / name)
    before = sorted(p.name for p in out.iterdir())
    rc, _, err = run_ferry("export", ckpt, out, "--format", "openvino", "--force", "--quiet",
                           env={"FERRY_TOKENIZER_PYTHON": ""})
    assert rc == 1 and err.count("\n") == 1, err
    assert ", ".join(sorted(CONVERTED)) in err and "export.json does not list" in err, err
    assert "delete or move them, then --force replaces the export" in err, err
    assert sorted(p.name for p in out.iterdir()) == before
    for name in CONVERTED:
        (out / name).unlink()
    rc, _, err = run_ferry("export", ckpt, out, "--format", "openvino", "--force", "--quiet",
                           env={"FERRY_TOKENIZER_PYTHON": ""})
    assert rc == 0, err


@pytest.mark.parametrize("case", ["not installed", "cannot convert"])
def test_without_a_conversion_the_export_warns_once(checkpoint, tmp_path, monkeypatch, case):
    import ferry
    import openvino_tokenizers

    if case == "not installed":
        monkeypatch.setitem(sys.modules, "openvino_tokenizers", None)
    else:
        def refuse(*args, **kwargs):
            raise RuntimeError("no such tokenizer model")
        monkeypatch.setattr(openvino_tokenizers, "convert_tokenizer", refuse)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exported = ferry.OpenVINOExporter().export_for_generation(str(checkpoint[0]))
    lines = [str(w.message) for w in caught if issubclass(w.category, ferry.FerryWarning)]
    assert len(lines) == 1 and caught[0].filename == __file__, lines
    assert ("is not installed" if case == "not installed" else "no such tokenizer model") \
        in lines[0] and "openvino_tokenizer.xml" in lines[0], lines
    exported.save_pretrained(tmp_path / "ov")
    assert listed(tmp_path / "ov") == ["tokenizer.json", "tokenizer_config.json"]
    assert not set(CONVERTED) & {p.name for p in (tmp_path / "ov").iterdir()}


@pytest.mark.parametrize("case", ["other file", "link", "xml alone"])
def test_converted_files_are_checked(checkpoint, tmp_path, case):
    """What the converter left is checked before the export carries it: only the four names,
    regular files, an .xml with its .bin; an error names the file, and nothing is written."""
    ckpt, _ = checkpoint
    fake = tmp_path / "python"
    made = {"other file": 'echo x > "$4/notes.txt"',
            "link": f'ln -s {ckpt}/tokenizer.json "$4/openvino_tokenizer.xml" && '
                    'echo x > "$4/openvino_tokenizer.bin"',
            "xml alone": 'echo x > "$4/openvino_tokenizer.xml"'}[case]
    fake.write_text(f"#!/bin/sh\n{made}\n")
    fake.chmod(0o755)
    rc, _, err = run_ferry("export", ckpt, tmp_path / "ov", "--format", "openvino",
                           env={"FERRY_TOKENIZER_PYTHON": str(fake)})
    assert rc == 1 and err.count("\n") == 1, err
    assert {"other file": "'notes.txt' is not a converted tokenizer file",
            "link": "openvino_tokenizer.xml: a symbolic link, not a converted tokenizer file",
            "xml alone": "openvino_tokenizer.xml without openvino_tokenizer.bin"}[case] in err
    assert not (tmp_path / "ov").exists()


def test_model_object_carries_its_tokenizer_files(checkpoint, tmp_path):
    import ferry
    from transformers import AutoModelForCausalLM

    ckpt, _ = checkpoint
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    ferry.OnnxExporter().export(model).save_pretrained(tmp_path / "onnx")
    assert listed(tmp_path / "onnx") == ["tokenizer.json", "tokenizer_config.json"]
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (tmp_path / "onnx" / name).read_bytes() == (ckpt / name).read_bytes()


def test_model_object_errors_name_the_model(checkpoint):
    import ferry
    from transformers import AutoModelForCausalLM

    ckpt, _ = checkpoint
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    model.config.rms_norm_eps = -1.0
    with pytest.raises(ferry.FerryError) as raised:
        ferry.OpenVINOExporter().export_for_generation(model)
    message = str(raised.value)
    assert f"<LlamaForCausalLM loaded from {ckpt}>/config.json" in message, message
    assert "ferry-model-" not in message and "rms_norm_eps" in message
    model.name_or_path = ""
    model.config._name_or_path = ""
    with pytest.raises(ferry.FerryError, match="<a LlamaForCausalLM object>/config.json"):
        ferry.OnnxExporter().export(model)
