"""Elastic training for PyTorch (`hvd.elastic` of `import horovodlite.torch as hvd`),
with Horovod 0.28's names: run, TorchState, ElasticSampler, ObjectState."""
from ...elastic import HostsUpdatedInterrupt, ObjectState, State, run, run_fn  # noqa: F401
from .sampler import ElasticSampler  # noqa: F401
from .state import TorchState  # noqa: F401
