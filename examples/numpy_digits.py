"""A two-layer network in plain numpy on scikit-learn's digits, trained data-parallel:
each rank computes gradients on its shard and hvd.grouped_allreduce averages them.

    horovodlite-run -np 2 python examples/numpy_digits.py
"""
import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from tqdm import tqdm

import horovodlite as hvd


def init_params(rng, sizes):
    return [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32) if i % 2 == 0
            else np.zeros(b, np.float32)
            for a, b in zip(sizes[:-1], sizes[1:]) for i in (0, 1)]


def forward(params, x):
    w1, b1, w2, b2 = params
    h = np.maximum(x @ w1 + b1, 0)
    logits = h @ w2 + b2
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    return h, p / p.sum(axis=1, keepdims=True)


def gradients(params, x, y):
    w1, b1, w2, b2 = params
    h, p = forward(params, x)
    d = p.copy()
    d[np.arange(len(y)), y] -= 1
    d /= len(y)
    dh = (d @ w2.T) * (h > 0)
    return [x.T @ dh, dh.sum(0), h.T @ d, d.sum(0)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.1)
    args = ap.parse_args()

    hvd.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    shard = slice(hvd.rank(), None, hvd.size())
    x_train, y_train = x_train[shard], y_train[shard]

    # Rank-dependent initialisation, then everyone takes rank 0's weights.
    params = init_params(np.random.default_rng(hvd.rank()), [64, 64, 10])
    params = [hvd.broadcast(p, root_rank=0, name=f"init.{i}") if hasattr(hvd, "broadcast")
              else hvd.allreduce(p if hvd.rank() == 0 else np.zeros_like(p), op=hvd.Sum,
                                 name=f"init.{i}")
              for i, p in enumerate(params)]

    rng = np.random.default_rng(1234 + hvd.rank())
    steps = len(x_train) // args.batch_size
    for epoch in range(args.epochs):
        order = rng.permutation(len(x_train))
        it = range(steps)
        if hvd.rank() == 0:
            it = tqdm(it, desc=f"epoch {epoch + 1}/{args.epochs}", leave=False)
        for s in it:
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            grads = hvd.grouped_allreduce(gradients(params, x_train[idx], y_train[idx]),
                                          op=hvd.Average, name="grads")
            params = [p - args.lr * g for p, g in zip(params, grads)]
        acc = (forward(params, x_test)[1].argmax(1) == y_test).mean()
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: test accuracy {acc:.4f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
