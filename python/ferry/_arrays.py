"""The caller's arrays as numpy, checked alike wherever they come in (ExportedModel calls, the
runners, generate(), the exporters' example inputs): a torch tensor (any device, any grad
state), a numpy array or a nested list; anything else is one FerryError naming the input, not
a traceback from numpy or torch. numpy is imported on use: exporting needs none."""

import re

from ._lib import FerryError, _escape


def to_numpy(value, name):
    import numpy as np

    try:
        if type(value).__module__.startswith("torch"):
            return value.detach().cpu().numpy()
        return np.asarray(value)
    except Exception as e:  # a ragged list, a meta tensor, an object numpy cannot take
        text = str(e).strip().splitlines()
        raise FerryError(f"{name} cannot be read as an array: "
                         f"{_escape(text[0] if text else type(e).__name__)}", status=1) from None


def int_matrix(value, name, mask=False):
    """`value` as a C-contiguous int64 [batch, sequence] array. An attention mask holds only 0
    and 1, and may be float or bool, as transformers takes it."""
    import numpy as np

    array = to_numpy(value, name)
    if array.dtype.kind not in "iub" and not (mask and array.dtype.kind == "f"):
        raise FerryError(f"{name} must hold integers, not {_escape(array.dtype)}", status=1)
    if array.ndim != 2:
        raise FerryError(f"{name} must be [batch, sequence], not of shape "
                         f"{list(array.shape)}", status=1)
    if mask and array.dtype.kind != "b":
        # a graph multiplies or compares by the mask's values: a 2 or a -1 is no padding flag
        # transformers defines, and changes the outputs
        odd = np.argwhere((array != 0) & (array != 1))
        if len(odd):
            row, column = (int(i) for i in odd[0])
            value = array[row, column].item()
            raise FerryError(f"{name} holds {_escape(repr(value))} at row {row}, position "
                             f"{column}: a mask holds only 0 (padding) and 1 (a token)", status=1)
    return np.ascontiguousarray(array.astype(np.int64, copy=False))


def check_token_ids(ids, vocab):
    """Refuses ids a graph would gather anyway (a negative one wraps around) or fail on."""
    if ids.size and (ids.min() < 0 or (isinstance(vocab, int) and ids.max() >= vocab)):
        bad = int(ids.min() if ids.min() < 0 else ids.max())
        raise FerryError(f"input_ids holds {bad}, outside the vocabulary [0, {vocab})", status=1)


def check_value_range(values, name, value_range):
    """Refuses values outside the inclusive [low, high] export.json gives an input (ids and
    token types a graph gathers from a table: past it onnxruntime fails and OpenVINO reads
    zeros)."""
    if not (isinstance(value_range, list) and len(value_range) == 2 and
            all(isinstance(v, int) and not isinstance(v, bool) for v in value_range)):
        return
    low, high = max(value_range[0], 0), value_range[1]  # no index is negative, whatever it says
    if values.size and (values.min() < low or values.max() > high):
        bad = int(values.min() if values.min() < low else values.max())
        raise FerryError(f"{_escape(name)} holds {bad}, outside [{low}, {high}]", status=1)


def axis_refusal(size, dim, symbols):
    """Why an axis of `size` does not fit `dim` as export.json declares it (an int: fixed at
    export; a symbol: within its min and max in `symbols`, a max of 0 or none unbounded), as
    the words after "its axis N"; None where it fits."""
    if isinstance(dim, int) and not isinstance(dim, bool):
        return None if size == dim else f"is fixed at {dim}"
    # "4*merged_patches": a whole number of units of a symbol (g_sym_count_in_units)
    units = re.fullmatch(r"([1-9][0-9]{0,8})\*(.+)", dim) if isinstance(dim, str) else None
    scale, name = (int(units[1]), units[2]) if units else (1, dim)
    bounds = symbols.get(name) if isinstance(name, str) else None
    bounds = bounds if isinstance(bounds, dict) else {}
    low, high = (b * scale if isinstance(b, int) and not isinstance(b, bool) else None
                 for b in (bounds.get("min"), bounds.get("max")))
    if (low is not None and size < low) or (high is not None and 0 < high < size):
        return f"({_escape(dim)}) takes {low} to {high or 'any'}"
    if size % scale:
        return f"({_escape(dim)}) takes multiples of {scale}"
    return None


def widen_advice(metadata, otherwise):
    """What export option makes a component take more than its axes do now (`metadata`: its
    export.json entry's): ExecuTorch bounds every dynamic axis itself; other formats'
    advice is `otherwise`."""
    config = (metadata or {}).get("export_config")
    if isinstance(config, dict) and config.get("export_format") == "executorch":
        return ("export with larger bounds: ExecuTorch plans each dynamic axis for its largest "
                "extent (--max-seq-len, --max-batch-size, or a --dim range)")
    return otherwise

