"""Keras 3 (TensorFlow backend) frontend: `import horovodlite.tensorflow.keras as hvd`
(or `horovodlite.keras`) in place of `horovod.tensorflow.keras`."""
import keras as _keras
import numpy as _np
import tensorflow as _tf

if _keras.backend.backend() != "tensorflow":
    raise ImportError(f"horovodlite.tensorflow.keras needs Keras on the TensorFlow backend, "
                      f"got KERAS_BACKEND={_keras.backend.backend()!r}; for JAX use "
                      "horovodlite.jax")

from ...basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                       cross_rank, cross_size, cuda_built, init, is_homogeneous, is_initialized,
                       local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                       nccl_built, rank, shutdown, size)
from ...process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                             remove_process_set)
from .. import mpi_ops as _ops
from ..compression import Compression  # noqa: F401
from ..mpi_ops import allgather_object, broadcast_object  # noqa: F401
from . import callbacks  # noqa: F401
from .optimizer import DistributedOptimizer as _distributed_optimizer


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps a Keras 3 optimizer so gradients are reduced across ranks before they are
    applied (model.fit, apply_gradients and custom loops alike); see optimizer.py.
    Models using it must not be XLA-compiled (jit_compile=False; "auto" picks that on CPU)."""
    return _distributed_optimizer(
        optimizer, name=name, compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
        groups=groups, process_set=process_set)


def broadcast_global_variables(root_rank):
    """TF 1 global-variable collections do not exist in TF 2 / Keras 3."""
    raise RuntimeError("broadcast_global_variables is a TF 1 API; use "
                       "hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) or "
                       "horovodlite.tensorflow.broadcast_variables(model.variables, root_rank)")


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none, process_set=global_process_set):
    """Reduces a tensor-like value over the ranks; returns a numpy array."""
    return _np.asarray(_ops.allreduce(_tf.convert_to_tensor(value), average=average, name=name,
                                      op=op, prescale_factor=prescale_factor,
                                      postscale_factor=postscale_factor,
                                      compression=compression, process_set=process_set))


def allgather(value, name=None, process_set=global_process_set):
    """Concatenates every rank's value along dim 0; returns a numpy array."""
    return _np.asarray(_ops.allgather(_tf.convert_to_tensor(value), name=name,
                                      process_set=process_set))


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """The root rank's value; returns a numpy array."""
    return _np.asarray(_ops.broadcast(_tf.convert_to_tensor(value), root_rank, name=name,
                                      process_set=process_set))


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    return _np.asarray(_ops.reducescatter(_tf.convert_to_tensor(value), name=name, op=op,
                                          process_set=process_set))


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """keras.models.load_model, with the compiled optimizer wrapped in DistributedOptimizer
    (its saved state kept)."""
    objects = dict(custom_objects or {})
    for opt_cls in custom_optimizers or []:
        objects[opt_cls.__name__] = opt_cls
    model = _keras.models.load_model(filepath, custom_objects=objects)
    old = getattr(model, "optimizer", None)
    if old is not None:
        new = DistributedOptimizer(old, compression=compression)
        if old.built:
            new.build(model.trainable_variables)
            for dst, src in zip(new.variables, old.variables):
                dst.assign(src)
        model.optimizer = new
    return model
