"""The PyTorch examples run as a user would start them, on 2 ranks."""
import re
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is not installed: the torch examples are skipped")
pytest.importorskip("sklearn", reason="scikit-learn is not installed: the digits example is skipped")

from mpirun import launch  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_pytorch_digits_reaches_95_percent():
    proc = launch(2, EXAMPLES / "pytorch_digits.py", timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    acc = [float(a) for a in re.findall(r"test accuracy ([0-9.]+)", proc.stdout)]
    assert len(acc) == 12, proc.stdout[-4000:]  # printed once per epoch, by rank 0 only
    assert acc[-1] >= 0.95, acc


def test_pytorch_synthetic_benchmark_runs():
    proc = launch(2, EXAMPLES / "pytorch_synthetic_benchmark.py",
                  ["--image-size", "32", "--batch-size", "4", "--num-warmup-batches", "1",
                   "--num-batches-per-iter", "1", "--num-iters", "2"], timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"Total img/sec on 2 rank\(s\): [0-9.]+ \+-[0-9.]+", proc.stdout), proc.stdout


def test_use_before_init_is_a_clear_error():
    import torch

    import horovodlite.torch as hvd

    if hvd.is_initialized():
        pytest.skip("initialized by another test in this process")
    with pytest.raises(ValueError, match="init"):
        hvd.allreduce(torch.ones(2))
    with pytest.raises(ValueError, match="init"):
        hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1))
    with pytest.raises(ValueError, match="init"):
        hvd.broadcast_parameters({"w": torch.ones(1)}, root_rank=0)
