"""Synthetic Keras training throughput: a ResNet on random images, trained with model.fit,
gradients averaged by horovodlite's DistributedOptimizer. Prints images/sec per rank and
in total (mean +- 1.96 std over the timed iterations), like Horovod's synthetic benchmarks.

    horovodlite-run -np 2 python examples/tensorflow2_keras_synthetic_benchmark.py --model smallcnn
    (or: mpirun -np 2 python examples/tensorflow2_keras_synthetic_benchmark.py)

The models are the ResNets of examples/pytorch_synthetic_benchmark.py written in Keras
(channels last; keras.applications is not needed); small images keep a CPU step short."""
import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow import keras  # noqa: E402

L = keras.layers


def _conv_bn(x, width, kernel, stride):
    x = L.Conv2D(width, kernel, stride, padding="same", use_bias=False)(x)
    return L.BatchNormalization()(x)


def _basic_block(x, width, stride):
    y = L.ReLU()(_conv_bn(x, width, 3, stride))
    y = _conv_bn(y, width, 3, 1)
    if stride != 1 or x.shape[-1] != width:
        x = _conv_bn(x, width, 1, stride)
    return L.ReLU()(L.Add()([x, y]))


def resnet(layers, num_classes, base, image_size):
    inputs = keras.Input((image_size, image_size, 3))
    x = L.ReLU()(_conv_bn(inputs, base, 7, 2))
    x = L.MaxPooling2D(3, 2, padding="same")(x)
    for i, n in enumerate(layers):
        for j in range(n):
            x = _basic_block(x, base * 2 ** i, 2 if (j == 0 and i > 0) else 1)
    x = L.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, L.Dense(num_classes)(x))


MODELS = {
    # As in the PyTorch example: 2.77 M parameters (smallcnn), 11.7 M (resnet18).
    "smallcnn": lambda size: resnet([1, 1, 1, 1], 10, 48, size),
    "resnet18": lambda size: resnet([2, 2, 2, 2], 1000, 64, size),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smallcnn", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-warmup-batches", type=int, default=3)
    ap.add_argument("--num-batches-per-iter", type=int, default=5)
    ap.add_argument("--num-iters", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="TensorFlow intra-op threads per rank")
    return ap.parse_args(argv)


class _StepTimes(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.times = []

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())


def run(args, hvd, log=print):
    """Trains with model.fit; returns the per-iteration images/sec of this rank."""
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    keras.utils.set_random_seed(0)
    model = MODELS[args.model](args.image_size)
    classes = model.output_shape[-1]
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01 * hvd.size(), momentum=0.9))
    model.compile(optimizer=opt,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = tf.random.normal((args.batch_size, args.image_size, args.image_size, 3))
    target = tf.random.uniform((args.batch_size,), 0, classes, dtype=tf.int32)
    dataset = tf.data.Dataset.from_tensors((data, target)).repeat()
    times = _StepTimes()
    log(f"Model: {args.model}, batch size {args.batch_size}, image size {args.image_size}, "
        f"{hvd.size()} rank(s), {args.threads} thread(s) each")
    per_iter = args.num_batches_per_iter
    steps = args.num_warmup_batches + per_iter * args.num_iters
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0), times])
    # Iteration i spans the batch ends warmup-1+i*per_iter .. warmup-1+(i+1)*per_iter.
    t = times.times[args.num_warmup_batches - 1:]
    img_secs = [args.batch_size * per_iter / (t[(i + 1) * per_iter] - t[i * per_iter])
                for i in range(args.num_iters)]
    for i, ips in enumerate(img_secs):
        log(f"Iter #{i}: {ips:.1f} img/sec per rank")
    return img_secs


def main():
    args = parse_args()
    import horovodlite.tensorflow.keras as hvd

    hvd.init()
    log = print if hvd.rank() == 0 else (lambda *a, **k: None)
    img_secs = run(args, hvd, log)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
