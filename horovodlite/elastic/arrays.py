"""Saving and syncing lists of arrays (framework variables read as numpy), shared by the
TensorFlow/Keras and JAX states: each array travels as one in-place broadcast."""
import numpy as np


def broadcast_arrays(arrays, name):
    """Rank 0's arrays on every rank (shapes and dtypes travel first, so a rank whose
    arrays are missing or shaped differently, e.g. a new one, still takes them)."""
    from ..objects import broadcast_object
    from ..ops import broadcast_
    from ..basics import rank

    arrays = [np.array(a, order="C") for a in arrays]  # (keeps 0-d shapes)
    spec = broadcast_object([(a.shape, a.dtype.str) for a in arrays] if rank() == 0 else None, 0,
                            name=f"{name}.spec")
    out = []
    for i, (shape, dtype) in enumerate(spec):
        mine = arrays[i] if i < len(arrays) else None
        buf = mine.copy() if mine is not None and mine.shape == tuple(shape) and mine.dtype.str == dtype \
            else np.zeros(shape, dtype=np.dtype(dtype))
        if buf.size:
            broadcast_(buf.reshape(-1).view(np.uint8), 0, name=f"{name}.{i}")
        out.append(buf)
    return out
