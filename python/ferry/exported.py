"""ExportedModel: an export in memory or on disk (components, manifest), saved and loaded by
libferry, and run in its runtime (onnxruntime, OpenVINO, torch or ExecuTorch: ferry.runtime)
like the model it came from: same kwargs, same output class."""

import ctypes
import json
import re
import sys
import tempfile
import threading
import warnings
from pathlib import Path

from . import _lib, _versions
from ._arrays import axis_refusal, check_token_ids, check_value_range, int_matrix, to_numpy
from ._lib import (FerryError, FerryWarning, _P, _c, _c_bytes, _escape, _fail, _str,
                   caller_stacklevel)
from .runtime import (EXECUTORCH_FORMAT, TORCH_FORMATS, check_device, is_encoder_output,
                      is_transformers_manifest, load_program, open_session, program_errors)


class ExportedComponent:
    """One graph of an export: its file, its role in the export ("model", "prefill", "decode")
    and the metadata export.json records for it (inputs, outputs, precision, cache...).
    `.program` is the backend's program, loaded on first use: an onnx.ModelProto whose weights
    stay in the external data file, an openvino.Model, a torch.export.ExportedProgram, or an
    executorch.runtime.Program (the guide's: an ExecutorchProgramManager cannot be rebuilt from
    the file)."""

    def __init__(self, exported, name, file, entry):
        self._exported, self.name, self.file = exported, name, file
        self.role = entry.get("role", name)  # transformers: a component's role is its name
        self.metadata = entry.get("metadata", {})
        self._program = None

    @property
    def path(self):
        """The component's file on disk (a fresh export is saved aside first)."""
        return self._exported._saved_directory() / self.file

    @property
    def program(self):
        if self._program is None:
            self._exported._check_files()
            fmt = self._exported.format
            # the reader's own errors (onnx's DecodeError) as one FerryError naming the file
            with program_errors(self.path, {"openvino": "openvino", "onnx": "onnx",
                                            EXECUTORCH_FORMAT: "executorch"}.get(fmt, "torch")):
                self._program = self._read(fmt)
        return self._program

    def _read(self, fmt):
        if fmt == "openvino":
            import openvino

            return openvino.Core().read_model(str(self.path))
        if fmt in TORCH_FORMATS:
            import torch

            program = load_program(self.path, torch.device("cpu"), self.metadata)
            if program.example_inputs is None and \
                    self.metadata.get("cache", {}).get("implementation") == "static":
                program._example_inputs = _static_cache_example(self.metadata)
            return program
        if fmt == EXECUTORCH_FORMAT:
            from executorch.runtime import Runtime

            return Runtime.get().load_program(str(self.path))
        import onnx

        return onnx.load(str(self.path), load_external_data=False)

    def __repr__(self):
        return f"ExportedComponent(name={self.name!r}, file={self.file!r}, role={self.role!r})"


def _static_cache_example(metadata):
    """The guide's `program.example_inputs` of a static-cache program: (args, kwargs) holding
    an empty, initialized StaticCache (ferry.static_cache). The program's own signature takes
    the cache as tensors, which torch's example_inputs setter would check these against, so
    they are set as its stored value; without transformers there is no StaticCache, and none
    are given (as before)."""
    try:
        import transformers.cache_utils  # noqa: F401
    except ImportError:
        return None
    from .static_cache import example_inputs

    return example_inputs(metadata)


class ExportedModel:
    """An export: its components (name -> ExportedComponent), the manifest, and a runner for
    its graph on `device`."""

    def __init__(self, handle, model_handle=None, device=None, source=None, cancel=None):
        self._h, self._model, self._session, self._tmp = handle, model_handle, None, None
        self._device, self._source = None, source  # source: a temporary checkpoint, kept
        self._cancel = cancel  # the c_int the export's ferry_export_config.cancel points at
        self._saving = threading.Lock()  # one save at a time: they share the handle and flag
        # one call or generate() at a time: they share a session and the runners' cache (found
        # by review: threads generating at once read each other's cache)
        self._running = threading.RLock()
        self._runners = self._components = None
        if device is not None:
            self.to(device)

    @classmethod
    def from_pretrained(cls, path, subfolder=None, device=None, *, revision=None, token=None,
                        cache_dir=None, local_files_only=False, force_download=False):
        """Loads the export in `path` (a directory, or a hub id: downloaded as from_pretrained
        downloads, with its kwargs revision, token, cache_dir, local_files_only and
        force_download, export.json first and then only the files it lists, see ferry.hub;
        `subfolder` for an export kept beside the model's weights), to run on `device` (see
        to()). Each time a runtime opens the programs (the first call, runners, .program),
        every file is read and compared with the CRC-32 the export recorded: a file swapped
        for another of the same size, or edited in place, is refused naming it."""
        from .hub import resolve_export

        path, subfolder = resolve_export(path, subfolder, revision=revision, token=token,
                                         cache_dir=cache_dir, local_files_only=local_files_only,
                                         force_download=force_download)
        raw = _c_bytes(path, "path")
        sub = _c_bytes(subfolder, "subfolder") if subfolder else None
        handle = _P()
        status = _c().ferry_exported_load(raw, sub, ctypes.byref(handle))
        if status:
            message = _str(_c().ferry_exported_errmsg(handle)) if handle else None
            _c().ferry_exported_free(handle)
            _fail(status, message)
        loaded = cls(handle, device=device)
        _versions.warn_on_drift(loaded.manifest, _escape(loaded.directory))
        return loaded

    def to(self, device=None, **kwargs):
        """Runs the export on `device` from the next call on, and returns self: an onnxruntime
        provider ("cpu", "cuda", "cuda:N") for ONNX, an OpenVINO device ("cpu", "gpu"/"xpu",
        "npu", "auto": the default) for OpenVINO IR. A device this machine's runtime lacks is
        refused here, by name."""
        if kwargs:
            raise FerryError(f"to() takes only a device, not {', '.join(sorted(kwargs))}",
                             status=1)
        if device is not None:
            device = str(device).strip().lower()  # a torch.device too: "cuda:0"
            check_device(self.format, device)
        self._device, self._session, self._runners = device, None, None
        return self

    @property
    def device(self):
        return self._device or ("auto" if self.format == "openvino" else "cpu")

    def save_pretrained(self, save_directory, force=False):
        """Writes the export to save_directory atomically. With force, an earlier export there
        (ferry's or transformers': export.json and only its files) is replaced; anything else
        is refused with a FerryError and left untouched (ferry_exported_save). Missing parent
        directories are made, and removed again if the save fails."""
        raw = _c_bytes(save_directory, "save_directory")
        if self._cancel is None:  # a loaded export: ferry_exported_save refuses it at once
            handle = self._live("save it")
            status = _c().ferry_exported_save(handle, raw, int(force))
        else:
            while not self._saving.acquire(timeout=0.1):
                pass  # another thread is saving this export (or closing it): after it
            try:
                handle = self._live("save it")  # under the lock: close() may have come first
                status = self._save_interruptibly(handle, raw, int(force))
                found = _str(_c().ferry_exported_save_warnings(handle)) or ""
            finally:
                self._saving.release()
        if status:
            _fail(status, _str(_c().ferry_exported_errmsg(handle)))
        if self._cancel is not None:
            # what the save found in the weights (values beyond an fp16 export's range), as the
            # CLI prints it after the save
            for line in found.splitlines():  # at the user's line, through an implicit save too
                warnings.warn(line, FerryWarning, stacklevel=caller_stacklevel())
        self._session = self._runners = None

    def _save_interruptibly(self, handle, raw, force):
        """ferry_exported_save on a worker thread, so that Ctrl-C (KeyboardInterrupt, which
        Python raises only between bytecodes, never inside a C call) reaches this thread: it
        sets the export's cancel flag, libferry stops within a band of weights and removes what
        it wrote, and the KeyboardInterrupt goes on up."""
        self._cancel.value = 0
        result, finished = [], threading.Event()

        def save():
            try:
                result.append(_c().ferry_exported_save(handle, raw, force))
            finally:
                finished.set()

        # An Event, not Thread.join: a join that an exception interrupts may not wait again.
        worker = threading.Thread(target=save, name="ferry-save", daemon=True)
        try:
            worker.start()
            while not finished.wait(0.1):
                pass
        except BaseException:  # KeyboardInterrupt, or what a signal handler raised
            self._cancel.value = 1
            if worker.ident is not None:
                _wait_through_interrupts(finished)
            raise
        return result[0]

    def _live(self, doing):
        """The library handle; after close() there is none, and libferry would take the NULL for
        a failed allocation ("out of memory")."""
        if not self._h:
            raise FerryError(f"this ExportedModel was closed (close() frees it): cannot {doing}",
                             status=1)
        return self._h

    @property
    def directory(self):
        return _str(_c().ferry_exported_dir(self._h))

    @property
    def files(self):
        """{component name: its file name} (the files save_pretrained writes beside
        export.json)."""
        lib, handle = _c(), self._live("list its components")
        return {_str(lib.ferry_exported_component_name(handle, i)):
                _str(lib.ferry_exported_component_file(handle, i))
                for i in range(lib.ferry_exported_component_count(handle))}

    @property
    def components(self):
        """{component name: ExportedComponent}, as the guide's ExportedModel.components: made
        once, so that each program is loaded once and keeps what the caller sets on it (found
        by review: every access read the file again)."""
        if self._components is None:
            entries = self.manifest.get("components", {})
            self._components = {name: ExportedComponent(self, name, file, entries.get(name, {}))
                                for name, file in self.files.items()}
        return self._components

    @property
    def program(self):
        """The program of the single "model" component (the guide's exported.program)."""
        components = self.components
        if len(components) != 1:
            raise FerryError(f"this export has {len(components)} components "
                             f"({', '.join(map(_escape, components))}): take one's program "
                             "with exported.components[name].program", status=1)
        return next(iter(components.values())).program

    @property
    def format(self):
        """"onnx", "openvino", "pt2" or "executorch" (export.json's format; transformers' exports say export_format,
        and ferry's carry both where transformers' loader can run them)."""
        manifest = self.manifest
        return manifest.get("format", manifest.get("export_format"))

    @property
    def manifest(self):
        return json.loads(_str(_c().ferry_exported_manifest(self._live("read its manifest"))))

    def _saved_directory(self):
        """The directory the export's files are in; a fresh export is saved aside to a
        temporary one first (kept until close())."""
        if self.directory is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="ferry-")
            self.save_pretrained(Path(self._tmp.name) / "export")
        return Path(self.directory)

    def _check_files(self):
        """Just before a runtime opens a loaded export's programs: every file read against
        its recorded CRC-32 (a file replaced since the load is refused). A fresh export runs
        the files this process wrote."""
        if self._model is None:
            handle = self._live("open its files")
            status = _c().ferry_exported_verify(handle)
            if status:
                _fail(status, _str(_c().ferry_exported_errmsg(handle)))

    @property
    def runners(self):
        """{"prefill": runner, "decode": runner} of a generation export, each owning its
        session and sharing one KV cache (ferry.runners)."""
        if self._runners is None:
            from .runners import Runners
            from .vision_language import is_vision_language, runners_class
            from .seq2seq import is_encoder_decoder
            from .seq2seq import runners_class as seq2seq_runners

            self._live("run it")
            manifest = self.manifest
            Runners.check_generation(manifest)
            directory = self._saved_directory()
            self._check_files()
            made = (runners_class(manifest) if is_vision_language(manifest) else
                    seq2seq_runners(manifest) if is_encoder_decoder(manifest) else Runners)
            self._runners = made(directory, manifest, self._device)
        return self._runners

    def generate(self, input_ids=None, attention_mask=None, **kwargs):
        """Greedy search or sampling with the generation export, as transformers' generate()
        with the checkpoint's generation_config.json; see ferry.generation. A vision-language
        export also takes what its processor returns for the images (pixel_values,
        image_grid_thw, mm_token_type_ids for Qwen2-VL; pixel_values, pixel_attention_mask for
        SmolVLM; ferry.vision_language, ferry.smolvlm). A Whisper export takes
        input_features instead of input_ids (ferry.whisper). Calls from several threads
        take turns: they share the runners' cache."""
        from .generation import generate
        from .vision_language import VisionLanguageRunners
        from .seq2seq import T5Runners, generate_t5
        from .whisper import WhisperRunners
        from .whisper import generate as generate_whisper

        with self._running:
            runners = self.runners
            if isinstance(runners, WhisperRunners):
                if input_ids is not None:
                    raise FerryError("a Whisper export's generate() takes input_features (what "
                                     "its feature extractor returns), not input_ids: its "
                                     "decoder prompt is the init tokens the generation config "
                                     "says", status=1)
                if "input_features" not in kwargs:
                    raise FerryError("a Whisper export's generate() needs input_features "
                                     "(what its feature extractor returns)", status=1)
                return generate_whisper(runners, self.directory, kwargs.pop("input_features"),
                                        attention_mask, **kwargs)
            if input_ids is None:
                wrong = next((k for k in ("input_features", "inputs_embeds") if k in kwargs),
                             None)
                raise FerryError("generate() needs input_ids" + (
                    f" (this export takes token ids, not {wrong})" if wrong else ""), status=1)
            if isinstance(runners, T5Runners):
                return generate_t5(runners, self.directory, input_ids, attention_mask, **kwargs)
            if isinstance(runners, VisionLanguageRunners):
                images = {k: kwargs.pop(k) for k in runners.IMAGE_INPUTS if k in kwargs}
                runners.set_images(**images)
            return generate(runners, self.directory, input_ids, attention_mask, **kwargs)

    def _runner(self):
        """(session, the "model" component's metadata), made on first use."""
        if self._session is None:
            self._check_callable()
            fmt = self.format
            if fmt not in ("onnx", "openvino", EXECUTORCH_FORMAT, *TORCH_FORMATS):
                raise FerryError(f"this is a {_escape(fmt)} export: ferry runs ONNX (onnxruntime), "
                                 "OpenVINO, pt2 (torch) and ExecuTorch exports", status=4)
            model = self.components["model"]
            # transformers' metadata says export_dtype ("float32"), ferry's precision ("fp32")
            precision = model.metadata.get("precision") or (
                "fp32" if model.metadata.get("export_dtype") == "float32" else None)
            # the metadata is kept with the session: each call reads it, and export.json is
            # parsed anew on every self.manifest
            path = model.path
            self._check_files()
            self._session = (open_session(path, fmt, precision, self._device,
                                          model.metadata), model.metadata)
        return self._session

    def _check_callable(self):
        """Calling runs the single "model" graph; a generation export has none, only stages that
        pass a KV cache between them, which the caller has to drive."""
        components = self.files
        if "model" in components:
            return
        if is_transformers_manifest(self.manifest):  # its export_for_generation wrote it
            from .runners import TRANSFORMERS_GENERATION

            raise FerryError(TRANSFORMERS_GENERATION, status=4)
        manifest = self.manifest.get("components", {})
        # Names, roles and the directory come from export.json and the file system: escaped.
        listed = ", ".join(
            f"{_escape(name)} (role {_escape(manifest.get(name, {}).get('role', name))}, "
            f"{_escape(file)})" for name, file in components.items())
        raw_dir = _c().ferry_exported_dir(self._h)
        where = _escape(raw_dir) if raw_dir else "the directory save_pretrained() writes"
        openvino = self.format == "openvino"
        if openvino and any(c.get("metadata", {}).get("stateful") for c in manifest.values()):
            raise FerryError(
                f"this export has no \"model\" component to call: its {listed} is OpenVINO's "
                "stateful generation graph, whose cache stays in the model's variables between "
                f"calls. Run it with generate() (or runners), or (from {where}) with "
                "openvino-genai's LLMPipeline, or an OpenVINO infer request fed input_ids, "
                "attention_mask, position_ids and beam_idx.",
                status=4)
        runtime = ("OpenVINO (openvino.Core().compile_model)" if openvino
                   else "torch (torch.export.load(file).module())" if self.format == "pt2"
                   else "executorch.runtime (Runtime.get().load_program(file))"
                   if self.format == EXECUTORCH_FORMAT
                   else "onnxruntime.InferenceSession")
        raise FerryError(
            f"this export has no \"model\" component to call: its components, {listed}, are "
            "the stages of a generation loop, which pass a KV cache from one call to the next. "
            "Run them with generate() (or runners), or each component's file with "
            f"{runtime} (from {where}), "
            "feeding the cache as export.json's components.<name>.metadata.cache describes "
            "(docs/design.md, \"Generation components\"); or export without for-generation to "
            "get a callable \"model\".", status=4)

    def __call__(self, **inputs):
        """Runs the "model" component like the model it came from. Inputs are torch tensors,
        numpy arrays or lists; those the graph does not take are dropped (a tokenizer's whole
        output can be passed); position_ids are derived from attention_mask as generate() does
        when not given to an export that takes them (ferry's take them only when exported with
        --inputs ...,position_ids; by default the graph computes them from 0, as transformers'
        forward does without them). Returns transformers' CausalLMOutputWithPast when the
        program imported transformers (ExportOutput otherwise), holding torch tensors when the
        inputs were torch tensors and numpy arrays otherwise. Calls from several threads take
        turns (an OpenVINO infer request runs one at a time)."""
        with self._running:
            return self._call(inputs)

    def _call(self, inputs):
        import numpy as np

        session, metadata = self._runner()
        as_torch = any(type(v).__module__.startswith("torch") for v in inputs.values())
        wanted = [i.name for i in session.get_inputs()]
        # what the graph does not take is dropped unread (a ragged list among
        # a tokenizer's extra outputs raised numpy's error)
        arrays = {k: to_numpy(v, k) for k, v in inputs.items()
                  if v is not None and (k in wanted or k in _TOKEN_INPUTS or
                                        (k == "token_type_ids" and _rectangular(v)))}
        ints = _token_inputs(arrays, metadata)
        if "attention_mask" not in ints and "input_ids" in ints:
            ints["attention_mask"] = np.ones_like(ints["input_ids"])
        if "token_type_ids" in wanted and "token_type_ids" not in ints and "input_ids" in ints:
            ints["token_type_ids"] = np.zeros_like(ints["input_ids"])  # the forward's default
        # an encoder's positions index an absolute table by the family's own rule (BERT's
        # arange, RoBERTa's count from its padding index): never generate()'s, derived here
        encoder = is_encoder_output(metadata.get("output_class"))
        if "position_ids" not in ints and "attention_mask" in ints and not encoder:
            mask = ints["attention_mask"]
            ints["position_ids"] = np.where(mask == 1, np.cumsum(mask, -1) - 1, 1)
        missing = [name for name in wanted if name not in ints and name not in arrays]
        listed = [i.get("name") for i in metadata.get("inputs") or [] if isinstance(i, dict)]
        if missing and listed and sorted(listed) != sorted(wanted):
            # the file and export.json disagree: an edited export, not a caller's mistake (found
            # by review: `ferry validate` reported it as an export it cannot run here)
            raise FerryError(f"the program takes {', '.join(map(_escape, wanted))}, where "
                             f"export.json lists {', '.join(map(_escape, map(str, listed)))}: "
                             "one of them was edited since the export", status=3)
        if missing:
            raise FerryError(f"the export takes {', '.join(map(_escape, wanted))}; missing "
                             f"{', '.join(map(_escape, missing))}", status=1)
        if "token_type_ids" in arrays and "token_type_ids" not in wanted and \
                np.asarray(arrays["token_type_ids"]).any():
            warnings.warn(FerryWarning("the export takes no token_type_ids: those given are "
                                       "dropped, and every token is of type 0"),
                          stacklevel=caller_stacklevel())
        if inputs.get("position_ids") is not None and "position_ids" not in wanted and \
                (encoder or not _from_zero_shifted(ints["position_ids"],
                                                   ints.get("attention_mask"))):
            # such an export (transformers' own, ferry's by default) computes positions from 0
            # in every row
            warnings.warn(FerryWarning("the export takes no position_ids: those given are "
                                       "dropped, and its logits are those of positions from "
                                       "0 in every row"), stacklevel=caller_stacklevel())
        if inputs.get("attention_mask") is not None and "attention_mask" not in wanted and \
                not ints["attention_mask"].all():
            warnings.warn(FerryWarning("the export takes no attention_mask: the padding it "
                                       "marks is dropped, and every token is attended to"),
                          stacklevel=caller_stacklevel())
        feeds = {name: ints.get(name, arrays.get(name)) for name in wanted}
        _check_dims(feeds, metadata)
        names = [o.name for o in session.get_outputs()]
        values = session.run(names, feeds)
        if as_torch:
            import torch

            values = [torch.from_numpy(np.ascontiguousarray(v)) for v in values]
        return _model_output(dict(zip(names, values)), metadata)

    def close(self):
        with self._saving:  # not under a save running on another thread
            self._close()

    def _close(self):
        if self._h:
            _c().ferry_exported_free(self._h)
            self._h = None
        if self._model:
            _c().ferry_model_free(self._model)
            self._model = None
        self._session = self._runners = self._components = None
        if self._source is not None:  # the saved checkpoint of a loaded transformers model
            self._source.cleanup()
            self._source = None

    def __del__(self):
        if _lib._lib is not None:
            self.close()


def _wait_through_interrupts(finished):
    """Waits for `finished` whatever more comes (Ctrl-C, or what a signal handler raises: a
    SystemExit): the cancelled save stops within a band of weights, and until it has, its
    handle must not be freed nor saved again. The first exception is the one that goes on."""
    while True:
        try:
            finished.wait()
            return
        except BaseException:
            continue


# what a call reads even where the graph does not take it (to drop it with a warning, or to
# derive position_ids from); token_type_ids are read only by a graph that takes them
_TOKEN_INPUTS = ("input_ids", "attention_mask", "position_ids")


def _token_inputs(arrays, metadata):
    """input_ids, attention_mask and position_ids as int64, checked as the model would check
    them (a graph would broadcast a one-row mask over every row, or gather a negative id, and
    answer wrong numbers instead of failing): integers (a mask may be 0/1 floats), [batch,
    sequence] alike and not empty, ids within the vocabulary the logits have."""
    takes_types = any(isinstance(i, dict) and i.get("name") == "token_type_ids"
                      for i in metadata.get("inputs") or [])
    ints = {name: int_matrix(arrays[name], name, mask=name == "attention_mask")
            for name in (*_TOKEN_INPUTS, "token_type_ids")
            if name in arrays and (name != "token_type_ids" or takes_types)}
    ids = ints.get("input_ids")
    if ids is None:
        return ints
    for name, value in ints.items():
        if value.shape != ids.shape:
            raise FerryError(f"{name} is {list(value.shape)} but input_ids is "
                             f"{list(ids.shape)}", status=1)
    if ids.size == 0:  # onnxruntime failed in a Reshape, OpenVINO and torch returned nothing
        raise FerryError(f"input_ids of shape {list(ids.shape)}: nothing to run", status=1)
    declared = {i.get("name"): i for i in metadata.get("inputs") or [] if isinstance(i, dict)}
    for name, value in ints.items():
        check_value_range(value, name, declared.get(name, {}).get("value_range"))
    if "value_range" not in declared.get("input_ids", {}):  # a causal LM: its logits' vocabulary
        logits = next((o for o in metadata.get("outputs", []) if o.get("name") == "logits"), {})
        check_token_ids(ids, (logits.get("shape") or [None])[-1])
    return ints


def _rectangular(value):
    """Whether a dropped extra input can be read as an array (a tokenizer's ragged lists are
    dropped unread)."""
    try:
        import numpy as np

        return np.asarray(value).dtype != object
    except (ValueError, TypeError):
        return False


def _from_zero_shifted(positions, mask):
    """Whether `positions` are, over each row's real tokens (mask 1), 0, 1, ... plus one
    constant: generate()'s cumsum(mask) - 1 on a left-padded row is. Rotary embeddings see only
    the distance between two positions, so dropping such positions for the graph's own from 0
    changes no logit of a real token (dynamic NTK rope aside, which rescales by the largest
    position past max_position_embeddings)."""
    import numpy as np

    shift = positions - np.arange(positions.shape[1])
    real = np.ones(positions.shape, bool) if mask is None else mask != 0
    return all(not keep.any() or (row[keep] == row[keep][0]).all()
               for row, keep in zip(shift, real))


def _check_dims(feeds, metadata):
    """Refuses inputs the export's shapes do not take: a static axis of another size, or a
    symbolic one outside its dim's range (each runtime said so in its own raw
    words, and onnxruntime ran past a Dim's max without a word)."""
    symbols = metadata.get("symbols") or {}
    for spec in metadata.get("inputs") or []:
        if not isinstance(spec, dict) or not isinstance(spec.get("shape"), list):
            continue
        name, declared = spec.get("name"), spec["shape"]
        value = feeds.get(name)
        if value is None:
            continue
        got = list(getattr(value, "shape", ()))
        for axis, (dim, size) in enumerate(zip(declared, got)):
            why = axis_refusal(size, dim, symbols)
            if why:
                hint = " (a static shape: export with dynamic shapes to vary it)" \
                    if why.startswith("is fixed") else ""
                raise FerryError(f"{_escape(name)} is {got}, but its axis {axis} {why}{hint}",
                                 status=1)


def _model_output(outputs, metadata=None):
    """transformers' output class of the model (export.json's out_spec names one of
    transformers.modeling_outputs; a causal LM's is CausalLMOutputWithPast) holding `outputs`,
    when the program uses transformers (it is imported) and the names are its fields;
    ExportOutput, which reads the same (`.logits`, `["last_hidden_state"]`), otherwise:
    importing transformers (and torch) only to wrap the result would cost a process that runs
    exports alone ~2 s and ~200 MiB."""
    if "transformers" in sys.modules:
        import transformers.modeling_outputs as classes

        # ferry's output_class (absent: a causal LM's), or the class transformers' out_spec
        # names
        metadata = metadata or {}
        spec = metadata.get("output_class") or metadata.get("out_spec")
        named = re.match(r'(?:\[1, \{"type": ")?transformers\.modeling_outputs\.(\w+)', spec) \
            if isinstance(spec, str) else None
        # only a class of that module, and only a ModelOutput: export.json is not trusted
        cls = getattr(classes, named.group(1), None) if named else \
            None if metadata.get("output_class") else classes.CausalLMOutputWithPast
        if isinstance(cls, type) and issubclass(cls, classes.ModelOutput) and \
                set(outputs) <= set(getattr(cls, "__dataclass_fields__", ())):
            return cls(**outputs)
    return ExportOutput(outputs)


class ExportOutput(dict):
    """Outputs by name, also as attributes (`.logits`), like a transformers ModelOutput."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None
