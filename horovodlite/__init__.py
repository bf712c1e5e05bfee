"""horovodlite: data-parallel training in the spirit of Horovod.

`import horovodlite as hvd` gives the common API on numpy arrays; the framework
frontends are `horovodlite.torch`, `horovodlite.tensorflow`, `horovodlite.keras`
and `horovodlite.jax`."""
from .basics import HorovodTypeError, HorovodValueError  # noqa: F401
from .basics import (Adasum, Average, HorovodInternalError, Max, Min, Product, Sum,  # noqa: F401
                     ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
                     gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size,
                     mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                     shutdown, size, start_timeline, stop_timeline)
from .compression import Compression  # noqa: F401
from .ops import *  # noqa: F401,F403
from .objects import allgather_object, broadcast_object  # noqa: F401
from .shared_arrays import shared_empty  # noqa: F401
from .process_sets import (ProcessSet, add_process_set, global_process_set,  # noqa: F401
                           remove_process_set)

__version__ = "0.1.0"

from . import elastic  # noqa: F401,E402  (horovodlite.elastic.run, ObjectState)
