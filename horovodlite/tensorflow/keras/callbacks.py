"""Keras callbacks for data-parallel training (Horovod names and arguments), subclassing
the Callback class of the Keras `tf.keras` is (Keras 3, or tf_keras with
TF_USE_LEGACY_KERAS=1; see keras_module.py)."""
import numpy as np
import tensorflow as tf

import horovodlite as _np_api
from ...process_sets import global_process_set
from .. import mpi_ops
from ..gradients import variable_key
from .keras_module import build_optimizer, keras, optimizer_variables


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every rank start from the root's model and optimizer state, before the first
    step. Keras builds the model before on_train_begin but the optimizer's slots only
    inside the first step, so the optimizer is built here first, as its first apply
    would. A model still unbuilt at on_train_begin is broadcast after its first batch
    instead. `local_variables` (a variable or a list: model-parallel parts) keep each
    rank's own values."""

    def __init__(self, root_rank, device="", local_variables=None,
                 process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.device = device
        self.process_set = process_set
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        self._local_vars = {variable_key(v) for v in local_variables}

    def register_local_var(self, var):
        """Marks one more variable as local (not broadcast)."""
        self._local_vars.add(variable_key(var))

    def _variables(self):
        variables = list(self.model.variables)
        opt = getattr(self.model, "optimizer", None)
        if opt is not None:
            variables += optimizer_variables(opt)
        return [v for v in variables if variable_key(v) not in self._local_vars]

    def _broadcast(self):
        mpi_ops.broadcast_variables(self._variables(), self.root_rank,
                                    process_set=self.process_set,
                                    name="BroadcastGlobalVariablesCallback")
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.model.built:
            return
        opt = getattr(self.model, "optimizer", None)
        if opt is not None:
            build_optimizer(opt, self.model.trainable_variables)
        self._broadcast()

    def on_train_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of each epoch, replaces every numeric metric in `logs` (training and
    validation) by its average over the ranks, in one collective. Put it before callbacks
    that read metrics (checkpointing, ReduceLROnPlateau); History and the progress bar
    come after it and see the averages."""

    def __init__(self, device="", process_set=global_process_set):
        super().__init__()
        self.process_set = process_set

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and _is_number(v))
        values = np.array([float(np.asarray(logs[k])) for k in keys], np.float64)
        # The key count is the array's shape: ranks with different metrics get a shape
        # mismatch error instead of silently mixed-up averages.
        avg = _np_api.allreduce(values, op=_np_api.Average, name="MetricAverageCallback",
                                process_set=self.process_set)
        for k, v in zip(keys, avg):
            logs[k] = float(v)


def _is_number(v):
    try:
        float(np.asarray(v))
        return True
    except (TypeError, ValueError):
        return False


def _set_lr(optimizer, value):
    lr = getattr(optimizer, "learning_rate", None)
    if isinstance(lr, tf.Variable):
        lr.assign(float(value))
    else:
        optimizer.learning_rate = float(value)


def _get_lr(optimizer):
    return float(np.asarray(optimizer.learning_rate))


def _has_settable_momentum(optimizer):
    """Momentum can change during training only where it is a hyperparameter variable
    (Keras 2 legacy optimizers). Keras 3 and Keras 2's new optimizers keep it as a Python
    float compiled into the train step, so it cannot be corrected there."""
    return hasattr(optimizer, "_set_hyper") and "momentum" in getattr(optimizer, "_hyper", {})


def _get_momentum(optimizer):
    return float(np.asarray(optimizer._get_hyper("momentum")))


def _set_momentum(optimizer, value):
    optimizer._set_hyper("momentum", float(value))  # assigns once the variable exists


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) for start_epoch <= epoch <
    end_epoch. `multiplier` is a number or a function of the epoch. staircase=True: set
    once per epoch with the integer epoch; False: every batch, with the fractional epoch
    epoch + batch / steps_per_epoch (steps_per_epoch defaults to what fit reports).

    momentum_correction (Goyal et al.): for the first batch after the rate changes from
    lr to lr', momentum is scaled by lr'/lr, then restored. Applied where momentum is a
    variable (Keras 2 legacy optimizers); Keras 3 and Keras 2's new optimizers compile it
    into the train step as a constant, so there it is left as it is."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None, verbose=0):
        super().__init__()
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else (lambda epoch: multiplier)
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.verbose = verbose
        self.current_epoch = None
        self.restore_momentum = None

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        opt = self.model.optimizer
        old_lr = _get_lr(opt)
        new_lr = self.initial_lr * self.multiplier(epoch)
        _set_lr(opt, new_lr)
        if self.momentum_correction and _has_settable_momentum(opt) and old_lr > 0 \
                and new_lr != old_lr:
            if self.restore_momentum is None:
                self.restore_momentum = _get_momentum(opt)
            _set_momentum(opt, self.restore_momentum * new_lr / old_lr)

    def _restore_momentum_if_needed(self):
        if self.restore_momentum is not None:
            _set_momentum(self.model.optimizer, self.restore_momentum)
            self.restore_momentum = None

    def on_train_batch_end(self, batch, logs=None):
        self._restore_momentum_if_needed()

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = (self.params or {}).get("steps")
            if not self.steps_per_epoch:
                raise ValueError("LearningRateScheduleCallback(staircase=False) needs "
                                 "steps_per_epoch (fit could not tell it)")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch
        if self.staircase and self._in_range(epoch):
            self._adjust(epoch)

    def on_train_batch_begin(self, batch, logs=None):
        if self.staircase or not self._in_range(self.current_epoch):
            return
        self._adjust(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["learning_rate"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Ramps the learning rate from initial_lr / size to initial_lr over warmup_epochs,
    batch by batch (the large-batch warmup of Goyal et al.): with size ranks, the rate
    at fractional epoch e is initial_lr / size * (e * (size - 1) / warmup_epochs + 1)."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        def multiplier(epoch):
            size = _np_api.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch, verbose=verbose)
        self.warmup_epochs = warmup_epochs

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.warmup_epochs - 1:
            # The last batch of warmup set e just below warmup_epochs: finish at the target.
            _set_lr(self.model.optimizer, self.initial_lr)
            if self.verbose and _np_api.rank() == 0:
                print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                      f"{self.initial_lr:g}.")


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """A ModelCheckpoint that keeps only the best model seen (save_best_only=True), with
    Horovod's arguments. As in Horovod (whose Spark estimator sets it later), `filepath`
    may be given after construction (`cb.filepath = ...`); it must be set before fit.
    Add it on rank 0 only, like any checkpointing callback."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch", filepath=None):
        # Keras 3 checks the path's extension at construction: give it a valid stand-in.
        stand_in = "best.weights.h5" if save_weights_only else "best.keras"
        super().__init__(filepath=filepath or stand_in, monitor=monitor, verbose=verbose,
                         save_best_only=True, save_weights_only=save_weights_only, mode=mode,
                         save_freq=save_freq)
        if not filepath:
            self.filepath = None

    def on_train_begin(self, logs=None):
        if not self.filepath:
            raise ValueError("horovodlite: BestModelCheckpoint needs a filepath: pass "
                             "filepath=... or set .filepath before model.fit")
        parent = getattr(super(), "on_train_begin", None)
        if parent is not None:
            parent(logs)
