"""init / shutdown / topology / capabilities / reduce ops, over the C++ core."""
import atexit
import threading

from ._loader import _core

HorovodInternalError = _core.HorovodInternalError


class HorovodValueError(ValueError, HorovodInternalError):
    """Arguments wrong on their face (splits, dims, roots, ...): a ValueError, as
    Horovod raises, and a HorovodInternalError, as the name fails on every rank."""


class HorovodTypeError(TypeError, HorovodInternalError):
    """A dtype (or argument type) the collective does not take: a TypeError and a
    HorovodInternalError."""


_core._set_error_classes(HorovodValueError, HorovodTypeError)

# Reduce ops: the core's ReduceOp codes, read from the binding.
_OP_CODES = _core.REDUCE_OP_CODES
Average = _OP_CODES["Average"]
Sum = _OP_CODES["Sum"]
Adasum = _OP_CODES["Adasum"]
Min = _OP_CODES["Min"]
Max = _OP_CODES["Max"]
Product = _OP_CODES["Product"]

_OP_NAMES = {code: name for name, code in _OP_CODES.items()}

_state = {"topology": None, "atexit": False, "settings": None}
_lock = threading.Lock()


def init(comm=None, process_sets=None):
    """Starts the engine. `comm`: None (all ranks), a list of world ranks, or an mpi4py
    communicator (duplicated). `process_sets`: a list of ProcessSet to create now, or
    "dynamic" to allow add_process_set/remove_process_set later."""
    from . import process_sets as _ps

    # Checked before anything starts, from the arguments alone, so every rank that was
    # given the same list raises the same ValueError and none waits for the others.
    _ps._check_static(process_sets)
    with _lock:
        if _core.is_initialized():
            return
        from . import _nccl, settings

        # The Python layer's settings, read at the same moment as the core's (before the
        # elastic world is looked up: it reads its settings from these).
        _state["settings"] = settings.read()
        fortran, ranks = -1, []
        if comm is None:
            from .elastic import world as _elastic_world

            comm = _elastic_world.default_comm()  # None unless in an elastic job
        if comm is None:
            pass
        elif isinstance(comm, (list, tuple)):
            ranks = [int(r) for r in comm]
        elif hasattr(comm, "py2f"):
            fortran = comm.py2f()
        else:
            raise TypeError(f"init(comm=...): expected None, a list of ranks or an mpi4py communicator, got {type(comm).__name__}")
        _nccl.configure(_state["settings"])  # before any GPU collective might load NCCL
        try:
            _core.init(fortran, ranks)
        except HorovodInternalError as e:
            _leave_if_joining(e)
            raise
        _state["topology"] = _core.topology()
        from . import _failure_notes

        _failure_notes.install(_state["topology"]["rank"])
        if not _state["atexit"]:
            atexit.register(shutdown)
            _state["atexit"] = True
    if _state["settings"] is None:  # the core was started without init() (tests)
        from . import settings

        _state["settings"] = settings.read()
    from .elastic import world as _elastic_world

    if _elastic_world.must_join_sets():
        # Spawned into a running elastic job: its sets come from the job's rank 0.
        _ps._on_init("dynamic" if process_sets == "dynamic" else None, _state["settings"])
        try:
            _elastic_world.join_sets(None if process_sets == "dynamic" else process_sets)
        except HorovodInternalError as e:
            _leave_if_joining(e)
            raise
        return
    _ps._on_init(process_sets, _state["settings"])


def _leave_if_joining(exc):
    """A process spawned to grow an elastic job whose join failed exits cleanly (see
    elastic.world.join_failed); elsewhere the error goes on to the caller."""
    from .elastic import world as _elastic_world

    if isinstance(exc, (HorovodValueError, HorovodTypeError)):
        return  # bad input or settings: the caller's to see
    if _elastic_world.join_failed(exc):
        raise SystemExit(0)


def shutdown():
    """Stops the background threads. Pending collectives fail; init() may be called again."""
    from . import process_sets as _ps

    _ps._on_shutdown()
    _core.shutdown()
    _state["topology"] = None


def is_initialized():
    return _core.is_initialized()


def _topology():
    t = _state["topology"]
    if t is None or not _core.is_initialized():
        raise HorovodValueError("horovodlite has not been initialized; call hvd.init() first")
    return t


def size():
    return _topology()["size"]


def rank():
    return _topology()["rank"]


def local_size():
    return _topology()["local_size"]


def local_rank():
    return _topology()["local_rank"]


def cross_size():
    return _topology()["cross_size"]


def cross_rank():
    return _topology()["cross_rank"]


def is_homogeneous():
    return _topology()["homogeneous"]


def mpi_built():
    return bool(_core.mpi_built())


def mpi_enabled():
    return mpi_built()


def mpi_threads_supported():
    _topology()
    return bool(_core.mpi_threads_supported())


def cuda_built():
    """True when the core was compiled with its CUDA kernels (GPU tensors supported)."""
    return bool(_core.CUDA_BUILT)


def nccl_built():
    """True when GPU collectives can use NCCL: a CUDA build and a loadable libnccl
    (the nvidia-nccl-cu13/-cu12 wheel), which is loaded at run time, not linked."""
    from . import _nccl

    return cuda_built() and _nccl.status()[0]


def gloo_built():
    return False


def gloo_enabled():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts recording a Chrome-trace timeline (rank 0 writes `file_path`; other ranks
    call this harmlessly). `mark_cycles` adds a CYCLE_START mark per negotiation round.
    Render it with `python -m horovodlite.timeline file_path -o timeline.png`."""
    _topology()
    import os

    _core.start_timeline(os.fspath(file_path), bool(mark_cycles))


def stop_timeline():
    """Stops recording and closes the timeline file (it is then complete JSON)."""
    _topology()
    _core.stop_timeline()
