"""Synthetic JAX training throughput: a ResNet-style CNN on random images, one jitted
train step whose gradients horovodlite's DistributedOptimizer averages (through the XLA
FFI collective, no Python in the step). Prints images/sec per rank and in total (mean +-
1.96 std over the timed iterations), like Horovod's synthetic benchmarks.

    horovodlite-run -np 2 python examples/jax_synthetic_benchmark.py --model smallcnn
    (or: mpirun -np 2 python examples/jax_synthetic_benchmark.py)

The models are the ResNets of examples/pytorch_synthetic_benchmark.py in plain jax.lax
(no flax), without batch norm (which would need state beside the parameters): 2.77 M
parameters (smallcnn), 11.7 M (resnet18). One XLA thread per rank unless XLA_FLAGS says
otherwise."""
import argparse
import os
import time

_OWN_FLAGS = "XLA_FLAGS" not in os.environ
os.environ.setdefault("XLA_FLAGS",
                      "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402


def one_xla_thread():
    """Makes XLA's CPU client with one thread, unless the user set XLA_FLAGS; call it
    before anything uses JAX's backend (hvd.init() included). The client sizes its pool
    by the CPUs the process may use when it is made, and the flags above no longer hold
    it to one thread: a lone smallcnn process used 1.6 cores, so 2 ranks on 2 cores
    fought over them. The client is made while this process may use one CPU (1.0-1.1
    cores used after), then the mask goes back, so the launcher's binding (or none)
    holds for everything else."""
    if not _OWN_FLAGS or not hasattr(os, "sched_setaffinity"):
        return
    cpus = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cpus)})
    try:
        jax.devices()
    finally:
        os.sched_setaffinity(0, cpus)


def _conv_init(key, kernel, cin, cout):
    return jax.random.normal(key, (kernel, kernel, cin, cout)) * jnp.sqrt(2.0 / (kernel * kernel * cin))


def _conv(x, w, stride):
    pad = w.shape[0] // 2
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad), (pad, pad)],
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))


def init_resnet(key, layers, num_classes, base):
    """Parameters: a pytree of the stem, the blocks (conv1, conv2[, down]) and the head."""
    keys = iter(jax.random.split(key, 4 + 3 * sum(layers)))
    params = {"stem": _conv_init(next(keys), 7, 3, base), "blocks": []}
    cin = base
    for i, n in enumerate(layers):
        width = base * 2 ** i
        for j in range(n):
            stride = 2 if (j == 0 and i > 0) else 1
            block = {"conv1": _conv_init(next(keys), 3, cin, width),
                     "conv2": _conv_init(next(keys), 3, width, width)}
            if stride != 1 or cin != width:
                block["down"] = _conv_init(next(keys), 1, cin, width)
            params["blocks"].append(block)
            cin = width
    params["fc"] = {"w": jax.random.normal(next(keys), (cin, num_classes)) / jnp.sqrt(cin),
                    "b": jnp.zeros(num_classes)}
    return params


def _strides(layers):
    return [2 if (j == 0 and i > 0) else 1 for i, n in enumerate(layers) for j in range(n)]


def forward(params, x, layers):
    x = jax.nn.relu(_conv(x, params["stem"], 2))
    x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 2, 2, 1),
                              [(0, 0), (1, 1), (1, 1), (0, 0)])
    for block, stride in zip(params["blocks"], _strides(layers)):
        y = jax.nn.relu(_conv(x, block["conv1"], stride))
        y = _conv(y, block["conv2"], 1)
        x = jax.nn.relu(y + (_conv(x, block["down"], stride) if "down" in block else x))
    x = jnp.mean(x, axis=(1, 2))
    return x @ params["fc"]["w"] + params["fc"]["b"]


MODELS = {  # (layers, classes, base width), as in the PyTorch example
    "smallcnn": ([1, 1, 1, 1], 10, 48),
    "resnet18": ([2, 2, 2, 2], 1000, 64),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smallcnn", choices=sorted(MODELS))
    ap.add_argument("--batch-size", type=int, default=32, help="per rank")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--num-warmup-batches", type=int, default=3)
    ap.add_argument("--num-batches-per-iter", type=int, default=5)
    ap.add_argument("--num-iters", type=int, default=5)
    return ap.parse_args(argv)


def run(args, hvd, log=print):
    """Times jitted train steps; returns the per-iteration images/sec of this rank."""
    layers, classes, base = MODELS[args.model]
    params = hvd.broadcast_parameters(init_resnet(jax.random.PRNGKey(0), layers, classes, base),
                                      root_rank=0)
    tx = hvd.DistributedOptimizer(optax.sgd(0.01 * hvd.size(), momentum=0.9))
    opt_state = tx.init(params)

    def loss_fn(params, x, y):
        logits = forward(params, x, layers)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    @jax.jit
    def train_step(params, opt_state, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    rng = np.random.default_rng(0)
    data = jnp.asarray(rng.standard_normal(
        (args.batch_size, args.image_size, args.image_size, 3), dtype=np.float32))
    target = jnp.asarray(rng.integers(0, classes, args.batch_size))
    log(f"Model: {args.model}, batch size {args.batch_size}, image size {args.image_size}, "
        f"{hvd.size()} rank(s)")

    def steps(n):
        nonlocal params, opt_state
        t = time.perf_counter()
        for _ in range(n):
            params, opt_state, loss = train_step(params, opt_state, data, target)
        loss.block_until_ready()
        return time.perf_counter() - t

    steps(args.num_warmup_batches)  # the first one compiles
    img_secs = []
    for i in range(args.num_iters):
        img_secs.append(args.batch_size * args.num_batches_per_iter / steps(args.num_batches_per_iter))
        log(f"Iter #{i}: {img_secs[-1]:.1f} img/sec per rank")
    return img_secs


def main():
    args = parse_args()
    one_xla_thread()
    import horovodlite.jax as hvd

    hvd.init()
    log = print if hvd.rank() == 0 else (lambda *a, **k: None)
    img_secs = run(args, hvd, log)
    mean, conf = np.mean(img_secs), 1.96 * np.std(img_secs)
    log(f"Img/sec per rank: {mean:.1f} +-{conf:.1f}")
    log(f"Total img/sec on {hvd.size()} rank(s): {hvd.size() * mean:.1f} +-{hvd.size() * conf:.1f}")
    hvd.shutdown()


if __name__ == "__main__":
    main()
