"""Data-parallel training with optax: average the gradients over ranks, then step.

    tx = hvd.DistributedOptimizer(optax.adam(1e-3))
    params = hvd.broadcast_parameters(params, root_rank=0)
    opt_state = tx.init(params)
    ...inside a jitted step: updates, opt_state = tx.update(grads, opt_state, params)
"""
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from ..basics import Average
from ..handles import auto_name
from ..ops import predivide_scales, resolve_op
from ..process_sets import global_process_set
from .compression import Compression
from .ops import _allreduce_leaves, _check_dtypes, _flatten, broadcast


def allreduce_gradients(grads, op=Average, compression=Compression.none, name=None,
                        gradient_predivide_factor=1.0, process_set=global_process_set):
    """Reduces a gradient pytree (one group: one negotiation, fused) for users of plain
    `jax.grad`. With op=Average, `gradient_predivide_factor` f divides by f before the
    sum and multiplies by f/size after, as in Horovod."""
    op = resolve_op(op, None)
    leaves, treedef = _flatten(grads)
    if not leaves:
        return grads
    _check_dtypes(leaves, True, "allreduce_gradients")
    pre, post = predivide_scales(op, gradient_predivide_factor)
    outs = _allreduce_leaves(leaves, auto_name("allreduce_gradients", name, process_set), op, compression,
                             pre, post, process_set, grouped=True)
    return treedef.unflatten(outs)


def broadcast_parameters(params, root_rank=0, name=None, process_set=global_process_set):
    """Returns `params` (any pytree) with the root's values on every rank (one group)."""
    return broadcast(params, root_rank, name=name or auto_name("broadcast_parameters", None, process_set),
                     process_set=process_set)


def broadcast_optimizer_state(opt_state, root_rank=0, name=None,
                              process_set=global_process_set):
    """The root's optax state (counts, moments, ...) on every rank."""
    return broadcast(opt_state, root_rank,
                     name=name or auto_name("broadcast_optimizer_state", None, process_set),
                     process_set=process_set)


class DistributedState(NamedTuple):
    inner: Any


class AccumulatingState(NamedTuple):
    inner: Any
    acc: Any  # local sum of gradients since the last step
    count: Any  # passes accumulated so far (int32 scalar)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         process_set=global_process_set, name=None):
    """Wraps an optax GradientTransformation: `update` reduces the gradients over ranks
    (one fused group) and then applies `optimizer`.

    backward_passes_per_step=k: gradients are averaged locally over k calls and reduced
    and applied on every k-th one; the other calls return zero updates. Works under jit
    (the reduction sits in a lax.cond, taken the same way on every rank).
    `named_parameters` is accepted for signature compatibility with Horovod and ignored.
    """
    del named_parameters
    k = int(backward_passes_per_step)
    if k < 1:
        raise ValueError("backward_passes_per_step must be >= 1")
    inner = optax.with_extra_args_support(optimizer)
    base = name or "DistributedOptimizer"

    def reduce(grads):
        return allreduce_gradients(grads, op=op, compression=compression,
                                   name=auto_name(base, None, process_set),
                                   gradient_predivide_factor=gradient_predivide_factor,
                                   process_set=process_set)

    if k == 1:
        def init_fn(params):
            return DistributedState(inner.init(params))

        def update_fn(updates, state, params=None, **extra_args):
            new, inner_state = inner.update(reduce(updates), state.inner, params, **extra_args)
            return new, DistributedState(inner_state)

        return optax.GradientTransformationExtraArgs(init_fn, update_fn)

    def init_fn(params):
        zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
        return AccumulatingState(inner.init(params), zeros, jnp.zeros((), jnp.int32))

    def update_fn(updates, state, params=None, **extra_args):
        acc = jax.tree_util.tree_map(jnp.add, state.acc, updates)
        count = state.count + 1

        def apply(_):
            mean = jax.tree_util.tree_map(lambda a: a / k, acc)
            new, inner_state = inner.update(reduce(mean), state.inner, params, **extra_args)
            zeros = jax.tree_util.tree_map(jnp.zeros_like, acc)
            return new, AccumulatingState(inner_state, zeros, jnp.zeros((), jnp.int32))

        def hold(_):
            zeros = jax.tree_util.tree_map(jnp.zeros_like, updates)
            return zeros, AccumulatingState(state.inner, acc, count)

        return jax.lax.cond(count >= k, apply, hold, None)

    return optax.GradientTransformationExtraArgs(init_fn, update_fn)
