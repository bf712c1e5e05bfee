"""horovodlite for PyTorch: `import horovodlite.torch as hvd` in place of
`import horovod.torch as hvd`.

Nothing here is compiled against torch: tensors reach the core as pointers, so every
torch >= 2.1 works with the same installed package."""
import numpy as _np
import torch as _torch

from ..basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                      ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                      gloo_enabled, init, is_homogeneous, is_initialized, local_rank,
                      local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
                      rank, rocm_built, shutdown, size, start_timeline, stop_timeline)
from ..shared_arrays import shared_empty as _shared_empty
from ..process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                            remove_process_set)
from .compression import Compression  # noqa: F401
from .functions import (allgather_object, broadcast_object, broadcast_optimizer_state,  # noqa: F401
                        broadcast_parameters)
from .mpi_ops import *  # noqa: F401,F403
from .mpi_ops import poll, synchronize  # noqa: F401
from .optimizer import DistributedOptimizer  # noqa: F401
from .sparse import sparse_allreduce_async  # noqa: F401
from .sync_batch_norm import SyncBatchNorm  # noqa: F401
from . import elastic  # noqa: F401,E402  (hvd.elastic.run, TorchState, ElasticSampler)

if not hasattr(_torch.Tensor, "register_post_accumulate_grad_hook"):
    raise ImportError(f"horovodlite.torch needs torch >= 2.1 (found {_torch.__version__})")


def join(device=-1):
    """This rank has no more data: until every rank has joined, the others' collectives
    go on with this rank contributing nothing. Returns the last rank to join (the same
    on every rank). `device` is accepted for Horovod compatibility."""
    import horovodlite

    return horovodlite.join()


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called barrier()."""
    import horovodlite

    return horovodlite.barrier(process_set=process_set)



def shared_empty(shape, dtype=_torch.float32):
    """A CPU tensor in memory the other ranks of this host can map (see
    horovodlite.shared_empty): allreduces whose tensors all come from here go
    zero-copy. Allocate the buffers allreduced every step this way."""
    shape = _torch.Size([shape] if isinstance(shape, int) else shape)
    nbytes = shape.numel() * _torch.empty((), dtype=dtype).element_size()
    if not nbytes:  # nothing to share (and frombuffer refuses an empty buffer)
        return _torch.empty(shape, dtype=dtype)
    # frombuffer keeps the array alive and takes every dtype, bfloat16 too.
    return _torch.frombuffer(_shared_empty(nbytes, _np.uint8), dtype=dtype).view(shape)
