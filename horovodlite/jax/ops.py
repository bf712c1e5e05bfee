"""Collectives on jax arrays and pytrees, eager or inside `jax.jit`.

A pytree goes to the core as one group: one negotiation and one fused transfer for all
its leaves. Unnamed collectives are named in call order; inside `jax.jit` that happens
once, when the function is traced, so every rank must trace the same collectives in
the same order (it does when all ranks run the same program; pass `name=` otherwise).

Differentiation: JAX skips a primitive's JVP when none of its inputs depends on what is
being differentiated. A collective whose input depends on the parameters on some ranks
but not on others would then run its tangent collective on some ranks only: keep the
data flow into collectives the same on every rank.

Shapes under jit are fixed when tracing, which sets two rules:
- allgather: every rank passes the same first dimension (eagerly they may differ);
- alltoall: equal splits (splits=None, dim 0 divisible by the set size).
"""
import numpy as np

import jax
import jax.numpy as jnp

from .. import ops as _np_ops
from ..basics import Average, Sum
from ..handles import auto_name
from ..ops import resolve_op
from ..process_sets import _set_id, global_process_set
from . import _eager, _rules  # noqa: F401 - _rules registers autodiff and vmap rules
from . import _kinds as K
from ._primitive import bind
from .compression import Compression

__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
           "reducescatter", "grouped_reducescatter", "alltoall"]


def _flatten(tree):
    leaves, treedef = jax.tree_util.tree_flatten(tree)
    leaves = [x if isinstance(x, (jax.Array, np.ndarray)) else jnp.asarray(x) for x in leaves]
    return leaves, treedef


def _traced(leaves):
    return any(isinstance(x, jax.core.Tracer) for x in leaves)


def _check_dtypes(leaves, reducible, what):
    """At trace time (jit). Concrete arrays are checked by the eager path after the
    collective is named, which also fails the name on the other ranks."""
    if not _traced(leaves):
        return
    for x in leaves:
        K.code_of(x, reducible, what)


def _run(leaves, kind, name, *, grouped=None, out_dim0s=None, **kw):
    """Traced leaves go through the primitive (FFI under jit); concrete ones straight to
    the numpy API, where shapes need not be known in advance."""
    if grouped is None:
        grouped = len(leaves) > 1
    if _traced(leaves):
        return bind(leaves, kind, name, out_dim0s=out_dim0s, grouped=grouped, **kw)
    params = dict(reduce_op=Sum, prescale=1.0, postscale=1.0, root=-1, process_set=0,
                  splits=())
    params.update(kw)
    params["splits"] = tuple(params["splits"])
    return _eager.impl(*leaves, kind=kind, name=name, out_dim0s=(None,) * len(leaves),
                   grouped=grouped, **params)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces an array, or every leaf of a pytree as one group, over the ranks of the
    set (op defaults to Average). Returns the same structure; bitwise identical on
    every rank. Differentiable for Sum and Average."""
    op = resolve_op(op, average)
    leaves, treedef = _flatten(tensor)
    if not leaves:
        return tensor
    _check_dtypes(leaves, True, "allreduce")
    return treedef.unflatten(_allreduce_leaves(
        leaves, auto_name("allreduce", name, process_set), op, compression, prescale_factor,
        postscale_factor, process_set, grouped=None))


def _allreduce_leaves(leaves, base, op, compression, prescale, postscale, process_set, grouped):
    wire, ctxs = [], []
    for x in leaves:
        w, c = compression.compress(x)
        wire.append(w)
        ctxs.append(c)
    outs = _run(wire, K.ALLREDUCE, base, grouped=grouped, reduce_op=op, prescale=prescale,
                postscale=postscale, process_set=_set_id(process_set))
    return [compression.decompress(o, c) for o, c in zip(outs, ctxs)]


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """List (or any pytree) in, same structure out; reduced together as one unit."""
    op = resolve_op(op, average)
    leaves, treedef = _flatten(tensors)
    if not leaves:
        return tensors
    _check_dtypes(leaves, True, "grouped_allreduce")
    return treedef.unflatten(_allreduce_leaves(
        leaves, auto_name("grouped_allreduce", name, process_set), op, compression, prescale_factor,
        postscale_factor, process_set, grouped=True))


def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenates along dim 0 across ranks (each leaf of a pytree, as one group).
    Under jit every rank must pass the same first dimension."""
    return _allgather(tensor, "allgather", name, process_set, grouped=None)


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A list (or pytree) allgathered as one unit."""
    return _allgather(tensors, "grouped_allgather", name, process_set, grouped=True)


def _allgather(tensor, kind, name, process_set, grouped):
    leaves, treedef = _flatten(tensor)
    if not leaves:
        return tensor
    _check_dtypes(leaves, False, kind)
    leaves = [x.reshape(1) if x.ndim == 0 else x for x in leaves]  # a scalar is one row
    ps = _set_id(process_set)
    size, _ = K.set_size_rank(ps)
    outs = _run(leaves, K.ALLGATHER, auto_name(kind, name, process_set), process_set=ps,
                grouped=grouped, out_dim0s=[size * x.shape[0] for x in leaves])
    return treedef.unflatten(outs)


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """The root's value of an array or pytree on every rank (root_rank is a global
    rank, as in Horovod). Pytrees go as one group."""
    leaves, treedef = _flatten(tensor)
    if not leaves:
        return tensor
    _check_dtypes(leaves, False, "broadcast")
    ps = _set_id(process_set)
    size, _ = K.set_size_rank(ps)
    root, err = _np_ops._root_in_set(root_rank, process_set)
    if err or not 0 <= root < size:
        raise ValueError(f"horovodlite: broadcast: {err or f'root_rank {root_rank} is out of range for a process set of size {size}'}")
    outs = _run(leaves, K.BROADCAST, auto_name("broadcast", name, process_set), root=root,
                process_set=ps)
    return treedef.unflatten(outs)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces, then rank r keeps its dim-0 slice (the first dim0 % size ranks get one
    extra row). Pytrees go as one group."""
    return _reducescatter(tensor, "reducescatter", name, compression, op, process_set,
                          prescale_factor, postscale_factor, grouped=None)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """A list (or pytree) reduce-scattered as one unit."""
    return _reducescatter(tensors, "grouped_reducescatter", name, compression, op, process_set,
                          prescale_factor, postscale_factor, grouped=True)


def _reducescatter(tensor, kind, name, compression, op, process_set, prescale, postscale,
                   grouped):
    op = resolve_op(op, None)
    leaves, treedef = _flatten(tensor)
    if not leaves:
        return tensor
    _check_dtypes(leaves, True, kind)
    for x in leaves:
        if x.ndim == 0:
            raise ValueError(f"horovodlite: {kind} needs arrays with at least one dimension "
                             "(got a scalar)")
    ps = _set_id(process_set)
    size, rank = K.set_size_rank(ps)
    wire, ctxs = zip(*[compression.compress(x) for x in leaves])
    outs = _run(list(wire), K.REDUCESCATTER, auto_name(kind, name, process_set),
                grouped=grouped, reduce_op=op, prescale=prescale, postscale=postscale,
                process_set=ps,
                out_dim0s=[_np_ops.reducescatter_rows(x.shape[0], size, rank) for x in leaves])
    return treedef.unflatten([compression.decompress(o, c) for o, c in zip(outs, ctxs)])


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends dim-0 slice i (sizes from `splits`, default equal) to rank i; returns
    (output, received_splits). Under jit only equal splits are possible."""
    if not isinstance(tensor, (jax.Array, np.ndarray)):
        tensor = jnp.asarray(tensor)
    K.code_of(tensor, False, "alltoall")
    if tensor.ndim == 0:
        raise ValueError("horovodlite: alltoall needs an array with at least one dimension")
    ps = _set_id(process_set)
    size, _ = K.set_size_rank(ps)
    base = auto_name("alltoall", name, process_set)
    if not _traced([tensor]) and not isinstance(splits, jax.core.Tracer):
        sp = None if splits is None else [int(s) for s in np.asarray(splits)]
        out, received = _np_ops.alltoall(np.asarray(tensor), splits=sp, name=base,
                                         process_set=_eager.process_set_of(ps))
        return _eager.to_jax(out), jnp.asarray(received)
    if splits is not None:
        sp = np.asarray(splits)  # raises for traced splits: shapes must be static
        if len(set(sp.tolist())) > 1 or int(sp.sum()) != tensor.shape[0]:
            raise ValueError("horovodlite: alltoall under jax.jit needs equal splits, "
                             f"got {sp.tolist()} for a first dimension of {tensor.shape[0]}")
    if tensor.shape[0] % size:
        raise ValueError(f"horovodlite: alltoall under jax.jit needs the first dimension "
                         f"({tensor.shape[0]}) divisible by the set size ({size})")
    out, = bind([tensor], K.ALLTOALL, base, process_set=ps, grouped=False)
    return out, jnp.full((size,), tensor.shape[0] // size, dtype=jnp.int32)
