"""The external initializers of an ONNX file (name, data file, offset, length, element type,
dims), read with the onnx package without loading their data, so that two onnxruntime sessions
over one data file can be handed the same memory-mapped tensors (runners.py)."""

from pathlib import Path

from ._lib import FerryError, _escape


def external_initializers(model_path):
    """[{name, data_type, dims, location, offset, length}] of the graph's external initializers
    (a subgraph's, inside an If or Loop, are left to onnxruntime). Raises FerryError when the
    file is not a readable ONNX model or names a data file outside its directory."""
    import onnx

    path = Path(model_path)
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # onnx raises DecodeError, OSError... for an unreadable file
        raise FerryError(f"{_escape(path)}: cannot read its initializers: {_escape(e)}",
                         status=3) from None
    found = []
    for tensor in model.graph.initializer:
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        external = {entry.key: entry.value for entry in tensor.external_data}
        location = external.get("location")
        if not location or Path(location).is_absolute() or ".." in Path(location).parts:
            raise FerryError(f"{_escape(path)}: initializer {_escape(tensor.name)} names the "
                             f"data file {_escape(location)!s}, which is not a plain relative "
                             "path inside the export", status=3)
        try:
            offset = int(external.get("offset", 0))
            length = int(external["length"]) if "length" in external else None
        except ValueError:
            raise FerryError(f"{_escape(path)}: initializer {_escape(tensor.name)} has a "
                             "non-numeric offset or length", status=3) from None
        found.append({"name": tensor.name, "data_type": tensor.data_type,
                      "dims": list(tensor.dims), "location": location, "offset": offset,
                      "length": length})
    return found
