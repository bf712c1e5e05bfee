"""torch tensors -> what the core takes (pointer, dtype code, shape, device) and
engine-owned outputs -> torch tensors. Nothing here is compiled against torch: the
core only ever sees addresses, so any torch version works.

Device hand-off: host tensors go as device -1; a CUDA tensor as its ordinal plus the
stream that produces it (the engine orders its own stream after that one, and a handle
completes only once the results are in place)."""
import torch

from .. import dtypes as _codes
from .._loader import _core

# The one torch dtype -> core code table: torch names its dtypes as the core does
# (torch.int16, torch.uint16, torch.bfloat16, torch.bool, ...), so it is built from
# the core's list and grows with it; names this torch lacks are left out.
_TO_CODE = {getattr(torch, name): code for name, code in _codes.CODES.items()
            if isinstance(getattr(torch, name, None), torch.dtype)}


def code_of(dtype, reducible=False, what="tensor"):
    """The core's dtype code for a torch dtype; TypeError naming what is supported."""
    code = _TO_CODE.get(dtype)
    if code is None or (reducible and code not in _codes.REDUCIBLE):
        allowed = [str(d) for d, c in _TO_CODE.items() if not reducible or c in _codes.REDUCIBLE]
        raise TypeError(f"horovodlite: unsupported dtype {dtype} for {what}; "
                        f"supported: {', '.join(allowed)}")
    return code


def placement(t, what="tensor"):
    """Where the core finds `t`: {"device": -1} for host memory; for a CUDA tensor its
    ordinal and the producer's current stream, which the engine's stream waits on
    before reading (so nothing here blocks the caller)."""
    if t.is_cpu:  # a property: t.device builds an object, five times slower
        return {"device": -1}
    if t.is_cuda and getattr(_core, "CUDA_BUILT", False):
        return {"device": t.device.index,
                "stream": torch.cuda.current_stream(t.device).cuda_stream}
    raise ValueError(f"horovodlite: {what} is on device '{t.device}', which this build cannot "
                     "reach (cuda_built() is False); move it with .cpu() first")


def check_tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"horovodlite: {what} needs a torch.Tensor, got {type(t).__name__}")
    if t.is_sparse:
        raise TypeError(f"horovodlite: {what} got a sparse tensor; use a dense one "
                        "(DistributedOptimizer handles sparse gradients itself)")
    return t


def engine_output(handle, dtype, device):
    """The engine-allocated result of `handle` as a tensor viewing that memory (no copy
    on the host)."""
    arr = _core.output(handle)
    shape = list(_core.output_shape(handle))
    if arr is None or arr.size == 0:
        out = torch.empty(shape, dtype=dtype)
    else:
        out = torch.from_numpy(arr).view(dtype).reshape(shape)
    return out if device.type == "cpu" else out.to(device)
