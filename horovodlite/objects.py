"""Collectives on picklable Python objects (cloudpickle), over the byte collectives."""
import cloudpickle
import numpy as np

from .handles import auto_name
from .ops import allgather, broadcast_
from .process_sets import global_process_set


def _to_bytes(obj):
    return np.frombuffer(cloudpickle.dumps(obj), dtype=np.uint8)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns `root_rank`'s `obj` on every rank of the set. Unnamed calls are named in
    call order (not by the object's type, which may differ on non-root ranks)."""
    from .basics import rank

    name = auto_name("broadcast_object", name, process_set)
    if rank() == root_rank:
        payload = _to_bytes(obj).copy()
        size = np.array([payload.size], dtype=np.int64)
    else:
        size = np.zeros(1, dtype=np.int64)
    broadcast_(size, root_rank, name=f"{name}.size", process_set=process_set)
    if rank() != root_rank:
        payload = np.empty(int(size[0]), dtype=np.uint8)
    broadcast_(payload, root_rank, name=f"{name}.data", process_set=process_set)
    # Every rank, the root included, gets its own copy (as in Horovod).
    return cloudpickle.loads(payload.tobytes())


def allgather_object(obj, name=None, process_set=global_process_set):
    """Returns the list of every rank's `obj`, in rank order of the set."""
    name = auto_name("allgather_object", name, process_set)
    payload = _to_bytes(obj)
    sizes = allgather(np.array([payload.size], dtype=np.int64), name=f"{name}.size",
                      process_set=process_set)
    data = allgather(payload, name=f"{name}.data", process_set=process_set)
    out, off = [], 0
    for n in sizes.tolist():
        out.append(cloudpickle.loads(data[off:off + n].tobytes()))
        off += n
    return out
