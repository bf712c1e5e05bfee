"""Keras 3 DistributedOptimizer. In Keras 3 every update path (model.fit's train step,
apply_gradients, LossScaleOptimizer) goes through Optimizer.apply(grads, variables), so
that is the one method overridden: gradients are reduced across ranks, then the user's
optimizer class applies them."""
import tensorflow as tf

from .. import gradients
from .wrapping import instantiate, register_local_var


def _distributed_class(base):
    def build(self, variables):
        super(cls, self).build(variables)
        if self._hvdl_passes > 1:
            # Local accumulators: with backward_passes_per_step = n, ranks only talk on
            # every n-th pass. Optimizer variables, so they are saved and broadcast too.
            self._hvdl_accumulators = [
                self.add_variable_from_reference(v, name="hvdl_accumulator") for v in variables]
            self._hvdl_pass_count = self.add_variable(shape=(), dtype="int64",
                                                      initializer="zeros",
                                                      name="hvdl_pass_count")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        if trainable_variables is not None:
            variables = list(trainable_variables)
            if not self.built:  # before any tf.cond below: variables are made here
                with tf.name_scope(self.name):
                    self.build(variables)
                self.built = True
        elif self.built:
            variables = list(self._trainable_variables)
        else:
            return super(cls, self).apply(grads, trainable_variables)  # Keras explains
        if self._hvdl_passes == 1:
            reduced = gradients.allreduce_gradients(
                grads, variables, self._hvdl_settings, gradients.base_name("DistributedOptimizer"))
            return super(cls, self).apply(reduced, trainable_variables)
        return self._hvdl_accumulate(grads, variables, trainable_variables)

    def _hvdl_accumulate(self, grads, variables, trainable_variables):
        slots = [self._get_variable_index(v) for v in variables]
        for g, i in zip(grads, slots):
            if g is not None:
                acc = self._hvdl_accumulators[i]
                acc.assign_add(tf.cast(tf.convert_to_tensor(g), acc.dtype))
        count = self._hvdl_pass_count.assign_add(1)
        n = self._hvdl_passes

        def communicate_and_apply():
            agg = []
            for g, i in zip(grads, slots):
                if g is None:
                    agg.append(None)
                    continue
                total = tf.convert_to_tensor(self._hvdl_accumulators[i])
                agg.append(total / n if self._hvdl_average_aggregated else total)
            reduced = gradients.allreduce_gradients(
                agg, variables, self._hvdl_settings, gradients.base_name("DistributedOptimizer"))
            super(cls, self).apply(reduced, trainable_variables)
            for i in slots:
                acc = self._hvdl_accumulators[i]
                acc.assign(tf.zeros_like(acc))

        def only_count():
            # Like Horovod: `iterations` counts backward passes, so schedules keyed on it
            # advance the same with or without aggregation.
            self.iterations.assign_add(1)

        if not tf.executing_eagerly():
            tf.cond(tf.equal(count % n, 0), communicate_and_apply, only_count)
        elif int(count) % n == 0:
            communicate_and_apply()
        else:
            only_count()

    cls = type(base.__name__, (base,), {
        "__module__": base.__module__,  # saved models record the user's optimizer class
        "build": build, "apply": apply, "_hvdl_accumulate": _hvdl_accumulate,
        "register_local_var": register_local_var,
    })
    return cls


def DistributedOptimizer(optimizer, settings, name=None, backward_passes_per_step=1,
                         average_aggregated_gradients=False):
    """An instance of `optimizer`'s class (same config, fresh state) that reduces
    gradients across ranks (as `settings`, a gradients.ReduceSettings, says) before
    applying them.

    backward_passes_per_step = n: gradients are summed locally and reduced every n-th
    apply (averaged over the n passes if average_aggregated_gradients)."""
    return instantiate(_distributed_class, optimizer, settings, name, backward_passes_per_step,
                       average_aggregated_gradients)
