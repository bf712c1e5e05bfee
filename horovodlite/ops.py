"""Collectives on numpy arrays. Each call validates locally, hands pointers to the
core and returns a handle; `synchronize` turns the handle into the result."""
import warnings

import numpy as np

from ._loader import _core
from . import dtypes
from .basics import Adasum, Average, Sum, _topology
from .compression import Compression
from .handles import (allreduce_now, allreduce_small, auto_name, blocking, collective, expect_group,
                      poll, submit, submit_allreduce, synchronize, track)
from .process_sets import _set_id, global_process_set
from .shared_arrays import shared_empty

# Core OpType codes, read from the binding.
ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER, BARRIER, JOIN = (
    _core.OP_TYPE_CODES[k] for k in ("allreduce", "allgather", "broadcast", "alltoall",
                                     "reducescatter", "barrier", "join"))

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async", "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "grouped_broadcast_", "grouped_broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter", "grouped_reducescatter_async",
    "barrier", "join",
    "poll", "synchronize",
]


def resolve_op(op, average, default=Average):
    """Horovod's rules: `average` is the deprecated bool form of `op`."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of "
                         "them. horovodlite: pass either op= or the deprecated average=")
    if op is None:
        if average is not None:  # Horovod's warning, word for word
            warnings.warn("Parameter `average` has been replaced with `op` and will be "
                          "removed in v0.21.0", DeprecationWarning, stacklevel=3)
        op = default if average is None else (Average if average else Sum)
    if op == Adasum:
        raise NotImplementedError("horovodlite: Adasum is not implemented")
    return int(op)


def _no_compression(compression):
    """None (ours) and Compression.none (Horovod's default) both skip the casts."""
    return compression is None or compression is Compression.none


def _writable_contiguous(a, what):
    if not isinstance(a, np.ndarray):
        raise TypeError(f"horovodlite: {what} needs a numpy array, got {type(a).__name__}")
    if not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"horovodlite: {what} needs a C-contiguous, writeable array "
                         "(use the out-of-place form for other arrays)")
    return a


def _allreduce_submit(src, dst, name, op, prescale, postscale, process_set, group="", group_size=0):
    # The hot path of every training step: the arrays go to the core as they are (it
    # reads their addresses and shapes), through an entry point made for allreduce.
    code = dtypes.code_of(src.dtype, reducible=True, what=f"allreduce '{name}'")
    return submit_allreduce((src, dst), None, name, src, dst, code, op, float(prescale),
                            float(postscale), _set_id(process_set), group, group_size)


_POOLED_FROM = _core.POOLED_FROM  # the core's plain entry makes its outputs alike


def _pooled_empty(nbytes, dtype, shape):
    """Large outputs come from the core's output pool (64-byte aligned): a fresh 64 MiB
    array costs 16,000 page faults, more than the allreduce itself; a training loop
    that drops last step's result gets those pages back warm."""
    return _core.empty(nbytes).view(dtype).reshape(shape)


_SHARED_FROM = _core.SHARED_FROM  # the core's smallest zero-copy allreduce


def _empty_like(a):
    # An input from hvd.shared_empty gets a shared output, keeping the allreduce zero-copy.
    if a.nbytes >= _SHARED_FROM and _core.in_shared_arena(a.ctypes.data, a.nbytes):
        return shared_empty(a.shape, a.dtype)
    if a.nbytes < _POOLED_FROM:
        return np.empty_like(a)
    return _pooled_empty(a.nbytes, a.dtype, a.shape)


def _aligned_empty(shape, dtype):
    """A C-contiguous array starting on a 64-byte boundary, which jax and TensorFlow
    adopt through DLPack without a copy."""
    dtype = np.dtype(dtype)
    shape = tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes >= _POOLED_FROM:
        return _pooled_empty(nbytes, dtype, shape)
    raw = np.empty(nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + nbytes].view(dtype).reshape(shape)


def predivide_scales(op, factor):
    """(prescale, postscale) for a gradient_predivide_factor f: divide by f before the
    sum and multiply by f after it (Average still divides by the set size), an average
    that overflows less in fp16. Only with op=Average."""
    factor = float(factor)
    if factor == 1.0:
        return 1.0, 1.0
    if op != Average:
        raise ValueError("horovodlite: gradient_predivide_factor needs op=Average")
    return 1.0 / factor, factor


def _allreduce_arrays(tensor, average, name, op, process_set, in_place):
    """(input, output, name, op code) of one allreduce call: what the async and the
    blocking calls share."""
    _topology()
    name = auto_name("allreduce", name, process_set)
    op = resolve_op(op, average)
    if in_place:
        t = _writable_contiguous(tensor, f"allreduce_ '{name}' (in place)")
        return t, t, name, op
    src = np.asarray(tensor, order="C")  # keeps 0-d (ascontiguousarray makes it 1-d)
    return src, _empty_like(src), name, op


@collective(ALLREDUCE, "allreduce")
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    src, dst, name, op = _allreduce_arrays(tensor, average, name, op, process_set, False)
    return _allreduce_submit(src, dst, name, op, prescale_factor, postscale_factor, process_set)


@collective(ALLREDUCE, "allreduce")
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    t, _, name, op = _allreduce_arrays(tensor, average, name, op, process_set, True)
    return _allreduce_submit(t, t, name, op, prescale_factor, postscale_factor, process_set)


@collective(ALLREDUCE, "allreduce")
def _allreduce_blocking(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set, in_place=False):
    # allreduce / allreduce_ without a handle: one call into the core submits and waits.
    src, dst, name, op = _allreduce_arrays(tensor, average, name, op, process_set, in_place)
    code = dtypes.code_of(src.dtype, reducible=True, what=f"allreduce '{name}'")
    allreduce_now(src, dst, name, code, op, float(prescale_factor), float(postscale_factor),
                  _set_id(process_set))
    return dst


# The blocking numpy call in its common form (op= or no op, no compression, scale
# factors as numbers, a registered set) goes whole to the core through one Python frame
# (handles.allreduce_small), which checks the arguments and the array: nothing of it can
# fail before the request is enqueued, so it needs neither @collective's error
# announcement nor the general argument handling. Each Python frame on the way was
# ~0.25 us of a ~6.5 us 4 KiB call. Anything else, or what the core declines, takes the
# general path, errors included.
_NO_COMPRESSION = Compression.none


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks of the set; returns a new array (op defaults to Average)."""
    if average is None and (compression is _NO_COMPRESSION or compression is None):
        out = allreduce_small(tensor, name, op, prescale_factor, postscale_factor, process_set,
                              False)
        if out is not None:
            return out
    if not _no_compression(compression):
        tensor, ctx = compression.compress(tensor)
        out = _allreduce_blocking(tensor, average, name, op, prescale_factor, postscale_factor,
                                  process_set)
        return compression.decompress(out, ctx)
    return _allreduce_blocking(tensor, average, name, op, prescale_factor, postscale_factor,
                               process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    if average is None:
        out = allreduce_small(tensor, name, op, prescale_factor, postscale_factor, process_set,
                              True)
        if out is not None:
            return out
    return _allreduce_blocking(tensor, average, name, op, prescale_factor, postscale_factor,
                               process_set, True)


class _GroupHandle:
    """Handle of a grouped op: synchronizes every member."""

    def __init__(self, handles):
        self.handles = handles


def _grouped(tensors, in_place, average, name, op, prescale_factor, postscale_factor, process_set):
    _topology()
    base = auto_name("grouped_allreduce", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    op = resolve_op(op, average)
    handles = []
    for i, t in enumerate(tensors):
        if in_place:
            src = dst = _writable_contiguous(t, f"grouped_allreduce_ '{base}.{i}' (in place)")
        else:
            src = np.asarray(t, order="C")
            dst = _empty_like(src)
        handles.append(_allreduce_submit(src, dst, f"{base}.{i}", op, prescale_factor,
                                         postscale_factor, process_set, group=base,
                                         group_size=len(tensors)))
    return _GroupHandle(handles)


@collective(ALLREDUCE, "grouped_allreduce")
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, False, average, name, op, prescale_factor, postscale_factor, process_set)


@collective(ALLREDUCE, "grouped_allreduce")
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor, process_set)


def _compressed(compression, tensors, run):
    """run(tensors) on the compressed tensors, its results decompressed (no compression:
    run(tensors) itself). For the grouped collectives of every array API."""
    if _no_compression(compression):
        return run(tensors)
    pairs = [compression.compress(t) for t in tensors]
    outs = run([p[0] for p in pairs])
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of arrays as one unit: negotiated together and fused."""
    return _compressed(compression, tensors, lambda ts: blocking(grouped_allreduce_async,
        ts, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return blocking(grouped_allreduce_async_, tensors, average, name, op, prescale_factor,
                                              postscale_factor, process_set)


# ---- collectives whose output the engine allocates (sizes known after negotiation) ----

def _contiguous(t):
    """C-contiguous view or copy that keeps 0-d arrays 0-d (np.ascontiguousarray
    would make them 1-d)."""
    a = np.asarray(t)
    return a if a.flags.c_contiguous else np.ascontiguousarray(a)


def _engine_output(handle, dtype):
    """The engine-allocated result of `handle` viewed as an array (no copy; the array
    keeps the memory alive)."""
    return _core.output(handle).view(dtype).reshape(_core.output_shape(handle))


def _submit_engine_output(kind, src, name, process_set, group="", group_size=0, reducible=False,
                          finish=None, **kwargs):
    code = dtypes.code_of(src.dtype, reducible=reducible, what=f"{kind} '{name}'")
    dt = src.dtype
    finish = finish or (lambda h: _engine_output(h, dt))
    return submit((src,), finish, name=name, input=src.ctypes.data, output=0, dtype=code,
                  shape=list(src.shape), process_set=_set_id(process_set), group=group,
                  group_size=group_size, **kwargs)


def _allgather_submit(tensor, name, process_set, group="", group_size=0):
    src = _contiguous(tensor)
    if src.ndim == 0:  # a scalar gathers as one row
        src = src.reshape(1)
    return _submit_engine_output("allgather", src, name, process_set, group, group_size,
                                 op=ALLGATHER)


@collective(ALLGATHER, "allgather")
def allgather_async(tensor, name=None, process_set=global_process_set):
    _topology()
    return _allgather_submit(tensor, auto_name("allgather", name, process_set), process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates `tensor` from every rank of the set along dim 0 (which may differ
    per rank; the other dims must match). Returns a new array."""
    return blocking(allgather_async, tensor, name, process_set)


@collective(ALLGATHER, "grouped_allgather")
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    _topology()
    base = auto_name("grouped_allgather", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    return _GroupHandle([_allgather_submit(t, f"{base}.{i}", process_set, base, len(tensors))
                         for i, t in enumerate(tensors)])


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """Allgathers a list of arrays as one unit (negotiated together, fused)."""
    return blocking(grouped_allgather_async, tensors, name, process_set)


def _root_in_set(root_rank, process_set):
    """Horovod's root_rank is a global rank; the engine counts ranks within the set.
    Returns (root within the set, error text for a root outside it)."""
    root = int(root_rank)
    if process_set is None or process_set.process_set_id == 0:
        return root, ""
    if root not in process_set.ranks:
        return -1, (f"ValueError: root_rank {root} is not a member of the process set "
                    f"(ranks {process_set.ranks})")
    return process_set.ranks.index(root), ""


@collective(BROADCAST, "broadcast")
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    _topology()
    name = auto_name("broadcast", name, process_set)
    src = _contiguous(tensor)
    root, err = _root_in_set(root_rank, process_set)
    return _submit_engine_output("broadcast", src, name, process_set, op=BROADCAST, root=root,
                                 error=err)


@collective(BROADCAST, "broadcast")
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    _topology()
    name = auto_name("broadcast", name, process_set)
    t = _writable_contiguous(tensor, f"broadcast_ '{name}' (in place)")
    code = dtypes.code_of(t.dtype, what=f"broadcast '{name}'")
    root, err = _root_in_set(root_rank, process_set)
    return submit((t,), None, op=BROADCAST, name=name,
                  input=t.ctypes.data, output=t.ctypes.data, dtype=code, shape=list(t.shape),
                  root=root, process_set=_set_id(process_set), error=err)


@collective(BROADCAST, "grouped_broadcast")
def grouped_broadcast_async_(tensors, root_rank, name=None, process_set=global_process_set):
    _topology()
    base = auto_name("grouped_broadcast", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    root, err = _root_in_set(root_rank, process_set)
    handles = []
    for i, t in enumerate(tensors):
        t = _writable_contiguous(t, f"grouped_broadcast_ '{base}.{i}' (in place)")
        handles.append(submit((t,), None, op=BROADCAST, name=f"{base}.{i}",
                              input=t.ctypes.data, output=t.ctypes.data,
                              dtype=dtypes.code_of(t.dtype, what=f"broadcast '{base}.{i}'"), shape=list(t.shape),
                              root=root, process_set=_set_id(process_set), error=err, group=base,
                              group_size=len(tensors)))
    return _GroupHandle(handles)


def grouped_broadcast_(tensors, root_rank, name=None, process_set=global_process_set):
    """Broadcasts a list of arrays in place as one unit: small ones share one transfer
    (not in Horovod; what broadcast_parameters wants for a whole model)."""
    return blocking(grouped_broadcast_async_, tensors, root_rank, name, process_set)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """Returns a new array holding `root_rank`'s `tensor` (root_rank is a global rank)."""
    return blocking(broadcast_async, tensor, root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with `root_rank`'s (in place); returns it."""
    return blocking(broadcast_async_, tensor, root_rank, name, process_set)


def _splits_list(splits):
    """(splits as a list of ints, error text). Problems are not raised here but sent
    with the request, so every rank of the collective fails with the same message
    (and the same class: the text starts with it, see horovodlite.handles)."""
    if splits is None:
        return [], ""
    s = np.asarray(splits)
    if s.dtype.kind not in "iu":
        return [], f"ValueError: splits must be integers, got dtype {s.dtype}"
    if s.ndim != 1:
        return [], f"ValueError: splits must be 1-D (one entry per rank), got shape {s.shape}"
    if s.size == 0:
        return [], "ValueError: splits is empty, expected one entry per rank"
    return [int(x) for x in s], ""


@collective(ALLTOALL, "alltoall")
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    _topology()
    name = auto_name("alltoall", name, process_set)
    src = _contiguous(tensor)
    split_list, err = _splits_list(splits)
    dt = src.dtype

    def finish(h):
        return _engine_output(h, dt), np.asarray(_core.aux(h), dtype=np.int32)

    return _submit_engine_output("alltoall", src, name, process_set, finish=finish, op=ALLTOALL,
                                 splits=split_list, error=err)


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends rows [sum(splits[:j]), +splits[j]) of `tensor` to rank j of the set (equal
    parts when splits is None) and returns (received rows concatenated in rank order,
    received_splits)."""
    return blocking(alltoall_async, tensor, splits, name, process_set)


def reducescatter_rows(dim0, size, rank):
    """Rows rank `rank` keeps of a reducescatter: the first dim0 % size ranks get one
    extra (the core's partition rule)."""
    return dim0 // size + (1 if rank < dim0 % size else 0)


def _reducescatter_submit(tensor, name, op, prescale, postscale, process_set, group="",
                          group_size=0):
    src = _contiguous(tensor)
    return _submit_engine_output("reducescatter", src, name, process_set, group, group_size,
                                 reducible=True, op=REDUCESCATTER, reduce_op=op,
                                 prescale=float(prescale), postscale=float(postscale))


@collective(REDUCESCATTER, "reducescatter")
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _topology()
    name = auto_name("reducescatter", name, process_set)
    op = resolve_op(op, None)
    return _reducescatter_submit(tensor, name, op, prescale_factor, postscale_factor, process_set)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set; rank r keeps its block of dim-0 rows (the first
    dim0 % size ranks get one extra row)."""
    if not _no_compression(compression):
        tensor, ctx = compression.compress(tensor)
        out = blocking(reducescatter_async, tensor, name, op, process_set, prescale_factor,
                                            postscale_factor)
        return compression.decompress(out, ctx)
    return blocking(reducescatter_async, tensor, name, op, process_set, prescale_factor,
                                         postscale_factor)


@collective(REDUCESCATTER, "grouped_reducescatter")
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _topology()
    base = auto_name("grouped_reducescatter", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    op = resolve_op(op, None)
    return _GroupHandle([_reducescatter_submit(t, f"{base}.{i}", op, prescale_factor,
                                               postscale_factor, process_set, base, len(tensors))
                         for i, t in enumerate(tensors)])


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """Reducescatters a list of arrays as one unit (negotiated together, fused)."""
    return _compressed(compression, tensors, lambda ts: blocking(grouped_reducescatter_async,
        ts, name, op, process_set, prescale_factor, postscale_factor))


# ---- synchronisation ----

def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    _topology()
    name = auto_name("barrier", None, process_set)
    blocking(submit, (), lambda h: None, op=BARRIER, name=name, input=0, output=0,
                     dtype=dtypes.UINT8, shape=[], process_set=_set_id(process_set))


def join(device=-1):
    """This rank has no more data. Until every rank has joined, the others' allreduces
    go on with this rank contributing the identity (0 for Sum/Average; Average still
    divides by the full size). Returns the last rank to join, the same on every rank.
    `device` is accepted for Horovod compatibility and ignored."""
    _topology()
    return blocking(submit, (), lambda h: int(_core.aux(h)[0]), op=JOIN, name=_core.JOIN_NAME,
                            input=0, output=0, dtype=dtypes.UINT8, shape=[], process_set=0)
