"""Elastic training (Horovod 0.28's `hvd.elastic`) on MPI with ULFM: a job that loses a
process re-forms its world from the survivors and goes on from its last commit; a job
whose host discovery reports more slots grows at its next commit. numpy / framework-
free API; the frontends add their states (horovodlite.torch.elastic.TorchState, ...)."""
from .runner import run, run_fn  # noqa: F401
from .state import HostsUpdatedInterrupt, ObjectState, State  # noqa: F401
