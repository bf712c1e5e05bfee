"""horovodlite.torch on 2 and 3 ranks: collectives and their gradients against numpy /
autograd references, DistributedOptimizer against one process training on the whole
batch, SyncBatchNorm against BatchNorm. The rank-side code is in torch_cases.py; each
test is one mpirun launch covering many cases."""
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch", reason="PyTorch is not installed: horovodlite.torch untested")

from mpirun import run  # noqa: E402

TESTS = str(Path(__file__).resolve().parent)


def _run(n, body, timeout=240, env=None):
    return run(n, f"""
import sys
sys.path.insert(0, {TESTS!r})

def main(_hvd):
    import torch_cases as c
    return {body}
""", timeout=timeout, env=env)


def _bits(a):
    return np.ascontiguousarray(np.asarray(a)).reshape(-1).view(np.uint8)


def _same_on_all_ranks(values, what):
    for q, v in enumerate(values[1:], 1):
        np.testing.assert_array_equal(_bits(v), _bits(values[0]),
                                      err_msg=f"{what}: rank {q} differs from rank 0")


@pytest.mark.parametrize("n", [2, 3])
def test_collectives_and_gradients(n):
    res = _run(n, "(c.allreduce_cases(), c.allreduce_errors(), c.allreduce_autograd(), "
                  "c.gather_broadcast_cases(), c.gather_broadcast_autograd())")
    for part in (0, 3):
        assert len(res[0][part]) > 0, f"part {part}: no case ran"
        for key in res[0][part]:
            _same_on_all_ranks([r[part][key] for r in res], key)
    for r in res:
        assert "float" in r[1] and "mismatch.dtype" in r[1]  # names the tensor and dtypes
        assert r[2] is True and r[4] is True


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_dtype_through_every_collective(n):
    res = _run(n, "c.dtype_matrix()")
    assert len(res[0]) > 200
    for key in res[0]:
        _same_on_all_ranks([r[key] for r in res], key)


@pytest.mark.parametrize("n", [2, 3])
def test_distributed_optimizer(n):
    res = _run(n, "(c.training_equivalence(), c.optimizer_misuse(), c.sync_batch_norm(), "
                  "c.objects_and_state(), c.join_uneven(), c.sparse_equivalence(), "
                  "c.optimizer_state_cases())",
               timeout=400)
    eq = [r[0] for r in res]
    assert len(eq[0]) > 0, "no training case ran"
    for key in eq[0]:
        diffs = [e[key][0] for e in eq]
        assert max(diffs) <= (3e-2 if key in ("fp16", "bf16") else 1e-9), (key, diffs)
        _same_on_all_ranks([e[key][1] for e in eq], key)
    assert all(r[1] is True for r in res)
    _same_on_all_ranks([r[2] for r in res], "SyncBatchNorm training")
    _same_on_all_ranks([r[3][0] for r in res], "training from broadcast state")
    for i in range(len(res[0][3][1])):
        _same_on_all_ranks([r[3][1][i] for r in res], "LBFGS state after broadcast")
    _same_on_all_ranks([r[4] for r in res], "weights after join")
    assert len(res[0][5]) > 0, "no sparse case ran"
    for key in res[0][5]:
        _same_on_all_ranks([r[5][key] for r in res], key)
    assert len(res[0][6]) > 100 and all(r[6].keys() == res[0][6].keys() for r in res)
    for key in res[0][6]:
        _same_on_all_ranks([r[6][key] for r in res], key)


def test_gradients_held_until_step_or_reduced_during_backward():
    """BACKWARD_OVERLAP=0 holds the optimizer's gradients until step() (none finished
    during a pause after backward; step() runs the round), =1 reduces them during
    backward; either trains as one process on the whole batch, with the same bits. Either
    way every gradient is in the engine's queue when backward() returns (held ones are
    submitted together at its end), also after a backward pass that stopped halfway. A
    rank blocked elsewhere (an MPI barrier) before its step() still lets a peer's step
    finish."""
    cases = ("(c.held_gradients(), c.held_gradients_while_a_rank_waits_elsewhere(), "
             "c.held_gradients_after_a_stopped_backward())")
    both = _run(2, cases, env={"HOROVODLITE_BACKWARD_OVERLAP": "0"})
    held = [b[0] for b in both]
    for i in range(len(both[0][1])):
        _same_on_all_ranks([b[1][i] for b in both], f"weights {i} after the barrier")
    more = _run(2, "(c.held_gradients(), c.held_gradients_after_a_stopped_backward())",
                env={"HOROVODLITE_BACKWARD_OVERLAP": "1"})
    overlapped = [m[0] for m in more]
    for res in (held, overlapped):
        assert all(diff <= 1e-9 for diff, *_ in res), [r[0] for r in res]
        for i in range(len(res[0][3])):
            _same_on_all_ranks([r[3][i] for r in res], f"weights {i}")
        for r in res:
            assert r[4] == [len(r[3])] * 3, f"gradients in the queue after backward: {r[4]}"
    for stopped in [b[2] for b in both] + [m[1] for m in more]:
        diff, queued, params, _ = stopped
        assert diff <= 1e-9, f"after a stopped backward: {diff} from the reference"
        assert queued == params, f"after a stopped backward, {queued} of {params} queued"
    for i in range(len(both[0][2][3])):
        _same_on_all_ranks([b[2][3][i] for b in both], f"weights {i} after a stopped backward")
    for diff, finished, rounds, *_ in held:
        assert finished == [0, 0, 0], f"held gradients finished before step(): {finished}"
        assert all(k >= 1 for k in rounds), f"step() ran no round for held gradients: {rounds}"
    for i in range(len(held[0][3])):  # a sum of two: the same bits however batched
        np.testing.assert_array_equal(_bits(held[0][3][i]), _bits(overlapped[0][3][i]))


def test_backward_overlap_rule(monkeypatch):
    """auto holds where the engine would take a training thread's core: this rank's
    cores and the host's, against the training threads."""
    import os

    from horovodlite import _overlap

    def machine(mine, host):
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(mine)))
        monkeypatch.setattr(os, "cpu_count", lambda: host)

    machine(1, 2)  # bound to one core each (horovodlite-run on 2 cores)
    assert not _overlap.engine_has_a_core(1, 2)
    machine(2, 2)  # unbound, 2 ranks on 2 cores
    assert not _overlap.engine_has_a_core(1, 2)
    machine(8, 8)
    assert _overlap.engine_has_a_core(1, 2) and not _overlap.engine_has_a_core(4, 2)
    machine(2, 16)  # bound to two cores each, one training thread
    assert _overlap.engine_has_a_core(1, 2) and not _overlap.engine_has_a_core(2, 2)
    monkeypatch.setenv("HOROVODLITE_BACKWARD_OVERLAP", "sometimes")
    with pytest.raises(ValueError, match="HOROVODLITE_BACKWARD_OVERLAP='sometimes'"):
        _overlap.choice()
    for value in ("0", "1", "auto"):
        monkeypatch.setenv("HOROVODLITE_BACKWARD_OVERLAP", value)
        assert _overlap.choice() == value
    assert _overlap.holds_gradients("0", 0, 2, 1) and not _overlap.holds_gradients("1", 0, 2, 1)
