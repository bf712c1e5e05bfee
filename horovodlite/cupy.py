"""Collectives on cupy arrays: `import horovodlite.cupy as hvd` gives the numpy API's
names for arrays that live on a GPU (one GPU per process: select it with
`cupy.cuda.Device(hvd.local_rank()).use()` before creating arrays).

Allreduce runs on the GPU (our kernels, NCCL or MPI staged through pinned memory) and
is ordered after the work queued on cupy's current stream when it is called. The other
collectives go through host memory until the engine runs them on GPUs; they take the
numpy API's arguments."""
import cupy
import numpy as np

from . import _device
from .basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                     _topology, cross_rank, cross_size, cuda_built, init, is_initialized,
                     local_rank, local_size, mpi_built, nccl_built, rank, shutdown, size)
from .handles import auto_name, blocking, poll, synchronize  # noqa: F401
from . import ops as _np_ops
from .ops import _compressed, _GroupHandle, resolve_op
from .process_sets import (ProcessSet, _set_id, add_process_set,  # noqa: F401
                           global_process_set, remove_process_set)

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_", "poll", "synchronize",
    "allgather", "grouped_allgather", "broadcast", "broadcast_", "alltoall", "reducescatter",
    "grouped_reducescatter",
    # as in horovodlite
    "Adasum", "Average", "HorovodInternalError", "Max", "Min", "Product", "Sum", "cross_rank",
    "cross_size", "cuda_built", "init", "is_initialized", "local_rank", "local_size",
    "mpi_built", "nccl_built", "rank", "shutdown", "size", "ProcessSet", "add_process_set",
    "global_process_set", "remove_process_set",
]


def _check_array(a, what, writable=False):
    if not isinstance(a, cupy.ndarray):
        raise TypeError(f"horovodlite.cupy: {what} needs a cupy array, got {type(a).__name__}")
    if writable and not a.flags.c_contiguous:
        raise ValueError(f"horovodlite.cupy: {what} needs a C-contiguous array "
                         "(use the out-of-place form for other arrays)")
    return a


def _submit(src, dst, name, op, prescale, postscale, process_set, group="", group_size=0):
    return _device.submit_allreduce(src, dst, name, op, prescale, postscale, _set_id(process_set),
                                    group=group, group_size=group_size)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    _topology()
    op = resolve_op(op, average)
    src = cupy.ascontiguousarray(_check_array(tensor, "allreduce"))
    return _submit(src, cupy.empty_like(src), auto_name("allreduce", name, process_set), op,
                   prescale_factor, postscale_factor, process_set)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    _topology()
    op = resolve_op(op, average)
    t = _check_array(tensor, "allreduce_ (in place)", writable=True)
    return _submit(t, t, auto_name("allreduce", name, process_set), op, prescale_factor,
                   postscale_factor, process_set)


def allreduce(tensor, average=None, name=None, compression=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks of the set into a new array (op defaults to Average)."""
    if compression is not None:
        tensor, ctx = compression.compress(tensor)
        out = blocking(allreduce_async, tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set)
        return compression.decompress(out, ctx)
    return blocking(allreduce_async, tensor, average, name, op, prescale_factor,
                                     postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return blocking(allreduce_async_, tensor, average, name, op, prescale_factor,
                                      postscale_factor, process_set)


def _grouped(tensors, in_place, average, name, op, prescale_factor, postscale_factor,
             process_set):
    _topology()
    op = resolve_op(op, average)
    base = auto_name("grouped_allreduce", name, process_set)
    handles = []
    for i, t in enumerate(tensors):
        if in_place:
            src = dst = _check_array(t, "grouped_allreduce_ (in place)", writable=True)
        else:
            src = cupy.ascontiguousarray(_check_array(t, "grouped_allreduce"))
            dst = cupy.empty_like(src)
        handles.append(_submit(src, dst, f"{base}.{i}", op, prescale_factor, postscale_factor,
                               process_set, group=base, group_size=len(tensors)))
    return _GroupHandle(handles)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, False, average, name, op, prescale_factor, postscale_factor,
                    process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped(tensors, True, average, name, op, prescale_factor, postscale_factor,
                    process_set)


def grouped_allreduce(tensors, average=None, name=None, compression=None, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    return _compressed(compression, tensors, lambda ts: blocking(grouped_allreduce_async,
        ts, average, name, op, prescale_factor, postscale_factor, process_set))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return blocking(grouped_allreduce_async_, tensors, average, name, op, prescale_factor,
                                              postscale_factor, process_set)


# ---- through host memory until the engine runs these on GPUs ----
def _to_host(x):
    if isinstance(x, cupy.ndarray):
        return cupy.asnumpy(x)  # waits for the current stream, so producers are done
    if isinstance(x, (list, tuple)):
        return type(x)(_to_host(v) for v in x)
    return x


def _to_device(x):
    if isinstance(x, np.ndarray):
        return cupy.asarray(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_to_device(v) for v in x)
    return x


def _via_host(fn):
    name = fn.__name__

    def op(tensor, *args, **kwargs):
        return _to_device(fn(_to_host(tensor), *args, **kwargs))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"{name} on cupy arrays, through host memory (see horovodlite.{name})."
    return op


allgather = _via_host(_np_ops.allgather)
grouped_allgather = _via_host(_np_ops.grouped_allgather)
broadcast = _via_host(_np_ops.broadcast)
alltoall = _via_host(_np_ops.alltoall)
reducescatter = _via_host(_np_ops.reducescatter)
grouped_reducescatter = _via_host(_np_ops.grouped_reducescatter)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """In-place broadcast of a cupy array (through host memory)."""
    t = _check_array(tensor, "broadcast_ (in place)", writable=True)
    t[...] = broadcast(t, root_rank, name=name, process_set=process_set)
    return t
