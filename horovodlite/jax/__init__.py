"""horovodlite for JAX: `import horovodlite.jax as hvd`.

Collectives on jax arrays and pytrees (a pytree is one group: one negotiation, one fused
transfer), eager or inside `jax.jit`, differentiable, vmappable, and an optax
`DistributedOptimizer`. Needs jax and optax; the core is never compiled against jax, so
any jax with `jax.ffi` works.

How it runs:
- Inside `jax.jit` each collective is an XLA custom call into the C++ core (an XLA FFI
  handler registered with `jax.ffi`): XLA's buffers go to the core by pointer, with no
  Python in the loop; allreduce and broadcast work in place on XLA's buffer. Where the
  jaxlib has FFI futures (FFI >= 0.3) the call returns at once and XLA keeps computing
  until the result is needed; set HOROVODLITE_JAX_FFI_ASYNC=0 to block instead.
- An ordered effect threads a token through the collectives of a program, so every rank
  issues them in the order they were traced, whatever XLA would schedule.
- Eagerly (concrete arrays) a collective goes straight to the core without compiling:
  inputs are read in place, outputs adopted by jax without a copy (DLPack).

Rules:
- Unnamed collectives are named in call order, which under jit means trace order: all
  ranks must trace the same collectives in the same order (pass `name=` otherwise).
- Under jit shapes are static: allgather needs the same first dimension on every rank,
  alltoall equal splits. Eagerly both may differ.
- Under jit collectives run on the CPU backend; accelerator arrays work eagerly (staged
  through host memory).
- Failures (mismatched shapes, dtypes, ops ... across ranks) raise on every rank:
  `HorovodInternalError` eagerly, `jax.errors.JaxRuntimeError` (a RuntimeError carrying
  the same message) from inside jit. Bad local arguments raise TypeError/ValueError at
  trace time.
- Gradients: allreduce (Sum/Average), broadcast, allgather, reducescatter (Sum/Average)
  and alltoall (equal splits) have exact JVP rules; their transposes (jax.grad) give
  Horovod 0.28's gradients, as in the torch and TensorFlow frontends (see _rules.py);
  keep the data flow into
  a collective the same on every rank (JAX skips the tangent collective on a rank whose
  input does not depend on the differentiated values).
"""
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
from ..objects import allgather_object, broadcast_object  # noqa: F401
from ..ops import barrier, join  # noqa: F401
from .compression import Compression  # noqa: F401
from .ops import (allgather, allreduce, alltoall, broadcast, grouped_allgather,  # noqa: F401
                  grouped_allreduce, grouped_reducescatter, reducescatter)
from .optimizer import (DistributedOptimizer, allreduce_gradients,  # noqa: F401
                        broadcast_optimizer_state, broadcast_parameters)
from . import elastic  # noqa: F401,E402  (hvd.elastic.run, ObjectState over pytrees)
