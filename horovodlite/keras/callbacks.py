"""horovodlite.keras.callbacks is horovodlite.tensorflow.keras.callbacks."""
from ..tensorflow.keras.callbacks import *  # noqa: F401,F403
from ..tensorflow.keras.callbacks import (BestModelCheckpoint,  # noqa: F401
                                          BroadcastGlobalVariablesCallback,
                                          LearningRateScheduleCallback,
                                          LearningRateWarmupCallback, MetricAverageCallback)
