"""TensorFlow 2 frontend: `import horovodlite.tensorflow as hvd` in place of
`import horovod.tensorflow as hvd`. Nothing here is compiled against TensorFlow: tensors
reach the core as pointers (see handoff.py), so any TF 2 version with DLPack works."""
try:
    import tensorflow as _tf  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("horovodlite.tensorflow needs TensorFlow: pip install tensorflow "
                      "(or tensorflow-cpu)") from e

from ..basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                      ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                      gloo_enabled, init, is_homogeneous, is_initialized, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                      rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from ..process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                            remove_process_set)
from .compat import (broadcast_object_fn, check_num_rank_power_of_2,  # noqa: F401
                     handle_average_backwards_compatibility, local_rank_op, local_size_op,
                     process_set_included_op, rank_op, size_op)
from .compression import Compression  # noqa: F401
from .gradient_tape import DistributedGradientTape, PartialDistributedGradientTape  # noqa: F401
from .mpi_ops import (allgather, allgather_object, allreduce, alltoall, barrier,  # noqa: F401
                      broadcast, broadcast_, broadcast_object, broadcast_variables,
                      grouped_allgather, grouped_allreduce, grouped_reducescatter, join,
                      reducescatter)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """Wraps an optimizer so gradients are reduced across ranks before they are applied:
    tf.compat.v1.train optimizers (compute_gradients reduces; see optimizer_v1.py) and
    Keras optimizers (Keras 3, or Keras 2 new and legacy; see horovodlite.tensorflow.keras)."""
    if isinstance(optimizer, _tf.compat.v1.train.Optimizer):
        from . import gradients as _gradients
        from .optimizer_v1 import DistributedOptimizer as _v1_distributed

        settings = _gradients.ReduceSettings(compression, sparse_as_dense, op,
                                             gradient_predivide_factor, num_groups, groups,
                                             process_set, scale_local_gradients)
        return _v1_distributed(optimizer, settings, name=name, use_locking=use_locking,
                               backward_passes_per_step=backward_passes_per_step)
    from .keras import DistributedOptimizer as _keras_distributed

    return _keras_distributed(optimizer, name=name, compression=compression,
                              sparse_as_dense=sparse_as_dense,
                              backward_passes_per_step=backward_passes_per_step, op=op,
                              gradient_predivide_factor=gradient_predivide_factor,
                              average_aggregated_gradients=average_aggregated_gradients,
                              num_groups=num_groups, groups=groups, process_set=process_set,
                              scale_local_gradients=scale_local_gradients)


def __getattr__(name):
    # SyncBatchNormalization is a Keras layer: import Keras only when it is asked for.
    if name == "SyncBatchNormalization":
        from .sync_batch_norm import SyncBatchNormalization

        return SyncBatchNormalization
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def broadcast_global_variables(root_rank):
    """TF 1 graph collections do not exist in TF 2."""
    raise RuntimeError("broadcast_global_variables is a TF 1 API; in TF 2 use "
                       "hvd.broadcast_variables(model.variables, root_rank) or the Keras "
                       "BroadcastGlobalVariablesCallback")


from . import elastic  # noqa: F401,E402  (hvd.elastic.run, TensorFlowKerasState)
