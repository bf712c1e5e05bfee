"""What the Keras 3 and the Keras 2 DistributedOptimizer share: the wrapped optimizer
is a fresh instance of a subclass of the user's class (same config), carrying the
reduce settings and the aggregation options; each Keras family makes its own subclass
(optimizer.py, optimizer_keras2.py)."""


def register_local_var(self, var):
    """Marks `var` worker-local (model parallelism): its gradient is applied without being
    reduced (divided by the set size when scale_local_gradients, as in Horovod)."""
    self._hvdl_settings.register_local(var)


def instantiate(distributed_class, optimizer, settings, name, backward_passes_per_step,
                average_aggregated_gradients):
    config = optimizer.get_config()
    if name is not None:
        config["name"] = name
    new = distributed_class(optimizer.__class__).from_config(config)
    new._hvdl_settings = settings
    new._hvdl_passes = int(backward_passes_per_step)
    new._hvdl_average_aggregated = bool(average_aggregated_gradients)
    return new
