"""Finds NCCL for the core, which loads it only when a GPU collective needs it. pip's
nvidia-nccl-cu13 / nvidia-nccl-cu12 wheels put libnccl.so.2 under site-packages
(nvidia/nccl/lib), where the dynamic linker does not look; HOROVODLITE_NCCL_LIBRARY
overrides the search."""
import importlib.metadata
from pathlib import Path

from ._loader import _core

_WHEELS = ("nvidia-nccl-cu13", "nvidia-nccl-cu12")
_state = {"configured": False}


def library_path(settings=None):
    """The NCCL_LIBRARY setting, else libnccl.so.2 from an installed wheel (CUDA 13
    first), or None."""
    from . import settings as _settings

    explicit = _settings.value("NCCL_LIBRARY", settings)
    if explicit:
        return explicit
    for name in _WHEELS:
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        for f in dist.files or []:
            if Path(f).name == "libnccl.so.2":
                p = Path(dist.locate_file(f))
                if p.exists():
                    return str(p.resolve())
    return None


def configure(settings=None):
    """Tells the core where NCCL is; harmless to call again."""
    if not _state["configured"]:
        path = library_path(settings)
        if path:
            _core.set_nccl_library(path)
        _state["configured"] = True


def status():
    """(loadable, "NCCL x.y.z at path" or the reason it is not)."""
    configure()
    return tuple(_core.nccl_status())
