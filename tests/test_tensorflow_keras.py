"""horovodlite.tensorflow.keras on 2 ranks, all cases in one launch, once with Keras 3 and
once with Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1 in the job's environment): model.fit
with DistributedOptimizer equals one process on the concatenated batches (also with
backward_passes_per_step, and Keras 2's legacy optimizers), the Partial* wrappers keep
local layers' gradients local, SyncBatchNormalization normalizes with the global batch,
and the callbacks do what they claim."""
import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install tensorflow-cpu)")
pytest.importorskip("keras", reason="keras is not installed")

from mpirun import run  # noqa: E402

ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
N = 2

JOB = """
import atexit, os, shutil, tempfile
TMP = tempfile.mkdtemp(prefix="hvdl-keras-")
atexit.register(shutil.rmtree, TMP, True)  # the saved models: nothing left in /tmp
import tensorflow as tf
if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
    import tf_keras as keras
else:
    import keras
import horovodlite.tensorflow as htf
import horovodlite.tensorflow.keras as hk

def opt_vars(opt):
    v = opt.variables
    return list(v() if callable(v) else v)

N, B, K, LR = 2, 4, 4, 0.05

def make_model(seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((5,)), keras.layers.Dense(7, activation="tanh"),
                             keras.layers.Dense(1)])

def data():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((K * N * B, 5)).astype(np.float32)
    return x, (x @ rng.standard_normal((5, 1))).astype(np.float32)

def my_shard(x, rows):
    # Global batch k is rows [k*N*rows, (k+1)*N*rows); rank r takes its r-th part of each.
    r = hk.rank()
    idx = np.concatenate([np.arange(k * N * rows + r * rows, k * N * rows + (r + 1) * rows)
                          for k in range(len(x) // (N * rows))])
    return x[idx]

def fit(opt, x, y, batch, callbacks=(), epochs=1):
    model = make_model()
    model.compile(opt, "mse")
    hist = model.fit(x, y, batch_size=batch, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=list(callbacks))
    return model, hist

class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.lrs, self.epoch_logs = [], []
    def on_train_batch_begin(self, batch, logs=None):
        self.lrs.append(float(np.asarray(self.model.optimizer.learning_rate)))
    def on_epoch_end(self, epoch, logs=None):
        self.epoch_logs.append(dict(logs))

def main(hvd):
    x, y = data()
    out = {}
    # model.fit equivalence: each rank B rows per step vs one process N*B rows per step.
    out["initial"] = make_model().get_weights()
    ref, _ = fit(keras.optimizers.SGD(LR), x, y, N * B)
    dist_opt = hk.DistributedOptimizer(keras.optimizers.SGD(LR))
    out["opt_class"] = (type(dist_opt).__name__, isinstance(dist_opt, keras.optimizers.SGD))
    import horovodlite.keras, horovodlite.keras.callbacks, horovodlite.tensorflow
    out["aliases"] = (horovodlite.keras.callbacks.MetricAverageCallback is hk.callbacks.MetricAverageCallback,
                      isinstance(horovodlite.tensorflow.DistributedOptimizer(keras.optimizers.Adam()),
                                 keras.optimizers.Adam))
    model, _ = fit(dist_opt, my_shard(x, B), my_shard(y, B), B)
    out["fit"] = (ref.get_weights(), model.get_weights())

    # backward_passes_per_step=2 + average: two local passes of B rows, then one update.
    ref2, _ = fit(keras.optimizers.SGD(LR), x, y, 2 * N * B)
    agg = hk.DistributedOptimizer(keras.optimizers.SGD(LR), backward_passes_per_step=2,
                                  average_aggregated_gradients=True)
    model, _ = fit(agg, my_shard(x, 2 * B), my_shard(y, 2 * B), B)
    out["aggregated"] = (ref2.get_weights(), model.get_weights(), int(agg.iterations))

    # MetricAverageCallback: logs before (local) and after (averaged) it.
    before, after = Recorder(), Recorder()
    _, hist = fit(hk.DistributedOptimizer(keras.optimizers.SGD(LR)), my_shard(x, B),
                  my_shard(y, B), B, [before, hk.callbacks.MetricAverageCallback(), after],
                  epochs=2)
    out["metrics"] = (before.epoch_logs, after.epoch_logs, hist.history)

    # Warmup: lr per batch over 2 warmup epochs of K steps, then flat.
    rec = Recorder()
    fit(hk.DistributedOptimizer(keras.optimizers.SGD(LR)), my_shard(x, B), my_shard(y, B), B,
        [hk.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2), rec],
        epochs=3)
    out["warmup"] = rec.lrs
    rec = Recorder()
    fit(hk.DistributedOptimizer(keras.optimizers.SGD(LR)), my_shard(x, B), my_shard(y, B), B,
        [hk.callbacks.LearningRateScheduleCallback(0.2, lambda e: 0.5 ** e, start_epoch=1), rec],
        epochs=3)
    out["schedule"] = rec.lrs

    # Different initial weights per rank; lr 0 so only the broadcast changes them.
    model = make_model(seed=10 + hk.rank())
    initial = model.get_weights()
    model.compile(hk.DistributedOptimizer(keras.optimizers.SGD(0.0, momentum=0.5)), "mse")
    model.fit(x[:8], y[:8], batch_size=4, verbose=0,
              callbacks=[hk.callbacks.BroadcastGlobalVariablesCallback(0)])
    out["broadcast"] = (initial, model.get_weights(),
                        [np.asarray(v) for v in opt_vars(model.optimizer)])
    path = os.path.join(TMP, "m.keras")
    model.save(path)
    loaded = hk.load_model(path)
    out["load_model"] = (type(loaded.optimizer).__name__,
                         hasattr(loaded.optimizer, "_hvdl_settings"),
                         int(loaded.optimizer.iterations))

    # local_variables: the first layer's variables keep each rank's own values.
    model = make_model(seed=10 + hk.rank())
    initial = model.get_weights()
    model.compile(hk.DistributedOptimizer(keras.optimizers.SGD(0.0)), "mse")
    local = list(model.layers[0].variables)
    model.fit(x[:8], y[:8], batch_size=4, verbose=0, callbacks=[
        hk.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=local)])
    out["broadcast_local"] = (initial, model.get_weights())

    # PartialDistributedOptimizer, one step of model.fit (the whole shard is one batch):
    # the local first layer applies its own gradient / size, the rest the average.
    local_grads = {}
    for mode in ("fit", "apply"):
        model = make_model()
        w0 = model.get_weights()
        xs, ys = my_shard(x, B)[:B], my_shard(y, B)[:B]
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(xs, training=True) - ys))
        grads = tape.gradient(loss, model.trainable_variables)
        local_grads[mode] = [np.asarray(g) for g in grads]
        opt = hk.PartialDistributedOptimizer(keras.optimizers.SGD(LR),
                                             local_layers=[model.layers[0]])
        if mode == "fit":
            model.compile(opt, "mse")
            model.fit(xs, ys, batch_size=B, epochs=1, shuffle=False, verbose=0)
        else:
            opt.apply_gradients(zip(grads, model.trainable_variables))
        out[("partial", mode)] = (w0, local_grads[mode], model.get_weights())

    # PartialDistributedGradientTape: the same rule for a custom loop.
    model = make_model()
    xs, ys = my_shard(x, B)[:B], my_shard(y, B)[:B]
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(tf.square(model(xs, training=True) - ys))
    plain = [np.asarray(g) for g in tape.gradient(loss, model.trainable_variables)]
    dtape = htf.PartialDistributedGradientTape(tape, local_layers=model.layers[0])
    out["partial_tape"] = (plain, [np.asarray(g) for g in dtape.gradient(
        loss, model.trainable_variables)])

    # SyncBatchNormalization: training-mode output and moving mean from the global batch.
    xb = np.random.default_rng(5).standard_normal((2 * B, 3)).astype(np.float32) * 3 + 1
    mine = xb[hk.rank() * B:(hk.rank() + 1) * B]
    sync = htf.SyncBatchNormalization(momentum=0.5)
    plain_bn = keras.layers.BatchNormalization(momentum=0.5)
    out["sync_bn"] = (np.asarray(tf.function(lambda t: sync(t, training=True))(mine)),
                      np.asarray(plain_bn(xb, training=True))[hk.rank() * B:(hk.rank() + 1) * B],
                      np.asarray(sync.moving_mean), np.asarray(plain_bn.moving_mean))

    # BestModelCheckpoint: the path may come after construction; saves the best model.
    best = hk.callbacks.BestModelCheckpoint(monitor="loss")
    model = make_model()
    model.compile(keras.optimizers.SGD(LR), "mse")
    try:
        model.fit(x[:8], y[:8], verbose=0, callbacks=[best])
        out["best_no_path"] = "no error"
    except ValueError as e:
        out["best_no_path"] = str(e)
    best.filepath = os.path.join(TMP, "best.keras")
    model.fit(x[:8], y[:8], epochs=2, verbose=0, callbacks=[best])
    out["best_saved"] = os.path.exists(best.filepath)

    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        # Keras 2's legacy optimizers (OptimizerV2) are wrapped too.
        ref, _ = fit(keras.optimizers.legacy.SGD(LR, momentum=0.9), x, y, N * B)
        model, _ = fit(hk.DistributedOptimizer(keras.optimizers.legacy.SGD(LR, momentum=0.9)),
                       my_shard(x, B), my_shard(y, B), B)
        out["legacy_fit"] = (ref.get_weights(), model.get_weights())
        ref2, _ = fit(keras.optimizers.legacy.SGD(LR), x, y, 2 * N * B)
        agg = hk.DistributedOptimizer(keras.optimizers.legacy.SGD(LR), backward_passes_per_step=2,
                                      average_aggregated_gradients=True)
        model, _ = fit(agg, my_shard(x, 2 * B), my_shard(y, 2 * B), B)
        out["legacy_aggregated"] = (ref2.get_weights(), model.get_weights(), int(agg.iterations))
        # momentum correction: momentum * new_lr / old_lr for the first batch at a new rate
        momenta = []
        class MomentumRecorder(keras.callbacks.Callback):
            def on_train_batch_begin(self, batch, logs=None):
                momenta.append(float(np.asarray(self.model.optimizer._get_hyper("momentum"))))
        fit(hk.DistributedOptimizer(keras.optimizers.legacy.SGD(LR, momentum=0.9)),
            my_shard(x, B), my_shard(y, B), B,
            [hk.callbacks.LearningRateScheduleCallback(0.2, lambda e: 0.5 ** e, start_epoch=1),
             MomentumRecorder()], epochs=3)
        out["momentum_correction"] = momenta
    return out
"""


KERASES = {"keras3": {}, "tf_keras": {"TF_USE_LEGACY_KERAS": "1"}}


@pytest.fixture(scope="module", params=list(KERASES))
def keras_run(request):
    if request.param == "tf_keras":
        pytest.importorskip("tf_keras", reason="tf_keras is not installed (pip install tf-keras)")
    res = run(N, JOB, env={**ENV, **KERASES[request.param]}, timeout=420)
    out = {k: [r[k] for r in res] for k in res[0]}
    out["which"] = request.param
    return out


def _same_everywhere(per_rank):
    for a, b in zip(per_rank[0], per_rank[1]):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes()


def test_fit_with_distributed_optimizer_matches_one_process(keras_run):
    assert keras_run["opt_class"][0] == ("SGD", True)
    assert keras_run["aliases"][0] == (True, True)
    for r in range(N):
        ref, got = keras_run["fit"][r]
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not np.allclose(got[0], keras_run["initial"][r][0])  # training moved them
    _same_everywhere([keras_run["fit"][r][1] for r in range(N)])


def test_backward_passes_per_step_averages_aggregated_gradients(keras_run):
    for r in range(N):
        ref, got, iterations = keras_run["aggregated"][r]
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert iterations == 4  # counts backward passes, as in Horovod
    _same_everywhere([keras_run["aggregated"][r][1] for r in range(N)])


def test_metric_average_callback(keras_run):
    befores = [keras_run["metrics"][r][0] for r in range(N)]
    for r in range(N):
        _, after, history = keras_run["metrics"][r]
        for epoch, logs in enumerate(after):
            local = [befores[s][epoch]["loss"] for s in range(N)]
            assert local[0] != local[1]  # shards differ, so averaging is visible
            assert logs["loss"] == pytest.approx(np.mean(local), rel=1e-6)
            assert history["loss"][epoch] == logs["loss"]
    assert keras_run["metrics"][0][2] == keras_run["metrics"][1][2]


def test_learning_rate_warmup_and_schedule(keras_run):
    steps, warmup, target = 4, 2, 0.4
    want = []
    for epoch in range(3):
        for b in range(steps):
            e = epoch + b / steps
            want.append(target / N * (e * (N - 1) / warmup + 1) if e < warmup else target)
    for r in range(N):
        np.testing.assert_allclose(keras_run["warmup"][r], want, rtol=1e-6)
        sched = [0.05] * steps + [0.2 * 0.5] * steps + [0.2 * 0.25] * steps
        np.testing.assert_allclose(keras_run["schedule"][r], sched, rtol=1e-6)


def test_broadcast_callback_and_load_model(keras_run):
    root_initial = keras_run["broadcast"][0][0]
    for r in range(N):
        initial, final, opt_vars = keras_run["broadcast"][r]
        for a, b in zip(final, root_initial):
            np.testing.assert_array_equal(a, b)
        assert keras_run["load_model"][r] == ("SGD", True, 2)
    assert not all(np.array_equal(a, b) for a, b in
                   zip(keras_run["broadcast"][1][0], root_initial))  # ranks started apart
    _same_everywhere([keras_run["broadcast"][r][2] for r in range(N)])


def test_broadcast_callback_local_variables(keras_run):
    root_initial = keras_run["broadcast_local"][0][0]
    for r in range(N):
        initial, final = keras_run["broadcast_local"][r]
        # layer 0 (kernel, bias) local: unchanged; the rest: the root's values
        for a, b in zip(final[:2], initial[:2]):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(final[2:], root_initial[2:]):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(keras_run["broadcast_local"][0][1][0],
                              keras_run["broadcast_local"][1][1][0])


def test_partial_distributed_optimizer_and_tape(keras_run):
    lr = 0.05
    for mode in ("fit", "apply"):
        grads = [keras_run[("partial", mode)][r][1] for r in range(N)]
        for r in range(N):
            w0, g, final = keras_run[("partial", mode)][r]
            for i, (a, b) in enumerate(zip(final, w0)):
                step = g[i] / N if i < 2 else sum(gr[i] for gr in grads) / N
                np.testing.assert_allclose(a, b - lr * step, rtol=1e-5, atol=1e-6,
                                           err_msg=f"{mode} variable {i}")
    plains = [keras_run["partial_tape"][r][0] for r in range(N)]
    for r in range(N):
        plain, got = keras_run["partial_tape"][r]
        for i, g in enumerate(got):
            want = plain[i] / N if i < 2 else sum(p[i] for p in plains) / N
            np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)


def test_sync_batch_norm_uses_the_global_batch(keras_run):
    for r in range(N):
        got, want, got_mean, want_mean = keras_run["sync_bn"][r]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(got_mean, want_mean, rtol=1e-5, atol=1e-6)


def test_best_model_checkpoint(keras_run):
    for r in range(N):
        assert "filepath" in keras_run["best_no_path"][r]
        assert keras_run["best_saved"][r]


def test_keras2_legacy_optimizers(keras_run):
    if keras_run["which"] != "tf_keras":
        pytest.skip("Keras 2 legacy optimizers exist in tf_keras only")
    for r in range(N):
        ref, got = keras_run["legacy_fit"][r]
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        ref, got, iterations = keras_run["legacy_aggregated"][r]
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert iterations == 4
        np.testing.assert_allclose(keras_run["momentum_correction"][r],
                                   [0.9] * 4 + [1.8] + [0.9] * 3 + [0.45] + [0.9] * 3, rtol=1e-6)
