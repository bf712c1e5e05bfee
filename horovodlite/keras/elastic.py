"""`horovodlite.keras.elastic`: the same as horovodlite.tensorflow.keras.elastic."""
from ..tensorflow.keras.elastic import *  # noqa: F401,F403
from ..tensorflow.keras.elastic import (CommitStateCallback, HostsUpdatedInterrupt,  # noqa: F401
                                        KerasState, ObjectState, UpdateBatchStateCallback,
                                        UpdateEpochStateCallback, run)
