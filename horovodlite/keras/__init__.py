"""`import horovodlite.keras as hvd` (Horovod's horovod.keras): Keras 3 runs on the
TensorFlow backend here, so this is horovodlite.tensorflow.keras."""
from ..tensorflow.keras import *  # noqa: F401,F403
from ..tensorflow.keras import (DistributedOptimizer, allgather, allreduce, broadcast,  # noqa: F401
                                broadcast_global_variables, callbacks, load_model,
                                reducescatter)
