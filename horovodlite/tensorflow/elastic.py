"""Elastic training for TensorFlow / Keras models (Horovod's horovod.tensorflow.elastic):
run, TensorFlowKerasState, ObjectState."""
import tensorflow as tf

from ..elastic import HostsUpdatedInterrupt, ObjectState, State, run_fn  # noqa: F401
from ..elastic.arrays import broadcast_arrays


def _is_peer_failure(e):
    # Inside a tf.function a failed collective comes back as a TF op error carrying
    # the engine's message.
    msg = getattr(e, "message", str(e))
    return "HorovodInternalError" in msg or " failed: " in msg and "horovodlite: rank" in msg


def run(func):
    """Like horovodlite.elastic.run; TF op errors from a failed peer count as
    HorovodInternalError."""
    from ..basics import HorovodInternalError

    def translated(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.OpError as e:
            if _is_peer_failure(e):
                raise HorovodInternalError(getattr(e, "message", str(e))) from e
            raise

    import functools

    return run_fn(functools.wraps(func)(translated))


def _optimizer_variables(optimizer):
    if optimizer is None:
        return []
    inner = getattr(optimizer, "_optimizer", optimizer)
    return list(getattr(inner, "variables", []) or [])


class TensorFlowKerasState(ObjectState):
    """A Keras `model` (and `optimizer`, by default the model's), plus keyword attributes
    (ObjectState): weights and optimizer variables are saved as numpy copies at commit
    and broadcast from rank 0 by sync()."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        self.model = model
        self.optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        self._saved_model = None
        self._saved_opt = None
        super().__init__(**kwargs)
        self._save_model()

    def _variables(self):
        return list(self.model.variables), _optimizer_variables(self.optimizer)

    def _build_optimizer(self):
        opt = self.optimizer
        inner = getattr(opt, "_optimizer", opt)
        if inner is not None and hasattr(inner, "build") and not getattr(inner, "built", True):
            inner.build(self.model.trainable_variables)

    def _save_model(self):
        mvars, ovars = self._variables()
        self._saved_model = [v.numpy().copy() for v in mvars]
        self._saved_opt = [v.numpy().copy() for v in ovars]

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        mvars, ovars = self._variables()
        for v, a in zip(mvars, self._saved_model):
            v.assign(a)
        for v, a in zip(ovars, self._saved_opt):
            v.assign(a)
        super().restore()

    def sync(self):
        self._build_optimizer()  # a new rank's optimizer has no slots yet
        mvars, ovars = self._variables()
        for v, a in zip(mvars, broadcast_arrays([v.numpy() for v in mvars], "elastic.keras.model")):
            v.assign(a)
        for v, a in zip(ovars, broadcast_arrays([v.numpy() for v in ovars], "elastic.keras.opt")):
            v.assign(a)
        super().sync()
        self._save_model()
