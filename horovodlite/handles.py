"""Python side of in-flight collectives: keeps the arrays handed to the core alive
until the handle completes, and turns a finished handle into its result."""
import operator
import threading

from ._loader import _core

_lock = threading.Lock()
_pending = {}  # handle -> (objects to keep alive, finish(handle) -> result)
_counters = {}


def auto_name(kind, name, process_set=None):
    """Unnamed collectives are named in call order, the same on every rank. The count
    is kept per process set: ranks that ran unnamed collectives on different sets
    still agree on the names of the next ones on the sets they share."""
    if name is not None:
        return str(name)
    set_id = getattr(process_set, "process_set_id", None) or 0
    with _lock:
        n = _counters.get((kind, set_id), 0)
        _counters[(kind, set_id)] = n + 1
    return f"{kind}.noname.{n}"


# _core.enqueue's parameters in order, and their defaults. Calling it positionally
# costs about 2 us less than by keyword (pybind11 matches keywords by name), which is
# a third of a small allreduce's submission.
_ENQUEUE_ARGS = ("op", "name", "input", "output", "dtype", "shape", "reduce_op", "prescale",
                 "postscale", "root", "device", "splits", "group", "group_size", "process_set",
                 "error", "stream")
_ENQUEUE_DEFAULTS = dict(reduce_op=_core.REDUCE_OP_CODES["Sum"], prescale=1.0, postscale=1.0,
                         root=-1, device=-1, splits=(), group="", group_size=0, process_set=0,
                         error="", stream=None)
_in_order = operator.itemgetter(*_ENQUEUE_ARGS)
_KNOWN = frozenset(_ENQUEUE_ARGS)


def submit(keep, finish, **kwargs):
    if not _KNOWN.issuperset(kwargs):
        raise TypeError(f"horovodlite: unknown enqueue arguments {sorted(kwargs.keys() - _KNOWN)}")
    h = _core.enqueue(*_in_order({**_ENQUEUE_DEFAULTS, **kwargs}))
    track(h, keep, finish)
    return h


def submit_allreduce(keep, finish, name, input, output, dtype, reduce_op, prescale, postscale,
                     process_set, group="", group_size=0, shape=None, device=-1, stream=None):
    """The one submission of an allreduce, for every frontend: the core's dedicated
    entry point (a gradient's allreduce is submitted on every step, so it takes only
    its own arguments). `input`/`output` are numpy arrays (shape None: read from them)
    or addresses with `shape`; device/stream as for submit(). Returns the handle."""
    h = _core.enqueue_allreduce(name, input, output, dtype, reduce_op, prescale, postscale,
                                group, group_size, process_set, shape, device, stream)
    track(h, keep, finish)
    return h


def track(h, keep, finish=None):
    """Keeps `keep` alive until `h` is synchronized, which returns finish(h), or
    without `finish` the last object kept (the output array)."""
    _pending[h] = (keep, finish)  # one dict operation: atomic, no lock needed


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    if hasattr(handle, "handles"):
        return all(_core.poll(h) for h in handle.handles)
    return _core.poll(handle)


def synchronize(handle):
    """Waits for the collective and returns its result; raises HorovodInternalError
    (a RuntimeError) if it failed on the ranks."""
    entry = _pending.pop(handle, None)
    if entry is None:
        if hasattr(handle, "handles"):  # a group: every member
            return _synchronize_all(handle.handles)
        raise ValueError(f"horovodlite: unknown or already synchronized handle {handle}")
    keep, finish = entry
    if finish is None:  # the result is the output array, the handle is not needed
        _core.wait_release(handle)
        return keep[-1]
    try:
        _core.wait(handle)
        return finish(handle)
    finally:
        _core.release(handle)


def _synchronize_all(handles):
    results, error = [], None
    for h in handles:
        try:
            results.append(synchronize(h))
        except Exception as e:  # noqa: BLE001 - re-raised below, after all members
            error = error or e
    if error is not None:
        raise error
    return results
