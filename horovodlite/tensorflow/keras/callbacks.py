"""Keras 3 callbacks for data-parallel training (Horovod names and arguments)."""
import keras
import numpy as np

import horovodlite as _np_api
from ...process_sets import global_process_set
from .. import mpi_ops


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes every rank start from the root's model and optimizer state, before the first
    step. Keras 3 builds the model before on_train_begin but the optimizer only inside the
    first step, so the optimizer is built here first, as its first apply would. A model
    still unbuilt at on_train_begin is broadcast after its first batch instead."""

    def __init__(self, root_rank, device="", process_set=global_process_set):
        super().__init__()
        self.root_rank = root_rank
        self.process_set = process_set
        self.broadcast_done = False

    def _variables(self):
        variables = list(self.model.variables)
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and getattr(opt, "built", False):
            variables += list(opt.variables)
        return variables

    def _broadcast(self):
        mpi_ops.broadcast_variables(self._variables(), self.root_rank,
                                    process_set=self.process_set,
                                    name="BroadcastGlobalVariablesCallback")
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if not self.model.built:
            return
        opt = getattr(self.model, "optimizer", None)
        if opt is not None and not opt.built:
            with keras.name_scope(opt.name, caller=opt):
                opt.build(self.model.trainable_variables)
            opt.built = True
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
    optimizer.learning_rate = float(value)


def _get_lr(optimizer):
    return float(np.asarray(optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to initial_lr * multiplier(epoch) for start_epoch <= epoch <
    end_epoch. `multiplier` is a number or a function of the epoch. staircase=True: set
    once per epoch with the integer epoch; False: every batch, with the fractional epoch
    epoch + batch / steps_per_epoch (steps_per_epoch defaults to what fit reports).

    momentum_correction is accepted for compatibility; Keras 3 optimizers bake momentum
    into the compiled step as a constant, so it is not rescaled."""

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

    def _in_range(self, epoch):
        return epoch >= self.start_epoch and (self.end_epoch is None or epoch < self.end_epoch)

    def _adjust(self, epoch):
        _set_lr(self.model.optimizer, self.initial_lr * self.multiplier(epoch))

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
