"""One JAX primitive for every horovodlite collective.

Inside `jax.jit` it lowers to an XLA custom call whose handler lives in our C++ core
(csrc/python/jax_ffi.cc, registered through `jax.ffi`): XLA passes its own buffers and
the core reduces them in place of the call, with no Python and no copy in between.
Outside jit (concrete arrays) the same primitive runs through the numpy API, which
is cheaper than compiling a program per collective name.

Differentiation: every collective here is linear in its inputs, so the JVP applies the
same collective to the tangents and the transpose applies the adjoint collective
(sum-allreduce -> sum-allreduce, allgather <-> reducescatter, broadcast -> sum to the
root, alltoall -> alltoall). Batching (vmap): allreduce and broadcast act elementwise,
so the batch axis passes through; the dim-0 collectives move it to axis 1.
"""
import numpy as np

import jax
import jax.numpy as jnp
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .. import dtypes
from .. import ops as _np_ops
from ..basics import Average, Sum, _topology
from ..handles import synchronize
from .._loader import _core

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = (
    _np_ops.ALLREDUCE, _np_ops.ALLGATHER, _np_ops.BROADCAST, _np_ops.ALLTOALL,
    _np_ops.REDUCESCATTER)
_KIND_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", BROADCAST: "broadcast",
               ALLTOALL: "alltoall", REDUCESCATTER: "reducescatter"}
FFI_TARGET = "horovodlite_collective"


class _Ordering:
    """How collectives are kept in trace order inside one XLA program.

    XLA may run independent custom calls in any order its scheduler picks, and that
    order can differ between ranks whose programs differ only in constants or in
    rank-dependent shapes; two ranks each waiting on a different collective would
    hang. So every collective carries an *ordered effect*: JAX threads a token
    through all of them in trace order (the same Python code on every rank), across
    control flow and across jitted calls. JAX exposes ordered effects to primitives
    only through jax._src, so if that ever moves we fall back to the unordered
    side-effect marker of jax.ffi (safe whenever all ranks run identical programs)."""
    effect = None
    ordered = False
    token_aval = None


try:
    from jax._src import effects as _jax_effects
    from jax._src.core import abstract_token as _abstract_token

    class CollectiveEffect(_jax_effects.Effect):
        def __str__(self):
            return "horovodlite"

        def __eq__(self, other):
            return isinstance(other, CollectiveEffect)

        def __hash__(self):
            return hash(CollectiveEffect)

    for _set in ("ordered_effects", "lowerable_effects", "control_flow_allowed_effects",
                 "custom_derivatives_allowed_effects", "remat_allowed_effects"):
        getattr(_jax_effects, _set).add_type(CollectiveEffect)
    _Ordering.effect, _Ordering.ordered = CollectiveEffect(), True
    _Ordering.token_aval = _abstract_token
except Exception:  # noqa: BLE001 - jax internals moved: keep working, unordered
    try:
        from jax._src.ffi import _FfiEffect as _unordered

        _Ordering.effect = _unordered
    except Exception:  # noqa: BLE001
        pass
_EFFECTS = frozenset({_Ordering.effect}) if _Ordering.effect is not None else frozenset()

jax.ffi.register_ffi_target(FFI_TARGET, _core.jax_ffi_handler(), platform="cpu", api_version=1)

collective_p = Primitive("horovodlite_collective")
collective_p.multiple_results = True


def set_size_rank(process_set_id):
    """(size, rank) of a process set, known at trace time."""
    _topology()
    ranks = _core.process_set_ranks(process_set_id)
    return len(ranks), _core.process_set_rank(process_set_id)


def reducescatter_rows(dim0, size, rank):
    """Rows rank `rank` keeps: the first dim0 % size ranks get one extra."""
    return dim0 // size + (1 if rank < dim0 % size else 0)


def bind(arrays, kind, name, *, reduce_op=Sum, prescale=1.0, postscale=1.0, root=-1,
         process_set=0, splits=(), out_dim0s=None, grouped=None):
    """Runs one collective over `arrays` (one group when there are several)."""
    _topology()  # tracing before init() fails here, not inside XLA
    arrays = list(arrays)
    if out_dim0s is None:
        out_dim0s = (None,) * len(arrays)
    if grouped is None:
        grouped = len(arrays) > 1
    return collective_p.bind(
        *arrays, kind=int(kind), name=str(name), reduce_op=int(reduce_op),
        prescale=float(prescale), postscale=float(postscale), root=int(root),
        process_set=int(process_set), splits=tuple(int(s) for s in splits),
        out_dim0s=tuple(out_dim0s), grouped=bool(grouped))


def _abstract_eval(*avals, kind, out_dim0s, **_):
    outs = []
    for a, d0 in zip(avals, out_dim0s):
        shape = a.shape if d0 is None else (d0,) + tuple(a.shape[1:])
        outs.append(jax.core.ShapedArray(shape, a.dtype))
    return outs, _EFFECTS


collective_p.def_effectful_abstract_eval(_abstract_eval)


# --- eager: straight to the core, no copies -------------------------------------------
# Inputs reach the core as views of the jax buffers (np.asarray is zero-copy on CPU);
# outputs are written into 64-byte aligned host arrays that jax then adopts through
# DLPack without copying. Compiling a program per call would cost more than the
# collective for small tensors, and every unnamed call has a new name.

def _aligned_empty(shape, dtype):
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 64, np.uint8)
    off = (-raw.ctypes.data) % 64
    return raw[off:off + nbytes].view(dtype).reshape(shape)


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


def _process_set(process_set_id):
    from .. import process_sets

    if process_set_id == 0:
        return process_sets.global_process_set
    return process_sets._registered[process_set_id]


def _eager_allreduce(arrays, name, reduce_op, prescale, postscale, ps, grouped):
    handles, outs = [], []
    for i, a in enumerate(arrays):
        src = np.ascontiguousarray(a).reshape(a.shape)
        dst = _aligned_empty(a.shape, a.dtype)
        handles.append(_np_ops._allreduce_submit(
            src, dst, f"{name}.{i}" if grouped else name, reduce_op, prescale, postscale, ps,
            group=name if grouped else "", group_size=len(arrays) if grouped else 0))
        outs.append(dst)
    synchronize(_np_ops._GroupHandle(handles))  # waits for all, then raises the first error
    return outs


def _impl(*args, kind, name, reduce_op, prescale, postscale, root, process_set, splits,
          out_dim0s, grouped):
    _topology()  # a clear error before init()
    ps = _process_set(process_set)
    arrays = [np.asarray(a) for a in args]
    for a in arrays:
        dtypes.code_of(a.dtype, reducible=kind in (ALLREDUCE, REDUCESCATTER),
                       what=_KIND_NAMES[kind])
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
                f"horovodlite: {_KIND_NAMES[kind]} '{name}' returned {o.shape[0]} rows where "
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
            "broadcast", np.ascontiguousarray(a).reshape(a.shape), f"{name}.{i}", ps,
            group=name, group_size=len(arrays), op=BROADCAST, root=root)
            for i, a in enumerate(arrays)]
        return synchronize(_np_ops._GroupHandle(handles))
    if kind == ALLTOALL:
        out, _ = _np_ops.alltoall(arrays[0], splits=list(splits) or None, name=name,
                                  process_set=ps)
        return [out]
    raise NotImplementedError(f"horovodlite: collective kind {kind}")


collective_p.def_impl(_impl)


# --- jit: the XLA FFI custom call --------------------------------------------------------

def _lowering(ctx, *operands, kind, name, reduce_op, prescale, postscale, root, process_set,
              splits, out_dim0s, grouped):
    attrs = dict(op=np.int64(kind), name=name, reduce_op=np.int64(reduce_op),
                 prescale=np.float64(prescale), postscale=np.float64(postscale),
                 root=np.int64(root), process_set=np.int64(process_set),
                 grouped=np.int64(grouped), splits=np.asarray(splits, dtype=np.int64))
    # allreduce and broadcast may write over their input (the core handles in == out):
    # XLA then reuses the operand's buffer when it is dead afterwards (a loop carry, a
    # gradient) and copies it first only when it is not.
    first = 1 if _Ordering.ordered else 0
    aliases = ({first + i: first + i for i in range(len(operands))}
               if kind in (ALLREDUCE, BROADCAST) else {})
    # Row-major layouts (minor-to-major), given explicitly so the token needs no shape.
    row_major = lambda a: tuple(reversed(range(len(a.shape))))  # noqa: E731
    in_layouts = [row_major(a) for a in ctx.avals_in]
    out_layouts = [row_major(a) for a in ctx.avals_out]
    if not _Ordering.ordered:
        rule = jax.ffi.ffi_lowering(FFI_TARGET, operand_layouts=in_layouts,
                                    result_layouts=out_layouts, has_side_effect=True,
                                    operand_output_aliases=aliases)
        return rule(ctx, *operands, **attrs)
    # Token in, token out: the handler skips token buffers (they carry no data).
    token = ctx.tokens_in.get(_Ordering.effect)
    tok = _Ordering.token_aval
    tctx = ctx.replace(avals_in=[tok, *ctx.avals_in], avals_out=[tok, *ctx.avals_out])
    rule = jax.ffi.ffi_lowering(FFI_TARGET, operand_layouts=[(), *in_layouts],
                                result_layouts=[(), *out_layouts], has_side_effect=True,
                                operand_output_aliases=aliases)
    results = list(rule(tctx, token, *operands, **attrs))
    ctx.set_tokens_out(ctx.tokens_in.update_tokens(mlir.TokenSet({_Ordering.effect: results[0]})))
    return results[1:]


mlir.register_lowering(collective_p, _lowering, platform="cpu")


def _no_device_lowering(ctx, *operands, name, **_):
    raise NotImplementedError(
        f"horovodlite.jax: collective '{name}' inside jax.jit runs on the CPU backend only "
        "(jax.jit(..., backend='cpu') or arrays on the CPU); eagerly, arrays on "
        "accelerators work through host memory")


for _platform in ("cuda", "rocm", "tpu"):
    mlir.register_lowering(collective_p, _no_device_lowering, platform=_platform)


# --- autodiff ----------------------------------------------------------------------------

_LINEAR_REDUCE_OPS = (Sum, Average)


def _check_linear(kind, reduce_op, name):
    if kind in (ALLREDUCE, REDUCESCATTER) and reduce_op not in _LINEAR_REDUCE_OPS:
        raise NotImplementedError(
            f"horovodlite: {_KIND_NAMES[kind]} '{name}' with a Min/Max/Product reduction is "
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
        # Every rank's output came from the root: the root's input gathers all of them.
        summed = bind(cts, ALLREDUCE, tname, reduce_op=Sum, **common)
        res = [s if rank == root else jnp.zeros_like(s) for s in summed]
    elif kind == ALLGATHER:
        for a, ct in zip(avals, cts):
            if ct.shape[0] != size * a.shape[0]:
                raise NotImplementedError(
                    f"horovodlite: differentiating allgather '{name}' needs equal first "
                    "dimensions on every rank")
        res = bind(cts, REDUCESCATTER, tname, reduce_op=Sum,
                   out_dim0s=[a.shape[0] for a in avals], **common)
    elif kind == REDUCESCATTER:
        gathered = bind(cts, ALLGATHER, tname, out_dim0s=[a.shape[0] for a in avals], **common)
        scale = prescale * postscale / (size if reduce_op == Average else 1)
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


# --- vmap --------------------------------------------------------------------------------

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


def code_of(x, reducible, what):
    return dtypes.code_of(np.dtype(x.dtype), reducible=reducible, what=what)
