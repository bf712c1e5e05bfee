"""`import horovodlite.torch as hvd` against Horovod 0.28's horovod.torch names
(tests/horovod_api.py): every name exists with the parameters Horovod users pass."""
import pytest

pytest.importorskip("torch", reason="PyTorch is not installed")

import horovodlite.torch as hvd  # noqa: E402
from horovod_api import BASICS, COLLECTIVES, KNOWN_MISSING, TORCH, walk  # noqa: E402


def test_every_horovod_torch_name_exists_with_a_compatible_signature():
    problems, checked = walk(hvd, BASICS, COLLECTIVES, TORCH)
    assert not problems, "\n".join(problems)
    expected = len(BASICS) + len(COLLECTIVES) + len(TORCH) - len(KNOWN_MISSING[hvd.__name__])
    assert len(checked) == expected


def test_horovod_torch_modules_import_the_same_way():
    # scripts import from the submodules too
    from horovodlite.torch.mpi_ops import allreduce, synchronize  # noqa: F401
    from horovodlite.torch.compression import Compression  # noqa: F401
    assert hvd.Compression.none is not None and hvd.Compression.fp16 is not None
