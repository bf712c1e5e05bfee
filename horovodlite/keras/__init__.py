"""`import horovodlite.keras as hvd` (Horovod's horovod.keras): Keras runs on the
TensorFlow backend here (Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1), so this is
horovodlite.tensorflow.keras."""
from ..tensorflow.keras import *  # noqa: F401,F403
from ..tensorflow.keras import (DistributedOptimizer, PartialDistributedOptimizer,  # noqa: F401
                                allgather, allreduce, broadcast, broadcast_global_variables,
                                callbacks, load_model, reducescatter)
from . import elastic  # noqa: F401,E402  (hvd.elastic.KerasState and its callbacks)
