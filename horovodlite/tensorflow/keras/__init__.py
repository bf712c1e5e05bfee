"""Keras frontend: `import horovodlite.tensorflow.keras as hvd` (or `horovodlite.keras`)
in place of `horovod.tensorflow.keras`. Works with the Keras `tf.keras` is: Keras 3 on
the TensorFlow backend, or Keras 2 (tf_keras) when TF_USE_LEGACY_KERAS=1 (keras_module.py)."""
import numpy as _np
import tensorflow as _tf

from .keras_module import keras as _keras

if _keras.backend.backend() != "tensorflow":
    raise ImportError(f"horovodlite.tensorflow.keras needs Keras on the TensorFlow backend, "
                      f"got KERAS_BACKEND={_keras.backend.backend()!r}; for JAX use "
                      "horovodlite.jax")

from ...basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                       ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                       gloo_enabled, init, is_homogeneous, is_initialized, local_rank,
                       local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                       rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from ...process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                             remove_process_set)
from .. import gradients as _gradients
from .. import mpi_ops as _ops
from ..compression import Compression  # noqa: F401
from ..mpi_ops import allgather_object, broadcast_object  # noqa: F401
from . import callbacks  # noqa: F401
from . import keras_module as _km
from . import optimizer as _optimizer_keras3
from . import optimizer_keras2 as _optimizer_keras2


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps a Keras optimizer (Keras 3, or Keras 2 new or legacy) so gradients are
    reduced across ranks before they are applied (model.fit, apply_gradients and custom
    loops alike); the result is an instance of the optimizer's own class. Models using
    it must not be XLA-compiled (jit_compile=False; "auto" picks that on CPU).

    backward_passes_per_step = n: gradients are summed locally and reduced every n-th
    apply (averaged over the n passes if average_aggregated_gradients). Variables
    registered with `register_local_var` keep their local gradient, divided by the set
    size if scale_local_gradients (as in Horovod). Other arguments as in
    DistributedGradientTape."""
    if int(backward_passes_per_step) < 1:
        raise ValueError(f"horovodlite: backward_passes_per_step must be >= 1, "
                         f"got {backward_passes_per_step}")
    family = (_optimizer_keras3 if _km.is_keras3_optimizer(optimizer) else
              _optimizer_keras2 if _km.is_keras2_optimizer(optimizer) else None)
    if family is not None:
        settings = _gradients.ReduceSettings(
            Compression.none if compression is None else compression, sparse_as_dense,
            Average if op is None else op, gradient_predivide_factor, num_groups, groups,
            global_process_set if process_set is None else process_set, scale_local_gradients)
        return family.DistributedOptimizer(
            optimizer, settings, name=name, backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients)
    raise TypeError(f"horovodlite: DistributedOptimizer wraps Keras optimizers (Keras 3, or "
                    f"tf_keras new or legacy), got {type(optimizer).__module__}."
                    f"{type(optimizer).__name__}; for tf.compat.v1 optimizers use "
                    "DistributedGradientTape")


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average,
                                backward_passes_per_step=1, average_aggregated_gradients=False,
                                groups=None, process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose gradients for the trainable variables of `local_layers`
    (a Keras layer or a list of them: model-parallel parts) are applied locally, not
    reduced (divided by the set size if scale_local_gradients, as in Horovod)."""
    local_vars = _gradients.local_variables_of(local_layers)
    opt = DistributedOptimizer(optimizer, name=name, compression=compression,
                               sparse_as_dense=sparse_as_dense,
                               gradient_predivide_factor=gradient_predivide_factor, op=op,
                               backward_passes_per_step=backward_passes_per_step,
                               average_aggregated_gradients=average_aggregated_gradients,
                               groups=groups, process_set=process_set,
                               scale_local_gradients=scale_local_gradients)
    for v in local_vars:
        opt.register_local_var(v)
    return opt


def broadcast_global_variables(root_rank):
    """TF 1 global-variable collections do not exist in eager TF 2 (Horovod raises too)."""
    raise RuntimeError("broadcast_global_variables is a TF 1 API that does not support eager "
                       "execution; use hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank)"
                       " or horovodlite.tensorflow.broadcast_variables(model.variables, "
                       "root_rank)")


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
    """Reduces, then rank r keeps its dim-0 slice; returns a numpy array."""
    return _np.asarray(_ops.reducescatter(_tf.convert_to_tensor(value), name=name, op=op,
                                          process_set=process_set))


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none, legacy_opts=False):
    """keras.models.load_model, with the compiled optimizer wrapped in DistributedOptimizer
    (its saved state kept). `legacy_opts` is accepted for Horovod compatibility: the
    optimizer's own class (Keras 3, Keras 2 new or legacy) decides how it is wrapped."""
    objects = dict(custom_objects or {})
    for opt_cls in custom_optimizers or []:
        objects[opt_cls.__name__] = opt_cls
    model = _keras.models.load_model(filepath, custom_objects=objects)
    old = getattr(model, "optimizer", None)
    if old is None:
        return model
    new = DistributedOptimizer(old, compression=compression)
    old_vars = _km.optimizer_variables(old)
    if old_vars:
        _km.build_optimizer(new, model.trainable_variables)
        new_vars = _km.optimizer_variables(new)
        for dst, src in zip(new_vars, old_vars):
            if tuple(dst.shape) == tuple(src.shape):
                dst.assign(src)
    model.optimizer = new
    return model


from . import elastic  # noqa: F401,E402  (hvd.elastic.KerasState and its callbacks)
