"""The README's first example, on 1 to 4 ranks."""
import numpy as np
import pytest

from mpirun import run


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_allreduce_sum_every_rank_agrees(n):
    res = run(n, """
    def main(hvd):
        return hvd.rank(), hvd.size(), hvd.allreduce(np.full(5, hvd.rank(), np.float32), op=hvd.Sum)
    """)
    for r, (rank, size, out) in enumerate(res):
        assert (rank, size) == (r, n)
        np.testing.assert_array_equal(out, np.full(5, sum(range(n)), np.float32))
