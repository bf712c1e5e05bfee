"""horovodlite.jax on 2 ranks: collectives eager and under jit against numpy references,
autodiff, vmap, pytrees, ordering, errors, and the optax DistributedOptimizer.

Each test is one mpirun launch covering many cases (jax's import dominates)."""
import numpy as np
import pytest

pytest.importorskip("jax", reason="horovodlite.jax tests need jax (pip install jax)")
pytest.importorskip("optax", reason="horovodlite.jax tests need optax (pip install optax)")

from mpirun import ROOT, launch, run  # noqa: E402

N = 2

_COLLECTIVES = """
import jax, jax.numpy as jnp, ml_dtypes
import horovodlite.jax as hj

def main(hvd):
    r, n = hj.rank(), hj.size()
    out = {}
    rng = np.random.default_rng(0)
    # Each rank's inputs are derived from the same seed, so every rank can build the
    # numpy reference for all ranks.
    def inputs(shape, dtype):
        base = [rng.standard_normal(shape) * 4 for _ in range(n)]
        return [np.asarray(b).astype(dtype) for b in base]

    cases = []
    for dt in (np.float32, np.float64, np.int32, np.float16, ml_dtypes.bfloat16, np.int8, np.uint8,
               np.int16, np.uint16):
        for op in (hj.Sum, hj.Average, hj.Min, hj.Max):
            if op == hj.Average and np.dtype(dt).kind in "iu":
                continue
            cases.append((dt, op))
    jit_allreduce = {}
    for i, (dt, op) in enumerate(cases):
        xs = inputs((3, 5), dt)
        if np.dtype(dt).kind == "u":
            xs = [np.abs(x) for x in xs]
        eager = hj.allreduce(jnp.asarray(xs[r]), op=op, name=f"e{i}")
        f = jit_allreduce.setdefault(op, jax.jit(lambda a, op=op: hj.allreduce(a, op=op)))
        jitted = f(jnp.asarray(xs[r]))
        out[("allreduce", np.dtype(dt).name, op)] = (xs, np.asarray(eager), np.asarray(jitted))

    # pre/post scale under jit
    xs = inputs((7,), np.float32)
    out["scaled"] = (xs, np.asarray(jax.jit(lambda a: hj.allreduce(
        a, op=hj.Sum, prescale_factor=0.5, postscale_factor=3.0))(jnp.asarray(xs[r]))))

    # a pytree with mixed dtypes, one group, eager and jit
    tree = {"w": jnp.arange(6.0).reshape(2, 3) + r, "b": jnp.ones(4, jnp.bfloat16) * (r + 1),
            "i": (jnp.arange(3, dtype=jnp.int32) * (r + 1), jnp.zeros((0,), jnp.float32)),
            "s": jnp.float32(r)}
    out["tree_eager"] = jax.tree_util.tree_map(np.asarray, hj.allreduce(tree, op=hj.Sum))
    out["tree_jit"] = jax.tree_util.tree_map(
        np.asarray, jax.jit(lambda t: hj.allreduce(t, op=hj.Sum))(tree))
    out["grouped"] = [np.asarray(a) for a in jax.jit(lambda l: hj.grouped_allreduce(l))(
        [jnp.ones(3) * r, jnp.ones((2, 2), jnp.float16) * r])]
    out["fp16_compressed"] = np.asarray(jax.jit(lambda a: hj.allreduce(
        a, compression=hj.Compression.fp16))(jnp.full((5,), 1.0 + r, jnp.float32)))
    out["fp16_compressed_dtype"] = str(hj.allreduce(jnp.ones(2), compression=hj.Compression.fp16).dtype)

    # broadcast: pytree with bool and ints, eager and jit, from rank 1
    bt = {"f": jnp.arange(4.0) * (r + 1), "m": jnp.array([r == 0, r == 1]),
          "k": jnp.arange(3, dtype=jnp.int32) + 10 * r}
    out["bcast_eager"] = jax.tree_util.tree_map(np.asarray, hj.broadcast(bt, 1))
    out["bcast_jit"] = jax.tree_util.tree_map(np.asarray, jax.jit(lambda t: hj.broadcast(t, 1))(bt))
    out["bcast_params"] = jax.tree_util.tree_map(np.asarray, hj.broadcast_parameters(bt, 0))

    # autodiff: loss_r = sum(allreduce_sum(x)**2) ; d(sum_r loss_r)/dx_r = n * 2 * S
    x = jnp.arange(5.0) + r
    loss = lambda a: jnp.sum(hj.allreduce(a, op=hj.Sum) ** 2)
    out["grad_eager"] = np.asarray(jax.grad(loss)(x))
    out["grad_jit"] = np.asarray(jax.jit(jax.grad(loss))(x))
    lossavg = lambda a: jnp.sum(jnp.sin(hj.allreduce(a * a, op=hj.Average)))
    out["grad_avg"] = np.asarray(jax.jit(jax.grad(lossavg))(x))
    p, t = jax.jvp(lambda a: hj.allreduce(a, op=hj.Sum), (x,), (jnp.ones(5) * (r + 1),))
    out["jvp"] = (np.asarray(p), np.asarray(t))
    out["grad_bcast"] = np.asarray(jax.jit(jax.grad(
        lambda a: jnp.sum(hj.broadcast(a, 0) * (r + 1))))(x))
    try:
        jax.grad(lambda a: jnp.sum(hj.allreduce(a, op=hj.Max)))(x)
        out["grad_max"] = "no error"
    except NotImplementedError as e:
        out["grad_max"] = str(e)

    # vmap: elementwise across ranks, batch axis anywhere
    out["vmap"] = np.asarray(jax.jit(jax.vmap(lambda a: hj.allreduce(a, op=hj.Sum), in_axes=1))(
        jnp.arange(6.0).reshape(2, 3) + r))
    # collectives inside lax.scan (one per iteration)
    _, ys = jax.jit(lambda xs: jax.lax.scan(
        lambda c, v: (c, hj.allreduce(v, op=hj.Sum, name="scan")), 0.0, xs))(
            jnp.arange(12.0).reshape(4, 3) * (r + 1))
    out["scan"] = np.asarray(ys)
    # programs that differ per rank (rank-dependent constants and shapes) still run
    # their collectives in trace order: XLA alone could schedule them differently
    out["ordered"] = [np.asarray(v) for v in jax.jit(lambda a, b: (
        hj.allreduce(a, op=hj.Sum, name="A2"), hj.allreduce(jnp.full(4, float(r)) * b,
                                                           op=hj.Sum, name="B2")))(
        jnp.ones(3), jnp.float32(2.0))]
    # many dispatches of one jitted collective without waiting in between
    g = jax.jit(lambda a: hj.allreduce(a, op=hj.Sum, name="burst"))
    outs = [g(jnp.full((64,), float(i + r))) for i in range(50)]
    out["burst"] = [float(o[0]) for o in outs]
    return out
"""


def _ref(xs, op):
    import ml_dtypes

    dt = xs[0].dtype
    wide = [x.astype(np.float64) for x in xs]
    if op == 1:  # Sum
        return np.sum(wide, axis=0), dt
    if op == 0:  # Average
        return np.mean(wide, axis=0), dt
    if op == 3:
        return np.min(wide, axis=0), dt
    if op == 4:
        return np.max(wide, axis=0), dt
    raise AssertionError(op, ml_dtypes)


def test_jax_collectives_eager_and_jit():
    res = run(N, _COLLECTIVES, timeout=300)
    r0 = res[0]
    for key, val in r0.items():
        if isinstance(key, tuple) and key[0] == "allreduce":
            xs, eager, jitted = val
            ref, dt = _ref(xs, key[2])
            if dt.kind in "iu":
                np.testing.assert_array_equal(eager, ref.astype(dt), err_msg=str(key))
            else:
                tol = {2: 1e-2}.get(dt.itemsize, 1e-5)
                np.testing.assert_allclose(eager.astype(np.float64), ref, rtol=tol, atol=tol,
                                           err_msg=str(key))
            # eager and jit take different paths into the core: same bits
            np.testing.assert_array_equal(eager, jitted, err_msg=str(key))
    # collective results are bitwise identical across ranks
    same = [k for k in r0 if isinstance(k, tuple)] + [
        "scaled", "tree_eager", "tree_jit", "grouped", "fp16_compressed", "bcast_eager",
        "bcast_jit", "bcast_params", "vmap", "scan", "ordered", "burst"]
    for key in same:
        a, b = r0[key], res[1][key]
        if isinstance(key, tuple):
            a, b = a[1:], b[1:]
        np.testing.assert_equal(a, b, err_msg=f"ranks differ on {key}")

    xs, scaled = r0["scaled"]
    np.testing.assert_allclose(scaled, (xs[0] * 0.5 + xs[1] * 0.5) * 3.0, rtol=1e-5)

    for k in ("tree_eager", "tree_jit"):
        t = r0[k]
        np.testing.assert_array_equal(t["w"], 2 * np.arange(6.0).reshape(2, 3) + 1)
        assert t["b"].dtype.name == "bfloat16"
        np.testing.assert_array_equal(t["b"].astype(np.float32), np.full(4, 3.0))
        assert t["i"][0].dtype == np.int32
        np.testing.assert_array_equal(t["i"][0], np.arange(3) * 3)
        assert t["i"][1].shape == (0,)
        assert float(t["s"]) == 1.0
    np.testing.assert_array_equal(r0["grouped"][0], np.full(3, 0.5))
    assert r0["grouped"][1].dtype == np.float16
    np.testing.assert_array_equal(r0["fp16_compressed"], np.full(5, 1.5, np.float32))
    assert r0["fp16_compressed_dtype"] == "float32"

    for k in ("bcast_eager", "bcast_jit"):
        t = r0[k]
        np.testing.assert_array_equal(t["f"], np.arange(4.0) * 2)
        np.testing.assert_array_equal(t["m"], [False, True])
        np.testing.assert_array_equal(t["k"], np.arange(3) + 10)
    np.testing.assert_array_equal(r0["bcast_params"]["k"], np.arange(3))

    s = 2 * np.arange(5.0) + 1  # x_0 + x_1
    np.testing.assert_allclose(r0["grad_eager"], N * 2 * s)
    np.testing.assert_allclose(r0["grad_jit"], N * 2 * s)
    # d/dx_r sum_r' sum(sin(mean_k x_k^2)) = N * cos(m) * 2 x_r / N
    for r in range(N):
        x = np.arange(5.0) + r
        m = (np.arange(5.0) ** 2 + (np.arange(5.0) + 1) ** 2) / 2
        np.testing.assert_allclose(res[r]["grad_avg"], np.cos(m) * 2 * x, rtol=1e-5)
        # broadcast's gradient (Horovod's): the root gets the ranks' average cotangent
        want = np.full(5, (1.0 + 2.0) / N) if r == 0 else np.zeros(5)
        np.testing.assert_allclose(res[r]["grad_bcast"], want)
    np.testing.assert_allclose(r0["jvp"][0], s)
    np.testing.assert_allclose(r0["jvp"][1], np.full(5, 3.0))
    assert "not differentiable" in r0["grad_max"]

    np.testing.assert_array_equal(r0["vmap"], (2 * np.arange(6.0).reshape(2, 3) + 1).T)
    np.testing.assert_array_equal(r0["scan"], np.arange(12.0).reshape(4, 3) * 3)
    np.testing.assert_array_equal(r0["ordered"][0], np.full(3, 2.0))
    np.testing.assert_array_equal(r0["ordered"][1], np.full(4, 2.0))
    assert r0["burst"] == [2.0 * i + 1 for i in range(50)]


_DIM0 = """
import jax, jax.numpy as jnp, ml_dtypes
import horovodlite.jax as hj

def main(hvd):
    r, n = hj.rank(), hj.size()
    out = {}
    J = lambda f: jax.jit(f)
    a = jnp.arange(6.0, dtype=jnp.float32).reshape(3, 2) + 10 * r
    # allgather: eager (first dims may differ), jit (equal), pytree with bf16 and bool
    out["ag_eager"] = np.asarray(hj.allgather(jnp.ones((1 + r, 2), jnp.int32) * r))
    out["ag_jit"] = np.asarray(J(lambda x: hj.allgather(x))(a))
    t = {"b": jnp.ones((2,), jnp.bfloat16) * (r + 1), "m": jnp.array([r == 1])}
    out["ag_tree"] = jax.tree_util.tree_map(np.asarray, J(lambda t: hj.allgather(t))(t))
    # reducescatter: 5 rows over 2 ranks -> 3 and 2 rows
    b = jnp.arange(10.0).reshape(5, 2) * (r + 1)
    out["rs_eager"] = np.asarray(hj.reducescatter(b, op=hj.Sum))
    out["rs_jit"] = np.asarray(J(lambda x: hj.reducescatter(x, op=hj.Sum))(b))
    out["rs_avg_jit"] = np.asarray(J(lambda x: hj.reducescatter(x))(b))
    # alltoall: equal splits under jit, uneven eagerly
    c = jnp.arange(8.0).reshape(4, 2) + 100 * r
    o, rs = J(lambda x: hj.alltoall(x))(c)
    out["a2a_jit"] = (np.asarray(o), np.asarray(rs))
    o, rs = hj.alltoall(jnp.arange(3.0) + 10 * r, splits=[1, 2] if r == 0 else [2, 1])
    out["a2a_eager"] = (np.asarray(o), np.asarray(rs))
    # broadcast through the core's broadcast, from rank 1, eager and jit
    out["bc_jit"] = np.asarray(J(lambda x: hj.broadcast(x, 1))(a))
    out["bc_eager"] = np.asarray(hj.broadcast(a, 1))
    # pytrees as one group under jit: reducescatter, allgather, broadcast
    tr = {"f": jnp.arange(8.0).reshape(4, 2) * (r + 1), "i": jnp.arange(3, dtype=jnp.int32) + r}
    out["grs"] = jax.tree_util.tree_map(np.asarray, J(lambda t: hj.grouped_reducescatter(t, op=hj.Sum))(tr))
    out["gag"] = jax.tree_util.tree_map(np.asarray, J(lambda t: hj.grouped_allgather(t))(tr))
    out["gbc"] = jax.tree_util.tree_map(np.asarray, J(lambda t: hj.broadcast(t, 1))(tr))
    # gradients: allgather <-> reducescatter, alltoall -> alltoall
    w = jnp.arange(4.0).reshape(2, 2) + r
    out["g_ag"] = np.asarray(J(jax.grad(lambda x: jnp.sum(hj.allgather(x) ** 2)))(w))
    out["g_rs"] = np.asarray(J(jax.grad(lambda x: jnp.sum(hj.reducescatter(x, op=hj.Sum) * (r + 1))))(
        jnp.ones((4, 2))))
    out["g_a2a"] = np.asarray(J(jax.grad(lambda x: jnp.sum(hj.alltoall(x)[0] * jnp.arange(4.0)[:, None])))(
        jnp.ones((4, 2))))
    out["g_rs_avg_scaled"] = np.asarray(J(jax.grad(lambda x: jnp.sum(hj.reducescatter(
        x, prescale_factor=0.5, postscale_factor=3.0) * (r + 1))))(jnp.ones((4, 2))))
    out["g_rs_eager"] = np.asarray(jax.grad(lambda x: jnp.sum(hj.reducescatter(x, op=hj.Sum) * (r + 1)))(
        jnp.ones((4, 2))))
    out["g_grs"] = np.asarray(J(jax.grad(lambda x: sum(jnp.sum(v * (r + 1)) for v in hj.grouped_reducescatter(
        [x, 2.0 * x], op=hj.Sum))))(jnp.ones((4, 2))))
    out["g_gar"] = np.asarray(J(jax.grad(lambda x: sum(jnp.sum(v * (r + 1)) for v in hj.grouped_allreduce(
        [x, 2.0 * x], op=hj.Sum, prescale_factor=0.5))))(jnp.ones((4, 2))))
    out["g_gag"] = np.asarray(J(jax.grad(lambda x: sum(jnp.sum(v) for v in jax.tree_util.tree_map(
        lambda a, p: a ** p, hj.grouped_allgather([x, 3.0 * x]), [2, 1]))))(w))
    # vmap over a dim-0 collective: batch axis is not the rank axis
    out["vmap_ag"] = np.asarray(J(jax.vmap(lambda x: hj.allgather(x)))(jnp.ones((3, 2, 2)) * r))
    try:
        J(lambda x: hj.allgather(x))(jnp.ones((2 + r, 2)))
        out["ag_unequal_jit"] = "no error"
    except Exception as e:
        out["ag_unequal_jit"] = str(e)
    return out
"""


def test_jax_dim0_collectives():
    from horovodlite import ops as np_ops

    if not hasattr(np_ops, "allgather"):
        pytest.skip("this build's core has no allgather/reducescatter/alltoall yet")
    res = run(N, _DIM0, timeout=240)
    for r, o in enumerate(res):
        np.testing.assert_array_equal(o["ag_eager"], [[0, 0], [1, 1], [1, 1]])
        a = [np.arange(6.0).reshape(3, 2) + 10 * k for k in range(N)]
        np.testing.assert_array_equal(o["ag_jit"], np.concatenate(a))
        assert o["ag_tree"]["b"].dtype.name == "bfloat16"
        np.testing.assert_array_equal(o["ag_tree"]["b"].astype(np.float32), [1, 1, 2, 2])
        np.testing.assert_array_equal(o["ag_tree"]["m"], [False, True])
        full = np.arange(10.0).reshape(5, 2) * 3
        mine = full[:3] if r == 0 else full[3:]
        np.testing.assert_array_equal(o["rs_eager"], mine)
        np.testing.assert_array_equal(o["rs_jit"], mine)
        np.testing.assert_allclose(o["rs_avg_jit"], mine / 2)
        c = [np.arange(8.0).reshape(4, 2) + 100 * k for k in range(N)]
        np.testing.assert_array_equal(o["a2a_jit"][0], np.concatenate([x[2 * r:2 * r + 2] for x in c]))
        np.testing.assert_array_equal(o["a2a_jit"][1], [2, 2])
        want = [np.array([0.0]), np.array([10.0, 11.0])] if r == 0 else [np.array([1.0, 2.0]), np.array([12.0])]
        np.testing.assert_array_equal(o["a2a_eager"][0], np.concatenate(want))
        np.testing.assert_array_equal(o["a2a_eager"][1], [len(w) for w in want])
        np.testing.assert_array_equal(o["bc_jit"], a[1])
        np.testing.assert_array_equal(o["bc_eager"], a[1])
        f_sum = np.arange(8.0).reshape(4, 2) * 3
        np.testing.assert_array_equal(o["grs"]["f"], f_sum[2 * r:2 * r + 2])
        i_sum = 2 * np.arange(3) + 1  # 3 rows over 2 ranks: 2 and 1
        np.testing.assert_array_equal(o["grs"]["i"], i_sum[:2] if r == 0 else i_sum[2:])
        np.testing.assert_array_equal(o["gag"]["f"], np.concatenate(
            [np.arange(8.0).reshape(4, 2), 2 * np.arange(8.0).reshape(4, 2)]))
        np.testing.assert_array_equal(o["gag"]["i"], [0, 1, 2, 1, 2, 3])
        np.testing.assert_array_equal(o["gbc"]["f"], 2 * np.arange(8.0).reshape(4, 2))
        np.testing.assert_array_equal(o["gbc"]["i"], [1, 2, 3])
        # Horovod's gradients. allgather: this rank's rows of the ranks' average
        # cotangent; loss_r' = sum(allgather(x)^2) gives 2 x_r on every rank.
        wr = np.arange(4.0).reshape(2, 2) + r
        np.testing.assert_array_equal(o["g_ag"], 2 * wr)
        np.testing.assert_array_equal(o["g_gag"], 2 * wr + 3.0)
        # reducescatter: the allgather of the cotangents ((r'+1) on rank r's rows), times
        # the set size for Sum, times the scale factors.
        owner = np.repeat([[1.0], [1.0], [2.0], [2.0]], 2, 1)
        np.testing.assert_array_equal(o["g_rs"], N * owner)
        np.testing.assert_array_equal(o["g_rs_eager"], N * owner)
        np.testing.assert_allclose(o["g_rs_avg_scaled"], 1.5 * owner)
        np.testing.assert_array_equal(o["g_grs"], 3.0 * N * owner)
        # grouped allreduce: the same op and scale on the cotangents, (1 + 2) * 0.5 per
        # member, the second member counted twice.
        np.testing.assert_allclose(o["g_gar"], np.full((4, 2), 3 * 1.5))
        # output row j of every rank is weighted j; row i of rank r's input lands on
        # rank i // 2 as row 2r + i % 2, so its gradient is that weight
        np.testing.assert_array_equal(
            o["g_a2a"], np.repeat([[2.0 * r + i % 2] for i in range(4)], 2, 1))
        np.testing.assert_array_equal(o["vmap_ag"], np.concatenate([np.zeros((3, 2, 2)), np.ones((3, 2, 2))], 1))
        assert "equal first dimensions" in o["ag_unequal_jit"], o["ag_unequal_jit"]


_ERRORS = """
import jax, jax.numpy as jnp
import horovodlite.jax as hj

def main(hvd):
    out = {}
    try:
        hj.allreduce(jnp.ones(3))
    except ValueError as e:
        out["before_init"] = str(e)
    hj.init()
    r = hj.rank()
    def catch(key, fn):
        try:
            v = fn()
            jax.block_until_ready(v)
            out[key] = "no error"
        except Exception as e:
            out[key] = (type(e).__name__, str(e))
    f = jax.jit(lambda a: hj.allreduce(a, name="shape"))
    catch("jit_shape", lambda: f(jnp.ones(3 + r)))
    catch("eager_shape", lambda: hj.allreduce(jnp.ones(3 + r), name="eshape"))
    catch("jit_dtype", lambda: jax.jit(lambda a: hj.allreduce(a, name="dtype"))(
        jnp.ones(3, jnp.float32 if r == 0 else jnp.int32)))
    catch("jit_op", lambda: jax.jit(lambda a: hj.allreduce(
        a, op=hj.Sum if r == 0 else hj.Max, name="op"))(jnp.ones(3)))
    catch("group_member", lambda: jax.jit(lambda t: hj.allreduce(t, name="grp"))(
        [jnp.ones(2), jnp.ones(2 + r)]))
    catch("unsupported", lambda: jax.jit(lambda a: hj.allreduce(a))(jnp.ones(3, jnp.uint32)))
    catch("bool_allreduce", lambda: hj.allreduce(jnp.ones(3, bool)))
    catch("bad_root", lambda: hj.broadcast(jnp.ones(3), 5))
    # the engine is still healthy afterwards, from inside jit
    out["after"] = np.asarray(jax.jit(lambda a: hj.allreduce(a, op=hj.Sum))(jnp.ones(2)))
    return out
"""


def test_jax_errors_raise_on_every_rank():
    # The blocking FFI mode (what jaxlibs without FFI futures get) is covered here; the
    # other tests use the asynchronous one.
    res = run(N, _ERRORS, timeout=240, init=False, env={"HOROVODLITE_JAX_FFI_ASYNC": "0"})
    for r, out in enumerate(res):
        assert "hvd.init()" in out["before_init"]
        for key, what in (("jit_shape", "shape"), ("eager_shape", "shape"),
                          ("jit_dtype", "dtype"), ("jit_op", "op"), ("group_member", "shape")):
            kind, msg = out[key]
            # jax.errors.JaxRuntimeError (XlaRuntimeError in older jax) from inside jit
            assert kind.endswith("RuntimeError") or kind == "HorovodInternalError", (r, key, kind)
            assert "rank 0" in msg and "rank 1" in msg, (r, key, msg)
        assert "'shape'" in out["jit_shape"][1] and "(3,)" in out["jit_shape"][1]
        assert "(4,)" in out["jit_shape"][1]
        assert "float32" in out["jit_dtype"][1] and "int32" in out["jit_dtype"][1]
        # eager errors are ours too: HorovodTypeError / HorovodValueError subclass both
        assert out["unsupported"][0].endswith("TypeError") and "uint32" in out["unsupported"][1]
        assert out["bool_allreduce"][0].endswith("TypeError")
        assert out["bad_root"][0].endswith("ValueError")
        np.testing.assert_array_equal(out["after"], [2.0, 2.0])


_OPTIMIZER = """
import jax, jax.numpy as jnp, optax
import horovodlite.jax as hj

K, B = 4, 8  # steps, per-rank batch

def model(p, x):
    return jnp.tanh(x @ p["w1"] + p["b1"]) @ p["w2"]

def loss_fn(p, x, y):
    return jnp.mean((model(p, x) - y) ** 2)

def main(hvd):
    r, n = hj.rank(), hj.size()
    rng = np.random.default_rng(42)  # the same data on every rank
    X = rng.standard_normal((K, n * B, 5)).astype(np.float32)
    Y = rng.standard_normal((K, n * B, 2)).astype(np.float32)
    init = {"w1": jnp.asarray(rng.standard_normal((5, 16)), jnp.float32) * 0.3,
            "b1": jnp.zeros(16), "w2": jnp.asarray(rng.standard_normal((16, 2)), jnp.float32)}
    # different starting points per rank: broadcast_parameters must fix that
    mine = jax.tree_util.tree_map(lambda a: a + r, init)
    params = hj.broadcast_parameters(mine, root_rank=0)
    out = {"bcast_ok": all(np.array_equal(a, b) for a, b in zip(
        jax.tree_util.tree_leaves(params), jax.tree_util.tree_leaves(init)))}

    def train(tx, params, batches):
        state = tx.init(params)
        @jax.jit
        def step(params, state, x, y):
            g = jax.grad(loss_fn)(params, x, y)
            u, state = tx.update(g, state, params)
            return optax.apply_updates(params, u), state
        for x, y in batches:
            params, state = step(params, state, x, y)
        return params

    shard = lambda k: (X[k, r * B:(r + 1) * B], Y[k, r * B:(r + 1) * B])
    dist = train(hj.DistributedOptimizer(optax.adam(1e-2)), params, [shard(k) for k in range(K)])
    single = train(optax.adam(1e-2), init, [(X[k], Y[k]) for k in range(K)])
    out["dist"] = jax.tree_util.tree_map(np.asarray, dist)
    out["single"] = jax.tree_util.tree_map(np.asarray, single)

    # backward_passes_per_step=2: two half-batches per step equal one full batch
    half = [(X[k, r * B:r * B + B // 2], Y[k, r * B:r * B + B // 2]) for k in range(K)]
    half2 = [(X[k, r * B + B // 2:(r + 1) * B], Y[k, r * B + B // 2:(r + 1) * B]) for k in range(K)]
    micro = [b for pair in zip(half, half2) for b in pair]
    acc = train(hj.DistributedOptimizer(optax.sgd(0.1), backward_passes_per_step=2), init, micro)
    out["acc"] = jax.tree_util.tree_map(np.asarray, acc)
    out["acc_single"] = jax.tree_util.tree_map(
        np.asarray, train(optax.sgd(0.1), init, [(X[k], Y[k]) for k in range(K)]))

    # allreduce_gradients for plain jax.grad users, with fp16 compression
    g = jax.grad(loss_fn)(init, *shard(0))
    out["ag"] = jax.tree_util.tree_map(np.asarray, jax.jit(
        lambda g: hj.allreduce_gradients(g, compression=hj.Compression.fp16))(g))
    out["ag_ref"] = jax.tree_util.tree_map(np.asarray, jax.grad(loss_fn)(init, X[0], Y[0]))
    return out
"""


def test_jax_distributed_optimizer_matches_single_process():
    res = run(N, _OPTIMIZER, timeout=240)
    for r in range(N):
        o = res[r]
        assert o["bcast_ok"]
        for k in o["single"]:
            np.testing.assert_allclose(o["dist"][k], o["single"][k], rtol=1e-5, atol=1e-6,
                                       err_msg=k)
            np.testing.assert_allclose(o["acc"][k], o["acc_single"][k], rtol=1e-5, atol=1e-6,
                                       err_msg=k)
            np.testing.assert_allclose(o["ag"][k], o["ag_ref"][k], rtol=2e-3, atol=2e-3, err_msg=k)
        # identical parameters on every rank, to the bit
        for k in o["dist"]:
            np.testing.assert_array_equal(o["dist"][k], res[0]["dist"][k])
            np.testing.assert_array_equal(o["acc"][k], res[0]["acc"][k])


def test_jax_digits_example_trains_to_95_percent():
    pytest.importorskip("sklearn", reason="the digits example needs scikit-learn")
    proc = launch(N, ROOT / "examples" / "jax_digits.py", ["--epochs", "15"], timeout=240)
    assert proc.returncode == 0, proc.stdout[-4000:]
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("test accuracy:")]
    assert len(line) == 1, proc.stdout[-4000:]  # printed by rank 0 only
    assert float(line[0].split()[2]) >= 0.95, line[0]
