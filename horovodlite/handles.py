"""Python side of in-flight collectives: keeps the arrays handed to the core alive
until the handle completes, and turns a finished handle into its result."""
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


def submit(keep, finish, **kwargs):
    h = _core.enqueue(**kwargs)
    with _lock:
        _pending[h] = (keep, finish)
    return h


def poll(handle):
    """True once the collective behind `handle` has finished (successfully or not)."""
    if hasattr(handle, "handles"):
        return all(_core.poll(h) for h in handle.handles)
    return _core.poll(handle)


def synchronize(handle):
    """Waits for the collective and returns its result; raises HorovodInternalError
    (a RuntimeError) if it failed on the ranks."""
    if hasattr(handle, "handles"):  # a group: wait for every member, then report
        results, error = [], None
        for h in handle.handles:
            try:
                results.append(synchronize(h))
            except Exception as e:  # noqa: BLE001 - re-raised below, after all members
                error = error or e
        if error is not None:
            raise error
        return results
    with _lock:
        if handle not in _pending:
            raise ValueError(f"horovodlite: unknown or already synchronized handle {handle}")
    try:
        _core.wait(handle)
        with _lock:
            keep, finish = _pending[handle]
        return finish(handle)
    finally:
        with _lock:
            _pending.pop(handle, None)
        _core.release(handle)
