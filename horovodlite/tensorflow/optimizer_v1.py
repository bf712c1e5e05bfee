"""DistributedOptimizer for tf.compat.v1.train optimizers (TF 1-style code running on TF 2,
eagerly or inside tf.function): compute_gradients reduces what the wrapped optimizer
computes, apply_gradients and the slot accessors are the wrapped optimizer's. minimize()
goes through both, so it is distributed too."""
import tensorflow as tf

from . import gradients


class _DistributedOptimizerV1(tf.compat.v1.train.Optimizer):
    def __init__(self, optimizer, settings, name=None, use_locking=False):
        super().__init__(name=name or f"Distributed{type(optimizer).__name__}",
                         use_locking=use_locking)
        self._optimizer = optimizer
        self._hvdl_settings = settings

    def register_local_var(self, var):
        """Marks `var` worker-local: its gradient is not reduced (divided by the set size
        when scale_local_gradients, as in Horovod)."""
        self._hvdl_settings.register_local(var)

    def compute_gradients(self, *args, **kwargs):
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        reduced = gradients.allreduce_gradients(grads, variables, self._hvdl_settings,
                                                gradients.base_name("DistributedOptimizer"))
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, settings, name=None, use_locking=False,
                         backward_passes_per_step=1):
    if int(backward_passes_per_step) != 1:
        # Horovod refuses it eagerly too; gradient aggregation is in the Keras wrappers.
        raise ValueError("horovodlite: backward_passes_per_step > 1 is not supported for "
                         "tf.compat.v1 optimizers; use a Keras optimizer with "
                         "hvd.DistributedOptimizer, or accumulate with DistributedGradientTape")
    return _DistributedOptimizerV1(optimizer, settings, name=name, use_locking=use_locking)
