"""Sparse (COO) tensors over the ranks, as Horovod does it: every rank's indices and
values are allgathered, in rank order, and form one uncoalesced sparse tensor (the same
on every rank). Nothing is densified, so an embedding's gradient costs only the rows a
step touched."""
import torch

from ..basics import Average, Sum
from ..handles import synchronize
from ..process_sets import global_process_set
from .mpi_ops import allgather_async

__all__ = ["sparse_allreduce_async"]


class SparseAllreduceHandle:
    """What sparse_allreduce_async returns. Calling it (Horovod's interface) or wait()
    blocks until both allgathers are done and returns the reduced sparse tensor."""

    def __init__(self, tensor, name, op, process_set):
        if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
            raise TypeError(f"horovodlite: sparse_allreduce_async '{name}' needs a sparse COO "
                            f"tensor, got {type(tensor).__name__}"
                            + ("" if not isinstance(tensor, torch.Tensor) else " (dense)"))
        if op not in (Average, Sum):
            raise ValueError(f"horovodlite: sparse allreduce '{name}' can only average or sum "
                             "(op=Average or op=Sum); pass sparse_as_dense=True for other ops")
        t = tensor.coalesce()
        self.shape, self.dtype, self.op, self.size = t.shape, t.dtype, op, process_set.size()
        # Allgather concatenates along dim 0, so indices travel as (nnz, sparse_dim).
        self.indices = allgather_async(t.indices().t().contiguous(), f"{name}.indices",
                                       process_set)
        self.values = allgather_async(t.values().contiguous(), f"{name}.values", process_set)
        self._result = None

    def wait(self):
        if self._result is None:
            values = synchronize(self.values)
            indices = synchronize(self.indices).t()
            if self.op == Average:
                values = values / self.size
            self._result = torch.sparse_coo_tensor(indices, values, self.shape,
                                                   check_invariants=False)
        return self._result

    __call__ = wait


def sparse_allreduce_async(tensor, name, op=Average, process_set=global_process_set):
    """Starts reducing the sparse tensor `tensor` over the set (Average or Sum) as an
    allgather of its indices and values; the returned handle, called, gives the result."""
    return SparseAllreduceHandle(tensor, name, op, process_set)
