"""Package versions: the ones this Python has, and the one warning a load gives when the runtime
an export was validated with (export.json's validated_with.runtime, which `ferry validate`
records) differs from the one installed — as transformers' exporters warn on drift from the
versions they were tested with."""

import functools
import logging
from importlib import metadata

from ._lib import _escape

logger = logging.getLogger("ferry")

# The package that runs each format's files, and those the eager reference ran with.
RUNTIME_PACKAGE = {"onnx": "onnxruntime", "openvino": "openvino", "pt2": "torch"}
REFERENCE_PACKAGES = ("transformers", "torch")


@functools.lru_cache(maxsize=None)
def installed_version(package):
    """The installed version of `package` (an importable name: onnxruntime also when it comes
    from onnxruntime-gpu), without a local build suffix (2.13.0+cpu -> 2.13.0); None if absent."""
    names = [package]
    try:
        metadata.version(package)
    except metadata.PackageNotFoundError:
        names = metadata.packages_distributions().get(package, [])
    for name in names:
        try:
            return metadata.version(name).split("+", 1)[0]
        except metadata.PackageNotFoundError:
            continue
    return None


def drift(manifest):
    """[(package, recorded, installed)] when the package that runs this export's format was
    recorded at another version than the one installed here (another runtime's record says
    nothing about this export; an absent package is left to running the export to say)."""
    recorded = (manifest.get("validated_with") or {}).get("runtime") or {}
    package = RUNTIME_PACKAGE.get(manifest.get("format", manifest.get("export_format")))
    version = recorded.get(package) if package else None
    installed = installed_version(package) if version is not None else None
    if installed is not None and installed != version:
        return [(package, _escape(version), installed)]  # the version is the file's text
    return []


def warn_on_drift(manifest, where):
    """Logs one warning (logger "ferry") naming every package whose installed version differs
    from the one the export at `where` (already escaped) was validated with."""
    found = drift(manifest)
    if found:
        listed = ", ".join(f"{package} {installed} is installed, it was validated with {recorded}"
                           for package, recorded, installed in found)
        logger.warning("%s: %s; its outputs may differ from what was checked (`ferry validate "
                       "%s` checks it with these)", where, listed, where)
