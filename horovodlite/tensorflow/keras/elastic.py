"""Elastic Keras (Horovod's horovod.tensorflow.keras.elastic): KerasState and the
callbacks that keep it current during model.fit."""
import keras

from ..elastic import HostsUpdatedInterrupt, ObjectState, TensorFlowKerasState, run  # noqa: F401


class KerasState(TensorFlowKerasState):
    """TensorFlowKerasState of a compiled Keras model (its optimizer by default)."""

    def __init__(self, model, optimizer=None, **kwargs):
        super().__init__(model, optimizer=optimizer, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits the state every `batches_per_commit` batches and at each epoch's end."""

    def __init__(self, state, batches_per_commit=1):
        super().__init__()
        self.state = state
        self.batches_per_commit = batches_per_commit
        self.batches_remaining = batches_per_commit

    def on_batch_end(self, batch, logs=None):
        self.batches_remaining -= 1
        if self.batches_remaining == 0:
            self.state.commit()
            self.batches_remaining = self.batches_per_commit

    def on_epoch_end(self, epoch, logs=None):
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps state.batch at the number of batches done in this epoch (0 at its end)."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._offset = 0

    def on_epoch_begin(self, epoch, logs=None):
        # Resumed mid-epoch: batches count on from the committed batch.
        self._offset = self.state.batch

    def on_batch_end(self, batch, logs=None):
        self.state.batch = self._offset + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self._offset = 0


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps state.epoch at the next epoch to run (fit(initial_epoch=state.epoch))."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self.initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self.initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = epoch + 1
