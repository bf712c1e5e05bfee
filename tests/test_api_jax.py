"""horovodlite.jax (JAX has no Horovod counterpart) against our documented API: the names
of ../shared/API.md's common and JAX sections and the docstring of horovodlite/jax,
with the signatures written there (tests/api_walk.py says what compatible means)."""
import pytest

pytest.importorskip("jax", reason="horovodlite.jax tests need jax (pip install jax)")
pytest.importorskip("optax", reason="horovodlite.jax tests need optax (pip install optax)")

from api_walk import run_walks  # noqa: E402

JAX = """
init(comm=None, process_sets=None)
shutdown()
is_initialized()
size()
rank()
local_size()
local_rank()
cross_size()
cross_rank()
is_homogeneous()
mpi_built()
mpi_enabled()
nccl_built()
cuda_built()
mpi_threads_supported()
Sum
Average
Min
Max
Product
Adasum
HorovodInternalError
ProcessSet
global_process_set
add_process_set(process_set)
remove_process_set(process_set)
Compression.none
Compression.fp16
Compression.bf16
allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
allgather(tensor, name=None, process_set=global_process_set)
grouped_allgather(tensors, name=None, process_set=global_process_set)
broadcast(tensor, root_rank, name=None, process_set=global_process_set)
alltoall(tensor, splits=None, name=None, process_set=global_process_set)
reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
barrier(process_set=global_process_set)
join()
broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set)
allgather_object(obj, name=None, process_set=global_process_set)
DistributedOptimizer(optimizer, *, op=Average, compression=Compression.none, backward_passes_per_step=1, gradient_predivide_factor=1.0, process_set=global_process_set)
broadcast_parameters(params, root_rank=0, name=None, process_set=global_process_set)
broadcast_optimizer_state(opt_state, root_rank=0, name=None, process_set=global_process_set)
allreduce_gradients(grads, op=Average, compression=Compression.none, name=None, gradient_predivide_factor=1.0, process_set=global_process_set)
"""


def test_horovodlite_jax_names():
    problems = run_walks({"horovodlite.jax": JAX})
    assert problems == {"horovodlite.jax": []}, problems
