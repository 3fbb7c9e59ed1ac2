"""Hub ids as from_pretrained takes them (issue 37): a checkpoint or an export named by its
repository id is downloaded with huggingface_hub (revision, subfolder, token, cache_dir,
local_files_only), only the files ferry reads, and exported or loaded from the local copy, in
the Python API and in the `ferry` command pip installs; libferry stays offline.

The Hub is a fake served from loopback by this module (the few endpoints huggingface_hub's
snapshot_download and hf_hub_download call), which records every request, so that a decoy
(pytorch_model.bin, a GGUF, a big file beside an export) can be seen never to be fetched.
huggingface_hub reads HF_ENDPOINT and its cache location when imported, so each download runs
in a fresh Python process with them set.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

import numpy as np
import pytest

from conftest import FERRY_BIN, FERRY_BUILD, ROOT, make_checkpoint, reference_logits, run_ferry

CKPT_REPO, EXPORT_REPO = "acme/tiny-llama", "acme/tiny-llama-onnx"
TOKENIZER_FILES = {"tokenizer_config.json": b'{"model_max_length": 128}\n',
                   "special_tokens_map.json": b'{"bos_token": "<s>"}\n',
                   "chat_template.jinja": b"{% for m in messages %}{{ m.content }}{% endfor %}"}
# what a checkpoint repository holds beside its safetensors that must never be downloaded
DECOYS = {"pytorch_model.bin": b"\x80\x02decoy" * 100, "model.Q4_K_M.gguf": b"GGUF" * 100,
          "onnx/model.onnx": b"decoy onnx", "README.md": b"# tiny\n"}
BIG = "extras/big-checkpoint.safetensors"  # beside an export: export.json does not list it


def _commit(tag):
    return hashlib.sha1(tag.encode()).hexdigest()


class FakeHub:
    """repo -> {"refs": {branch or tag: commit}, "commits": {commit: {path: bytes}}}; every
    request is appended to `requests` as (method, repo path)."""

    def __init__(self):
        self.repos, self.requests, self.auth = {}, [], []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.serve(self, body=False)

            def do_GET(self):
                hub.serve(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, repo, ref, files):
        commit = _commit(f"{repo}@{ref}")
        entry = self.repos.setdefault(repo, {"refs": {}, "commits": {}})
        entry["refs"][ref] = commit
        entry["commits"][commit] = dict(files)
        return commit

    def fetched(self, repo):
        """The files of `repo` that were requested (HEAD or GET)."""
        return {path for _, r, path in self.requests if r == repo and path}

    def _commit_of(self, repo, rev):
        entry = self.repos[repo]
        return rev if rev in entry["commits"] else entry["refs"].get(rev)

    def serve(self, handler, body):
        parts = [unquote(p) for p in urlsplit(handler.path).path.split("/")[1:]]
        self.auth.append(handler.headers.get("authorization"))
        api = parts[:2] == ["api", "models"]
        repo = "/".join(parts[2:4] if api else parts[:2])
        if repo not in self.repos:
            return self.reply(handler, 404, error="RepoNotFound")
        if api:  # /api/models/org/name/{revision|tree}/REV
            kind, rev = parts[4], parts[5]
            commit = self._commit_of(repo, rev)
            self.requests.append((handler.command, repo, None))
            if commit is None:
                return self.reply(handler, 404, error="RevisionNotFound")
            files = self.repos[repo]["commits"][commit]
            if kind == "revision":
                info = {"id": repo, "sha": commit, "private": False,
                        "siblings": [{"rfilename": p} for p in sorted(files)]}
            else:
                info = [{"type": "file", "path": p, "size": len(data),
                         "oid": hashlib.sha1(data).hexdigest()}
                        for p, data in sorted(files.items())]
            return self.reply(handler, 200, json.dumps(info).encode(), body=body)
        # /org/name/resolve/REV/path
        rev, path = parts[3], "/".join(parts[4:])
        self.requests.append((handler.command, repo, path))
        commit = self._commit_of(repo, rev)
        if commit is None:
            return self.reply(handler, 404, error="RevisionNotFound")
        data = self.repos[repo]["commits"][commit].get(path)
        if data is None:
            return self.reply(handler, 404, error="EntryNotFound", commit=commit)
        self.reply(handler, 200, data, body=body, commit=commit,
                   etag=hashlib.sha256(data).hexdigest())

    @staticmethod
    def reply(handler, status, data=b"", *, body=True, error=None, commit=None, etag=None):
        handler.send_response(status)
        if error:
            handler.send_header("X-Error-Code", error)
        if commit:
            handler.send_header("X-Repo-Commit", commit)
        if etag:
            handler.send_header("ETag", f'"{etag}"')
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if body:
            handler.wfile.write(data)


def _files(directory):
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(Path(directory).rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The fake Hub: a checkpoint repository (main, and tag v1 an older commit), an export
    repository (an ONNX export at its root and another in onnx/), one holding only
    pytorch_model.bin, and one whose export.json names a file outside the export."""
    work = tmp_path_factory.mktemp("hub")
    fake = FakeHub()
    ckpts = {}
    for ref, seed in (("v1", 7), ("main", 0)):
        ckpt = make_checkpoint(work / f"ckpt-{ref}", "llama", seed=seed)
        for name, data in TOKENIZER_FILES.items():
            (ckpt / name).write_bytes(data)
        ckpts[ref] = ckpt
        fake.add(CKPT_REPO, ref, {**_files(ckpt), **DECOYS})
    exports = {}
    for name, ref in (("root", "main"), ("sub", "v1")):
        rc, _, err = run_ferry("export", ckpts[ref], work / name, "--dynamic", "-q")
        assert rc == 0, err
        exports[name] = work / name
    files = {**_files(exports["root"]),
             **{f"onnx/{p}": data for p, data in _files(exports["sub"]).items()},
             BIG: b"\0" * (1 << 20), "README.md": b"# an export\n"}
    fake.add(EXPORT_REPO, "main", files)
    fake.add("acme/bin-only", "main", {"config.json": ckpts["main"].joinpath(
        "config.json").read_bytes(), "pytorch_model.bin": DECOYS["pytorch_model.bin"]})
    manifest = json.loads((exports["root"] / "export.json").read_text())
    manifest["components"]["model"]["data_files"] = ["../../../escaped.data"]
    fake.add("acme/evil", "main", {**_files(exports["root"]),
                                   "export.json": json.dumps(manifest).encode()})
    fake.ckpts, fake.exports = ckpts, exports
    yield fake
    fake.server.shutdown()


def _env(hub, home, **more):
    env = {k: v for k, v in os.environ.items()
           if not k.lower().endswith("_proxy") and k not in ("HF_HUB_CACHE", "HF_TOKEN")}
    env.update(HF_ENDPOINT=hub.url, HF_HOME=str(home), HF_HUB_OFFLINE="0",
               HF_HUB_DISABLE_PROGRESS_BARS="1", HF_HUB_DISABLE_TELEMETRY="1",
               HF_HUB_DISABLE_XET="1", NO_PROXY="127.0.0.1", no_proxy="127.0.0.1",
               FERRY_LIB=str(FERRY_BUILD / "libferry.so"), PYTHONPATH=str(ROOT / "python"))
    env.update(more)
    return env


def _python(hub, home, code, **env):
    """Runs `code` in a fresh Python against the fake Hub, with the hub cache under `home`."""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=_env(hub, home, **env), timeout=120)
    return proc.returncode, proc.stdout, proc.stderr


def _api_ok(hub, home, code, **env):
    rc, out, err = _python(hub, home, "import ferry\n" + code, **env)
    assert rc == 0, f"exit {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out


def _api_error(hub, home, code, **env):
    """The FerryError message `code` raises (and nothing else)."""
    rc, out, err = _python(hub, home, "import ferry\ntry:\n    " + code +
                           "\nexcept ferry.FerryError as e:\n    print('FerryError:', e)\n",
                           **env)
    assert rc == 0 and out.startswith("FerryError: "), f"exit {rc}\n{out}\n{err}"
    message = out[len("FerryError: "):].strip()
    assert "\n" not in message, message
    return message


def _same_export(got, want):
    """The same files with the same bytes; in export.json only the source (the path it was
    exported from) may differ."""
    got, want = _files(got), _files(want)
    assert sorted(got) == sorted(want)
    for name in got:
        if name == "export.json":
            a, b = json.loads(got[name]), json.loads(want[name])
            a.pop("source", None), b.pop("source", None)
            assert a == b
        else:
            assert got[name] == want[name], name


def test_checkpoint_by_id_python_api(hub, tmp_path):
    """A checkpoint by id exports as its local directory does, main and a tag, and only
    config, safetensors, tokenizer and generation files are fetched."""
    hub.requests.clear()
    _api_ok(hub, tmp_path / "hf", f"""
config = ferry.OnnxConfig(dynamic=True)
exported = ferry.OnnxExporter().export({CKPT_REPO!r}, config=config)
exported.save_pretrained({str(tmp_path / 'main')!r})
exported = ferry.OnnxExporter().export({CKPT_REPO!r}, config=config, revision="v1")
exported.save_pretrained({str(tmp_path / 'v1')!r})
""")
    _same_export(tmp_path / "main", hub.exports["root"])
    _same_export(tmp_path / "v1", hub.exports["sub"])
    fetched = hub.fetched(CKPT_REPO)
    assert not fetched & set(DECOYS), fetched
    assert {"config.json", "model.safetensors", "generation_config.json",
            *TOKENIZER_FILES} <= fetched, fetched
    # the snapshot is in the cache asked for: a later run needs no network at all
    hub.requests.clear()
    _api_ok(hub, tmp_path / "hf", f"""
e = ferry.OnnxExporter().export({CKPT_REPO!r}, config=ferry.OnnxConfig(dynamic=True),
                               revision="v1", local_files_only=True)
e.save_pretrained({str(tmp_path / 'again')!r})
""")
    assert hub.requests == []
    _same_export(tmp_path / "again", hub.exports["sub"])


def test_checkpoint_by_id_console_script(hub, tmp_path):
    """`ferry export ID OUT` from the pip console script downloads, then runs the C command on
    the snapshot: the same export as from the directory."""
    package = tmp_path / "site" / "ferry"  # laid out as pip installs it: the command inside
    shutil.copytree(ROOT / "python" / "ferry", package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (package / "bin").mkdir()
    os.symlink(FERRY_BIN, package / "bin" / "ferry")
    env = _env(hub, tmp_path / "hf", PYTHONPATH=str(tmp_path / "site"))

    def ferry(*args, **more):
        return subprocess.run([sys.executable, "-m", "ferry._cli", *map(str, args)],
                              capture_output=True, text=True, env=dict(env, **more), timeout=120)

    hub.requests.clear()
    proc = ferry("export", CKPT_REPO, tmp_path / "out", "--revision", "v1", "--dynamic", "-q")
    assert proc.returncode == 0, proc.stderr
    _same_export(tmp_path / "out", hub.exports["sub"])
    assert not hub.fetched(CKPT_REPO) & set(DECOYS)
    proc = ferry("inspect", EXPORT_REPO, "--subfolder", "onnx")
    assert proc.returncode == 0 and "model.onnx" in proc.stdout, proc.stderr
    for verbose in ("--verbose", "-v"):  # downloaded too (it went to the C command as an id)
        proc = ferry("inspect", verbose, EXPORT_REPO)
        assert proc.returncode == 0 and "model.onnx" in proc.stdout, proc.stderr
    assert BIG not in hub.fetched(EXPORT_REPO)
    for args, more, words in (
            (("export", "acme/missing", tmp_path / "x"), {},
             ["acme/missing", "no such repository"]),
            (("export", CKPT_REPO, tmp_path / "x", "--revision", "nope"), {},
             [CKPT_REPO, "'nope'", "no such revision"]),
            (("export", "acme/not-cached", tmp_path / "x"), {"HF_HUB_OFFLINE": "1"},
             ["acme/not-cached", "HF_HUB_OFFLINE"])):
        proc = ferry(*args, **more)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, proc.stderr
        assert lines[0].startswith("ferry: error: ") and all(w in lines[0] for w in words), lines
        assert not (tmp_path / "x").exists()


def test_export_by_id_loads_and_runs(hub, tmp_path):
    """An export by id, and by id and subfolder, runs as transformers' eager model does; only
    export.json and the files it lists are fetched (not the big file beside them)."""
    ids = np.random.default_rng(3).integers(0, 160, size=(2, 5)).astype(np.int64)
    np.save(tmp_path / "ids.npy", ids)
    hub.requests.clear()
    _api_ok(hub, tmp_path / "hf", f"""
import numpy as np
ids = np.load({str(tmp_path / 'ids.npy')!r})
for name, kwargs in (("root", {{}}), ("sub", {{"subfolder": "onnx", "token": "hf_secret",
                                               "cache_dir": {str(tmp_path / 'cache')!r}}})):
    model = ferry.ExportedModel.from_pretrained({EXPORT_REPO!r}, **kwargs)
    logits = model(input_ids=ids, attention_mask=np.ones_like(ids)).logits
    np.save({str(tmp_path)!r} + f"/{{name}}.npy", logits)
""")
    for name, ref in (("root", "main"), ("sub", "v1")):
        want = reference_logits(hub.ckpts[ref], ids, np.ones_like(ids), None)
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), want, atol=1e-4)
    listed = set(_files(hub.exports["root"]))
    assert hub.fetched(EXPORT_REPO) == listed | {f"onnx/{p}" for p in listed}
    assert "Bearer hf_secret" in hub.auth
    assert (tmp_path / "cache" / "models--acme--tiny-llama-onnx").is_dir()
    assert not (tmp_path / "hf" / "hub" / "models--acme--tiny-llama-onnx" / "snapshots" /
                hub.repos[EXPORT_REPO]["refs"]["main"] / "onnx").exists()
    # pinned to a commit, from the cache alone: no request at all
    main = hub.repos[EXPORT_REPO]["refs"]["main"]
    hub.requests.clear()
    _api_ok(hub, tmp_path / "hf", f"""
model = ferry.ExportedModel.from_pretrained({EXPORT_REPO!r}, revision={main!r},
                                            local_files_only=True)
assert model.format == "onnx" and "model" in model.files
""")
    assert hub.requests == []
    # onnx itself reads the downloaded graph with its external data (it refuses data with
    # more than one hard link, which a link to the cache's blob has)
    _api_ok(hub, tmp_path / "hf", f"""
import onnx
model = ferry.ExportedModel.from_pretrained({EXPORT_REPO!r}, revision={main!r},
                                            local_files_only=True)
onnx.load(str(model.components["model"].path))
""")


def test_revision_cannot_leave_the_cache(hub, tmp_path):
    """A revision is a branch, tag or commit: one with path parts is refused before
    huggingface_hub writes a ref file by its name (outside the cache with "../")."""
    home = tmp_path / "hf"
    hub.requests.clear()
    for revision in ("../../../../escaped-ref", "main/../../x", "/abs"):
        message = _api_error(hub, home, f"ferry.ExportedModel.from_pretrained({EXPORT_REPO!r}, "
                             f"revision={revision!r})")
        assert "is not a valid name or hash" in message, message
    assert not (tmp_path / "escaped-ref").exists() and hub.fetched(EXPORT_REPO) == set()


def test_errors_name_the_id(hub, tmp_path):
    home = tmp_path / "hf"
    message = _api_error(hub, home, "ferry.OnnxExporter().export('acme/missing')")
    assert "hub id 'acme/missing'" in message and "no such repository" in message
    message = _api_error(hub, home, f"ferry.OnnxExporter().export({CKPT_REPO!r}, revision='v9')")
    assert f"hub id '{CKPT_REPO}' (revision 'v9')" in message and "no such revision" in message
    message = _api_error(hub, home, "ferry.OnnxExporter().export('acme/bin-only')")
    assert "'acme/bin-only'" in message and "no safetensors" in message
    assert not hub.fetched("acme/bin-only") & {"pytorch_model.bin"}
    message = _api_error(hub, home, f"ferry.OnnxExporter().export({CKPT_REPO!r}, "
                         "local_files_only=True)")
    assert CKPT_REPO in message and "local_files_only=True" in message
    message = _api_error(hub, home, f"ferry.ExportedModel.from_pretrained({EXPORT_REPO!r}, "
                         "subfolder='nothing-here')")
    assert "subfolder 'nothing-here'" in message and "export.json" in message
    message = _api_error(hub, home, "ferry.ExportedModel.from_pretrained('acme/evil')")
    assert "export.json" in message and "../../../escaped.data" in message
    assert hub.fetched("acme/evil") == {"export.json"}
    message = _api_error(hub, home, "ferry.OnnxExporter().export('./my-llama')")
    assert message == "./my-llama: no such directory"
    assert not any(r == "my-llama" for _, r, _ in hub.requests)
