"""Horovod 0.28's public names in horovod.tensorflow, horovod.tensorflow.keras and
horovod.keras (from its documentation and API reference) exist in horovodlite's modules
with compatible signatures (tests/api_walk.py says what compatible means). Keras is
checked as Keras 3 and as Keras 2 (tf_keras, TF_USE_LEGACY_KERAS=1).

Not listed: horovod.tensorflow.elastic / keras.elastic (elastic training is its own
issue), BroadcastGlobalVariablesHook (a tf.estimator hook; TensorFlow 2.16+ has no
estimator, so Horovod does not define it there either)."""
import pytest

pytest.importorskip("tensorflow", reason="tensorflow is not installed (pip install tensorflow-cpu)")

from api_walk import run_walks  # noqa: E402

from test_api_torch import BASICS  # noqa: E402  (the names every frontend re-exports)

TENSORFLOW = BASICS + """
rank_op(name=None)
local_rank_op(name=None)
size_op(process_set_id=0, name=None)
local_size_op(name=None)
process_set_included_op(process_set_id=0, name=None)
handle_average_backwards_compatibility(op, average)
check_num_rank_power_of_2(num_rank)
join()
SyncBatchNormalization(fused=False)
allreduce(tensor, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, name=None, process_set=global_process_set, ignore_name_scope=False)
grouped_allreduce(tensors, average=None, device_dense='', device_sparse='', compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set, ignore_name_scope=False, name=None)
reducescatter(tensor, device_dense='', compression=Compression.none, op=Average, name=None, process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0, postscale_factor=1.0)
grouped_reducescatter(tensors, device_dense='', compression=Compression.none, op=Average, process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0)
allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set)
grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=global_process_set)
broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=global_process_set)
broadcast_(variables, root_rank, name=None, process_set=global_process_set)
alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=global_process_set)
broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False)
broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set)
broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set)
allgather_object(obj, session=None, name=None, process_set=global_process_set)
broadcast_global_variables(root_rank)
DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False, backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, average_aggregated_gradients=False, num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True)
DistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True)
PartialDistributedGradientTape(gradtape, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False, op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, process_set=global_process_set, local_layers=None, scale_local_gradients=True)
tape.gradient(target, sources, output_gradients=None, use_generic_names=False)
tape.register_local_source(source)
"""

KERAS = BASICS + """
callbacks
DistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1, average_aggregated_gradients=False, num_groups=0, groups=None, process_set=global_process_set, scale_local_gradients=True)
PartialDistributedOptimizer(optimizer, name=None, device_dense='', device_sparse='', compression=Compression.none, sparse_as_dense=False, gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1, average_aggregated_gradients=False, groups=None, process_set=global_process_set, local_layers=None, scale_local_gradients=True)
broadcast_global_variables(root_rank)
allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0, op=None, compression=Compression.none)
allgather(value, name=None)
broadcast(value, root_rank, name=None)
reducescatter(value, name=None, op=Average)
load_model(filepath, custom_optimizers=None, custom_objects=None, compression=Compression.none)
optimizer.register_local_var(var)
callbacks.BroadcastGlobalVariablesCallback(root_rank, device='', local_variables=None)
callbacks.MetricAverageCallback(device='')
callbacks.LearningRateScheduleCallback(initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True, momentum_correction=True, steps_per_epoch=None)
callbacks.LearningRateWarmupCallback(initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None, verbose=0)
callbacks.BestModelCheckpoint(monitor='val_loss', verbose=0, save_weights_only=False, mode='auto', save_freq='epoch')
"""

SETUP = """
import os
import tensorflow as tf
import horovodlite.tensorflow as htf
import horovodlite.tensorflow.keras as hk
from horovodlite.tensorflow.keras.keras_module import keras
extra["tape"] = htf.DistributedGradientTape(tf.GradientTape())
extra["optimizer"] = hk.DistributedOptimizer(keras.optimizers.SGD(0.1))
"""

ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "TF_ENABLE_ONEDNN_OPTS": "0"}


@pytest.mark.parametrize("legacy", [False, True], ids=["keras3", "tf_keras"])
def test_horovod_tensorflow_and_keras_names(legacy):
    if legacy:
        pytest.importorskip("tf_keras", reason="tf_keras is not installed (pip install tf-keras)")
    env = dict(ENV, TF_USE_LEGACY_KERAS="1" if legacy else "0")
    problems = run_walks({"horovodlite.tensorflow": TENSORFLOW,
                          "horovodlite.tensorflow.keras": KERAS,
                          "horovodlite.keras": KERAS}, setup=SETUP, env=env)
    assert problems == {m: [] for m in problems}, problems
