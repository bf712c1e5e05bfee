"""Data-parallel MLP on scikit-learn's digits with JAX + optax + horovodlite.

    horovodlite-run -np 2 python examples/jax_digits.py
    (or: mpirun -np 2 python examples/jax_digits.py)

Each rank trains on its own shard; the jitted train step reduces the gradients
through horovodlite's XLA FFI collective (no Python in the step), so every rank holds
the same parameters. Rank 0 shows progress and the test accuracy."""
import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import horovodlite.jax as hvd


def init_mlp(key, sizes):
    params = []
    for din, dout in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append({"w": jax.random.normal(sub, (din, dout)) * jnp.sqrt(2.0 / din),
                       "b": jnp.zeros(dout)})
    return params


def forward(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def loss_fn(params, x, y):
    return optax.softmax_cross_entropy_with_integer_labels(forward(params, x), y).mean()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=1e-3)
    args = ap.parse_args()

    hvd.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    # Every rank sees a different slice of the training set.
    x_tr, y_tr = x_tr[hvd.rank()::hvd.size()], y_tr[hvd.rank()::hvd.size()]

    # Different seeds per rank on purpose: broadcast_parameters makes them agree.
    params = init_mlp(jax.random.PRNGKey(hvd.rank()), [64, 128, 64, 10])
    params = hvd.broadcast_parameters(params, root_rank=0)
    tx = hvd.DistributedOptimizer(optax.adam(args.lr * hvd.size()))
    opt_state = tx.init(params)

    @jax.jit
    def train_step(params, opt_state, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, hvd.allreduce(loss)

    # Same number of steps on every rank (shards can differ by one sample).
    steps = len(x_tr) // args.batch_size
    rng = np.random.default_rng(hvd.rank())
    bar = tqdm(range(args.epochs), disable=hvd.rank() != 0, desc="epochs")
    for _ in bar:
        order = rng.permutation(len(x_tr))
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            params, opt_state, loss = train_step(params, opt_state, x_tr[idx], y_tr[idx])
        bar.set_postfix(loss=f"{float(loss):.4f}")

    # Every rank holds the same parameters, hence the same accuracy.
    acc = float(jnp.mean(jnp.argmax(forward(params, x_te), -1) == y_te))
    if hvd.rank() == 0:
        print(f"test accuracy: {acc:.4f} on {hvd.size()} ranks")
    return acc


if __name__ == "__main__":
    main()
