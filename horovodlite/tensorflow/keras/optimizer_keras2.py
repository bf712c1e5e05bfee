"""Keras 2 (tf_keras, new and legacy optimizers) DistributedOptimizer. Every Keras 2
update path (model.fit's minimize, a custom loop's apply_gradients) ends in
apply_gradients(grads_and_vars), so that is the one method overridden: gradients are
reduced across ranks, then the user's optimizer class applies them. Both optimizer
families create their slots under tf.init_scope inside apply_gradients, so applying
inside a tf.cond (gradient aggregation) is safe."""
import tensorflow as tf

from .. import gradients
from .wrapping import instantiate, register_local_var


class _Aggregation:
    """Local gradient sums and the pass counter, made on first use (lifted out of any
    tf.function being traced, as Keras makes its slots). A plain object, so the
    optimizer's checkpoint tracking leaves it alone (its dict is keyed by variable refs)."""

    def __init__(self):
        self.sums = {}
        self.count = None

    def accumulators(self, variables):
        accs = []
        for v in variables:
            acc = self.sums.get(v.ref())
            if acc is None:
                with tf.init_scope():
                    acc = tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                      name="hvdl_accumulator")
                self.sums[v.ref()] = acc
            accs.append(acc)
        return accs

    def counter(self):
        if self.count is None:
            with tf.init_scope():
                self.count = tf.Variable(0, dtype=tf.int64, trainable=False,
                                         name="hvdl_pass_count")
        return self.count


def _distributed_class(base):
    def apply_gradients(self, grads_and_vars, *args, **kwargs):
        pairs = [(g, v) for g, v in grads_and_vars]
        grads = [g for g, _ in pairs]
        variables = [v for _, v in pairs]
        if self._hvdl_passes == 1:
            reduced = gradients.allreduce_gradients(
                grads, variables, self._hvdl_settings, gradients.base_name("DistributedOptimizer"))
            return super(cls, self).apply_gradients(list(zip(reduced, variables)), *args,
                                                    **kwargs)
        return self._hvdl_accumulate(grads, variables, args, kwargs)

    def _hvdl_accumulate(self, grads, variables, args, kwargs):
        agg_state = self._hvdl_agg
        accs = agg_state.accumulators(variables)
        for g, acc in zip(grads, accs):
            if g is not None:
                acc.assign_add(tf.cast(tf.convert_to_tensor(g), acc.dtype))
        count = agg_state.counter().assign_add(1)
        n = self._hvdl_passes

        def communicate_and_apply():
            agg = [None if g is None else
                   (tf.convert_to_tensor(acc) / n if self._hvdl_average_aggregated
                    else tf.convert_to_tensor(acc))
                   for g, acc in zip(grads, accs)]
            reduced = gradients.allreduce_gradients(
                agg, variables, self._hvdl_settings, gradients.base_name("DistributedOptimizer"))
            super(cls, self).apply_gradients(
                [(r, v) for r, v in zip(reduced, variables) if r is not None], *args, **kwargs)
            for acc in accs:
                acc.assign(tf.zeros_like(acc))
            return tf.constant(True)

        def only_count():
            # As in Horovod: `iterations` counts backward passes.
            self.iterations.assign_add(1)
            return tf.constant(False)

        if not tf.executing_eagerly():
            return tf.cond(tf.equal(count % n, 0), communicate_and_apply, only_count)
        return communicate_and_apply() if int(count) % n == 0 else only_count()

    cls = type(base.__name__, (base,), {
        "__module__": base.__module__,  # saved models record the user's optimizer class
        "apply_gradients": apply_gradients, "_hvdl_accumulate": _hvdl_accumulate,
        "register_local_var": register_local_var,
    })
    return cls


def DistributedOptimizer(optimizer, settings, name=None, backward_passes_per_step=1,
                         average_aggregated_gradients=False):
    """An instance of `optimizer`'s class (same config, fresh state) that reduces
    gradients across ranks before applying them."""
    new = instantiate(_distributed_class, optimizer, settings, name, backward_passes_per_step,
                      average_aggregated_gradients)
    new._hvdl_agg = _Aggregation()
    return new
