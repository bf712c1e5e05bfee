"""numpy arrays in memory that the other ranks of this host can map. When every rank
of a single-host set passes such arrays to an allreduce (input and output alike),
rank r reduces its share of the batch straight from every rank's arrays into every
rank's arrays: no staging copies (a ResNet-50 gradient batch on 2 ranks took 19-40% less
time than from ordinary arrays, depending on where the VM's vCPUs sat)."""
import numpy as np

from ._loader import _core


def shared_empty(shape, dtype=np.float32):
    """An uninitialised C-contiguous array from this process's shared arena, freed
    (its pages returned) when the last view of it goes. Use it for the buffers that
    are allreduced every step, such as gradients."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if np.ndim(shape) == 0 else tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    return _core.shared_empty(nbytes).view(dtype).reshape(shape)
