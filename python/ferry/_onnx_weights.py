"""The external initializers of an ONNX file (name, data file, offset, length, element type,
dims), read from its protobuf without the onnx package, so that two onnxruntime sessions over
one data file can be handed the same memory-mapped tensors (runners.py)."""

from pathlib import Path

from ._lib import FerryError, _escape

# ONNX field numbers (onnx.proto): ModelProto.graph, GraphProto.initializer, and TensorProto's
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_DIMS, _DATA_TYPE, _NAME, _EXTERNAL_DATA, _DATA_LOCATION = 1, 2, 8, 13, 14
_EXTERNAL = 1  # TensorProto.DataLocation.EXTERNAL


def _varint(buf, pos):
    value, shift = 0, 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(buf):
    """(field number, wire type, value) of one message: an int for varints and fixed widths,
    a memoryview for length-delimited fields."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = int.from_bytes(buf[pos:pos + 8], "little"), pos + 8
        elif wire == 5:
            value, pos = int.from_bytes(buf[pos:pos + 4], "little"), pos + 4
        elif wire == 2:
            size, pos = _varint(buf, pos)
            if pos + size > len(buf):
                raise ValueError("a field runs past the end of its message")
            value, pos = buf[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} (groups) is not used by ONNX")
        yield field, wire, value


def _tensor(buf):
    name, dtype, dims, location, external = None, 0, [], 0, {}
    for field, wire, value in _fields(buf):
        if field == _NAME and wire == 2:
            name = bytes(value).decode("utf-8")
        elif field == _DATA_TYPE and wire == 0:
            dtype = value
        elif field == _DIMS and wire == 0:
            dims.append(value)
        elif field == _DIMS and wire == 2:  # packed
            pos = 0
            while pos < len(value):
                dim, pos = _varint(value, pos)
                dims.append(dim)
        elif field == _DATA_LOCATION and wire == 0:
            location = value
        elif field == _EXTERNAL_DATA and wire == 2:
            entry = {k: bytes(v).decode("utf-8") for k, w, v in _fields(value) if w == 2}
            external[entry.get(1, "")] = entry.get(2, "")
    if location != _EXTERNAL:
        return None
    return {"name": name, "data_type": dtype, "dims": dims, "location": external.get("location"),
            "offset": int(external.get("offset", 0)), "length": int(external["length"])
            if "length" in external else None}


def external_initializers(model_path):
    """[{name, data_type, dims, location, offset, length}] of the graph's external initializers
    (a subgraph's, inside an If or Loop, are left to onnxruntime). Raises FerryError when the
    file is not a readable ONNX model or names a data file outside its directory."""
    path = Path(model_path)
    try:
        buf = memoryview(path.read_bytes())
        found = []
        for field, wire, graph in _fields(buf):
            if field != _MODEL_GRAPH or wire != 2:
                continue
            for gfield, gwire, value in _fields(graph):
                if gfield == _GRAPH_INITIALIZER and gwire == 2:
                    tensor = _tensor(value)
                    if tensor is not None:
                        found.append(tensor)
    except (OSError, ValueError, UnicodeDecodeError, KeyError) as e:
        raise FerryError(f"{_escape(path)}: cannot read its initializers: {_escape(e)}",
                         status=3) from None
    for tensor in found:
        location = tensor["location"]
        if not location or Path(location).is_absolute() or ".." in Path(location).parts:
            raise FerryError(f"{_escape(path)}: initializer {_escape(tensor['name'])} names the "
                             f"data file {_escape(location)!s}, which is not a plain relative "
                             "path inside the export", status=3)
    return found
