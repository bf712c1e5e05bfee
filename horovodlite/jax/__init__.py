"""horovodlite for JAX: `import horovodlite.jax as hvd`.

Collectives on jax arrays and pytrees, eager or inside `jax.jit` (where they run as an
XLA FFI custom call into the core: no Python in the loop), differentiable, and an optax
DistributedOptimizer. Needs jax and optax; the core itself is never compiled against
jax, so any jax version with `jax.ffi` works."""
try:
    import jax as _jax  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("horovodlite.jax needs jax: pip install jax") from e

from ..basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                      cross_rank, cross_size, cuda_built, init, is_homogeneous, is_initialized,
                      local_rank, local_size, mpi_built, mpi_enabled, mpi_threads_supported,
                      nccl_built, rank, shutdown, size)
from ..process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                            remove_process_set)
from .compression import Compression  # noqa: F401
from .ops import (allgather, allreduce, alltoall, broadcast, grouped_allreduce,  # noqa: F401
                  reducescatter)
from .optimizer import (DistributedOptimizer, allreduce_gradients,  # noqa: F401
                        broadcast_optimizer_state, broadcast_parameters)
