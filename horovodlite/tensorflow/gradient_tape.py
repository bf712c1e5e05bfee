"""DistributedGradientTape: a tf.GradientTape whose gradient() returns gradients
reduced across ranks."""
import tensorflow as tf

from ..basics import Average
from ..process_sets import global_process_set
from . import gradients
from .compression import Compression


def _tape_class(base):
    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        # use_generic_names (Horovod's 4th argument) names the allreduces grad_0, grad_1,
        # ... in graphs; ours are named per call site already, so it changes nothing.
        grads = super(cls, self).gradient(target, sources, output_gradients,
                                          unconnected_gradients)
        flat_grads = tf.nest.flatten(grads)
        reduced = gradients.allreduce_gradients(flat_grads, tf.nest.flatten(sources),
                                                self._hvdl_settings,
                                                gradients.base_name("DistributedGradientTape"))
        return tf.nest.pack_sequence_as(grads, reduced)

    def register_local_source(self, source):
        """Marks `source` (a variable) worker-local: its gradient is not reduced (it is
        divided by the set size when scale_local_gradients, as in Horovod)."""
        self._hvdl_settings.register_local(source)

    cls = type(base.__name__, (base,), {"gradient": gradient,
                                        "register_local_source": register_local_source})
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
                                        process_set, scale_local_gradients)
    cls = _tape_class(gradtape.__class__)
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the recorded tape and its flags
    tape._hvdl_settings = settings
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape whose gradients for the trainable variables of
    `local_layers` (a Keras layer or a list of them) stay local to each rank."""
    local_vars = gradients.local_variables_of(local_layers)
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for v in local_vars:
        tape.register_local_source(v)
    return tape
