"""Keras model.fit on scikit-learn's digits, data-parallel with horovodlite: each rank
trains on its shard; DistributedOptimizer averages gradients, the callbacks start every
rank from rank 0's weights, average the epoch metrics and warm the learning rate up.

    horovodlite-run -np 2 python examples/tensorflow2_keras_digits.py
    (or: mpirun -np 2 python examples/tensorflow2_keras_digits.py)

Keras is `tf.keras`, as in Horovod's examples: Keras 3, or Keras 2 (tf_keras) with
TF_USE_LEGACY_KERAS=1 in the environment.
"""
import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from tensorflow import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import horovodlite.tensorflow.keras as hvd  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--lr", type=float, default=0.002, help="single-process rate; scaled by size")
    ap.add_argument("--warmup-epochs", type=int, default=3)
    args = ap.parse_args()

    hvd.init()
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    n = len(x_train) // hvd.size() * hvd.size()  # equal shards: every rank takes as many steps
    x_train, y_train = x_train[hvd.rank():n:hvd.size()], y_train[hvd.rank():n:hvd.size()]

    keras.utils.set_random_seed(hvd.rank())  # different on purpose: the broadcast fixes it
    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(10, activation="softmax"),
    ])
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        hvd.callbacks.MetricAverageCallback(),
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs, verbose=1),
    ]
    model.fit(x_train, y_train, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=2 if hvd.rank() == 0 else 0)
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    if hvd.rank() == 0:
        print(f"test accuracy {acc:.4f} (loss {loss:.4f})", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
