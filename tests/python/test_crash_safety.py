"""Crash safety of `ferry export`: SIGKILL at random moments while the weights are being written
(and while the export is being synced, renamed or swapped in) never leaves a partial export.

After every kill the destination either does not exist or is a complete export, byte for byte
the one an uninterrupted run writes (itself checked with onnx.checker and against export.json);
an existing export replaced with --force is either still the old one, byte for byte, or the
complete new one. What a killed run leaves is a temporary directory named
`.<dest>.ferry-tmp-<pid>-XXXXXX` whose lock file nobody holds any more (the kernel released it
with the process), and the next export next to it removes it.

The checkpoint is ~40 MB of random bf16 written directly (numpy, no torch init), exported to
fp32 (~80 MB of weights), so that the write takes long enough to be interrupted anywhere.
Kill moments are drawn from a seeded generator: most trials kill when the export has written a
random fraction of its weights (conftest.bytes_written), the rest at a random delay after the weights are
complete (sync, graph, manifest, rename phases)."""

import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import FERRY_BIN, bytes_written, check_model_full, ferry_export

TRIALS = 24
SEED = 20240611
TMP_NAME = re.compile(r"^\.(?P<base>.+)\.ferry-tmp-(?P<pid>\d+)-[A-Za-z0-9]{6}$")


def _bf16(rng, shape, scale):
    """Random bf16 bit patterns (the top half of float32 normals) as uint16."""
    x = rng.standard_normal(shape, dtype=np.float32) * np.float32(scale)
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def make_big_checkpoint(path, *, vocab=8000, hidden=512, inter=1536, layers=4, heads=8, kv=4,
                        head_dim=64, seed=0):
    """A Llama checkpoint of random bf16 weights (~41 MB with the defaults), written as one
    safetensors file by hand."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.mkdir(parents=True)
    tensors = {"model.embed_tokens.weight": _bf16(rng, (vocab, hidden), 1.0)}
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors[p + "input_layernorm.weight"] = _bf16(rng, (hidden,), 0.1)
        tensors[p + "post_attention_layernorm.weight"] = _bf16(rng, (hidden,), 0.1)
        tensors[p + "self_attn.q_proj.weight"] = _bf16(rng, (heads * head_dim, hidden), 0.04)
        tensors[p + "self_attn.k_proj.weight"] = _bf16(rng, (kv * head_dim, hidden), 0.04)
        tensors[p + "self_attn.v_proj.weight"] = _bf16(rng, (kv * head_dim, hidden), 0.04)
        tensors[p + "self_attn.o_proj.weight"] = _bf16(rng, (hidden, heads * head_dim), 0.04)
        tensors[p + "mlp.gate_proj.weight"] = _bf16(rng, (inter, hidden), 0.04)
        tensors[p + "mlp.up_proj.weight"] = _bf16(rng, (inter, hidden), 0.04)
        tensors[p + "mlp.down_proj.weight"] = _bf16(rng, (hidden, inter), 0.03)
    tensors["model.norm.weight"] = _bf16(rng, (hidden,), 0.1)
    tensors["lm_head.weight"] = _bf16(rng, (vocab, hidden), 0.04)
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, a in tensors.items():
        header[name] = {"dtype": "BF16", "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        for a in tensors.values():
            f.write(a.tobytes())
    config = dict(architectures=["LlamaForCausalLM"], model_type="llama", vocab_size=vocab,
                  hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=head_dim,
                  rms_norm_eps=1e-5, max_position_embeddings=2048, tie_word_embeddings=False,
                  hidden_act="silu", dtype="bfloat16")
    (path / "config.json").write_text(json.dumps(config, indent=2))
    return path


def digest(root):
    """{relative path: sha256} of every file under root."""
    root = Path(root)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def check_complete_export(out):
    """export.json names files that exist; every external-data reference of every component
    lies inside its data file; onnx.checker accepts every component (external data followed)."""
    import onnx

    manifest = json.loads((out / "export.json").read_text())
    for comp in manifest["components"].values():
        model_path = out / comp["file"]
        data_sizes = {name: (out / name).stat().st_size for name in comp["data_files"]}
        model = onnx.load(str(model_path), load_external_data=False)
        refs = 0
        for init in model.graph.initializer:
            if init.data_location != onnx.TensorProto.EXTERNAL:
                continue
            info = {e.key: e.value for e in init.external_data}
            end = int(info.get("offset", 0)) + int(info["length"])
            assert info["location"] in data_sizes, f"{init.name} in an unlisted file"
            assert end <= data_sizes[info["location"]], f"{init.name} past the end of its data"
            refs += 1
        assert refs > 0, "no weights in external data: the check would be vacuous"
        check_model_full(model_path)


def temp_dirs(parent):
    """[(name, pid)] of ferry temp directories in parent."""
    found = []
    for name in os.listdir(parent):
        m = TMP_NAME.match(name)
        if m:
            found.append((name, int(m.group("pid")), m.group("base")))
    return found


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def dead_pid():
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def kill_during_export(ckpt, out, flags, rng, data_total, tail_seconds):
    """Starts `ferry export ckpt out flags`, kills it at a moment drawn from rng, and returns
    (phase, return code): phase says where the kill landed ("weights" with the data file
    partially written, "after-weights", or "finished" if the export won the race)."""
    parent = out.parent
    proc = subprocess.Popen([str(FERRY_BIN), "export", str(ckpt), str(out), *flags, "-q"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    mid_write = rng.random() < 0.75
    target = rng.uniform(0.0, 1.0) * data_total
    delay = rng.uniform(0.0, tail_seconds)
    data_path = None
    phase = "finished"
    while proc.poll() is None:
        if data_path is None:
            mine = [n for n, pid, _ in temp_dirs(parent) if pid == proc.pid]
            if mine:
                data_path = parent / mine[0] / "export" / "model.onnx.data"
            continue
        size = bytes_written(proc.pid)
        if mid_write and size >= target:
            phase = "weights" if size < data_total else "after-weights"
            break
        if not mid_write and size >= data_total:
            time.sleep(delay)
            phase = "after-weights"
            break
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
    else:
        phase = "finished"
    rc = proc.wait()
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    if rc == 0:  # it finished between the last poll and the kill: the export won the race
        phase = "finished"
    if phase == "finished":
        assert rc == 0, stderr
    else:
        assert rc == -signal.SIGKILL, (rc, stderr)
    return phase, proc.pid


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """(checkpoint, reference export, its digest, data size, post-weights time)."""
    root = tmp_path_factory.mktemp("crash")
    ckpt = make_big_checkpoint(root / "ckpt")
    assert (ckpt / "model.safetensors").stat().st_size > 30e6
    ref = ferry_export(ckpt, root / "ref", "--dynamic", "-q")
    check_complete_export(ref)
    again = ferry_export(ckpt, root / "again", "--dynamic", "-q")
    ref_digest = digest(ref)
    assert digest(again) == ref_digest, "exports are not deterministic: byte checks impossible"
    shutil.rmtree(again)
    data_total = (ref / "model.onnx.data").stat().st_size
    # How long an export runs once its weights are written (sync, graph, manifest, rename):
    # the range the post-weights kills are drawn from.
    t0 = time.perf_counter()
    ferry_export(ckpt, root / "timed", "--dynamic", "-q")
    total = time.perf_counter() - t0
    shutil.rmtree(root / "timed")
    return ckpt, ref, ref_digest, data_total, max(0.05, total * 0.5)


def test_killed_export_leaves_nothing_or_everything(big, tmp_path):
    ckpt, ref, ref_digest, data_total, tail = big
    rng = np.random.default_rng(SEED)
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "model"
    phases = {}
    for trial in range(TRIALS):
        if out.exists():
            shutil.rmtree(out)
        phase, pid = kill_during_export(ckpt, out, ["--dynamic"], rng, data_total, tail)
        phases[phase] = phases.get(phase, 0) + 1
        if out.exists():
            assert digest(out) == ref_digest, f"trial {trial} ({phase}): a partial export"
        else:
            assert phase != "finished"
        # Only this run's temp dir may be left: earlier ones were removed when it started
        # saving. It is recognisable: named after the destination, with the dead pid.
        left = temp_dirs(parent)
        assert all(p == pid and base == "model" for _, p, base in left), (trial, left)
        assert not pid_alive(pid)
        assert sorted(os.listdir(parent)) == sorted(
            [n for n, _, _ in left] + (["model"] if out.exists() else [])), os.listdir(parent)
    print(f"kill phases over {TRIALS} trials: {phases}")
    assert phases.get("weights", 0) >= TRIALS // 3, f"too few kills mid-write: {phases}"
    # The next run cleans up what the killed ones left and writes a complete export.
    if out.exists():
        shutil.rmtree(out)
    ferry_export(ckpt, out, "--dynamic", "-q")
    assert digest(out) == ref_digest
    assert os.listdir(parent) == ["model"], os.listdir(parent)


def test_killed_force_replacement_keeps_old_export(big, tmp_path):
    ckpt, ref, ref_digest, data_total, tail = big
    rng = np.random.default_rng(SEED + 1)
    parent = tmp_path / "outs"
    parent.mkdir()
    out = parent / "model"
    # The export being replaced differs in every file: fp16 weights, static shapes.
    old = ferry_export(ckpt, tmp_path / "old", "--dtype", "fp16", "-q")
    old_digest = digest(old)
    assert old_digest != ref_digest
    shutil.copytree(old, out)
    phases, kept, replaced = {}, 0, 0
    for trial in range(TRIALS):
        phase, pid = kill_during_export(ckpt, out, ["--dynamic", "--force"], rng, data_total,
                                        tail)
        phases[phase] = phases.get(phase, 0) + 1
        now = digest(out)
        if now == old_digest:
            kept += 1
        else:
            assert now == ref_digest, f"trial {trial} ({phase}): the destination is damaged"
            replaced += 1
            shutil.rmtree(out)
            shutil.copytree(old, out)
        left = temp_dirs(parent)
        assert all(p == pid and base == "model" for _, p, base in left), (trial, left)
    print(f"force: {kept} kept the old export, {replaced} completed the swap; phases {phases}")
    assert kept >= TRIALS // 3 and phases.get("weights", 0) >= TRIALS // 3, phases
    ferry_export(ckpt, out, "--dynamic", "--force", "-q")
    assert digest(out) == ref_digest
    assert os.listdir(parent) == ["model"], os.listdir(parent)


def test_stale_temp_dirs_are_recognised(tmp_path):
    """Cleaning removes exactly this destination's temp dirs whose lock file it can lock (the
    pid in the name plays no part: it means nothing in another PID namespace or on another
    host), and empty ones that never got a lock file. It spares a locked one (a live export,
    wherever it runs), one without a lock file that holds something, other destinations', links,
    and every name not exactly ferry's. test_tempdir_lock.py runs the live export for real, in
    another PID namespace."""
    parent = tmp_path / "outs"
    parent.mkdir()
    gone, alive = dead_pid(), os.getpid()

    def make(name, lock=True, content=True):
        d = parent / name
        d.mkdir()
        if lock:
            (d / "lock").write_bytes(b"")
        if content:
            (d / "export").mkdir()
            (d / "export" / "model.onnx.data").write_bytes(b"\0" * 4096)
        return d

    stale = [make(f".model.ferry-tmp-{gone}-a1B2c3"),
             make(f".model.ferry-tmp-{alive}-zzzzzz"),        # a live pid, but no lock held
             make(f".model.ferry-tmp-{gone}-q0q0q0", lock=False, content=False)]  # no lock yet
    held = make(f".model.ferry-tmp-{gone}-h3ld00")             # locked: a live export
    keep = [held,
            make(f".model.ferry-tmp-{gone}-n0l0ck", lock=False),   # no lock file, not empty
            make(f".other.ferry-tmp-{gone}-x1y2z3"),               # another destination's
            make(f".model.ferry-tmp-{gone}-abc"),                  # not mkdtemp's six characters
            make(f".model.ferry-tmp-{gone}-abcdef.old"),
            make(f".model.ferry-tmp-x{gone}-abcdef"),
            make(f".model.ferry-tmp--a1b2c3"),
            make(".model.backup"), make("model.bak"), make("target")]
    odd = make(f".model.ferry-tmp-{gone}-d1r000", lock=False)
    (odd / "lock").mkdir()                                       # a lock that is a directory
    linked = make(f".model.ferry-tmp-{gone}-l0ck1k", lock=False)
    (linked / "lock").symlink_to(parent / "target" / "lock")     # a lock that is a link
    (parent / f".model.ferry-tmp-{gone}-l1nk00").symlink_to("target")  # a link to a directory
    keep += [odd, linked, parent / f".model.ferry-tmp-{gone}-l1nk00"]
    kept_before = {p.name: digest(p) for p in keep}
    assert all(kept_before.values())
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-llama"
    with open(held / "lock", "r+b") as f:
        # A POSIX record lock conflicts with ferry's open file description lock.
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        ferry_export(fixture, parent / "model", "--dynamic", "-q")
    assert sorted(os.listdir(parent)) == sorted([p.name for p in keep] + ["model"])
    assert not any(p.exists() for p in stale)
    assert {p.name: digest(p) for p in keep} == kept_before


@pytest.mark.parametrize("files", [["model.onnx", "model.onnx.data"],
                                   ["openvino_model.xml", "openvino_model.bin"],
                                   ["prefill.pt2", "decode.pt2"], ["model.pte"]],
                         ids=["onnx", "openvino", "pt2", "executorch"])
def test_stale_temp_dirs_of_every_format_removed(tmp_path, files):
    """A killed export's temporary directory holds its format's files, and the next export to
    the same destination removes it, whatever the format (pt2's, then executorch's, were left
    behind, gigabytes each for a real model)."""
    parent = tmp_path / "outs"
    stale = parent / f".model.ferry-tmp-{dead_pid()}-a1B2c3"
    (stale / "export").mkdir(parents=True)
    (stale / "lock").write_bytes(b"")
    for name in files + ["export.json", "config.json"]:
        (stale / "export" / name).write_bytes(b"\0" * 4096)
    fixture = Path(__file__).resolve().parents[2] / "fixtures" / "tiny-llama"
    ferry_export(fixture, parent / "model", "--dynamic", "-q")
    assert os.listdir(parent) == ["model"]
