"""Telling the runtime that a process spawned to grow the job ends cleanly when it
cannot call MPI_Finalize.

The processes MPI_Comm_spawn starts form a job of their own, and that job is not
under ULFM: PRRTE takes a process of it that exits without finalizing for an
abnormal termination and fails the whole mpirun (exit code 1), although the
elastic job itself went on fine. Such a process never calls MPI_Finalize (that
disconnects from every parent, which crashed or hung: see world.start_growth), and
PMIx_Finalize alone is what
PRRTE looks at: called last, it makes the exit a normal one (seen: spawned process
leaving, its parents going on, mpirun's exit code 0 instead of 1)."""
import ctypes
import os


def _loaded_pmix():
    """The PMIx client library this process's MPI loaded (none: None)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libpmix" in line and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path, mode=getattr(os, "RTLD_NOLOAD", 0))
        except OSError:
            continue
    return None


def finalize_runtime():
    """PMIx_Finalize: this process is done with the runtime (MPI must not be used
    after it). Returns whether it was called."""
    lib = _loaded_pmix()
    fn = getattr(lib, "PMIx_Finalize", None) if lib is not None else None
    if fn is None:
        return False
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn(None, 0) == 0
