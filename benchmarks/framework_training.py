"""Keras and JAX training throughput against their no-exchange bound: the synthetic
ResNets of examples/tensorflow2_keras_synthetic_benchmark.py (model.fit) and
examples/jax_synthetic_benchmark.py (one jitted step) at 2 ranks, one compute thread per
rank, with

  bound        the same 2 ranks training with no gradient exchange at all
  lockstep     the bound plus one barrier per step (torch_training.py says why): Keras
               after every batch, JAX inside the jitted step
  horovodlite  horovodlite's DistributedOptimizer (Keras: horovodlite.tensorflow.keras;
               JAX: horovodlite.jax, the XLA FFI collective inside the jitted step)

interleaved as in benchmarks/torch_training.py (whose launcher and table this reuses:
the same --launch, --impls horovodlite:NAME=VALUE and IMPL@LAUNCH forms).

    python benchmarks/framework_training.py --framework keras|jax [--model smallcnn
        --batch-size 32 --repeats 5] [--launch mpirun-yield|mpirun|horovodlite-run]"""
import argparse
import importlib.util
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXAMPLES = {"keras": "tensorflow2_keras_synthetic_benchmark", "jax": "jax_synthetic_benchmark"}
IMPLS = ("bound", "lockstep", "horovodlite")


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tt = _load(HERE / "torch_training.py", "torch_training")


class _NoExchange(tt._NoExchange):
    """The bound's stand-in for horovodlite.tensorflow.keras / horovodlite.jax."""

    class callbacks:  # noqa: N801 - the module's name
        @staticmethod
        def BroadcastGlobalVariablesCallback(root_rank):  # noqa: N802 - Horovod's name
            from tensorflow import keras
            return keras.callbacks.Callback()

    def broadcast_parameters(self, params, root_rank=0):
        return params


class _KerasLockstep(_NoExchange):
    """The lockstep reference for Keras: a barrier after every batch."""

    class callbacks:  # noqa: N801 - the module's name
        @staticmethod
        def BroadcastGlobalVariablesCallback(root_rank):  # noqa: N802 - Horovod's name
            from tensorflow import keras

            class Lockstep(keras.callbacks.Callback):
                def on_train_batch_end(self, batch, logs=None):
                    tt._barrier()
            return Lockstep()


class _JaxLockstep(_NoExchange):
    """The lockstep reference for JAX: the optimizer's update waits at a barrier inside
    the jitted step (an ordered host callback), once per step."""

    def DistributedOptimizer(self, tx, **kwargs):  # noqa: N802 - Horovod's name
        import jax
        import numpy as np
        import optax
        from jax.experimental import io_callback

        def wait():
            tt._barrier()
            return np.float32(0)

        def update(updates, state, params=None):
            zero = io_callback(wait, jax.ShapeDtypeStruct((), np.float32), ordered=True)
            # The updates depend on it, so the step cannot finish before the barrier.
            updates = jax.tree_util.tree_map(lambda u: u + zero.astype(u.dtype), updates)
            return tx.update(updates, state, params)
        return optax.GradientTransformation(tx.init, update)


def worker(framework, impl, args):
    example = _load(HERE.parent / "examples" / f"{EXAMPLES[framework]}.py", EXAMPLES[framework])
    if framework == "jax":
        example.one_xla_thread()  # before anything makes XLA's client
    if impl == "bound":
        hvd = _NoExchange()
    elif impl == "lockstep":
        hvd = _KerasLockstep() if framework == "keras" else _JaxLockstep()
    else:
        hvd = importlib.import_module(
            "horovodlite.tensorflow.keras" if framework == "keras" else "horovodlite.jax")
        hvd.init()
    before = tt._threads()
    stats0 = tt._stats(impl)
    img_secs = example.run(args, hvd, log=lambda *a, **k: None)
    steps = tt._steps(args)
    extra = tt._others(before, tt._threads(), steps)
    extra.update(tt._engine_extra(impl, stats0, steps))
    tt._report(hvd.rank(), hvd.size(), img_secs, extra)
    if impl != "bound":
        hvd.shutdown()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--framework", required=True, choices=sorted(EXAMPLES))
    tt.compare_arguments(ap, IMPLS, timeout=900)
    own, rest = ap.parse_known_args()
    example = _load(HERE.parent / "examples" / f"{EXAMPLES[own.framework]}.py",
                    EXAMPLES[own.framework])
    if "--batch-size" not in rest:
        rest += ["--batch-size", "32"]
    args = example.parse_args(rest)
    if own.worker:
        return worker(own.framework, own.worker, args)
    own.before = own.horovod_python = None  # what torch_training's launcher asks
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    impls = [i for i in own.impls.split(",") if i]
    if "bound" not in impls:
        impls.insert(0, "bound")
    print(f"{own.framework}: model {args.model}, batch {args.batch_size}/rank, image "
          f"{args.image_size}px, 1 thread/rank, np={own.np}, {args.num_iters} x "
          f"{args.num_batches_per_iter} batches timed, {own.repeats} interleaved repeats, "
          f"launch: {own.launch}", flush=True)
    tt.compare(impls, own, ["--framework", own.framework, *rest], script=Path(__file__).resolve())


if __name__ == "__main__":
    sys.exit(main())
