"""TorchState: a model, an optimizer, samplers and any other attributes, saved in memory
at commit and made the same on every rank (from rank 0) after the world re-formed."""
import copy

import torch

from ...elastic.state import State
from .sampler import ElasticSampler


class _Handler:
    def __init__(self, value):
        self.value = value
        self.save()


def _copy_into(saved, current):
    """`current` (a state_dict: nested dicts / lists of tensors and plain values) saved
    into `saved`, the copy the last commit made, in place where the structure, shapes
    and dtypes match; otherwise a fresh deep copy. Returns the saved copy.

    Why: a commit every few steps deep-copied the whole model and optimizer state,
    allocating fresh buffers each time (large tensors come from mmap: page faults and
    zeroing on every commit); copying into the buffers of the previous commit took
    0.17 ms instead of 0.59 ms for benchmarks/elastic_overhead.py's 0.4 M-parameter MLP
    with momentum."""
    if saved is None or not _copy_in_place(saved, current):
        return copy.deepcopy(current)
    return saved


def _copy_in_place(saved, current):
    """True when every tensor of `current` (dicts and lists of them) went into its twin
    in `saved` (plain values are replaced); False, `saved` possibly half-updated, when
    the structure or a tensor's shape, dtype or device differs."""
    if isinstance(current, dict):
        if not isinstance(saved, dict) or saved.keys() != current.keys():
            return False
        keys = current.keys()
    elif isinstance(current, list):
        if not isinstance(saved, list) or len(saved) != len(current):
            return False
        keys = range(len(current))
    else:
        return False
    for k in keys:
        v = current[k]
        if isinstance(v, torch.Tensor):
            if not _same_layout(saved[k], v):
                return False
            saved[k].copy_(v)
        elif isinstance(v, (dict, list)):
            if not _copy_in_place(saved[k], v):
                return False
        else:
            saved[k] = copy.deepcopy(v)
    return True


def _same_layout(saved, t):
    return (isinstance(saved, torch.Tensor) and saved.shape == t.shape and saved.dtype == t.dtype
            and saved.device == t.device and not saved.requires_grad and saved.is_contiguous()
            and saved.layout == t.layout == torch.strided and saved.data_ptr() != t.data_ptr())


class _ModelHandler(_Handler):
    _saved = None

    def save(self):
        with torch.no_grad():
            self._saved = _copy_into(self._saved, self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)  # copies into the parameters

    def sync(self):
        from ..functions import broadcast_parameters

        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    _saved = None

    def save(self):
        with torch.no_grad():
            self._saved = _copy_into(self._saved, self.value.state_dict())

    def restore(self):
        forget = getattr(self.value, "_forget_step", None)  # a DistributedOptimizer
        if forget is not None:
            forget()
        # A copy: Optimizer.load_state_dict keeps the tensors it is given when their
        # dtype and device fit (torch 2.x), so the optimizer's in-place updates would
        # change the saved commit (a second failure before the next commit restored
        # those steps; and the next save would copy buffers onto themselves).
        self.value.load_state_dict(copy.deepcopy(self._saved))

    def sync(self):
        from ..functions import broadcast_optimizer_state

        new_world = getattr(self.value, "_new_world", None)  # a DistributedOptimizer
        if new_world is not None:
            new_world()
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self):
        self.value.load_state_dict(self._saved)

    def sync(self):
        # What any rank processed is done: the union is re-sharded over the new world.
        from ..functions import allgather_object, broadcast_object

        mine = self.value.state_dict()
        epoch = broadcast_object(mine["epoch"], 0, name="elastic.sampler.epoch")
        done = set()
        for processed in allgather_object(mine["processed_indices"] if mine["epoch"] == epoch else [],
                                          name="elastic.sampler.processed"):
            done.update(processed)
        self.value.load_state_dict(dict(epoch=epoch, processed_indices=sorted(done)))


class _ObjectHandler(_Handler):
    def save(self):
        self._saved = copy.deepcopy(self.value)

    def restore(self):
        self.value = copy.deepcopy(self._saved)

    def sync(self):
        from ..functions import broadcast_object

        self.value = broadcast_object(self._saved, 0, name="elastic.object")
        self._saved = copy.deepcopy(self.value)


def _handler(value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value)
    return _ObjectHandler(value)


class TorchState(State):
    """`model` and `optimizer` (either may be None) and keyword attributes (e.g.
    epoch=0, batch=0, train_sampler=ElasticSampler(...)): state.model, state.batch, ...
    Modules, optimizers and ElasticSamplers are saved through their state_dict; other
    values are saved by copy and broadcast as objects."""

    def __init__(self, model=None, optimizer=None, **kwargs):
        from ..functions import broadcast_object
        from ...basics import rank

        super().__init__(bcast_object=broadcast_object, get_rank=rank)
        values = dict(kwargs)
        if model is not None:
            values["model"] = model
        if optimizer is not None:
            values["optimizer"] = optimizer
        object.__setattr__(self, "_handlers", {k: _handler(v) for k, v in values.items()})

    # Attributes in a handler are read and written through it (state.batch += 1).
    def __getattr__(self, name):
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            return handlers[name].value
        raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers is not None and name in handlers:
            handlers[name].value = value
        else:
            object.__setattr__(self, name, value)

    def save(self):
        for h in self._handlers.values():
            h.save()

    def restore(self):
        for h in self._handlers.values():
            h.restore()

    def sync(self):
        # Objects first (sorted names: the same order on every rank), then tensors.
        for name in sorted(self._handlers):
            self._handlers[name].sync()
        self.save()  # the synced state is the last commit on every rank
