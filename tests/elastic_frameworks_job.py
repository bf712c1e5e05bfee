"""Keras (fit with the elastic callbacks) and JAX/optax elastic jobs for
tests/test_elastic_frameworks.py: `python elastic_frameworks_job.py keras|jax OUT
--kill RANK:STEP`. Each process writes OUT/<pid>.pkl with its final parameters."""
import argparse
import os
import pickle
import signal
import time

import numpy as np


def data(rank, size, n=64):
    g = np.random.default_rng([rank, size])
    return g.standard_normal((n, 8), dtype=np.float32), g.standard_normal((n, 2), dtype=np.float32)


def keras_job(a, kill_rank, kill_step, log):
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import keras
    import tensorflow as tf

    import horovodlite.tensorflow.keras as hvd
    from horovodlite.tensorflow.keras import elastic

    tf.config.threading.set_inter_op_parallelism_threads(1)
    hvd.init()
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(2)])
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  loss="mse", jit_compile=False)
    state = elastic.KerasState(model, batch=0, epoch=0)
    state.register_reset_callbacks([lambda: log["resets"].append(hvd.size())])
    me = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
    steps = {"n": 0}

    class Killer(keras.callbacks.Callback):
        def on_batch_end(self, batch, logs=None):
            steps["n"] += 1
            if me == kill_rank and steps["n"] == kill_step and hvd.size() == a.np:
                os.kill(os.getpid(), signal.SIGKILL)

    @elastic.run
    def train(state):
        log["entries"].append((state.epoch, state.batch, hvd.size()))
        x, y = data(hvd.rank(), hvd.size())
        model.fit(x, y, batch_size=8, epochs=4, initial_epoch=state.epoch, shuffle=False, verbose=0,
                  callbacks=[elastic.CommitStateCallback(state, batches_per_commit=4),
                             elastic.UpdateBatchStateCallback(state),
                             elastic.UpdateEpochStateCallback(state), Killer()])

    train(state)
    log["final"] = (hvd.rank(), hvd.size(), state.epoch,
                    b"".join(np.asarray(v).tobytes() for v in model.get_weights()))


def jax_job(a, kill_rank, kill_step, log):
    import jax
    import jax.numpy as jnp
    import optax

    import horovodlite.jax as hvd
    from horovodlite.jax import elastic

    hvd.init()
    key = jax.random.PRNGKey(0)
    params = {"w": jax.random.normal(key, (8, 2)) * 0.1, "b": jnp.zeros(2)}
    tx = optax.adam(0.01)
    state = elastic.ObjectState(params=params, opt_state=tx.init(params), step=0)
    state.register_reset_callbacks([lambda: log["resets"].append(hvd.size())])
    me = int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))

    @jax.jit
    def grads_of(params, x, y):
        return jax.grad(lambda p: jnp.mean((x @ p["w"] + p["b"] - y) ** 2))(params)

    @elastic.run
    def train(state):
        log["entries"].append((state.step, hvd.size()))
        x, y = data(hvd.rank(), hvd.size())
        while state.step < 30:
            if me == kill_rank and state.step == kill_step and hvd.size() == a.np:
                os.kill(os.getpid(), signal.SIGKILL)
            i = (state.step % 8) * 8
            g = hvd.allreduce_gradients(grads_of(state.params, x[i:i + 8], y[i:i + 8]))
            updates, state.opt_state = tx.update(g, state.opt_state, state.params)
            state.params = optax.apply_updates(state.params, updates)
            state.step += 1
            if state.step % 5 == 0:
                state.commit()

    train(state)
    log["final"] = (hvd.rank(), hvd.size(), state.step,
                    b"".join(np.asarray(v).tobytes() for v in jax.tree_util.tree_leaves(state.params)))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["keras", "jax"])
    p.add_argument("out")
    p.add_argument("--np", type=int, default=3)
    p.add_argument("--kill", default="")
    a = p.parse_args()
    kill_rank, kill_step = map(int, a.kill.split(":")) if a.kill else (-2, -2)
    log = {"entries": [], "resets": [], "errors": []}
    t0 = time.time()
    try:
        (keras_job if a.mode == "keras" else jax_job)(a, kill_rank, kill_step, log)
    except BaseException as e:
        log["errors"].append(f"{type(e).__name__}: {e}")
        raise
    finally:
        log["total"] = time.time() - t0
        with open(os.path.join(a.out, f"{os.getpid()}.pkl"), "wb") as f:
            pickle.dump(log, f)
