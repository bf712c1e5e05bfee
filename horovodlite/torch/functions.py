"""Making every rank start from the root's model and optimizer state."""
import collections.abc

import torch

from ..basics import rank
from ..handles import synchronize
from ..process_sets import global_process_set
from .mpi_ops import broadcast_async_


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """The root's picklable `obj` on every rank (cloudpickle)."""
    import horovodlite

    return horovodlite.broadcast_object(obj, root_rank=root_rank, name=name,
                                        process_set=process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """A list with every rank's picklable `obj`, in rank order."""
    import horovodlite

    return horovodlite.allgather_object(obj, name=name, process_set=process_set)


def _named_tensors(params):
    if isinstance(params, collections.abc.Mapping):
        return sorted(params.items(), key=lambda kv: str(kv[0]))
    if isinstance(params, collections.abc.Iterable) and not isinstance(params, torch.Tensor):
        return [p if isinstance(p, tuple) else (None, p) for p in params]
    raise ValueError(f"horovodlite: broadcast_parameters takes a state_dict, named_parameters() "
                     f"or a list of tensors, not {type(params).__name__}")


def broadcast_parameters(params, root_rank, process_set=global_process_set):
    """Overwrites each tensor in `params` (a state_dict, `model.named_parameters()` or a
    list of tensors) with the root's value, in place. Non-tensor entries are left alone."""
    handles = [broadcast_async_(p, root_rank, name=name, process_set=process_set)
               for name, p in _named_tensors(params) if isinstance(p, torch.Tensor)]
    for h in handles:
        synchronize(h)


class _Slot:
    """Stands for one tensor of the root's optimizer state in the broadcast skeleton."""

    def __init__(self, index, shape, dtype):
        self.index, self.shape, self.dtype = index, shape, dtype


def _strip(obj, found):
    """`obj` with each tensor replaced by a _Slot; the tensors are appended to `found`."""
    if isinstance(obj, torch.Tensor):
        found.append(obj)
        return _Slot(len(found) - 1, tuple(obj.shape), obj.dtype)
    if isinstance(obj, dict):
        return {k: _strip(v, found) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_strip(v, found) for v in obj)
    return obj


def _slots(obj, out):
    """The _Slots of a skeleton, in index order."""
    if isinstance(obj, _Slot):
        out.append(obj)
    elif isinstance(obj, dict):
        for v in obj.values():
            _slots(v, out)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _slots(v, out)
    return sorted(out, key=lambda s: s.index)


def _fill(obj, tensors):
    if isinstance(obj, _Slot):
        return tensors[obj.index]
    if isinstance(obj, dict):
        return {k: _fill(v, tensors) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_fill(v, tensors) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer, root_rank, process_set=global_process_set):
    """Every rank takes the root's optimizer state: hyper-parameters of each param group
    (lr, momentum, ...; also tensor-valued ones) and the per-parameter state tensors.

    The state's structure travels as a small object; the tensors travel as in-place
    broadcasts. Ranks whose state is empty or shaped differently simply take the
    root's, and no optimizer step is taken to create state (so parameters and e.g.
    Adam's step count are not disturbed). Works for every torch.optim optimizer,
    LBFGS included.

    As in Horovod, an optimizer with no state yet gives each parameter that requires a
    gradient and has none a zero gradient (scripts then read or broadcast .grad), a
    sparse one for SparseAdam."""
    _zero_missing_grads(optimizer)
    mine = []
    skeleton = _strip(optimizer.state_dict(), mine)
    skeleton = broadcast_object(skeleton, root_rank=root_rank,
                                name="broadcast_optimizer_state", process_set=process_set)
    is_root = rank() == root_rank  # a global rank, as everywhere in Horovod
    tensors = []
    for slot in _slots(skeleton, []):
        if is_root:
            t = mine[slot.index].detach()
            tensors.append(t if t.is_contiguous() else t.contiguous())
        else:
            tensors.append(torch.empty(slot.shape, dtype=slot.dtype))
    handles = [broadcast_async_(t, root_rank, name=f"optimizer_state.{i}",
                                process_set=process_set) for i, t in enumerate(tensors)]
    for h in handles:
        synchronize(h)
    if not is_root:
        optimizer.load_state_dict(_fill(skeleton, tensors))
        _keep_root_dtypes(optimizer, skeleton)


def _keep_root_dtypes(optimizer, skeleton):
    """load_state_dict casts floating state to each parameter's dtype (NAdam's float32
    mu_product becomes float64 next to float64 parameters), so the next step would
    compute in another precision than on the root: put back the root's dtypes."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for index, entries in skeleton.get("state", {}).items():
        if not isinstance(index, int) or index >= len(params):
            continue
        state = optimizer.state.get(params[index], {})
        for key, slot in entries.items():
            t = state.get(key)
            if isinstance(slot, _Slot) and isinstance(t, torch.Tensor) and t.dtype != slot.dtype:
                state[key] = t.to(slot.dtype)


def _zero_missing_grads(optimizer):
    if optimizer.state_dict()["state"]:
        return
    sparse = isinstance(optimizer, torch.optim.SparseAdam)  # it takes sparse ones only
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p).to_sparse() if sparse else torch.zeros_like(p)
