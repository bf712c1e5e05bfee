"""DistributedGradientTape: a tf.GradientTape whose gradient() returns gradients
reduced across ranks."""
import tensorflow as tf

from ..basics import Average
from ..process_sets import global_process_set
from . import gradients
from .compression import Compression


def _tape_class(base):
    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super(cls, self).gradient(target, sources, output_gradients,
                                          unconnected_gradients)
        flat_grads = tf.nest.flatten(grads)
        reduced = gradients.allreduce_gradients(flat_grads, tf.nest.flatten(sources),
                                                self._hvdl_settings,
                                                gradients.base_name("DistributedGradientTape"))
        return tf.nest.pack_sequence_as(grads, reduced)

    cls = type(base.__name__, (base,), {"gradient": gradient})
    return cls


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps `gradtape` (used or not yet entered): the result is an instance of the tape's
    own class whose gradient() allreduces what it computes.

    compression: Compression.none / fp16 / bf16 on the wire. sparse_as_dense: reduce
    tf.IndexedSlices as dense tensors instead of allgathering them. op: Average (default),
    Sum, ... gradient_predivide_factor: divide by f before the sum and by size / f after.
    groups: an int (that many fused groups) or lists of variables reduced as one unit."""
    settings = gradients.ReduceSettings(compression, sparse_as_dense, op,
                                        gradient_predivide_factor, num_groups, groups,
                                        process_set)
    cls = _tape_class(gradtape.__class__)
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the recorded tape and its flags
    tape._hvdl_settings = settings
    return tape
