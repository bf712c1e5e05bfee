"""Python side of in-flight collectives: keeps the arrays handed to the core alive
until the handle completes, and turns a finished handle into its result."""
import functools
import inspect
import operator
import threading

from ._loader import _core

_pending = {}  # handle -> (objects to keep alive, finish(handle) -> result)


def auto_name(kind, name, process_set=None):
    """Unnamed collectives are named in call order, the same on every rank. The count
    is kept per process set: ranks that ran unnamed collectives on different sets
    still agree on the names of the next ones on the sets they share. The counts live
    in the core (under the GIL), which names small plain allreduces itself
    (allreduce_small)."""
    if name is not None:
        return named(str(name))
    set_id = getattr(process_set, "process_set_id", None) or 0
    return named(_core.next_auto_name(kind, set_id))


def reset_auto_names():
    """Every count from 0 again (a new world after a failure: elastic/world.py)."""
    _core.reset_auto_counts()


# ---- a local error fails the name on every rank ----
#
# Whatever a rank refuses before its request is enqueued (a dtype the core lacks, bad
# splits, a wrong root, an array that cannot be written in place, ...) is raised on
# that rank at once *and* enqueued as the request's error, so the coordinator fails
# the name on every rank with the same message instead of the others waiting for it.
# Public collectives are wrapped in @collective: the names a call takes (auto_name,
# named, expect_group) are noted per thread, and an exception before they were all
# enqueued is announced for them. A call that fails before it named itself takes its
# name on the way out, so unnamed collectives' counters advance the same on every
# rank whatever fails.

class _Call(threading.local):
    """The collective being submitted on this thread (class attributes: the defaults
    every thread starts with). Kept cheap: a submission on the hot path pays for two
    attribute stores and a list."""
    active = False
    waits = False  # the caller synchronizes at once (blocking())
    names = None
    group = ""
    group_size = 0


_local = _Call()
_orphans = []  # (handle, objects to keep alive): requests no caller will synchronize


def named(name):
    """Notes `name` as taken by the collective being submitted on this thread."""
    if _local.active:
        _local.names.append(name)
    return name


def expect_group(base, names, core_group=True):
    """The call submits `names` under the base name `base` (as one core group unless
    `core_group` is False): all of them must reach the peers, failed or not, or the
    peers wait for the missing ones."""
    call = _local
    if call.active:
        if core_group:
            call.group, call.group_size = base, len(names)
        call.names = [n for n in call.names if n != base] + list(names)


def _error_classes():
    from .basics import HorovodInternalError, HorovodTypeError, HorovodValueError
    return HorovodInternalError, HorovodTypeError, HorovodValueError


def as_horovod_error(exc):
    """`exc` as the error to raise: ValueError / TypeError become our subclasses of both
    them and HorovodInternalError, with the same message; anything else is unchanged."""
    internal, type_error, value_error = _error_classes()
    if isinstance(exc, internal):
        return exc
    cls = type_error if isinstance(exc, TypeError) else value_error if isinstance(exc, ValueError) else None
    if cls is None:
        return exc
    new = cls(*exc.args)
    new._hvdl_local = True  # raised here, not by the peers: outer layers may announce
    new.__cause__ = exc.__cause__
    new.__suppress_context__ = True
    new._hvdl_announced = getattr(exc, "_hvdl_announced", ())
    return new.with_traceback(exc.__traceback__)


def _wire_text(exc):
    kind = "TypeError" if isinstance(exc, TypeError) else "ValueError" if isinstance(exc, ValueError) \
        else type(exc).__name__
    return f"{kind}: {exc}"


def announce_failure(exc, names, op, process_set=0, group="", group_size=0):
    """Sends `exc` as the error of each of `names` not announced yet (the other ranks
    then raise it for those names too) and returns the exception to raise here."""
    internal = _error_classes()[0]
    if isinstance(exc, internal) and not getattr(exc, "_hvdl_local", False):
        return exc  # from the core or the peers: the name already failed everywhere
    if isinstance(exc, ValueError) and "is already in flight on this rank" in str(exc):
        # The core refused a second request under a name in flight: the first one is
        # what the peers match, and it may even be done by now (announcing would then
        # leave a stray request under that name).
        return as_horovod_error(exc)
    done = set(getattr(exc, "_hvdl_announced", ()))
    set_id = process_set if isinstance(process_set, int) else (
        getattr(process_set, "process_set_id", None) or 0)
    text = _wire_text(exc)
    for n in names:
        if n in done:
            continue
        done.add(n)
        try:
            h = _core.enqueue(op, n, 0, 0, 0, [], 1, 1.0, 1.0, -1, -1, [], group, group_size,
                              set_id, text, None)
        except Exception:  # noqa: BLE001 - in flight already (enqueued), or no engine
            continue
        _orphans.append((h, ()))
    out = as_horovod_error(exc)
    try:
        out._hvdl_announced = tuple(done)
        exc._hvdl_announced = tuple(done)
    except AttributeError:
        pass
    return out


def _reap_orphans():
    for item in list(_orphans):
        if _core.poll(item[0]):
            _core.release(item[0])
            _orphans.remove(item)


def collective(op, kind, namer=None, grouped=False, core_group=True, active=None):
    """Decorator for a public collective of kind `kind` (core op code `op`): see above.
    `namer(kind, name, process_set)` names a call that failed before naming itself
    (default auto_name); `grouped`: its `tensors` are members `<base>.<i>` (of one
    core group unless `core_group` is False); `active()` False: do nothing this call
    (TensorFlow while tracing a graph, where nothing is enqueued yet)."""
    def deco(fn):
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            call = _local
            if call.active or (active is not None and not active()):
                return fn(*args, **kwargs)  # inside another collective's call: it answers
            call.active, call.names, call.group, call.group_size = True, [], "", 0
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                names = call.names
                bound = sig.bind_partial(*args, **kwargs)
                ps = bound.arguments.get("process_set", sig.parameters["process_set"].default
                                         if "process_set" in sig.parameters else None)
                if not names:
                    try:
                        base = (namer or auto_name)(kind, bound.arguments.get("name"), ps)
                        names = [base]
                        if grouped:
                            n = len(bound.arguments.get("tensors", ()))
                            names = [f"{base}.{i}" for i in range(n)]
                            if core_group:
                                call.group, call.group_size = base, n
                    except Exception:  # noqa: BLE001 - not initialised: nothing to tell
                        names = []
                err = announce_failure(e, names, op, ps, call.group, call.group_size)
                raise err from None if err is not e else e.__cause__
            finally:
                call.active = False
        return wrapper
    return deco


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
    h = _core.enqueue(*_in_order({**_ENQUEUE_DEFAULTS, **kwargs}), _local.waits)
    track(h, keep, finish)
    return h


def submit_allreduce(keep, finish, name, input, output, dtype, reduce_op, prescale, postscale,
                     process_set, group="", group_size=0, shape=None, device=-1, stream=None,
                     held=False):
    """The one submission of an allreduce, for every frontend: the core's dedicated
    entry point (a gradient's allreduce is submitted on every step, so it takes only
    its own arguments). `input`/`output` are numpy arrays (shape None: read from them)
    or addresses with `shape`; device/stream as for submit(). `held`: the engine holds
    it until a caller blocks (_overlap.py). Returns the handle."""
    h = _core.enqueue_allreduce(name, input, output, dtype, reduce_op, prescale, postscale,
                                group, group_size, process_set, shape, device, stream, _local.waits,
                                held)
    track(h, keep, finish)
    return h


def allreduce_now(src, dst, name, dtype, reduce_op, prescale, postscale, process_set):
    """submit_allreduce's blocking sibling, for host arrays: submits as a caller that
    waits, and waits, in one call into the core (no handle to track). A signal's
    exception (Ctrl-C) while waiting leaves the collective to the peers, which still
    run it: its arrays then stay alive until it is done, as an orphan's."""
    if _orphans:
        _reap_orphans()
    try:
        _core.allreduce_now(name, src, dst, dtype, reduce_op, prescale, postscale, process_set)
    except BaseException:
        _orphan_interrupted((src, dst))
        raise


def _orphan_interrupted(keep):
    """After a blocking call into the core raised: where a signal's exception left its
    collective to the peers, `keep` (its arrays, and the output the core made, if it
    made one) stays alive until that is done."""
    h, output = _core.take_interrupted()
    if h >= 0:
        _orphans.append((h, (keep, output)))


def allreduce_small(tensor, name, op, prescale, postscale, process_set, in_place):
    """A blocking allreduce of a plain array, whole in the core (_core.allreduce_small),
    the user's arguments as they came: its output, or None where the core finds the call
    not plain (op not None or one of Average, Sum, Min, Max, Product; scale factors not
    float or int; the array, the name or the set not plain): nothing done, no name
    taken. Inside another collective's call it is None too: that call notes the names it
    takes (named())."""
    if _local.active:
        return None
    if _orphans:
        _reap_orphans()
    try:
        return _core.allreduce_small(tensor, name, op, prescale, postscale, process_set,
                                     in_place)
    except BaseException:
        _orphan_interrupted(tensor)
        raise


def blocking(submit_fn, *args, **kwargs):
    """A blocking collective: submit_fn(*args, **kwargs), then synchronize its handle.
    The core is told that the caller waits at once: where the caller can run the round
    itself (the core's Worker::help) the submission does not wake the engine's thread,
    and elsewhere the wait wakes it as before. (Nested: the outer call's flag stays.)"""
    call = _local
    outer, call.waits = call.waits, True
    try:
        h = submit_fn(*args, **kwargs)
    finally:
        call.waits = outer
    return synchronize(h)


def track(h, keep, finish=None):
    """Keeps `keep` alive until `h` is synchronized, which returns finish(h), or
    without `finish` the last object kept (the output array)."""
    _pending[h] = (keep, finish)  # one dict operation: atomic, no lock needed
    if _orphans:
        _reap_orphans()


def orphan(handles):
    """A failed call's handles that were enqueued: the peers run them, nobody will
    synchronize them here; keep their arrays until they are done, then release them."""
    for h in handles:
        entry = _pending.pop(h, None)
        _orphans.append((h, entry))


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
    # A signal handler's exception (KeyboardInterrupt, an alarm) while waiting leaves
    # the collective pending: the peers still run it, so its arrays stay alive and a
    # later synchronize(handle) completes it (hvd.shutdown() fails it).
    if finish is None:  # the result is the output array, the handle is not needed
        try:
            _core.wait_release(handle)
        except BaseException as e:
            if not isinstance(e, _error_classes()[0]):
                _pending[handle] = entry
            raise
        return keep[-1]
    try:
        _core.wait(handle)
    except BaseException as e:
        if not isinstance(e, _error_classes()[0]):
            _pending[handle] = entry
            raise
        _core.release(handle)
        raise
    try:
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
