"""horovodlite.tensorflow on 2 ranks: collectives on tf tensors (eager and tf.function)
against numpy references, their gradients, errors, and DistributedGradientTape against
one process on the concatenated batch. TensorFlow takes seconds to import, so each test
is one mpirun launch covering many cases."""
import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install tensorflow-cpu)")

from mpirun import run  # noqa: E402

ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
N = 2

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int32", "int64", "int8", "uint8", "int16", "uint16"]


def _input(rank, dtype, shape=(3, 5)):
    import ml_dtypes

    rng = np.random.default_rng(100 + rank)
    if dtype in INTS:
        return rng.integers(1, 5, size=shape).astype(dtype)
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    return rng.standard_normal(shape).astype(np.float32).astype(dt)


ALLREDUCE = """
import tensorflow as tf
import horovodlite.tensorflow as htf

def _input(rank, dtype, shape=(3, 5)):
    import ml_dtypes
    rng = np.random.default_rng(100 + rank)
    if dtype in {ints!r}:
        return rng.integers(1, 5, size=shape).astype(dtype)
    dt = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    return rng.standard_normal(shape).astype(np.float32).astype(dt)

def allreduce_cases():
    r = htf.rank()
    out = {{}}
    ops = {{"Sum": htf.Sum, "Average": htf.Average, "Min": htf.Min, "Max": htf.Max,
           "Product": htf.Product}}
    static_shapes = []

    @tf.function
    def in_graph(t, names):
        ys = {{n: htf.allreduce(t, op=ops[n]) for n in names}}
        static_shapes.extend(tuple(y.shape) for y in ys.values())
        return ys

    for dtype in {floats!r} + {ints!r}:
        x = tf.constant(_input(r, dtype))
        names = [n for n in ops if not (dtype in {ints!r} and n == "Average")]
        for opname, y in in_graph(x, names).items():
            out[(dtype, opname, "graph")] = np.asarray(y)
        for opname in names:
            out[(dtype, opname, "eager")] = np.asarray(htf.allreduce(x, op=ops[opname]))
    out["static_shapes"] = static_shapes
    x = tf.constant(_input(r, "float32"))
    out["scaled"] = htf.allreduce(x, op=htf.Sum, prescale_factor=0.5, postscale_factor=3.0).numpy()
    out["average_kw"] = htf.allreduce(x, average=False).numpy()
    out["fp16"] = htf.allreduce(x, compression=htf.Compression.fp16)
    out["fp16"] = (out["fp16"].dtype.name, out["fp16"].numpy())
    out["bf16"] = htf.allreduce(x, compression=htf.Compression.bf16).numpy()
    out["scalar"] = htf.allreduce(tf.constant(float(r + 1)), op=htf.Sum).numpy()
    out["empty"] = htf.allreduce(tf.zeros([0, 4]), op=htf.Sum).shape.as_list()
    out["variable"] = htf.allreduce(tf.Variable(tf.fill([2], float(r))), op=htf.Sum).numpy()
    g = htf.grouped_allreduce([x, 2 * x, tf.constant([r], tf.int64)], op=htf.Sum)
    out["grouped"] = [t.numpy() for t in g]
    out["grouped_graph"] = [t.numpy() for t in tf.function(
        lambda a, b: htf.grouped_allreduce([a, b], op=htf.Average))(x, 3 * x)]

    # Gradients, with a rank-dependent upstream weight: d/dx_s of sum_r w_r . y_r.
    w = tf.constant(np.random.default_rng(7 + r).standard_normal((3, 5)).astype(np.float32))
    def grad_of(op, fn=lambda f: f):
        def g(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = htf.allreduce(x * x, op=op, prescale_factor=2.0)
                loss = tf.reduce_sum(w * y)
            return tape.gradient(loss, x)
        return fn(g)(x).numpy()
    for opname in ("Sum", "Average"):
        out[("grad", opname, "eager")] = grad_of(ops[opname])
        out[("grad", opname, "graph")] = grad_of(ops[opname], tf.function)
    with tf.GradientTape() as tape:
        tape.watch(x)
        a, b = htf.grouped_allreduce([x, x * x], op=htf.Sum)
        loss = tf.reduce_sum(w * a) + tf.reduce_sum(w * b)
    out[("grad", "grouped")] = tape.gradient(loss, x).numpy()
    out["x"], out["w"] = x.numpy(), w.numpy()
    return out
"""


def _close(a, b, dtype):
    if dtype in ("float16", "bfloat16"):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32),
                                   rtol=1e-2, atol=1e-2)
    elif dtype in ("float32", "float64"):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_array_equal(a, b)


OTHERS = """
def other_cases():
    r, n = htf.rank(), htf.size()
    out = {}
    rng = np.random.default_rng(50 + r)
    x = tf.constant(rng.standard_normal((r + 1, 3)).astype(np.float32))  # r+1 rows on rank r
    w = tf.constant(rng.standard_normal((3, 3)).astype(np.float32))      # the gathered shape
    wf = tf.constant(rng.standard_normal(32).astype(np.float32))          # for grouped outputs
    out["x"], out["w"], out["wf"] = x.numpy(), w.numpy(), wf.numpy()

    def with_grad(fn, x, graph, weight=None):
        def body(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = fn(x)
                flat = tf.reshape(w if weight is None else weight, [-1])
                loss = tf.reduce_sum(flat[:tf.size(y)] * tf.reshape(y, [-1]))
            return y, tape.gradient(loss, x)
        y, g = (tf.function(body) if graph else body)(x)
        return y.numpy(), g.numpy()

    for mode in ("eager", "graph"):
        g = mode == "graph"
        out[("allgather", mode)] = with_grad(lambda t: htf.allgather(t), x, g)
        out[("broadcast", mode)] = with_grad(lambda t: htf.broadcast(t, 1), tf.tile(x[:1], [3, 1]), g)
        out[("reducescatter", mode)] = with_grad(
            lambda t: htf.reducescatter(t, op=htf.Sum), tf.tile(x[:1], [3, 1]) * (r + 1), g)
        out[("reducescatter_avg", mode)] = with_grad(
            lambda t: htf.reducescatter(t), tf.tile(x[:1], [3, 1]) * (r + 1), g)
        out[("reducescatter_scaled", mode)] = with_grad(
            lambda t: htf.reducescatter(t, op=htf.Sum, prescale_factor=0.5, postscale_factor=3.0),
            tf.tile(x[:1], [3, 1]) * (r + 1), g)
        # grouped: the gradient of each member, as for the single op (w weighs the
        # concatenation of the outputs, flattened).
        out[("grouped_allgather", mode)] = with_grad(
            lambda t: tf.concat([tf.reshape(a, [-1]) for a in htf.grouped_allgather(
                [t, 2.0 * t[:1], tf.fill([2], r)])[:2]], 0), x, g, wf)
        out[("grouped_reducescatter", mode)] = with_grad(
            lambda t: tf.concat([tf.reshape(a, [-1]) for a in htf.grouped_reducescatter(
                [t, 3.0 * t], op=htf.Sum, postscale_factor=0.5)], 0), tf.tile(x[:1], [3, 1]), g, wf)
        out[("grouped_reducescatter_avg", mode)] = with_grad(
            lambda t: tf.concat([tf.reshape(a, [-1]) for a in htf.grouped_reducescatter(
                [t, 3.0 * t])], 0), tf.tile(x[:1], [3, 1]), g, wf)
        splits = tf.constant([1, 2] if r == 0 else [2, 1], tf.int32)
        def a2a(t):
            y, received = htf.alltoall(t, splits=splits)
            out[("alltoall_received", mode)] = received
            return y
        out[("alltoall", mode)] = with_grad(a2a, tf.tile(x[:1], [3, 1]) + tf.range(3.0)[:, None], g)
        out[("alltoall_received", mode)] = np.asarray(out[("alltoall_received", mode)]) \
            if mode == "eager" else None
    out["alltoall_no_splits"] = htf.alltoall(tf.fill([2, 3], float(r))).numpy()
    out["allgather_int"] = htf.allgather(tf.fill([r + 1], r)).numpy()
    out["allgather_bool"] = htf.allgather(tf.constant([r == 0, True])).numpy()
    out["allgather_uint32"] = htf.allgather(tf.constant([7 + r], tf.uint32)).numpy()
    out["grouped_allgather"] = [t.numpy() for t in htf.grouped_allgather([x, 2 * x])]
    out["grouped_reducescatter"] = [t.numpy() for t in htf.grouped_reducescatter(
        [tf.ones([4, 2]) * (r + 1), tf.ones([3]) * (r + 1)], op=htf.Sum)]
    out["allgather_shape_in_graph"] = tuple(tf.function(
        lambda t: htf.allgather(t)).get_concrete_function(tf.TensorSpec([2, 3])).structured_outputs.shape.as_list())

    # tf.IndexedSlices: gathered, averaged by dividing the values.
    sl = tf.IndexedSlices(tf.fill([1, 2], float(r + 1)), tf.constant([r]), tf.constant([4, 2]))
    red = htf.allreduce(sl)
    out["sparse"] = (type(red).__name__, red.values.numpy(), red.indices.numpy())

    # Variables: ranks start apart, end with rank 0's values (ints and odd dtypes too).
    vs = [tf.Variable(tf.fill([2, 2], float(r))), tf.Variable(r, dtype=tf.int64),
          tf.Variable([r, r], dtype=tf.uint32)]
    htf.broadcast_variables(vs, root_rank=0)
    out["broadcast_variables"] = [v.numpy() for v in vs]
    v2 = [tf.Variable(float(r) + 1.0)]
    @tf.function
    def assign_in_graph():
        htf.broadcast_variables(v2, root_rank=1)
    assign_in_graph()
    out["broadcast_variables_graph"] = v2[0].numpy()
    out["broadcast_object"] = htf.broadcast_object({"from": r, "list": [r] * 3}, root_rank=1)
    out["allgather_object"] = htf.allgather_object(("rank", r))
    bcast = htf.broadcast_object_fn(root_rank=1)
    out["broadcast_object_fn"] = [bcast({"call": k, "from": r}) for k in range(2)]
    out["small_ops"] = (int(htf.size_op()), int(htf.rank_op()), int(htf.process_set_included_op()),
                        int(htf.process_set_included_op(process_set_id=12345)),
                        htf.handle_average_backwards_compatibility(None, False) == htf.Sum,
                        htf.check_num_rank_power_of_2(4), htf.check_num_rank_power_of_2(6))
    htf.barrier()
    out["join"] = int(htf.join())
    return out
"""

COLLECTIVES_MAIN = """
def main(hvd):
    return {"allreduce": allreduce_cases(), "errors": error_cases(), "others": other_cases()}
"""


@pytest.fixture(scope="module")
def collectives():
    """One launch for every collective case (TensorFlow's import dominates a launch)."""
    code = (ALLREDUCE.format(floats=FLOATS, ints=INTS) + ERRORS + OTHERS
            + COLLECTIVES_MAIN)
    res = run(N, code, env=ENV, timeout=300)
    return {k: [r[k] for r in res] for k in res[0]}


def test_allreduce_values_gradients_eager_and_graph(collectives):
    res = collectives["allreduce"]
    reduce = {"Sum": lambda xs: xs[0] + xs[1], "Average": lambda xs: (xs[0] + xs[1]) / 2,
              "Min": np.minimum.reduce, "Max": np.maximum.reduce,
              "Product": lambda xs: xs[0] * xs[1]}
    for key, got in res[0].items():
        if not (isinstance(key, tuple) and len(key) == 3 and key[0] != "grad"):
            continue
        dtype, opname, mode = key
        # Bitwise identical on every rank, eager or graph.
        assert np.asarray(got).tobytes() == np.asarray(res[1][key]).tobytes(), key
        assert got.dtype == _input(0, dtype).dtype, key
        xs = [_input(r, dtype) for r in range(N)]
        ref = reduce[opname]([x.astype(np.float64) for x in xs]).astype(xs[0].dtype)
        _close(got, ref, dtype)
    assert set(res[0]["static_shapes"]) == {(3, 5)}  # shapes survive the numpy_function

    xs = [r_["x"] for r_ in res]
    ws = [r_["w"] for r_ in res]
    for r in range(N):
        out = res[r]
        np.testing.assert_allclose(out["scaled"], 3.0 * (0.5 * xs[0] + 0.5 * xs[1]), rtol=1e-6)
        np.testing.assert_allclose(out["average_kw"], xs[0] + xs[1], rtol=1e-6)
        assert out["fp16"][0] == "float32"
        np.testing.assert_allclose(out["fp16"][1], (xs[0] + xs[1]) / 2, rtol=2e-3, atol=2e-3)
        np.testing.assert_allclose(out["bf16"], (xs[0] + xs[1]) / 2, rtol=2e-2, atol=2e-2)
        assert out["scalar"] == 3.0 and out["empty"] == [0, 4]
        np.testing.assert_array_equal(out["variable"], [1.0, 1.0])
        np.testing.assert_allclose(out["grouped"][0], xs[0] + xs[1], rtol=1e-6)
        np.testing.assert_allclose(out["grouped"][1], 2 * (xs[0] + xs[1]), rtol=1e-6)
        np.testing.assert_array_equal(out["grouped"][2], [1])
        np.testing.assert_allclose(out["grouped_graph"][1], 3 * (xs[0] + xs[1]) / 2, rtol=1e-6)
        # y_r = op(2 x^2): dL/dx_r = 4 x_r * (sum_s w_s) for Sum, (mean_s w_s) for Average.
        wsum = ws[0] + ws[1]
        for mode in ("eager", "graph"):
            np.testing.assert_allclose(out[("grad", "Sum", mode)], 4 * xs[r] * wsum, rtol=1e-5)
            np.testing.assert_allclose(out[("grad", "Average", mode)], 4 * xs[r] * wsum / 2,
                                       rtol=1e-5)
        np.testing.assert_allclose(out[("grad", "grouped")], wsum + 2 * xs[r] * wsum, rtol=1e-5)


ERRORS = """
def error_cases():
    r = htf.rank()
    seen = {}
    def expect(key, fn, exc):
        try:
            fn()
            seen[key] = "no error"
        except exc as e:
            seen[key] = (type(e).__name__, str(e)[-400:])
    expect("shape_eager", lambda: htf.allreduce(tf.ones([2 + r]), name="bad.shape"),
           htf.HorovodInternalError)
    expect("dtype_eager", lambda: htf.allreduce(tf.ones([2], [tf.float32, tf.float64][r]),
                                                name="bad.dtype"), htf.HorovodInternalError)
    expect("op_eager", lambda: htf.allreduce(tf.ones([2]), op=[htf.Sum, htf.Max][r],
                                             name="bad.op"), htf.HorovodInternalError)
    f = tf.function(lambda t: htf.allreduce(t, name="bad.graph"))
    expect("shape_graph", lambda: f(tf.ones([2 + r])), tf.errors.OpError)
    expect("bool", lambda: htf.allreduce(tf.constant([True])), TypeError)
    expect("string", lambda: htf.allreduce(tf.constant(["a"])), TypeError)
    expect("xla", lambda: tf.function(htf.allreduce, jit_compile=True)(tf.ones([2])),
           RuntimeError)
    expect("adasum", lambda: htf.allreduce(tf.ones([2]), op=htf.Adasum), NotImplementedError)
    expect("predivide", lambda: htf.DistributedGradientTape(
        tf.GradientTape(), op=htf.Sum, gradient_predivide_factor=2.0), ValueError)
    # The engine is still usable after all of that.
    seen["after"] = htf.allreduce(tf.fill([2], float(r)), op=htf.Sum).numpy()
    return seen
"""


def test_errors_surface_on_every_rank(collectives):
    res = collectives["errors"]
    for r in range(N):
        seen = res[r]
        for key in ("shape_eager", "dtype_eager", "op_eager", "shape_graph"):
            assert seen[key] != "no error", (r, key)
        assert "bad.shape" in seen["shape_eager"][1] and "(2,)" in seen["shape_eager"][1] \
            and "(3,)" in seen["shape_eager"][1]
        assert "bad.dtype" in seen["dtype_eager"][1]
        assert "bad.op" in seen["op_eager"][1]
        assert "bad.graph" in seen["shape_graph"][1] and "mismatched shape" in seen["shape_graph"][1]
        assert "bool" in seen["bool"][1] and "string" in seen["string"][1]
        assert "jit_compile" in seen["xla"][1]
        for key in ("adasum", "predivide"):
            assert seen[key] != "no error", (r, key)
        np.testing.assert_array_equal(seen["after"], [1.0, 1.0])


TAPE = """
import tensorflow as tf
import horovodlite.tensorflow as htf

N, B, K, LR, VOCAB = 2, 8, 3, 0.1, 11

def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((K, N * B, 4)).astype(np.float32)
    ids = rng.integers(0, VOCAB, size=(K, N * B)).astype(np.int32)
    y = rng.standard_normal((K, N * B, 1)).astype(np.float32)
    return x, ids, y

def make_vars():
    rng = np.random.default_rng(1)
    return [tf.Variable(rng.standard_normal(s).astype(np.float32) * 0.5, name=n)
            for n, s in (("w1", (4, 6)), ("b1", (6,)), ("emb", (VOCAB, 6)), ("w2", (6, 1)))] + \\
           [tf.Variable(tf.ones([3]), name="unused")]

def loss_fn(vs, x, ids, y):
    w1, b1, emb, w2, _ = vs
    h = tf.nn.tanh(x @ w1 + b1 + tf.gather(emb, ids))
    return tf.reduce_mean((h @ w2 - y) ** 2)

def train(shard, distributed, graph, **kw):
    vs = make_vars()
    if kw.pop("groups_of_variables", False):
        kw["groups"] = [[vs[0], vs[1]], [vs[3]]]  # emb reduced on its own
    x, ids, y = data()
    def step(x, ids, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(vs, x, ids, y)
        if distributed:
            tape = htf.DistributedGradientTape(tape, **kw)
        grads = tape.gradient(loss, vs)
        assert grads[-1] is None  # no gradient stays None
        for v, g in zip(vs[:-1], grads[:-1]):
            v.assign_sub(LR * tf.convert_to_tensor(g))
        return loss
    if graph:
        step = tf.function(step)
    for k in range(K):
        step(x[k][shard], ids[k][shard], y[k][shard])
    return [v.numpy() for v in vs[:-1]]

def main(hvd):
    r = htf.rank()
    assert htf.size() == N
    mine = slice(r * B, (r + 1) * B)
    out = {"reference": train(slice(None), False, False)}
    variants = {
        "eager": (False, dict(sparse_as_dense=True)),
        "graph": (True, dict(sparse_as_dense=True)),
        "graph_groups_predivide": (True, dict(sparse_as_dense=True, groups=2,
                                               gradient_predivide_factor=2.0)),
        "eager_var_groups": (False, dict(sparse_as_dense=True, groups_of_variables=True)),
        "graph_fp16": (True, dict(sparse_as_dense=True, compression=htf.Compression.fp16)),
    }
    variants["graph_sparse_allgather"] = (True, dict())
    variants["eager_sparse_allgather"] = (False, dict())
    for name, (graph, kw) in variants.items():
        out[name] = train(mine, True, graph, **kw)
    # A tf.compat.v1 optimizer wrapped by hvd.DistributedOptimizer, through minimize().
    for graph in (False, True):
        vs = make_vars()
        x, ids, y = data()
        opt = htf.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(LR),
                                       sparse_as_dense=True)
        def v1_step(x, ids, y):
            opt.minimize(lambda: loss_fn(vs, x, ids, y), var_list=vs[:-1])
        step = tf.function(v1_step) if graph else v1_step
        for k in range(K):
            step(x[k][mine], ids[k][mine], y[k][mine])
        out["v1_graph" if graph else "v1_eager"] = [v.numpy() for v in vs[:-1]]
    return out
"""


def test_gradient_tape_matches_one_process_on_the_whole_batch():
    res = run(N, TAPE, env=ENV, timeout=240)
    ref = res[0]["reference"]
    variants = [k for k in res[0] if k != "reference"]
    assert len(variants) == 9
    for name in variants:
        tol = 2e-3 if "fp16" in name else 1e-5
        for r in range(N):
            for got, want in zip(res[r][name], ref):
                np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
        for a, b in zip(res[0][name], res[1][name]):  # every rank holds the same weights
            assert a.tobytes() == b.tobytes(), name


def test_allgather_broadcast_reducescatter_alltoall_and_gradients(collectives):
    res = collectives["others"]
    xs = [res[r]["x"] for r in range(N)]
    ws = [res[r]["w"] for r in range(N)]
    gathered = np.concatenate(xs)
    wsum = ws[0] + ws[1]
    for r in range(N):
        out = res[r]
        for mode in ("eager", "graph"):
            # Horovod's gradients (2 ranks; w_s is rank s's upstream gradient):
            # allgather: rows r of the average of the w_s.
            wavg = wsum / N
            mine_rows = slice(0, 1) if r == 0 else slice(1, 3)
            y, g = out[("allgather", mode)]
            np.testing.assert_array_equal(y, gathered)
            np.testing.assert_allclose(g, wavg[mine_rows], rtol=1e-6)
            # broadcast from rank 1: the root gets the average of the w_s, others zeros.
            y, g = out[("broadcast", mode)]
            np.testing.assert_array_equal(y, np.tile(xs[1][:1], (3, 1)))
            np.testing.assert_allclose(g, wavg if r == 1 else 0 * wsum, rtol=1e-6)
            # grouped_allgather of [x, 2 x[:1], ints]: wf weighs the two float outputs
            # (3x3 then 2x3), flattened one after the other.
            flat = [res[s]["wf"] for s in range(N)]
            wa = [f[:9].reshape(3, 3) for f in flat]
            wb = [f[9:15].reshape(2, 3) for f in flat]
            ga = (wa[0] + wa[1]) / N
            gb = (wb[0] + wb[1]) / N
            y, g = out[("grouped_allgather", mode)]
            np.testing.assert_allclose(g, ga[mine_rows] + 2.0 * np.concatenate(
                [gb[r:r + 1], np.zeros((len(xs[r]) - 1, 3), np.float32)]), rtol=1e-6, atol=1e-7)
            # reducescatter of 3 rows: rank 0 keeps rows 0-1, rank 1 row 2.
            rows = slice(0, 2) if r == 0 else slice(2, 3)
            total = sum(np.tile(xs[s][:1], (3, 1)) * (s + 1) for s in range(N))
            y, g = out[("reducescatter", mode)]
            np.testing.assert_allclose(y, total[rows], rtol=1e-6)
            # Horovod: the allgather of the upstream gradients, times the set size for Sum
            # (the "expected 2.0 at 2 ranks"), times pre- and postscale.
            gathered_w = np.concatenate([ws[0][:2], ws[1][:1]])
            np.testing.assert_allclose(g, N * gathered_w, rtol=1e-6)
            y, g = out[("reducescatter_avg", mode)]
            np.testing.assert_allclose(y, total[rows] / 2, rtol=1e-6)
            np.testing.assert_allclose(g, gathered_w, rtol=1e-6)
            y, g = out[("reducescatter_scaled", mode)]
            np.testing.assert_allclose(y, 1.5 * total[rows], rtol=1e-6)
            np.testing.assert_allclose(g, 1.5 * N * gathered_w, rtol=1e-6)
            # grouped_reducescatter of [t, 3 t] (3 rows each: rank 0 keeps 2, rank 1 one):
            # outputs flattened [a (rows x 3), b (rows x 3)] weighed by w's first values.
            n_out = [2, 1]
            fw = [res[s]["wf"] for s in range(N)]
            wa = [fw[s][:3 * n_out[s]].reshape(n_out[s], 3) for s in range(N)]
            wb = [fw[s][3 * n_out[s]:6 * n_out[s]].reshape(n_out[s], 3) for s in range(N)]
            ga, gb = np.concatenate(wa), np.concatenate(wb)
            y, g = out[("grouped_reducescatter", mode)]
            np.testing.assert_allclose(g, N * 0.5 * (ga + 3.0 * gb), rtol=1e-5)
            y, g = out[("grouped_reducescatter_avg", mode)]
            np.testing.assert_allclose(g, ga + 3.0 * gb, rtol=1e-5)
            # alltoall: rank 0 sends [1, 2] rows, rank 1 sends [2, 1].
            send = [np.tile(xs[s][:1], (3, 1)) + np.arange(3.0)[:, None] for s in range(N)]
            mine = (np.concatenate([send[0][:1], send[1][:2]]) if r == 0
                    else np.concatenate([send[0][1:], send[1][2:]]))
            y, g = out[("alltoall", mode)]
            np.testing.assert_allclose(y, mine, rtol=1e-6)
            # grad goes back: rows I sent to rank j come back with rank j's weights.
            back = (np.concatenate([ws[0][:1], ws[1][:2]]) if r == 0
                    else np.concatenate([ws[0][1:3], ws[1][2:3]]))
            np.testing.assert_allclose(g, back, rtol=1e-6)
        np.testing.assert_array_equal(out[("alltoall_received", "eager")], [1, 2] if r == 0 else [2, 1])
        np.testing.assert_array_equal(out["alltoall_no_splits"], [[0.0] * 3, [1.0] * 3])
        np.testing.assert_array_equal(out["allgather_int"], [0, 1, 1])
        np.testing.assert_array_equal(out["allgather_bool"], [True, True, False, True])
        np.testing.assert_array_equal(out["allgather_uint32"], [7, 8])
        np.testing.assert_array_equal(out["grouped_allgather"][1], 2 * gathered)
        np.testing.assert_array_equal(out["grouped_reducescatter"][0], np.full((2, 2), 3.0))
        np.testing.assert_array_equal(out["grouped_reducescatter"][1], np.full(2 - r, 3.0))
        assert out["allgather_shape_in_graph"] == (None, 3)
        kind, values, indices = out["sparse"]
        assert kind == "IndexedSlices"
        np.testing.assert_allclose(values, [[0.5, 0.5], [1.0, 1.0]])
        np.testing.assert_array_equal(indices, [0, 1])
        bv = out["broadcast_variables"]
        np.testing.assert_array_equal(bv[0], np.zeros((2, 2)))
        assert bv[1] == 0 and list(bv[2]) == [0, 0]
        assert out["broadcast_variables_graph"] == 2.0
        assert out["broadcast_object"] == {"from": 1, "list": [1, 1, 1]}
        assert out["allgather_object"] == [("rank", 0), ("rank", 1)]
        assert out["broadcast_object_fn"] == [{"call": 0, "from": 1}, {"call": 1, "from": 1}]
        assert out["small_ops"] == (N, r, 1, -3, True, True, False)
        assert out["join"] in (0, 1) and out["join"] == res[0]["join"]
