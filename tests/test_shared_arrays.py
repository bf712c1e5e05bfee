"""Arrays from hvd.shared_empty: allreduces whose tensors all lie in the ranks' shared
arenas take the zero-copy path (every dtype and op, scale factors, in place and out
of place, fused batches with small tensors, N = 2 and 3) and give the same bits as
the staged path on ordinary arrays; a rank with ordinary arrays makes every rank fall
back; freed arrays give their memory back."""
import pytest

from collective_refs import REFS
from mpirun import run

ZERO_COPY = REFS + r'''
from horovodlite._loader import _core

def shared_copy(x):
    y = hvd.shared_empty(x.shape, x.dtype)
    y[...] = x
    return y

def main(hvd):
    n, r = hvd.size(), hvd.rank()
    zc = lambda: _core.shared_arena_info()["zero_copy_allreduces"]
    done, results = zc(), {}
    ops = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
           "Product": hvd.Product}
    for d, dt in enumerate(REDUCIBLE):
        for o, (opname, op) in enumerate(ops.items()):
            count = 70001  # past the zero-copy threshold in every dtype, odd for the blocks
            seed = 10 * d + o
            x = data(dt, (count,), seed, r, lo=-2, hi=3)
            want = reduce_ref([data(dt, (count,), seed, k, lo=-2, hi=3) for k in range(n)], op, n)
            key = f"{np.dtype(dt).name}/{opname}"
            staged = hvd.allreduce(x, op=op, name=key + "/staged")
            y = shared_copy(x)
            hvd.allreduce_(y, op=op, name=key + "/in-place")
            z = hvd.allreduce(shared_copy(x), op=op, name=key + "/out-of-place")
            assert _core.in_shared_arena(z.ctypes.data, z.nbytes), "output not shared"
            for what, got in (("staged", staged), ("in place", y), ("out of place", z)):
                assert same(got, want), f"{key} {what}: wrong result"
            results[key] = y
    assert zc() - done == 2 * len(REDUCIBLE) * len(ops), (zc() - done)
    # Scale factors, and a fused batch whose small tensors would not qualify alone.
    x = data(np.float32, (40000,), 7, r)
    want = reduce_ref([data(np.float32, (40000,), 7, k) for k in range(n)], hvd.Sum, n, 0.5, 3.0)
    y = hvd.allreduce(shared_copy(x), op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0,
                      name="scaled")
    assert same(y, want), "scaled"
    counts = [3, 1, 0, 5000, 17, 20000, 2]
    arrays = [shared_copy(data(np.float64, (c,), 11 + i, r)) for i, c in enumerate(counts)]
    before = zc()
    hs = [hvd.allreduce_async_(a, op=hvd.Max, name=f"batch.{i}") for i, a in enumerate(arrays)]
    for i, (h, c) in enumerate(zip(hs, counts)):
        got = hvd.synchronize(h)
        assert same(got, reduce_ref([data(np.float64, (c,), 11 + i, k) for k in range(n)],
                                    hvd.Max, n)), f"batch.{i}"
    assert zc() > before, "the fused batch did not go zero-copy"
    results["batch"] = np.concatenate(arrays)
    return results
'''


@pytest.mark.parametrize("n", [2, 3])
def test_zero_copy_allreduce(n):
    res = run(n, ZERO_COPY, timeout=240)
    for r in range(1, n):  # bitwise identical on every rank
        for k in res[0]:
            assert res[r][k].tobytes() == res[0][k].tobytes(), f"rank {r} differs on {k}"


MIXED = r'''
from horovodlite._loader import _core

def main(hvd):
    r = hvd.rank()
    x = np.full(100000, r + 1, np.float32)
    if r == 0:
        s = hvd.shared_empty(x.shape, x.dtype)
        s[...] = x
        x = s
    before = _core.shared_arena_info()["zero_copy_allreduces"]
    hvd.allreduce_(x, op=hvd.Sum, name="mixed")
    assert (x == 3).all(), x[:4]
    return _core.shared_arena_info()["zero_copy_allreduces"] - before
'''


def test_one_rank_with_ordinary_arrays_makes_all_fall_back():
    assert run(2, MIXED) == [0, 0]


ARENA = r'''
import gc
from horovodlite._loader import _core

def main(hvd):
    base = _core.shared_arena_info()["bytes_in_use"]
    rng = np.random.default_rng(0)
    arrays = [hvd.shared_empty(int(k), np.uint8) for k in rng.integers(1, 3 << 20, 64)]
    for a in arrays:
        a[...] = 7  # touch every page
    del a
    assert all(a.ctypes.data % 4096 == 0 for a in arrays)
    for i in rng.permutation(len(arrays)):  # holes everywhere, then merged back
        arrays[i] = None
    gc.collect()
    assert _core.shared_arena_info()["bytes_in_use"] == base
    big = hvd.shared_empty((64 << 20) // 8, np.float64)  # needs the holes merged
    assert (big == 0).all()  # returned pages come back as zeros
    info = _core.shared_arena_info()
    del big
    return info["bytes_in_use"] - base, _core.shared_arena_info()["bytes_in_use"] - base
'''


def test_shared_arena_frees_and_merges():
    assert run(1, ARENA) == [(64 << 20, 0)]


TORCH = r'''
import torch
import horovodlite.torch as thvd
from horovodlite._loader import _core

def main(hvd):
    r = thvd.rank()
    out = []
    for dt in (torch.float32, torch.bfloat16, torch.int64):
        t = thvd.shared_empty((300, 111), dt)
        t.fill_(r + 1)
        before = _core.shared_arena_info()["zero_copy_allreduces"]
        thvd.allreduce_(t, op=thvd.Sum, name=f"t.{dt}")
        assert t.shape == (300, 111) and t.dtype == dt
        assert bool((t == 3).all()), t.flatten()[:4]
        out.append(_core.shared_arena_info()["zero_copy_allreduces"] - before)
    return out
'''


def test_torch_shared_tensors_go_zero_copy():
    pytest.importorskip("torch")
    assert run(2, TORCH) == [[1, 1, 1]] * 2


def test_forked_child_leaves_the_parents_arrays_alone():
    import os

    import numpy as np

    import horovodlite as hvd

    a = hvd.shared_empty(1 << 20, np.float32)
    a[...] = 5
    pid = os.fork()
    if pid == 0:  # the child drops its copy of the array, and may not allocate
        code = 0
        try:
            del a
            import gc
            gc.collect()
            try:
                hvd.shared_empty(10)
                code = 3
            except RuntimeError:
                pass
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert (a == 5).all()  # the child's free did not punch the parent's pages


NO_ARENA = r'''
import resource
# Less address space than the arena asks for (64 GiB): there can be no arena.
resource.setrlimit(resource.RLIMIT_AS, (32 << 30, 32 << 30))
from horovodlite._loader import _core

def main(hvd):
    x = np.full(100000, hvd.rank() + 1, np.float32)
    y = hvd.allreduce(x, op=hvd.Sum, name="no-arena")  # staged, as if no array were shared
    assert (y == 3).all()
    try:
        hvd.shared_empty(10)
        return "shared_empty worked"
    except RuntimeError as e:
        return str(e)
'''


def test_without_an_arena_allreduce_still_works_and_shared_empty_says_why():
    res = run(2, NO_ARENA)
    for msg in res:
        assert "shared arena" in msg, msg
