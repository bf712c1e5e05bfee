"""Autodiff and vmap rules of the collective primitive.

Every collective here is linear in its inputs: the JVP applies the same collective to
the tangents. The transposes (what jax.grad uses) are Horovod 0.28's gradients, the same
as in horovodlite.torch and horovodlite.tensorflow, so a model gets the same gradients
in every frontend: allreduce -> allreduce with the same op and scale factors; allgather
-> Average-reducescatter (this rank's rows of the averaged cotangent); broadcast ->
Average-allreduce on the root, zeros elsewhere; reducescatter -> allgather, times the
set size for Sum, times the scale factors; alltoall -> alltoall back. (Horovod's
allgather/broadcast rules are the gradient of the mean of the ranks' losses, its
reducescatter rule size times that of their sum: they are not one objective's.) Under vmap, allreduce and broadcast act elementwise, so the batch axis
passes through; the dim-0 collectives move it to axis 1, keeping dim 0 the rank axis.
"""
import jax
import jax.numpy as jnp
from jax.interpreters import ad, batching

from ..basics import Average, Sum
from ._kinds import (ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, KIND_NAMES, REDUCESCATTER,
                     set_size_rank)
from ._primitive import bind, collective_p

_LINEAR_REDUCE_OPS = (Sum, Average)


def _check_linear(kind, reduce_op, name):
    if kind in (ALLREDUCE, REDUCESCATTER) and reduce_op not in _LINEAR_REDUCE_OPS:
        raise NotImplementedError(
            f"horovodlite: {KIND_NAMES[kind]} '{name}' with a Min/Max/Product reduction is "
            "not differentiable; only Sum and Average are")


def _jvp(primals, tangents, **params):
    _check_linear(params["kind"], params["reduce_op"], params["name"])
    outs = collective_p.bind(*primals, **params)
    tans = [ad.instantiate_zeros(t) for t in tangents]
    touts = collective_p.bind(*tans, **dict(params, name=params["name"] + ".jvp"))
    return outs, touts


ad.primitive_jvps[collective_p] = _jvp


def _transpose(cts, *args, kind, name, reduce_op, prescale, postscale, root, process_set,
               splits, out_dim0s, grouped):
    _check_linear(kind, reduce_op, name)
    cts = [ad.instantiate_zeros(ct) for ct in cts]
    avals = [a.aval if ad.is_undefined_primal(a) else jax.core.get_aval(a) for a in args]
    tname = name + ".T"
    common = dict(process_set=process_set, grouped=grouped)
    size, rank = set_size_rank(process_set)
    if kind == ALLREDUCE:
        # y = pre*post*R(x) with R symmetric across ranks: the adjoint is the same op.
        res = bind(cts, ALLREDUCE, tname, reduce_op=reduce_op, prescale=prescale,
                   postscale=postscale, **common)
    elif kind == BROADCAST:
        # Every rank's output came from the root: the root's input gets their average.
        averaged = bind(cts, ALLREDUCE, tname, reduce_op=Average, **common)
        res = [s if rank == root else jnp.zeros_like(s) for s in averaged]
    elif kind == ALLGATHER:
        for a, ct in zip(avals, cts):
            if ct.shape[0] != size * a.shape[0]:
                raise NotImplementedError(
                    f"horovodlite: differentiating allgather '{name}' needs equal first "
                    "dimensions on every rank")
        res = bind(cts, REDUCESCATTER, tname, reduce_op=Average,
                   out_dim0s=[a.shape[0] for a in avals], **common)
    elif kind == REDUCESCATTER:
        gathered = bind(cts, ALLGATHER, tname, out_dim0s=[a.shape[0] for a in avals], **common)
        scale = prescale * postscale * (size if reduce_op == Sum else 1)
        res = [g if scale == 1.0 else (g * scale).astype(g.dtype) for g in gathered]
    elif kind == ALLTOALL:
        if splits:
            raise NotImplementedError(
                f"horovodlite: differentiating alltoall '{name}' needs equal splits")
        res = bind(cts, ALLTOALL, tname, **common)
    else:
        raise NotImplementedError(f"horovodlite: no transpose for collective kind {kind}")
    return [r if ad.is_undefined_primal(a) else None for r, a in zip(res, args)]


ad.primitive_transposes[collective_p] = _transpose


# vmap --------------------------------------------------------------------------------

def _batch(args, dims, **params):
    kind = params["kind"]
    if kind in (ALLREDUCE, BROADCAST):
        # Elementwise across ranks: a batch axis anywhere is just more elements. Unbatched
        # members of a group stay unbatched.
        return collective_p.bind(*args, **params), list(dims)
    # Collectives along dim 0: keep dim 0 the rank axis by moving the batch axis to 1.
    moved, out_dims = [], []
    for x, d in zip(args, dims):
        if d is None:  # this member is not batched
            moved.append(x)
            out_dims.append(None)
        else:
            moved.append(jnp.moveaxis(x, d, 1))
            out_dims.append(1)
    return collective_p.bind(*moved, **params), out_dims


batching.primitive_batchers[collective_p] = _batch
