"""Collective kinds (the core's OpType codes) and the shape rules the JAX frontend
needs at trace time."""
import numpy as np

from .. import dtypes
from .. import ops as _np_ops
from ..basics import _topology
from .._loader import _core

ALLREDUCE, ALLGATHER, BROADCAST, ALLTOALL, REDUCESCATTER = (
    _np_ops.ALLREDUCE, _np_ops.ALLGATHER, _np_ops.BROADCAST, _np_ops.ALLTOALL,
    _np_ops.REDUCESCATTER)
KIND_NAMES = {ALLREDUCE: "allreduce", ALLGATHER: "allgather", BROADCAST: "broadcast",
              ALLTOALL: "alltoall", REDUCESCATTER: "reducescatter"}


def set_size_rank(process_set_id):
    """(size, rank) of a process set, known at trace time."""
    _topology()
    ranks = _core.process_set_ranks(process_set_id)
    return len(ranks), _core.process_set_rank(process_set_id)


def code_of(x, reducible, what):
    """The core's dtype code for an array's dtype; TypeError when unsupported."""
    return dtypes.code_of(np.dtype(x.dtype), reducible=reducible, what=what)
