"""Hub ids as from_pretrained takes them: a checkpoint or an export named by its repository id
("org/name") is downloaded with huggingface_hub into its cache, only the files ferry reads, and
libferry is handed the local copy. libferry itself never goes online.

A checkpoint brings config.json, its safetensors (model.safetensors, or the index and the
shards it names), the tokenizer, chat template, generation and processor files; never
pytorch_model.bin, a GGUF or an ONNX file beside them. An export brings export.json, then
exactly the files it lists (component files and their weights, tokenizer files,
genai_config.json), with config.json and generation_config.json where the repository has them.
export.json comes from the network: a file name in it that is not a plain relative path inside
the export is refused before anything else is downloaded.
"""

import json
import os
import re
from pathlib import Path

from ._lib import FerryError

# What libferry and the runners read of a checkpoint directory (src/model/checkpoint.c,
# tokenizer_files.c), and the processor files transformers' AutoProcessor reads beside them.
CHECKPOINT_FILES = (
    "config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json",
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
    "tokenizer.model", "spiece.model", "vocab.json", "merges.txt", "vocab.txt",
    "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json",
)
CHECKPOINT_PATTERNS = ("chat_template*",)
SAFETENSORS_INDEX = "model.safetensors.index.json"

# files beside export.json that it does not list, read where present (ferry writes both)
EXPORT_OPTIONAL_FILES = ("config.json", "generation_config.json")
EXPORT_MANIFEST_MAX_BYTES = 16 << 20  # libferry's limit (exp_manifest_limits)

# the spelling huggingface_hub and libferry's hub.c accept: letters, digits, "-", "_", ".", at
# most one "/" between two non-empty parts
_HUB_ID = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_REVISION = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)*")


def _shown(text):
    """Untrusted text as libferry prints it (controls and invisible characters escaped)."""
    try:
        from ._lib import _escape

        return _escape(text) or ""
    except Exception:  # libferry not loadable: Python's own escaping
        return str(text).encode("unicode_escape").decode("ascii")


def looks_like_path(text):
    """Whether `text` is written as a path (./x, ../x, /x, ~/x): such a name is never a hub id."""
    return text in (".", "..", "~") or text.startswith(("./", "../", "/", "~")) or \
        text.startswith(os.sep)


def is_hub_id(text):
    """Whether `text` has the form of a hub repository id ("org/name" or "name")."""
    return isinstance(text, str) and not looks_like_path(text) and ".." not in text and \
        _HUB_ID.fullmatch(text) is not None


def _is_revision(text):
    """A branch, tag or commit name as libferry's hub.c takes one: parts of id characters."""
    return isinstance(text, str) and 0 < len(text) <= 255 and ".." not in text and \
        not text.startswith(".") and _REVISION.fullmatch(text) is not None


def _describe(repo_id, revision, subfolder):
    where = f"hub id '{_shown(repo_id)}'"
    if revision is not None:
        where += f" (revision '{_shown(revision)}')"
    if subfolder:
        where += f", subfolder '{_shown(subfolder)}'"
    return where


def _offline(local_files_only):
    try:
        from huggingface_hub import constants

        return bool(local_files_only or constants.HF_HUB_OFFLINE)
    except ImportError:
        return bool(local_files_only)


def _import_hub(what):
    try:
        import huggingface_hub
    except ImportError:
        raise FerryError(f"{what}: downloading from the Hub needs huggingface_hub (pip install "
                         "huggingface_hub), which is not installed", status=2) from None
    return huggingface_hub


def _hub_error(error, where, local_files_only):
    """One FerryError line for what huggingface_hub raised while fetching `where`."""
    from huggingface_hub import constants, errors

    endpoint = constants.ENDPOINT
    if isinstance(error, errors.GatedRepoError):
        why = (f"the repository on {endpoint} is gated: accept its terms on the Hub and pass a "
               "token (token=..., or log in with `hf auth login`)")
    elif isinstance(error, errors.RepositoryNotFoundError):
        why = (f"no such repository on {endpoint} (or it is private: pass a token, or log in "
               "with `hf auth login`)")
    elif isinstance(error, errors.RevisionNotFoundError):
        why = f"the repository on {endpoint} has no such revision (branch, tag or commit)"
    elif isinstance(error, errors.DisabledRepoError):
        why = f"the repository on {endpoint} is disabled"
    elif isinstance(error, errors.RemoteEntryNotFoundError):
        why = f"the file is not in the repository on {endpoint}"
    elif isinstance(error, errors.LocalEntryNotFoundError):
        if _offline(local_files_only):
            switch = "local_files_only=True" if local_files_only else "HF_HUB_OFFLINE is set"
            why = f"not in the local hub cache, and downloads are off ({switch})"
        else:
            why = f"not in the local hub cache, and {endpoint} cannot be reached"
    elif isinstance(error, errors.HfHubHTTPError):
        status = getattr(getattr(error, "response", None), "status_code", None)
        why = f"{endpoint} answered HTTP {status}" if status else f"{endpoint}: {error}"
    elif isinstance(error, OSError):
        why = f"cannot download: {error.strerror or error}"
    else:
        why = f"{type(error).__name__}: {error}"
    return FerryError(f"{where}: {_shown(why)}".replace("\n", " "), status=2)


def _hub_errors():
    """The exceptions a download may raise that are the Hub's, the network's or the disk's."""
    from huggingface_hub import errors

    return (errors.HfHubHTTPError, errors.EntryNotFoundError, errors.OfflineModeIsEnabled,
            errors.HFValidationError, OSError, ValueError)


def _escape_pattern(name):
    """`name` as an fnmatch pattern that matches only itself."""
    return re.sub(r"([\[\]*?])", r"[\1]", name)


def _check_subfolder(subfolder):
    if subfolder in (None, ""):
        return None
    if not isinstance(subfolder, (str, os.PathLike)):
        raise FerryError(f"subfolder must be a str, not {type(subfolder).__name__}", status=1)
    text = os.fspath(subfolder).strip("/")
    if not _plain_relative(text):
        raise FerryError(f"subfolder '{_shown(subfolder)}' must be a relative path inside the "
                         "repository", status=1)
    return text


def _plain_relative(name):
    """A relative path that stays inside its directory: no absolute path, no "." or ".." part,
    no empty part, no backslash or control character."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name or \
            any(ord(c) < 32 or ord(c) == 127 for c in name):
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


def _in_c_cache(repo_id):
    """Whether libferry's offline resolution could find `repo_id` in the hub cache (its own
    spelling of snapshots, such as a hand-made one, which huggingface_hub may not take)."""
    from huggingface_hub import constants

    return (Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))).is_dir()


def resolve_checkpoint(model, revision=None, *, subfolder=None, token=None, cache_dir=None,
                       local_files_only=False, force_download=False):
    """(what libferry opens, the revision to pass it) for `model`: a local directory as it is
    (joined with `subfolder`), a hub id downloaded into the hub cache (only the files a
    checkpoint export reads) and then its local snapshot, anything else as given (libferry
    names it). A path written as one (./x, /x, ~/x) that does not exist is a missing directory,
    never looked up on the Hub."""
    if isinstance(model, os.PathLike):
        model = os.fspath(model)
    if not isinstance(model, str) or "\0" in model:
        return model, revision  # bytes, or what the binding refuses by name
    sub = _check_subfolder(subfolder)
    if os.path.isdir(model):
        return (os.path.join(model, sub) if sub else model), revision
    if os.path.lexists(model):
        raise FerryError(f"{_shown(model)}: not a directory", status=2)
    if looks_like_path(model):
        raise FerryError(f"{_shown(model)}: no such directory", status=2)
    if not is_hub_id(model) or (revision is not None and not _is_revision(revision)):
        return model, revision  # libferry refuses it by name
    hub_only = sub or token is not None or cache_dir is not None or force_download
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        if hub_only:
            _import_hub(_describe(model, revision, sub))
        return model, revision  # libferry finds what the hub cache holds
    return _download_checkpoint(model, revision, sub, token, cache_dir, local_files_only,
                                force_download)


def _download_checkpoint(repo_id, revision, sub, token, cache_dir, local_files_only,
                         force_download):
    from huggingface_hub import errors, snapshot_download

    where = _describe(repo_id, revision, sub)
    prefix = f"{sub}/" if sub else ""
    kwargs = dict(repo_id=repo_id, token=token, cache_dir=cache_dir,
                  local_files_only=local_files_only, force_download=force_download)
    patterns = [prefix + _escape_pattern(n) for n in CHECKPOINT_FILES] + \
        [prefix + p for p in CHECKPOINT_PATTERNS]
    try:
        snapshot = snapshot_download(revision=revision, allow_patterns=patterns, **kwargs)
    except errors.LocalEntryNotFoundError as error:
        # libferry also reads a cache laid out by hand (snapshots named otherwise than by a
        # commit), which huggingface_hub does not
        if _offline(local_files_only) and not sub and cache_dir is None and \
                _in_c_cache(repo_id):
            return repo_id, revision
        raise _hub_error(error, where, local_files_only) from None
    except _hub_errors() as error:
        raise _hub_error(error, where, local_files_only) from None
    directory = Path(snapshot) / sub if sub else Path(snapshot)
    if not (directory / "config.json").is_file():
        raise FerryError(f"{where}: the repository has no {prefix}config.json: not a "
                         "Transformers checkpoint", status=2)
    index = directory / SAFETENSORS_INDEX
    if index.is_file():
        shards = _shards(index, where)
        commit = Path(snapshot).name
        try:
            snapshot_download(revision=commit if _COMMIT.fullmatch(commit) else revision,
                              allow_patterns=[prefix + _escape_pattern(s) for s in shards],
                              **kwargs)
        except _hub_errors() as error:
            raise _hub_error(error, where, local_files_only) from None
        missing = [s for s in shards if not (directory / s).is_file()]
        if missing:
            raise FerryError(f"{where}: {SAFETENSORS_INDEX} names {_shown(missing[0])}, which "
                             "the repository does not hold", status=2)
    elif not (directory / "model.safetensors").is_file():
        raise FerryError(f"{where}: the repository has no safetensors weights "
                         f"({prefix}model.safetensors or {prefix}{SAFETENSORS_INDEX}); ferry "
                         "reads safetensors only, and downloads nothing else (no "
                         "pytorch_model.bin, GGUF or ONNX)", status=4)
    return str(directory), None


def _shards(index, where):
    """The shard files model.safetensors.index.json names (libferry checks the rest)."""
    try:
        if index.stat().st_size > 64 << 20:
            return []
        weight_map = json.loads(index.read_text("utf-8")).get("weight_map")
    except (OSError, ValueError, AttributeError):
        return []  # libferry reports the malformed index by name
    if not isinstance(weight_map, dict):
        return []
    shards = sorted({v for v in weight_map.values() if isinstance(v, str)})
    for name in shards:
        if not _plain_relative(name):
            raise FerryError(f"{where}: {SAFETENSORS_INDEX} names '{_shown(name)}', which is "
                             "not a file inside the checkpoint", status=3)
    return shards


# --- exports --------------------------------------------------------------------------------

def resolve_export(path, subfolder=None, *, revision=None, token=None, cache_dir=None,
                   local_files_only=False, force_download=False):
    """(directory, subfolder) for libferry to load: a local directory as it is; a hub id
    downloaded (export.json, then the files it lists) and its local copy, subfolder applied."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or "\0" in path or os.path.isdir(path):
        if revision is not None and isinstance(path, str):
            raise FerryError(f"{_shown(path)} is a local directory, and a revision "
                             f"('{_shown(revision)}') applies only to a hub id", status=1)
        return path, subfolder
    if os.path.lexists(path):
        raise FerryError(f"{_shown(path)}: not a directory", status=2)
    if not is_hub_id(path):
        raise FerryError(f"{_shown(path)}: no such directory" +
                         ("" if looks_like_path(path) else ", and not a hub id (org/name)"),
                         status=2)
    sub = _check_subfolder(subfolder)
    if revision is not None and not _is_revision(revision):
        # huggingface_hub writes a ref file by the revision's name: "../x" lands outside the
        # cache
        raise FerryError(f"revision '{_shown(revision)}' is not a valid name or hash (a "
                         "branch, tag or commit: parts of letters, digits, '-', '_', '.')",
                         status=1)
    where = _describe(path, revision, sub)
    hub = _import_hub(where)
    from huggingface_hub import errors

    kwargs = dict(repo_id=path, subfolder=sub, token=token, cache_dir=cache_dir,
                  local_files_only=local_files_only, force_download=force_download)
    try:
        manifest_path = Path(hub.hf_hub_download(filename="export.json", revision=revision,
                                                 **kwargs))
    except errors.RemoteEntryNotFoundError:
        raise FerryError(f"{where}: the repository has no {sub + '/' if sub else ''}export.json: "
                         "not an export (a checkpoint is exported with an exporter's export())",
                         status=2) from None
    except _hub_errors() as error:
        raise _hub_error(error, where, local_files_only) from None
    snapshot = manifest_path.parent
    for _ in sub.split("/") if sub else ():
        snapshot = snapshot.parent
    # the files of the commit export.json came from, even if the branch moves meanwhile
    pinned = snapshot.name if _COMMIT.fullmatch(snapshot.name) else revision
    listed, optional = export_files(manifest_path, where)
    cached = {"export.json": manifest_path}
    for name in listed + optional:
        try:
            cached[name] = Path(hub.hf_hub_download(filename=name, revision=pinned, **kwargs))
        except errors.EntryNotFoundError:
            if name in optional:
                continue
            raise FerryError(f"{where}: export.json lists '{_shown(name)}', which the repository "
                             "does not hold", status=2) from None
        except _hub_errors() as error:
            raise _hub_error(error, f"{where}: {_shown(name)}", local_files_only) from None
    return str(_materialize(snapshot, sub, cached, where)), None


def _materialize(snapshot, sub, cached, where):
    """A directory of the export's own files for libferry to load, beside the hub cache's
    snapshot of it (<repo>/ferry-exports/<commit>/<subfolder, or @root>). The snapshot holds
    symbolic links into the cache's blobs/, which libferry refuses in an export: a file must
    not lead out of its directory. Here each file is a hard link to its blob (a copy where the
    file system has none), so nothing is stored twice, except an ONNX graph's external data
    (<file>.data, <file>_data), which is copied: onnx refuses external data with more than one
    link (a hard link could give it a file outside the model's directory). The directory is
    built aside and renamed into place whole, and is the same for every later load of that
    commit (libferry checks every file's CRC-32 when it loads it)."""
    import shutil
    import tempfile
    from urllib.parse import quote

    if snapshot.parent.name != "snapshots":  # not a cache layout ferry knows: as it is
        return snapshot / sub if sub else snapshot
    base = snapshot.parent.parent / "ferry-exports" / snapshot.name
    final = base / (quote(sub, safe="") if sub else "@root")

    def copied(name):
        return name.endswith((".data", "_data"))

    def complete(directory):
        try:
            return all(os.path.getsize(directory / name) == os.path.getsize(path)
                       if copied(name) else os.path.samefile(directory / name, path)
                       for name, path in cached.items())
        except OSError:
            return False

    if complete(final):
        return final
    building = None
    try:
        base.mkdir(parents=True, exist_ok=True)
        building = Path(tempfile.mkdtemp(prefix=".building-", dir=base))
        for name, path in cached.items():
            target = building / name
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                if copied(name):
                    shutil.copyfile(path, target)
                else:
                    os.link(os.path.realpath(path), target)
            except OSError:
                shutil.copyfile(path, target)
        if final.exists():  # an older, incomplete one: set aside, then removed
            stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=base))
            os.rename(final, stale / "export")
            shutil.rmtree(stale, ignore_errors=True)
        try:
            os.rename(building, final)
            building = None
        except OSError:
            if not complete(final):  # another process built it meanwhile, or this failed
                raise
    except OSError as error:
        raise FerryError(f"{where}: cannot lay out the downloaded export in {_shown(base)}: "
                         f"{_shown(error.strerror or error)}", status=2) from None
    finally:
        if building is not None:
            shutil.rmtree(building, ignore_errors=True)
    return final


def _no_repeated_keys(pairs):
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise ValueError(f"key '{key}' appears twice")
        seen.add(key)
    return dict(pairs)


def export_files(manifest_path, where="export.json"):
    """([files export.json lists], [files read beside it where present]) of the export whose
    manifest is at `manifest_path`, each a plain relative path (FerryError naming export.json
    otherwise). A manifest that cannot be read as one lists nothing: libferry's load then says
    what is wrong with it, by name."""
    try:
        if Path(manifest_path).stat().st_size > EXPORT_MANIFEST_MAX_BYTES:
            return [], []
        manifest = json.loads(Path(manifest_path).read_text("utf-8"),
                              object_pairs_hook=_no_repeated_keys)
    except ValueError as error:
        if "appears twice" in str(error):
            raise FerryError(f"{where}: export.json: {_shown(error)}", status=3) from None
        return [], []
    except OSError:
        return [], []
    if not isinstance(manifest, dict) or not isinstance(manifest.get("components"), dict):
        return [], []
    files = []

    def add(name, key):
        if not _plain_relative(name):
            raise FerryError(f"{where}: export.json: {key}: '{_shown(name)}' is not a file name "
                             "inside the export (it would be written outside it); nothing "
                             "else was downloaded", status=3)
        if name not in files:
            files.append(name)

    transformers_schema = "format" not in manifest and "export_format" in manifest
    fmt = manifest.get("format", manifest.get("export_format"))
    for name, component in manifest["components"].items():
        if not isinstance(component, dict):
            continue
        key = f"components.{_shown(name)}"
        file = component.get("file")
        if not isinstance(file, str):
            continue
        add(file, key + ".file")
        data_files = component.get("data_files")
        for data in data_files if isinstance(data_files, list) else ():
            if isinstance(data, str):
                add(data, key + ".data_files")
        # the weights each format's reader opens beside the program, whether listed or not
        if fmt == "openvino" and file.endswith(".xml"):
            add(file[:-len(".xml")] + ".bin", key + ".file")
        elif transformers_schema and fmt == "onnx" and file.endswith(".onnx"):
            add(file + ".data", key + ".file")
    genai = manifest.get("onnxruntime_genai")
    if isinstance(genai, dict):
        for k in ("config", "processor_config"):
            if isinstance(genai.get(k), str):
                add(genai[k], f"onnxruntime_genai.{k}")
    tokenizer = manifest.get("tokenizer_files")
    for name in tokenizer if isinstance(tokenizer, list) else ():
        if isinstance(name, str):
            add(name, "tokenizer_files")
    optional = [n for n in EXPORT_OPTIONAL_FILES if n not in files]
    return files, optional


# --- the `ferry` command pip installs --------------------------------------------------------

# The options that take a value, by subcommand, as the C command reads them (cli/options.c's
# shared export options and each format's own, export's and graph's; inspect's; validate's,
# which validation.py's argparse reads): what follows one is its value, not an operand.
_EXPORT_VALUE_OPTIONS = ("format", "dim", "example-shape", "dtype", "config", "revision",
                         "inputs", "max-cache-len", "quantize", "block-size", "accuracy-level",
                         "quant-method")
_EXPORT_FLAGS = ("dynamic", "for-generation", "no-tokenizer", "text-only", "multi-token-decode",
                 "single-token-decode", "static-cache", "asymmetric", "quantize-embeddings",
                 "float-lm-head", "help", "quiet")
_COMMAND_OPTIONS = {
    # command: (options with a value, flags, whether a prefix of a name is taken for it)
    "export": (_EXPORT_VALUE_OPTIONS, _EXPORT_FLAGS + ("force", "validate"), True),
    "graph": (_EXPORT_VALUE_OPTIONS + ("stage", "component"), _EXPORT_FLAGS, True),
    "inspect": (("subfolder",), ("json", "verify", "verbose", "help"), False),
    "validate": (("model", "revision", "subfolder", "atol", "min-top1"),
                 ("no-record", "quiet", "help"), True),
}


def _format_options():
    """{long option name: whether it takes a value} of every format's own flags
    (ferry_format_option_describe); None when libferry cannot be asked."""
    import ctypes

    class Info(ctypes.Structure):
        # ferry_format_option_info up to flag_value: the fields read here
        _fields_ = [("format", ctypes.c_char_p), ("key", ctypes.c_char_p),
                    ("alias", ctypes.c_char_p), ("default_value", ctypes.c_char_p),
                    ("expects", ctypes.c_char_p), ("flag", ctypes.c_char_p),
                    ("flag_value", ctypes.c_char_p), ("metavar", ctypes.c_char_p),
                    ("help", ctypes.c_char_p), ("generation_only", ctypes.c_int)]

    try:
        from ._lib import _c

        describe = _c().ferry_format_option_describe
    except Exception:
        return None
    describe.argtypes, describe.restype = [ctypes.c_int, ctypes.POINTER(Info)], ctypes.c_int
    found, info = {}, Info()
    for i in range(256):
        if describe(i, ctypes.byref(info)) != 0:
            break
        if info.flag and info.flag.startswith(b"--"):
            found[info.flag[2:].decode()] = info.flag_value is None
    return found


def _parse(command, args):
    """([(index in args, operand)], {option: (index of the option, index of its value or
    None, value)}) of a subcommand's arguments, read as getopt_long reads them (options and
    operands in any order, --name=value or --name value, a unique prefix of a name, "--" ending
    the options); None where they cannot be read so (an unknown option: the C command says so
    itself)."""
    values, flags, prefixes = _COMMAND_OPTIONS[command]
    takes = {name: True for name in values}
    takes.update({name: False for name in flags})
    if command in ("export", "graph"):
        more = _format_options()
        if more is None:
            return None
        takes.update(more)
    operands, options, i = [], {}, 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            operands += [(k, a) for k, a in enumerate(args[i + 1:], i + 1)]
            break
        if arg.startswith("--"):
            name, eq, inline = arg[2:].partition("=")
            matches = [n for n in takes if n == name] or \
                ([n for n in takes if n.startswith(name)] if prefixes and name else [])
            if len(matches) != 1:
                return None
            name = matches[0]
            if not takes[name]:
                options[name] = (i, None, None)
            elif eq:
                options[name] = (i, i, inline)
            elif i + 1 < len(args):
                options[name] = (i, i + 1, args[i + 1])
                i += 1
            else:
                return None
        elif arg.startswith("-") and arg != "-":
            short = {"q": "quiet", "h": "help", "v": "verbose"}
            if any(short.get(c) not in takes for c in arg[1:]):
                return None
            options.update({short[c]: (i, None, None) for c in arg[1:]})
        else:
            operands.append((i, arg))
        i += 1
    return operands, options


def _is_download(name):
    """Whether an operand names a hub repository to download: not a local path, and a hub id."""
    return not os.path.lexists(name) and is_hub_id(name)


def _without(args, dropped, options):
    """`args` less the options named in `dropped` and their values (a local directory takes no
    revision; a downloaded export is the subfolder itself)."""
    drop = {k for name in dropped for k in options[name][:2]}
    return [a for k, a in enumerate(args) if k not in drop]


def cli_argv(argv):
    """The `ferry` command's arguments with each hub id it is given as a checkpoint (export's
    and graph's MODEL, validate's --model; --revision applies) or as an export (inspect's DIR,
    validate's EXPORT; --subfolder applies) replaced by its local copy, downloaded first: the C
    command stays offline. Anything else is left as it is, for the C command to read (and
    refuse by name). A validate of a downloaded export records nothing in it (--no-record):
    the copy in the hub cache is the repository's, not the caller's to edit."""
    if not argv or argv[0] not in _COMMAND_OPTIONS:
        return argv
    command, args = argv[0], list(argv[1:])
    parsed = _parse(command, args)
    if parsed is None or "help" in parsed[1]:
        return argv
    operands, options = parsed
    try:
        from huggingface_hub.utils import disable_progress_bars, logging

        logging.set_verbosity_error()  # a failed download is one line: ferry's, below
        if "quiet" in options:
            disable_progress_bars()
    except ImportError:
        pass
    revision = options["revision"][2] if "revision" in options else None
    subfolder = options["subfolder"][2] if "subfolder" in options else None
    replace, drop_revision, drop_subfolder, add = {}, False, False, []
    if command in ("export", "graph") and operands and _is_download(operands[0][1]):
        at, name = operands[0]
        local, left = resolve_checkpoint(name, revision)
        if left is None and local != name:
            replace[at], drop_revision = local, revision is not None
    if command == "validate" and "model" in options and _is_download(options["model"][2]):
        option_at, at, name = options["model"]
        local, left = resolve_checkpoint(name, revision)
        if left is None and local != name:
            replace[at] = local if at != option_at else f"--model={local}"
            drop_revision = revision is not None
    if command in ("inspect", "validate") and operands and _is_download(operands[0][1]):
        at, name = operands[0]
        sub = _check_subfolder(subfolder)
        replace[at], _ = resolve_export(name, sub)  # the export itself, its subfolder applied
        if command == "validate" and "no-record" not in options:
            add.append("--no-record")
        drop_subfolder = sub is not None
    args = [replace.get(k, a) for k, a in enumerate(args)]
    dropped = [o for o, drop in (("revision", drop_revision), ("subfolder", drop_subfolder))
               if drop]
    return [command] + add + _without(args, dropped, options)
