"""Collectives on numpy arrays. Each call validates locally, hands pointers to the
core and returns a handle; `synchronize` turns the handle into the result."""
import numpy as np

from . import dtypes
from .basics import Adasum, Average, Sum, _topology
from .handles import auto_name, poll, submit, synchronize
from .process_sets import _set_id, global_process_set

# Core OpType codes.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = range(7)

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "poll", "synchronize",
]


def resolve_op(op, average, default=Average):
    """Horovod's rules: `average` is the deprecated bool form of `op`."""
    if op is not None and average is not None:
        raise ValueError("horovodlite: pass either op= or the deprecated average=, not both")
    if op is None:
        op = default if average is None else (Average if average else Sum)
    if op == Adasum:
        raise NotImplementedError("horovodlite: Adasum is not implemented")
    return int(op)


def _writable_contiguous(a, what):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"horovodlite: {what} needs a numpy array, got {type(a).__name__}")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"horovodlite: {what} needs a C-contiguous, writeable array "
                         "(use the out-of-place form for other arrays)")
    return a


def _allreduce_submit(src, dst, name, op, prescale, postscale, process_set, group="", group_size=0):
    code = dtypes.code_of(src.dtype, reducible=True, what="allreduce")
    return submit(
        (src, dst), lambda h: dst,
        op=ALLREDUCE, name=name, input=src.ctypes.data, output=dst.ctypes.data, dtype=code,
        shape=list(src.shape), reduce_op=op, prescale=float(prescale), postscale=float(postscale),
        process_set=_set_id(process_set), group=group, group_size=group_size)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    _topology()
    op = resolve_op(op, average)
    src = np.asarray(tensor, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
    return _allreduce_submit(src, np.empty_like(src), auto_name("allreduce", name), op,
                             prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    _topology()
    op = resolve_op(op, average)
    t = _writable_contiguous(tensor, "allreduce_ (in place)")
    return _allreduce_submit(t, t, auto_name("allreduce", name), op, prescale_factor,
                             postscale_factor, process_set)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks of the set; returns a new array (op defaults to Average)."""
    if compression is not None:
        tensor, ctx = compression.compress(tensor)
        out = synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                          postscale_factor, process_set))
        return compression.decompress(out, ctx)
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


class _GroupHandle:
    """Handle of a grouped op: synchronizes every member."""

    def __init__(self, handles):
        self.handles = handles


def _grouped(tensors, in_place, average, name, op, prescale_factor, postscale_factor, process_set):
    _topology()
    op = resolve_op(op, average)
    base = auto_name("grouped_allreduce", name)
    handles = []
    for i, t in enumerate(tensors):
        if in_place:
            src = dst = _writable_contiguous(t, "grouped_allreduce_ (in place)")
        else:
            src = np.asarray(t, order="C")
            dst = np.empty_like(src)
        handles.append(_allreduce_submit(src, dst, f"{base}.{i}", op, prescale_factor,
                                         postscale_factor, process_set, group=base,
                                         group_size=len(tensors)))
    return _GroupHandle(handles)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, False, average, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor, process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of arrays as one unit: negotiated together and fused."""
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))
