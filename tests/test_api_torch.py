"""Horovod 0.28's public names in horovod.torch (from its documentation and API
reference) exist in horovodlite.torch with compatible signatures (tests/api_walk.py says
what compatible means). test_api_numpy.py walks the framework-free part of this list.

Not listed: horovod.torch.elastic (elastic training is its own issue; README, "Coming
from Horovod")."""
import pytest

from api_walk import run_walks

BASICS = """
init(comm=None, process_sets=None)
shutdown()
is_initialized()
start_timeline(file_path, mark_cycles=False)
stop_timeline()
size()
local_size()
cross_size()
rank()
local_rank()
cross_rank()
is_homogeneous()
mpi_threads_supported()
mpi_enabled()
mpi_built()
gloo_enabled()
gloo_built()
nccl_built()
ddl_built()
ccl_built()
cuda_built()
rocm_built()
ProcessSet(ranks_or_comm)
global_process_set
add_process_set(process_set)
remove_process_set(process_set)
Average
Sum
Adasum
Min
Max
Product
HorovodInternalError
Compression.none
Compression.fp16
"""

COLLECTIVES = """
allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
allgather(tensor, name=None, process_set=global_process_set)
allgather_async(tensor, name=None, process_set=global_process_set)
grouped_allgather(tensors, name=None, process_set=global_process_set)
grouped_allgather_async(tensors, name=None, process_set=global_process_set)
broadcast(tensor, root_rank, name=None, process_set=global_process_set)
broadcast_async(tensor, root_rank, name=None, process_set=global_process_set)
broadcast_(tensor, root_rank, name=None, process_set=global_process_set)
broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set)
alltoall(tensor, splits=None, name=None, process_set=global_process_set)
alltoall_async(tensor, splits=None, name=None, process_set=global_process_set)
reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
join(device=-1)
barrier(process_set=global_process_set)
poll(handle)
synchronize(handle)
broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set)
allgather_object(obj, name=None)
"""

TORCH = BASICS + COLLECTIVES + """
sparse_allreduce_async(tensor, name, op, process_set=global_process_set)
broadcast_parameters(params, root_rank)
broadcast_optimizer_state(optimizer, root_rank)
DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False, process_set=global_process_set)
SyncBatchNorm(num_features, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)
mpi_ops.allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set)
mpi_ops.synchronize(handle)
compression.Compression.none
"""


def test_horovodlite_torch_has_horovod_torch_names():
    pytest.importorskip("torch", reason="PyTorch is not installed")
    problems = run_walks({"horovodlite.torch": TORCH})
    assert problems == {"horovodlite.torch": []}, problems
