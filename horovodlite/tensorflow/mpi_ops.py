"""Collectives on tf tensors, eager and inside tf.function, each with its gradient.

Every op here is one call of `handoff.run` over a numpy-level function that enqueues its
collectives on the core and waits for them; semantics (names, ops, validation) come from
the numpy API in horovodlite.ops, so the frontends cannot drift apart.

Gradients are Horovod 0.28's definitions, so training scripts get the same numbers as
under Horovod (and as horovodlite.torch and horovodlite.jax). They are not all the
gradient of one objective: allgather's and broadcast's are that of the mean of the
ranks' losses, reducescatter's is size times that of their sum.
allreduce -> allreduce of the gradient with the same op and scale factors; allgather
(and each tensor of grouped_allgather) -> Average-allreduce, then this rank's rows;
broadcast -> Average-allreduce on the root, zeros elsewhere; reducescatter (and
grouped_reducescatter) -> allgather, times the set size for Sum and times the
prescale and postscale factors; alltoall -> alltoall back with the received splits."""
from collections import Counter

import numpy as np
import tensorflow as tf

import horovodlite as _np_api
from .. import handles as _handles
from .. import objects as _np_objects
from .. import ops as _np_ops
from ..basics import Average, Sum, _topology
from ..process_sets import global_process_set
from . import handoff
from .compression import Compression

_BITWISE_CARRIERS = {1: tf.uint8, 2: tf.float16, 4: tf.int32, 8: tf.int64}


# ----------------------------------------------------------------------------- helpers

def _wait_all(handles):
    """Waits for every handle (buffers stay alive until then), then raises the first error."""
    return _np_api.synchronize(_np_ops._GroupHandle(handles))


def _submit_all(submit_one, items, names, op, process_set, groups=None):
    """Submits every item, then waits for all. If one fails here, the rest are still
    announced to the peers as failed (they would wait for them otherwise), and what
    was enqueued runs on without a waiter (its arrays are kept until it is done)."""
    handles = []
    items = list(items)
    try:
        for item in items:
            handles.append(submit_one(*item))
    except Exception as e:
        rest = range(len(handles), len(items))
        sizes = Counter(g for g in (groups or []) if g)
        err = e
        for g in sorted({(groups[i] if groups else "") for i in rest}):
            err = _handles.announce_failure(err, [names[i] for i in rest
                                                  if (groups[i] if groups else "") == g],
                                            op, process_set, g, sizes.get(g, 0))
        _handles.orphan(handles)
        if err is e:
            raise
        raise err from None
    return _wait_all(handles)


def _set_size(process_set):
    return process_set.size() if process_set is not None else _np_api.size()


def _set_rank(process_set):
    return process_set.rank() if process_set is not None else _np_api.rank()


def _is_rank(root_rank):
    """root_rank is a global rank (as in the numpy API)."""
    return _np_api.rank() == int(root_rank)


def _dense(t, like):
    if t is None:
        return tf.zeros_like(like)
    return tf.convert_to_tensor(t)


def _to_wire(t, what):
    """Bitwise collectives (allgather, broadcast, alltoall) carry any fixed-width dtype:
    types the core lacks travel bitcast to a supported type of the same width."""
    try:
        handoff.numpy_dtype(t.dtype, what=what)
        return t, None
    except TypeError:
        carrier = _BITWISE_CARRIERS.get(t.dtype.size) if t.dtype.is_numpy_compatible else None
        if carrier is None or t.dtype in (tf.string, tf.resource, tf.variant):
            raise
        return tf.bitcast(t, carrier), t.dtype


def _from_wire(t, dtype):
    return t if dtype is None else tf.bitcast(t, dtype)


def _differentiable(forward, backward, *xs):
    """forward(*xs) -> output(s); backward(xs, ys, *dys) -> gradient(s) for xs.
    tf.custom_gradient costs tens of microseconds per eager call (it inspects signatures
    and wraps outputs), so eager calls skip it when no tape can record them."""
    if tf.executing_eagerly() and not handoff.tape_may_record():
        return forward(*xs)

    @tf.custom_gradient
    def op(*xs):
        ys = forward(*xs)
        return ys, lambda *dys: backward(xs, ys, *dys)

    return op(*xs)


# ----------------------------------------------------------------------------- allreduce

def _np_allreduce(arrays, names, groups, op, prescale, postscale, process_set):
    group_sizes = Counter(g for g in groups if g)

    def submit(a, name, group):
        a = np.asarray(a)
        return _np_ops._allreduce_submit(a, _np_ops._aligned_empty(a.shape, a.dtype), name, op,
                                         prescale, postscale, process_set, group=group,
                                         group_size=group_sizes.get(group, 0))

    return _submit_all(submit, zip(arrays, names, groups), names, _np_ops.ALLREDUCE, process_set,
                       groups)


def _allreduce_dense(tensors, names, groups, op, prescale, postscale, process_set):
    """Differentiable allreduce of dense tensors, all in one hand-off."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    for t, n in zip(tensors, names):
        handoff.numpy_dtype(t.dtype, reducible=True, what=f"allreduce of '{n}'")

    def forward(*xs):
        return handoff.run(
            lambda *a: _np_allreduce(a, names, groups, op, prescale, postscale, process_set),
            xs, [x.dtype for x in xs], [x.shape for x in xs])

    def backward(xs, ys, *dys):
        if op not in (Average, Sum):
            raise NotImplementedError(f"horovodlite: allreduce with op={op} has no gradient "
                                      "(only Sum and Average are linear)")
        return _allreduce_dense([_dense(d, x) for d, x in zip(dys, xs)],
                                [n + ".grad" for n in names],
                                [g + ".grad" if g else "" for g in groups],
                                op, prescale, postscale, process_set)

    out = _differentiable(forward, backward, *tensors)
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _allreduce_sparse(slices, name, op, prescale, postscale, process_set):
    """IndexedSlices are gathered, not summed: every rank gets every rank's rows."""
    if op not in (Average, Sum):
        raise NotImplementedError(f"horovodlite: allreduce of tf.IndexedSlices supports Sum and "
                                  f"Average, got op={op}; pass sparse_as_dense=True")
    values = allgather(slices.values, name=f"{name}.values", process_set=process_set)
    indices = allgather(slices.indices, name=f"{name}.indices", process_set=process_set)
    scale = prescale * postscale / (_set_size(process_set) if op == Average else 1)
    if scale != 1.0:
        values = values * tf.cast(scale, values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


@_handles.collective(_np_ops.ALLREDUCE, "allreduce", handoff.op_name, active=tf.executing_eagerly)
def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=Compression.none,
              op=None, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, ignore_name_scope=False):
    """Reduces `tensor` over the ranks of the set (op defaults to Average); a new tensor,
    bitwise identical on every rank. tf.IndexedSlices are allgathered instead."""
    _topology()
    op = _np_ops.resolve_op(op, average)
    name = handoff.op_name("allreduce", name, process_set)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_sparse(tensor, name, op, prescale_factor, postscale_factor, process_set)
    t, ctx = compression.compress(tf.convert_to_tensor(tensor))
    out = _allreduce_dense([t], [name], [""], op, prescale_factor, postscale_factor, process_set)[0]
    return compression.decompress(out, ctx)


@_handles.collective(_np_ops.ALLREDUCE, "grouped_allreduce", handoff.op_name, grouped=True, active=tf.executing_eagerly)
def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """Reduces a list of tensors as one unit (negotiated together, fused)."""
    _topology()
    op = _np_ops.resolve_op(op, average)
    base = handoff.op_name("grouped_allreduce", name, process_set)
    _handles.expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    out = [None] * len(tensors)
    dense, ctxs = [], []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            out[i] = _allreduce_sparse(t, f"{base}.{i}", op, prescale_factor, postscale_factor,
                                       process_set)
        else:
            c, ctx = compression.compress(tf.convert_to_tensor(t))
            dense.append((i, c))
            ctxs.append(ctx)
    reduced = _allreduce_dense([c for _, c in dense], [f"{base}.{i}" for i, _ in dense],
                               [base] * len(dense), op, prescale_factor, postscale_factor,
                               process_set)
    for (i, _), r, ctx in zip(dense, reduced, ctxs):
        out[i] = compression.decompress(r, ctx)
    return out


# ----------------------------------------------------------------------------- allgather

def _np_gather(kind, arrays, names, process_set, **kw):
    fn = getattr(_np_ops, kind + "_async")
    return _submit_all(lambda a, n: fn(np.asarray(a), name=n, process_set=process_set, **kw),
                       zip(arrays, names), names, getattr(_np_ops, kind.upper()), process_set)


def _allgather_nograd(tensors, names, process_set):
    size = _set_size(process_set)
    wires = [_to_wire(tf.convert_to_tensor(t), f"allgather of '{n}'") for t, n in zip(tensors, names)]
    shapes = [tf.TensorShape([None if size > 1 else w.shape[0]]).concatenate(w.shape[1:])
              if w.shape.rank else w.shape for w, _ in wires]
    outs = handoff.run(lambda *a: _np_gather("allgather", a, names, process_set),
                       [w for w, _ in wires], [w.dtype for w, _ in wires], shapes)
    return [_from_wire(o, d) for o, (_, d) in zip(outs, wires)]


def _allgather_backward(xs, ys, dys, names, process_set):
    """Horovod's allgather gradient: the Average-allreduce of each incoming gradient,
    then this rank's rows (found from one allgather of every input's first dimension).
    Every float input takes part, with zeros for a missing gradient, so all ranks run
    the same collectives."""
    rows = _allgather_nograd([tf.stack([tf.shape(x, out_type=tf.int64)[0] for x in xs])],
                             [names[0] + ".grad.rows"], process_set)[0]
    rows = tf.reshape(rows, [_set_size(process_set), len(xs)])
    me = _set_rank(process_set)
    floats = [i for i, x in enumerate(xs) if x.dtype.is_floating]
    averaged = _allreduce_dense([_dense(dys[i], ys[i]) for i in floats],
                                [names[i] + ".grad" for i in floats], [""] * len(floats),
                                Average, 1.0, 1.0, process_set)
    out = [None] * len(xs)
    for i, total in zip(floats, averaged):
        start = tf.reduce_sum(rows[:me, i])
        out[i] = total[start:start + rows[me, i]]
    return out


def _check_rank(x, name, what):
    if x.shape.rank == 0:
        raise ValueError(f"horovodlite: {what} of '{name}' needs a tensor with at least one "
                         "dimension, got a scalar")


@_handles.collective(_np_ops.ALLGATHER, "allgather", handoff.op_name, active=tf.executing_eagerly)
def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Concatenates every rank's tensor along dim 0 (dim 0 may differ between ranks)."""
    _topology()
    name = handoff.op_name("allgather", name, process_set)
    x = tf.convert_to_tensor(tensor)
    _check_rank(x, name, "allgather")
    if not x.dtype.is_floating:
        return _allgather_nograd([x], [name], process_set)[0]
    return _differentiable(
        lambda x: _allgather_nograd([x], [name], process_set)[0],
        lambda xs, y, dy: _allgather_backward(xs, [y], [dy], [name], process_set)[0], x)


@_handles.collective(_np_ops.ALLGATHER, "grouped_allgather", handoff.op_name, grouped=True, core_group=False, active=tf.executing_eagerly)
def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Allgathers a list of tensors in one hand-off; differentiable like allgather."""
    _topology()
    base = handoff.op_name("grouped_allgather", name, process_set)
    _handles.expect_group(base, [f"{base}.{i}" for i in range(len(tensors))], core_group=False)
    xs = [tf.convert_to_tensor(t) for t in tensors]
    if not xs:
        return []
    names = [f"{base}.{i}" for i in range(len(xs))]
    for x, n in zip(xs, names):
        _check_rank(x, n, "grouped_allgather")
    if not any(x.dtype.is_floating for x in xs):
        return _allgather_nograd(xs, names, process_set)
    out = _differentiable(lambda *a: _allgather_nograd(a, names, process_set),
                          lambda a, ys, *dys: _allgather_backward(a, ys, dys, names, process_set),
                          *xs)
    return list(out) if isinstance(out, (list, tuple)) else [out]


# ----------------------------------------------------------------------------- broadcast

def _broadcast_nograd(tensors, names, root_rank, process_set):
    wires = [_to_wire(tf.convert_to_tensor(t), f"broadcast of '{n}'") for t, n in zip(tensors, names)]
    outs = handoff.run(
        lambda *a: _np_gather("broadcast", a, names, process_set, root_rank=root_rank),
        [w for w, _ in wires], [w.dtype for w, _ in wires], [w.shape for w, _ in wires])
    return [_from_wire(o, d) for o, (_, d) in zip(outs, wires)]


@_handles.collective(_np_ops.BROADCAST, "broadcast", handoff.op_name, active=tf.executing_eagerly)
def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set):
    """The root rank's tensor on every rank of the set."""
    _topology()
    name = handoff.op_name("broadcast", name, process_set)
    x = tf.convert_to_tensor(tensor)
    if not x.dtype.is_floating:
        return _broadcast_nograd([x], [name], root_rank, process_set)[0]

    def backward(xs, y, dy):
        # Horovod: the Average-allreduce of the gradient on the root, zeros elsewhere.
        total = _allreduce_dense([_dense(dy, y)], [name + ".grad"], [""], Average, 1.0, 1.0,
                                 process_set)[0]
        return total if _is_rank(root_rank) else tf.zeros_like(total)

    return _differentiable(lambda x: _broadcast_nograd([x], [name], root_rank, process_set)[0],
                           backward, x)


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """In place: assigns the root's values to `variables` (a list); returns them."""
    broadcast_variables(variables, root_rank, process_set=process_set, name=name)
    return variables


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False,
                        name=None):
    """Assigns the root rank's values to every variable, all in one hand-off. Returns the
    grouped assign op inside a graph, None when eager."""
    _topology()
    variables = list(variables)
    if not variables:
        return None if tf.executing_eagerly() else tf.no_op()
    base = handoff.op_name("broadcast_variables", name, process_set)
    values = _broadcast_nograd([v.read_value() if isinstance(v, tf.Variable) else v
                                for v in variables],
                               [f"{base}.{i}" for i in range(len(variables))], root_rank,
                               process_set)
    assigns = [v.assign(x) for v, x in zip(variables, values)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


# ----------------------------------------------------------------------------- reducescatter

def _reducescatter_nograd(tensors, names, op, prescale, postscale, process_set):
    size, rank = _set_size(process_set), _set_rank(process_set)
    shapes = []
    for t, n in zip(tensors, names):
        handoff.numpy_dtype(t.dtype, reducible=True, what=f"reducescatter of '{n}'")
        if t.shape.rank == 0:
            raise ValueError(f"horovodlite: reducescatter of '{n}' needs a tensor with at least "
                             "one dimension, got a scalar")
        d0 = t.shape[0]
        shapes.append(tf.TensorShape([None if d0 is None else _np_ops.reducescatter_rows(d0, size, rank)])
                      .concatenate(t.shape[1:]))
    return handoff.run(
        lambda *a: _np_gather("reducescatter", a, names, process_set, op=op,
                              prescale_factor=prescale, postscale_factor=postscale),
        tensors, [t.dtype for t in tensors], shapes)


def _reducescatter_backward(ys, dys, names, op, prescale, postscale, process_set):
    """Horovod's reducescatter gradient: the allgather of each incoming gradient, times
    the set size for Sum, times the prescale and postscale factors."""
    if op not in (Average, Sum):
        raise NotImplementedError(f"horovodlite: reducescatter of '{names[0]}' with op={op} "
                                  "has no gradient (only Sum and Average are linear)")
    scale = prescale * postscale * (_set_size(process_set) if op == Sum else 1)
    grads = [_dense(d, y) for d, y in zip(dys, ys)]
    # Not one grouped allgather: TensorFlow may hand float32 zeros for a float64 input.
    gathered = _allgather_nograd(grads, [n + ".grad" for n in names], process_set)
    return [g * tf.cast(scale, g.dtype) if scale != 1.0 else g for g in gathered]


@_handles.collective(_np_ops.REDUCESCATTER, "reducescatter", handoff.op_name, active=tf.executing_eagerly)
def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """Reduces, then rank r keeps its dim-0 slice (the first dim0 % size ranks get one
    extra row)."""
    _topology()
    op = _np_ops.resolve_op(op, None)
    name = handoff.op_name("reducescatter", name, process_set)
    x, ctx = compression.compress(tf.convert_to_tensor(tensor))
    y = _differentiable(
        lambda x: _reducescatter_nograd([x], [name], op, prescale_factor, postscale_factor,
                                        process_set)[0],
        lambda xs, y, dy: _reducescatter_backward([y], [dy], [name], op, prescale_factor,
                                                  postscale_factor, process_set)[0], x)
    return compression.decompress(y, ctx)


@_handles.collective(_np_ops.REDUCESCATTER, "grouped_reducescatter", handoff.op_name, grouped=True, core_group=False, active=tf.executing_eagerly)
def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, name=None):
    """Reducescatter of each tensor of a list, in one hand-off; differentiable like
    reducescatter."""
    _topology()
    op = _np_ops.resolve_op(op, None)
    base = handoff.op_name("grouped_reducescatter", name, process_set)
    _handles.expect_group(base, [f"{base}.{i}" for i in range(len(tensors))], core_group=False)
    pairs = [compression.compress(tf.convert_to_tensor(t)) for t in tensors]
    if not pairs:
        return []
    names = [f"{base}.{i}" for i in range(len(pairs))]
    xs = [p for p, _ in pairs]
    outs = _differentiable(
        lambda *a: _reducescatter_nograd(list(a), names, op, prescale_factor, postscale_factor,
                                         process_set),
        lambda a, ys, *dys: _reducescatter_backward(ys, dys, names, op, prescale_factor,
                                                    postscale_factor, process_set), *xs)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(outs, pairs)]


# ----------------------------------------------------------------------------- alltoall

def _alltoall_nograd(x, splits, name, process_set):
    wire, dtype = _to_wire(x, f"alltoall of '{name}'")
    fn = _np_ops.alltoall_async

    def run_np(a, s=None):
        h = fn(np.asarray(a), splits=None if s is None else [int(v) for v in s], name=name,
               process_set=process_set)
        out, received = _wait_all([h])[0]
        return [out, np.asarray(received, np.int32)]

    inputs = [wire] if splits is None else [wire, tf.cast(splits, tf.int32)]
    shape = tf.TensorShape([None]).concatenate(wire.shape[1:]) if wire.shape.rank else wire.shape
    out, received = handoff.run(run_np, inputs, [wire.dtype, tf.int32],
                                [shape, tf.TensorShape([_set_size(process_set)])])
    return _from_wire(out, dtype), received


@_handles.collective(_np_ops.ALLTOALL, "alltoall", handoff.op_name, active=tf.executing_eagerly)
def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set):
    """Sends dim-0 slices of `tensor` (`splits[r]` rows to rank r, equal by default).
    As in Horovod's TensorFlow API: returns (received tensor, received_splits) when
    `splits` is given, the received tensor alone when it is not."""
    _topology()
    name = handoff.op_name("alltoall", name, process_set)
    x = tf.convert_to_tensor(tensor)
    _check_rank(x, name, "alltoall")
    if not x.dtype.is_floating:
        out = _alltoall_nograd(x, splits, name, process_set)
    else:
        def backward(xs, ys, dy, _received_grad=None):
            y, received = ys
            return _alltoall_nograd(_dense(dy, y), received, name + ".grad", process_set)[0]

        out = _differentiable(lambda x: _alltoall_nograd(x, splits, name, process_set),
                              backward, x)
    return tuple(out) if splits is not None else out[0]


# ----------------------------------------------------------------------------- the rest

def join(process_set=global_process_set):
    """This rank has no more data; returns the last rank to join (a scalar tensor)."""
    return tf.constant(_np_ops.join(), tf.int32)


def barrier(process_set=global_process_set):
    _np_ops.barrier(process_set=process_set)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """The root rank's picklable object on every rank."""
    return _np_objects.broadcast_object(obj, root_rank=root_rank, name=name,
                                        process_set=process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """A list with every rank's picklable object, by rank."""
    return _np_objects.allgather_object(obj, name=name, process_set=process_set)
