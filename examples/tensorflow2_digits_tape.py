"""A custom TF 2 training loop on scikit-learn's digits with DistributedGradientTape
inside tf.function: each rank trains on its shard, the tape averages the gradients.

    horovodlite-run -np 2 python examples/tensorflow2_digits_tape.py
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovodlite.tensorflow as hvd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.002, help="single-process rate; scaled by size")
    args = ap.parse_args()

    hvd.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    n = len(x_train) // hvd.size() * hvd.size()  # equal shards: every rank takes as many steps
    x_train, y_train = x_train[hvd.rank():n:hvd.size()], y_train[hvd.rank():n:hvd.size()]
    dataset = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
               .shuffle(len(x_train), seed=hvd.rank()).batch(args.batch_size))

    keras.utils.set_random_seed(hvd.rank())
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])
    opt = keras.optimizers.Adam(args.lr * hvd.size())
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # Start every rank from rank 0's weights and optimizer state.
    opt.build(model.trainable_variables)
    hvd.broadcast_variables(model.variables + opt.variables, root_rank=0)

    @tf.function
    def train_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return hvd.allreduce(loss, name="loss")

    for epoch in range(args.epochs):
        losses = [float(train_step(images, labels)) for images, labels in dataset]
        if hvd.rank() == 0:
            print(f"epoch {epoch + 1}: mean loss {np.mean(losses):.4f}", flush=True)
    acc = float(np.mean(np.argmax(model(x_test), axis=1) == y_test))
    if hvd.rank() == 0:
        print(f"test accuracy {acc:.4f}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
