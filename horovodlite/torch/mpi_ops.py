"""Collectives on torch tensors: sync, async (handle) and in-place forms, with autograd.

Every call hands the core pointers to contiguous tensors and keeps those tensors alive in
the handle until it completes (horovodlite.handles). Names follow Horovod's: a named op
`x` is negotiated as `allreduce.x` (`broadcast.x`, ...), an unnamed one by call order.

Gradients are Horovod 0.28's, so scripts and tests written for it get the same numbers:
  allreduce      allreduce of the gradient with the same op and pre/postscale factors
                 (for every op: Min/Max/Product reduce the gradient with that op too)
  grouped_allreduce  the same, as one grouped allreduce
  allgather      the Average-allreduced gradient, this rank's rows (grouped: per tensor)
  broadcast      the Average-allreduced gradient on the root, zeros elsewhere
  alltoall       alltoall of the gradient back along the received splits
  reducescatter  allgather of the gradient, times the set size for Sum and times the
                 pre/postscale factors (grouped: one grouped allgather)
"""
import torch

from ..basics import Average, Sum, _topology
from ..basics import rank as _rank
from .._loader import _core
from ..handles import auto_name, blocking, collective, expect_group, named, poll, submit, submit_allreduce, synchronize, track
from ..ops import (ALLGATHER, ALLREDUCE, ALLTOALL, BROADCAST, REDUCESCATTER, _GroupHandle,
                   _root_in_set, _splits_list, resolve_op)
from ..process_sets import _set_id, global_process_set
from ._tensors import check_tensor, code_of, engine_output, placement
from .compression import Compression

__all__ = [
    "allreduce", "allreduce_", "allreduce_async", "allreduce_async_",
    "grouped_allreduce", "grouped_allreduce_", "grouped_allreduce_async",
    "grouped_allreduce_async_",
    "allgather", "allgather_async", "grouped_allgather", "grouped_allgather_async",
    "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "alltoall", "alltoall_async",
    "reducescatter", "reducescatter_async", "grouped_reducescatter",
    "grouped_reducescatter_async",
    "poll", "synchronize", "HorovodAllreduce", "HorovodGroupedAllreduce", "HorovodAllgather",
    "HorovodBroadcast", "HorovodAlltoall", "HorovodReducescatter", "HorovodGroupedAllgather",
    "HorovodGroupedReducescatter",
]


def _differentiable(tensor, what):
    """Whether a call on `tensor` should record a gradient (TypeError for non-tensors)."""
    check_tensor(tensor, what)
    return tensor.requires_grad and torch.is_grad_enabled()


def _full_name(kind, name):
    """The name a named op of this kind negotiates under."""
    return f"{kind}.{name}"


def _op_name(kind, name, process_set):
    """Unnamed ops count per kind and process set (horovodlite.handles.auto_name)."""
    return auto_name(kind, None, process_set) if name is None else named(_full_name(kind, name))


def _sub_name(name, suffix):
    """Name of a derived op (a gradient): named ops keep a name, unnamed ones count."""
    return None if name is None else f"{name}.{suffix}"


def _prepare(tensor, what, on_device=False):
    """(contiguous detached source, where it lives: core enqueue arguments). Ops the
    core runs on host memory only (`on_device` False) get GPU tensors staged through
    the host; their results go back to the tensor's device."""
    check_tensor(tensor, what)
    # Only a tensor that records gradients needs detaching: detach() costs more than
    # the rest of a gradient's submission, and optimizer gradients never record.
    src = tensor.detach() if tensor.requires_grad else tensor
    if not src.is_cpu and not on_device:
        src = src.cpu()
    if not src.is_contiguous():
        src = src.contiguous()
    return src, placement(src, what)


def _in_place_target(tensor, src):
    """(where an in-place op writes, finish, what to keep until then). Contiguous
    tensors are written directly, and synchronize returns `tensor`, kept last (src may
    be a detached alias of it); others go through a contiguous copy written back at
    the end."""
    if src.data_ptr() == tensor.data_ptr() and tensor.is_contiguous():
        return src, None, (src, tensor)

    def copy_back(h):
        with torch.no_grad():
            tensor.copy_(src)
        return tensor

    return src, copy_back, (tensor, src)


# ---------------------------------------------------------------------------- allreduce

def _allreduce_submit(tensor, in_place, name, op, prescale, postscale, process_set,
                      group="", group_size=0, held=False):
    what = f"allreduce '{name}'"
    src, where = _prepare(tensor, what, on_device=True)
    code = code_of(src.dtype, reducible=True, what=what)
    if in_place:
        dst, finish, keep = _in_place_target(tensor, src)
    else:
        dst, finish = torch.empty_like(src), None
        keep = (tensor, src, dst)
    return submit_allreduce(keep, finish, name, src.data_ptr(), dst.data_ptr(), code, op,
                            float(prescale), float(postscale), _set_id(process_set), group,
                            group_size, src.shape, where["device"], where.get("stream"), held)


@collective(ALLREDUCE, "allreduce", _op_name)
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing `tensor` over the set; synchronize(handle) returns a new tensor."""
    _topology()
    op = resolve_op(op, average)
    return _allreduce_submit(tensor, False, _op_name("allreduce", name, process_set), op, prescale_factor,
                             postscale_factor, process_set)


@collective(ALLREDUCE, "allreduce", _op_name)
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """In-place form: synchronize(handle) returns `tensor`, now holding the result."""
    _topology()
    op = resolve_op(op, average)
    return _allreduce_submit(tensor, True, _op_name("allreduce", name, process_set), op, prescale_factor,
                             postscale_factor, process_set)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    return blocking(allreduce_async_, tensor, average, name, op, prescale_factor,
                                      postscale_factor, process_set)


class HorovodAllreduce(torch.autograd.Function):
    """allreduce with a gradient (see the module docstring)."""

    @staticmethod
    def forward(ctx, tensor, name, op, prescale_factor, postscale_factor, process_set):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return blocking(allreduce_async, tensor, None, name, op, prescale_factor,
                                         postscale_factor, process_set)

    @staticmethod
    def backward(ctx, grad):
        name, op, pre, post, ps = ctx.args
        g = allreduce(grad, name=_sub_name(name, "grad"), op=op, prescale_factor=pre,
                      postscale_factor=post, process_set=ps)
        return g, None, None, None, None, None


@collective(ALLREDUCE, "allreduce", _op_name)
def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces `tensor` over all ranks of the set (op defaults to Average) into a new
    tensor, bitwise identical on every rank. Differentiable."""
    _topology()
    op = resolve_op(op, average)
    check_tensor(tensor, "allreduce")
    compressed, cctx = compression.compress(tensor)
    if _differentiable(compressed, "allreduce"):
        out = HorovodAllreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                     process_set)
    else:
        out = blocking(allreduce_async, compressed, None, name, op, prescale_factor,
                                        postscale_factor, process_set)
    return compression.decompress(out, cctx)


@collective(ALLREDUCE, "grouped_allreduce", _op_name, grouped=True)
def _grouped_allreduce_async(tensors, in_place, average, name, op, prescale_factor,
                             postscale_factor, process_set):
    _topology()
    op = resolve_op(op, average)
    tensors = list(tensors)
    base = _op_name("grouped_allreduce", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    return _GroupHandle([
        _allreduce_submit(t, in_place, f"{base}.{i}", op, prescale_factor, postscale_factor,
                          process_set, group=base, group_size=len(tensors))
        for i, t in enumerate(tensors)])


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, False, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    return _grouped_allreduce_async(tensors, True, average, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    return blocking(grouped_allreduce_async_, tensors, average, name, op, prescale_factor,
                                              postscale_factor, process_set)


class HorovodGroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, prescale_factor, postscale_factor, process_set, *tensors):
        ctx.args = (name, op, prescale_factor, postscale_factor, process_set)
        return tuple(blocking(grouped_allreduce_async,
            tensors, None, name, op, prescale_factor, postscale_factor, process_set))

    @staticmethod
    def backward(ctx, *grads):
        name, op, pre, post, ps = ctx.args
        out = grouped_allreduce(list(grads), name=_sub_name(name, "grad"), op=op,
                                prescale_factor=pre, postscale_factor=post, process_set=ps)
        return (None, None, None, None, None, *out)


@collective(ALLREDUCE, "grouped_allreduce", _op_name, grouped=True)
def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None,
                      prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """Reduces a list of tensors as one unit (negotiated together, fused). Differentiable."""
    _topology()
    op = resolve_op(op, average)
    pairs = [compression.compress(check_tensor(t, "grouped_allreduce")) for t in tensors]
    compressed = [c for c, _ in pairs]
    if torch.is_grad_enabled() and any(t.requires_grad for t in compressed):
        outs = HorovodGroupedAllreduce.apply(name, op, prescale_factor, postscale_factor,
                                             process_set, *compressed)
    else:
        outs = blocking(grouped_allreduce_async, compressed, None, name, op, prescale_factor,
                                                 postscale_factor, process_set)
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


# ---------------------------------------------------------------------------- allgather

def _allgather_submit(tensor, name, process_set, group="", group_size=0):
    what = f"allgather '{name}'"
    src, where = _prepare(tensor, what)
    code = code_of(src.dtype, what=what)
    if src.dim() == 0:  # a scalar gathers as one row
        src = src.reshape(1)
    dtype, dev = src.dtype, tensor.device
    return submit((tensor, src), lambda h: engine_output(h, dtype, dev), op=ALLGATHER,
                  name=name, input=src.data_ptr(), output=0, dtype=code, shape=list(src.shape),
                  **where, process_set=_set_id(process_set), group=group,
                  group_size=group_size)


@collective(ALLGATHER, "allgather", _op_name)
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating `tensor` from every rank along dim 0 (dim 0 may differ)."""
    _topology()
    return _allgather_submit(tensor, _op_name("allgather", name, process_set), process_set)


def _my_slice(grad, dim0, name, process_set):
    """This rank's rows of a gathered gradient: the offsets come from an allgather of
    every rank's first dimension."""
    dims = blocking(allgather_async, torch.tensor([dim0], dtype=torch.int64),
                                     name=_sub_name(name, "dims"), process_set=process_set)
    r = process_set.rank()
    offset = int(dims[:r].sum())
    return grad.narrow(0, offset, dim0)


class HorovodAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.shape, ctx.args = tensor.shape, (name, process_set)
        return blocking(allgather_async, tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        name, ps = ctx.args
        reduced = allreduce(grad, name=_sub_name(name, "grad"), op=Average, process_set=ps)
        dim0 = ctx.shape[0] if len(ctx.shape) else 1
        return _my_slice(reduced, dim0, name, ps).reshape(ctx.shape), None, None


@collective(ALLGATHER, "allgather", _op_name)
def allgather(tensor, name=None, process_set=global_process_set):
    """Concatenation of `tensor` from every rank along dim 0. Differentiable."""
    _topology()
    if _differentiable(tensor, "allgather"):
        return HorovodAllgather.apply(tensor, name, process_set)
    return blocking(allgather_async, tensor, name, process_set)


@collective(ALLGATHER, "grouped_allgather", _op_name, grouped=True)
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    _topology()
    tensors = list(tensors)
    base = _op_name("grouped_allgather", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    return _GroupHandle([_allgather_submit(t, f"{base}.{i}", process_set, group=base,
                                           group_size=len(tensors))
                         for i, t in enumerate(tensors)])


class HorovodGroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.shapes, ctx.args = [t.shape for t in tensors], (name, process_set)
        return tuple(blocking(grouped_allgather_async, tensors, name, process_set))

    @staticmethod
    def backward(ctx, *grads):
        name, ps = ctx.args
        reduced = grouped_allreduce(list(grads), name=_sub_name(name, "grad"), op=Average,
                                    process_set=ps)
        return (None, None, *[_my_slice(g, shape[0] if len(shape) else 1,
                                        _sub_name(name, f"{i}"), ps).reshape(shape)
                              for i, (g, shape) in enumerate(zip(reduced, ctx.shapes))])


@collective(ALLGATHER, "grouped_allgather", _op_name, grouped=True)
def grouped_allgather(tensors, name=None, process_set=global_process_set):
    _topology()
    tensors = [check_tensor(t, "grouped_allgather") for t in tensors]
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        return list(HorovodGroupedAllgather.apply(name, process_set, *tensors))
    return blocking(grouped_allgather_async, tensors, name, process_set)


# ---------------------------------------------------------------------------- broadcast

def _broadcast_submit(tensor, in_place, root_rank, name, process_set):
    what = f"broadcast '{name}'"
    src, where = _prepare(tensor, what)
    code = code_of(src.dtype, what=what)
    root, err = _root_in_set(root_rank, process_set)
    if in_place:
        dst, finish, keep = _in_place_target(tensor, src)
    else:
        dst = torch.empty_like(src)
        finish = lambda h: dst.to(tensor.device)  # noqa: E731
        keep = (tensor, src, dst)
    return submit(keep, finish, op=BROADCAST, name=name, input=src.data_ptr(),
                  output=dst.data_ptr(), dtype=code, shape=list(src.shape), root=root,
                  **where, process_set=_set_id(process_set), error=err)


@collective(BROADCAST, "broadcast", _op_name)
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    _topology()
    return _broadcast_submit(tensor, False, root_rank, _op_name("broadcast", name, process_set), process_set)


@collective(BROADCAST, "broadcast", _op_name)
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    _topology()
    return _broadcast_submit(tensor, True, root_rank, _op_name("broadcast", name, process_set), process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Overwrites `tensor` with the root's value; returns it."""
    return blocking(broadcast_async_, tensor, root_rank, name, process_set)


class HorovodBroadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.args = (root_rank, name, process_set)
        return blocking(broadcast_async, tensor, root_rank, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        root, name, ps = ctx.args
        g = allreduce(grad, name=_sub_name(name, "grad"), op=Average, process_set=ps)
        if _rank() != root:  # root_rank is a global rank, as in Horovod
            g = torch.zeros_like(g)
        return g, None, None, None


@collective(BROADCAST, "broadcast", _op_name)
def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """The root's `tensor` on every rank, as a new tensor. Differentiable."""
    _topology()
    if _differentiable(tensor, "broadcast"):
        return HorovodBroadcast.apply(tensor, root_rank, name, process_set)
    return blocking(broadcast_async, tensor, root_rank, name, process_set)


# ---------------------------------------------------------------------------- alltoall

@collective(ALLTOALL, "alltoall", _op_name)
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts an alltoall; synchronize(handle) returns (output, received_splits)."""
    _topology()
    name = _op_name("alltoall", name, process_set)
    what = f"alltoall '{name}'"
    src, where = _prepare(tensor, what)
    code = code_of(src.dtype, what=what)
    dtype, dev = src.dtype, tensor.device
    if isinstance(splits, torch.Tensor):
        splits = splits.detach().cpu().numpy()
    split_list, err = _splits_list(splits)

    def finish(h):
        from .._loader import _core

        received = torch.tensor(list(_core.aux(h)), dtype=torch.int32)
        return engine_output(h, dtype, dev), received

    return submit((tensor, src), finish, op=ALLTOALL, name=name, input=src.data_ptr(),
                  output=0, dtype=code, shape=list(src.shape), splits=split_list, error=err,
                  **where, process_set=_set_id(process_set))


class HorovodAlltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = blocking(alltoall_async, tensor, splits, name, process_set)
        ctx.args = (received, name, process_set)
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _received_grad):
        received, name, ps = ctx.args
        g, _ = blocking(alltoall_async, grad.contiguous(), received, _sub_name(name, "grad"),
                                        ps)
        return g, None, None, None


@collective(ALLTOALL, "alltoall", _op_name)
def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends dim-0 slices of `tensor` (sizes `splits`, default equal) to each rank and
    concatenates what arrives. Like Horovod: returns the output alone when `splits` is
    None, else (output, received_splits). Differentiable."""
    _topology()
    if _differentiable(tensor, "alltoall"):
        out, received = HorovodAlltoall.apply(tensor, splits, name, process_set)
    else:
        out, received = blocking(alltoall_async, tensor, splits, name, process_set)
    return out if splits is None else (out, received)


# ---------------------------------------------------------------------------- reducescatter

def _reducescatter_submit(tensor, name, op, prescale, postscale, process_set, group="",
                          group_size=0):
    what = f"reducescatter '{name}'"
    src, where = _prepare(tensor, what)
    code = code_of(src.dtype, reducible=True, what=what)
    dtype, dev = src.dtype, tensor.device
    return submit((tensor, src), lambda h: engine_output(h, dtype, dev), op=REDUCESCATTER,
                  name=name, input=src.data_ptr(), output=0, dtype=code, shape=list(src.shape),
                  reduce_op=op, prescale=float(prescale), postscale=float(postscale),
                  **where, process_set=_set_id(process_set), group=group,
                  group_size=group_size)


@collective(REDUCESCATTER, "reducescatter", _op_name)
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    _topology()
    op = resolve_op(op, None)
    return _reducescatter_submit(tensor, _op_name("reducescatter", name, process_set), op, prescale_factor,
                                 postscale_factor, process_set)


def _reducescatter_grad_scale(op, prescale, postscale, process_set):
    """Horovod's factor on the allgathered gradient of a reducescatter."""
    return (process_set.size() if op == Sum else 1) * prescale * postscale


class HorovodReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, prescale_factor, postscale_factor):
        ctx.args = (name, process_set,
                    _reducescatter_grad_scale(op, prescale_factor, postscale_factor, process_set))
        return blocking(reducescatter_async, tensor, name, op, process_set, prescale_factor,
                                             postscale_factor)

    @staticmethod
    def backward(ctx, grad):
        name, ps, scale = ctx.args
        g = blocking(allgather_async, grad.contiguous(), _sub_name(name, "grad"), ps)
        return (g * scale if scale != 1.0 else g), None, None, None, None, None


class HorovodGroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, prescale_factor, postscale_factor, *tensors):
        ctx.args = (name, process_set,
                    _reducescatter_grad_scale(op, prescale_factor, postscale_factor, process_set))
        return tuple(blocking(grouped_reducescatter_async,
            tensors, name, op, process_set, prescale_factor, postscale_factor))

    @staticmethod
    def backward(ctx, *grads):
        name, ps, scale = ctx.args
        gs = blocking(grouped_allgather_async, [g.contiguous() for g in grads],
                                               _sub_name(name, "grad"), ps)
        return (None, None, None, None, None,
                *[g * scale if scale != 1.0 else g for g in gs])


@collective(REDUCESCATTER, "reducescatter", _op_name)
def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """Reduces `tensor` over the set; rank r keeps its dim-0 slice (the first
    dim0 % size ranks get one extra row). Differentiable."""
    _topology()
    op = resolve_op(op, None)
    check_tensor(tensor, "reducescatter")
    compressed, cctx = compression.compress(tensor)
    if _differentiable(compressed, "reducescatter"):
        out = HorovodReducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                         postscale_factor)
    else:
        out = blocking(reducescatter_async, compressed, name, op, process_set,
                                            prescale_factor, postscale_factor)
    return compression.decompress(out, cctx)


@collective(REDUCESCATTER, "grouped_reducescatter", _op_name, grouped=True)
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    _topology()
    op = resolve_op(op, None)
    tensors = list(tensors)
    base = _op_name("grouped_reducescatter", name, process_set)
    expect_group(base, [f"{base}.{i}" for i in range(len(tensors))])
    return _GroupHandle([
        _reducescatter_submit(t, f"{base}.{i}", op, prescale_factor, postscale_factor,
                              process_set, group=base, group_size=len(tensors))
        for i, t in enumerate(tensors)])


@collective(REDUCESCATTER, "grouped_reducescatter", _op_name, grouped=True)
def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    _topology()
    op = resolve_op(op, None)
    pairs = [compression.compress(check_tensor(t, "grouped_reducescatter")) for t in tensors]
    compressed = [c for c, _ in pairs]
    if torch.is_grad_enabled() and any(t.requires_grad for t in compressed):
        outs = HorovodGroupedReducescatter.apply(name, op, process_set, prescale_factor,
                                                 postscale_factor, *compressed)
    else:
        outs = blocking(grouped_reducescatter_async, compressed, name, op, process_set,
                                                     prescale_factor, postscale_factor)
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
