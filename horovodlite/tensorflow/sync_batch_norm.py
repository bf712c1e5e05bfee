"""SyncBatchNormalization: batch normalization whose batch statistics are those of the
global batch (every rank's), for small per-rank batches. The layer of the Keras tf.keras
is (Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1)."""
import tensorflow as tf

from ..basics import Average, size
from . import mpi_ops
from .keras.keras_module import IS_KERAS3, keras


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """Like keras.layers.BatchNormalization, but in training the mean and variance are
    averaged over the ranks (each rank's batch weighs the same, as in Horovod): the
    variance from the averaged E[x] and E[x^2]. Inference is unchanged."""

    def __init__(self, fused=False, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        if not kwargs.get("name"):
            kwargs["name"] = "sync_batch_normalization"
        if not IS_KERAS3:  # Keras 3 has no fused kernel (nor the argument)
            kwargs["fused"] = False
        super().__init__(**kwargs)

    def _moments(self, inputs, *args, **kwargs):
        mean, variance = super()._moments(inputs, *args, **kwargs)
        if size() == 1:
            return mean, variance
        mean_of_square = variance + tf.math.square(mean)
        # One allreduce for both statistics; its gradient is the averaged gradient.
        group = mpi_ops.allreduce(tf.stack([mean, mean_of_square]), op=Average,
                                  name=None)
        group_mean, group_mean_of_square = tf.unstack(group)
        return group_mean, group_mean_of_square - tf.math.square(group_mean)
