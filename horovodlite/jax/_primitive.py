"""One JAX primitive for every horovodlite collective.

Inside `jax.jit` it lowers to an XLA custom call whose handler lives in our C++ core
(csrc/python/jax_ffi.cc, registered through `jax.ffi`): XLA passes its own buffers and
the core works on them directly, with no Python and no staging copy. On concrete
arrays it runs eagerly (_eager.py). Autodiff and vmap rules are in _rules.py.
"""
import numpy as np

import jax
from jax.extend.core import Primitive
from jax.interpreters import mlir

from ..basics import Sum, _topology
from .._loader import _core
from ._eager import impl
from ._kinds import ALLREDUCE, BROADCAST

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


collective_p.def_impl(impl)


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
