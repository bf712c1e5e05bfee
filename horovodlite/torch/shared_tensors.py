"""CPU tensors in the shared arena (see horovodlite.shared_empty)."""
import numpy as np
import torch

from ..shared_arrays import shared_empty as _shared_empty


def shared_empty(shape, dtype=torch.float32):
    """A CPU tensor in memory the other ranks of this host can map (see
    horovodlite.shared_empty): allreduces whose tensors all come from here go
    zero-copy. Allocate the buffers allreduced every step this way."""
    itemsize = torch.empty((), dtype=dtype).element_size()
    shape = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
    raw = _shared_empty((int(np.prod(shape, dtype=np.int64)) * itemsize,), np.uint8)
    # frombuffer shares the memory (and keeps the array alive) for every dtype, bfloat16 too.
    return torch.frombuffer(raw, dtype=dtype).view(shape) if raw.size else torch.empty(
        shape, dtype=dtype)
