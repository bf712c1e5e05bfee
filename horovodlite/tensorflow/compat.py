"""Smaller names horovod.tensorflow exports, kept so Horovod scripts run unchanged."""
import tensorflow as tf

import horovodlite as _np_api
from .. import objects as _np_objects
from ..basics import Average, Sum, is_initialized
from ..process_sets import _registered, global_process_set

# Horovod's process-set error codes (process_set_included_op returns them).
PROCESS_SET_ERROR_INIT = -1
PROCESS_SET_ERROR_UNKNOWN_SET = -3


def handle_average_backwards_compatibility(op, average):
    """The reduce op from Horovod's two spellings: `op`, or the deprecated bool `average`."""
    if op is not None:
        if average is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one "
                             "of them.")
        return op
    if average is not None:
        return Average if average else Sum
    return Average


def check_num_rank_power_of_2(num_rank):
    """True when `num_rank` is a power of two (Horovod's Adasum precondition)."""
    return num_rank > 0 and (num_rank & (num_rank - 1)) == 0


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function that broadcasts its (picklable) argument from `root_rank`, under one name
    for every call (Horovod builds TF 1 placeholders for this; eager TF 2 needs none)."""
    name = name or "broadcast_object_fn"

    def _bcast(obj):
        return _np_objects.broadcast_object(obj, root_rank=root_rank, name=name,
                                            process_set=process_set)

    return _bcast


def _process_set(process_set_id):
    if process_set_id == 0:
        return global_process_set
    return _registered.get(int(process_set_id))


def size_op(process_set_id=0, name=None):
    """The size of the process set (the world by default), as an int32 scalar tensor."""
    ps = _process_set(process_set_id)
    if ps is None:
        raise ValueError(f"horovodlite: size_op: no process set with id {process_set_id}")
    return tf.constant(ps.size(), tf.int32, name=name)


def process_set_included_op(process_set_id=0, name=None):
    """1 if this rank belongs to the process set, 0 if not; Horovod's error codes when
    horovodlite is not initialized (-1) or the set is unknown (-3)."""
    if not is_initialized():
        return tf.constant(PROCESS_SET_ERROR_INIT, tf.int32, name=name)
    ps = _process_set(process_set_id)
    if ps is None:
        return tf.constant(PROCESS_SET_ERROR_UNKNOWN_SET, tf.int32, name=name)
    return tf.constant(int(ps.included()), tf.int32, name=name)


def local_size_op(name=None):
    return tf.constant(_np_api.local_size(), tf.int32, name=name)


def rank_op(name=None):
    return tf.constant(_np_api.rank(), tf.int32, name=name)


def local_rank_op(name=None):
    return tf.constant(_np_api.local_rank(), tf.int32, name=name)
