"""horovodlite.tensorflow.keras (Keras 3) on 2 ranks, all cases in one launch:
model.fit with DistributedOptimizer equals one process on the concatenated batches (also
with backward_passes_per_step), and the callbacks do what they claim."""
import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install tensorflow-cpu)")
pytest.importorskip("keras", reason="keras is not installed")

from mpirun import run  # noqa: E402

ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}
N = 2

JOB = """
import os, tempfile
import keras
import tensorflow as tf
import horovodlite.tensorflow.keras as hk

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
                        [np.asarray(v) for v in model.optimizer.variables])
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    loaded = hk.load_model(path)
    out["load_model"] = (type(loaded.optimizer).__name__,
                         hasattr(loaded.optimizer, "_hvdl_settings"),
                         int(loaded.optimizer.iterations))
    return out
"""


@pytest.fixture(scope="module")
def keras_run():
    res = run(N, JOB, env=ENV, timeout=300)
    return {k: [r[k] for r in res] for k in res[0]}


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
