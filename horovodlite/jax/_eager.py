"""Collectives on concrete jax arrays: straight to the core, no compilation, no copies.

Inputs reach the core as views of the jax buffers (np.asarray is zero-copy on CPU);
allreduce outputs are written into 64-byte aligned host arrays that jax then adopts
through DLPack without copying. Compiling a program per call would cost more than the
collective for small tensors, and every unnamed call has a new name."""
import numpy as np

import jax
import jax.numpy as jnp

from .. import dtypes
from .. import ops as _np_ops
from ..basics import _topology
from .. import handles
from ..handles import synchronize
from ._kinds import ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, KIND_NAMES, REDUCESCATTER

def to_jax(a):
    """A host numpy array as a jax array, adopting its memory when jax can."""
    try:
        return jax.dlpack.from_dlpack(a)  # zero-copy when aligned; copies otherwise
    except Exception:  # noqa: BLE001 - dtypes numpy cannot export (bfloat16): copy
        return jnp.asarray(a)


def _place_like(out, like):
    """Accelerator inputs went through host memory; give the result back their device."""
    devices = getattr(like, "devices", None)
    if devices is None:
        return out
    devs = devices()
    if len(devs) == 1:
        dev = next(iter(devs))
        if dev.platform != "cpu":
            return jax.device_put(out, dev)
    return out


def process_set_of(process_set_id):
    from .. import process_sets

    if process_set_id == 0:
        return process_sets.global_process_set
    return process_sets._registered[process_set_id]


def _eager_allreduce(arrays, name, reduce_op, prescale, postscale, ps, grouped):
    handles = []
    for i, a in enumerate(arrays):
        handles.append(_np_ops._allreduce_submit(
            _np_ops._contiguous(a), _np_ops._aligned_empty(a.shape, a.dtype),
            f"{name}.{i}" if grouped else name, reduce_op, prescale, postscale, ps,
            group=name if grouped else "", group_size=len(arrays) if grouped else 0))
    # the outputs, once all are done; the first error is raised after waiting for all
    return synchronize(_np_ops._GroupHandle(handles))


def impl(*args, kind, name, reduce_op, prescale, postscale, root, process_set, splits,
          out_dim0s, grouped):
    _topology()  # a clear error before init()
    ps = process_set_of(process_set)
    try:
        return _impl(args, kind, name, reduce_op, prescale, postscale, root, ps, splits,
                     out_dim0s, grouped)
    except Exception as e:
        # A local error must fail the name on the peers too (horovodlite.handles).
        names = [f"{name}.{i}" for i in range(len(args))] if grouped else [name]
        err = handles.announce_failure(e, names, kind, ps, name if grouped else "",
                                       len(args) if grouped else 0)
        if err is e:
            raise
        raise err from None


def _impl(args, kind, name, reduce_op, prescale, postscale, root, ps, splits, out_dim0s,
          grouped):
    arrays = [np.asarray(a) for a in args]
    for a in arrays:
        dtypes.code_of(a.dtype, reducible=kind in (ALLREDUCE, REDUCESCATTER),
                       what=KIND_NAMES[kind])
    if kind == ALLREDUCE:
        outs = _eager_allreduce(arrays, name, reduce_op, prescale, postscale, ps, grouped)
    else:
        outs = _eager_other(kind, arrays, name, reduce_op, prescale, postscale, root, ps,
                            splits, grouped)
        if kind == BROADCAST:  # the numpy API returns 0-d inputs as shape (1,)
            outs = [np.reshape(o, np.shape(a)) for o, a in zip(outs, args)]
    results = []
    for a, o, d0 in zip(args, outs, out_dim0s):
        if d0 is not None and o.shape[0] != d0:
            raise ValueError(
                f"horovodlite: {KIND_NAMES[kind]} '{name}' returned {o.shape[0]} rows where "
                f"{d0} were expected from the shapes known when it was traced")
        results.append(_place_like(to_jax(o), a))
    return results


def _eager_other(kind, arrays, name, reduce_op, prescale, postscale, root, ps, splits, grouped):
    """allgather / broadcast / alltoall / reducescatter through the numpy API (their
    outputs are engine-allocated, sized after negotiation)."""
    if kind == ALLGATHER:
        if grouped:
            return _np_ops.grouped_allgather(arrays, name=name, process_set=ps)
        return [_np_ops.allgather(arrays[0], name=name, process_set=ps)]
    if kind == REDUCESCATTER:
        kw = dict(name=name, op=reduce_op, process_set=ps, prescale_factor=prescale,
                  postscale_factor=postscale)
        if grouped:
            return _np_ops.grouped_reducescatter(arrays, **kw)
        return [_np_ops.reducescatter(arrays[0], **kw)]
    if kind == BROADCAST:
        # `root` counts within the set here; the numpy API takes a global rank.
        groot = root if ps.process_set_id == 0 else ps.ranks[root]
        if not grouped:
            return [_np_ops.broadcast(arrays[0], groot, name=name, process_set=ps)]
        handles = [_np_ops._submit_engine_output(
            "broadcast", _np_ops._contiguous(a), f"{name}.{i}", ps,
            group=name, group_size=len(arrays), op=BROADCAST, root=root)
            for i, a in enumerate(arrays)]
        return synchronize(_np_ops._GroupHandle(handles))
    if kind == ALLTOALL:
        out, _ = _np_ops.alltoall(arrays[0], splits=list(splits) or None, name=name,
                                  process_set=ps)
        return [out]
    raise NotImplementedError(f"horovodlite: collective kind {kind}")
