"""Shared-memory and hierarchical allreduce: the full allreduce matrix through the
shared-memory path at N = 2, 3, 4; a rank killed in the middle of a collective; and
hierarchical allreduce over several pretend hosts (one per HOROVODLITE_HOSTNAME_OVERRIDE
value, so the shared-memory domains are separate and the cross-host ring really runs)."""
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest

from mpirun import RankError, mpi_env, mpirun_path, run

# Data and exact numpy references for every (dtype, op): small integers, so that any
# summation order gives the same bits, and the reference can apply the core's scaling
# rules (floats in their own precision, float16/bfloat16 via float32, integers in
# double truncated toward zero).
COMMON = """
import ml_dtypes
DTYPES = [np.uint8, np.int8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16,
          np.float32, np.float64]
OPS = {"Sum": hvd.Sum, "Average": hvd.Average, "Min": hvd.Min, "Max": hvd.Max,
       "Product": hvd.Product}

def data(count, dt, op, k):
    i = np.arange(count)
    if op == "Product":
        v = np.array([1, 2] if dt == np.uint8 else [-1, 1, 2])[(i + k) % (2 if dt == np.uint8 else 3)]
    elif dt == np.uint8:
        v = (i * 7 + k * 3) % 4
    else:
        v = (i * 7 + k * 3) % 7 - 3
    return v.astype(dt)

def reference(count, dt, op, n, pre=1.0, post=1.0):
    parts = [data(count, dt, op, k).astype(np.float64) * pre for k in range(n)]
    if op in ("Sum", "Average"):
        s = np.sum(parts, axis=0)
    elif op == "Min":
        s = np.min(parts, axis=0)
    elif op == "Max":
        s = np.max(parts, axis=0)
    else:
        s = np.prod(parts, axis=0)
    s = s.astype(dt) if count else np.zeros(0, dt)
    factor = post / n if op == "Average" else post
    if factor == 1.0:
        return s
    if np.issubdtype(np.dtype(dt), np.integer):
        return np.trunc(s.astype(np.float64) * factor).astype(dt)
    if dt == np.float64:
        return s * factor
    return (s.astype(np.float32) * np.float32(factor)).astype(dt)

def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()
"""

MATRIX = COMMON + """
from horovodlite._loader import _core

SIZES = [0, 1, 7, 63, 1001, 4097, 65537]

def check(name, got, want):
    if not same_bits(got, want):
        bad = np.flatnonzero(got.astype(np.float64) != want.astype(np.float64))
        raise AssertionError(f"{name}: {len(bad)} wrong, first at {bad[:5]}: "
                             f"got {got[bad[:5]]}, want {want[bad[:5]]}")

def main(hvd):
    n, r = int(os.environ["OMPI_COMM_WORLD_SIZE"]), int(os.environ["OMPI_COMM_WORLD_RANK"])
    # Tiny pipeline steps and two slots: the odd sizes cross many steps, wrap the
    # slots and cut pieces at every kind of boundary; the larger sizes stream their
    # inputs and outputs, the smaller ones use ordinary stores.
    os.environ.update(HOROVODLITE_SHM_CHUNK_BYTES="4096", HOROVODLITE_SHM_SLOTS="2",
                      HOROVODLITE_SHM_STREAM_IN_THRESHOLD="4000",
                      HOROVODLITE_SHM_STREAM_OUT_THRESHOLD="65536")
    hvd.init(process_sets="dynamic")
    assert _core.allreduce_algorithm(0) == "shm", _core.allreduce_algorithm(0)
    results = {}
    for dt in DTYPES:
        for opname, op in OPS.items():
            for count in SIZES:
                x = data(count, dt, opname, r)
                key = f"{np.dtype(dt).name}/{opname}/{count}"
                if count % 2:  # out of place: read where it lies, written to a new array
                    y = hvd.allreduce(x, op=op, name=key)
                else:
                    y = x.copy()
                    hvd.allreduce_(y, op=op, name=key)
                check(key, y, reference(count, dt, opname, n))
                results[key] = y
    # Pre/post scale, the fused path (grouped), and a set of a subset of the ranks.
    x = data(20001, np.float32, "Sum", r)
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0, name="scaled")
    check("scaled", y, reference(20001, np.float32, "Sum", n, pre=0.5, post=3.0))
    results["scaled"] = y
    group = [data(c, np.int32, "Sum", r) for c in (3, 1000, 4099, 0, 17)]
    outs = hvd.grouped_allreduce(group, op=hvd.Sum, name="grouped")
    for c, o in zip((3, 1000, 4099, 0, 17), outs):
        check(f"grouped/{c}", o, reference(c, np.int32, "Sum", n))
        results[f"grouped/{c}"] = o
    sub = hvd.add_process_set([0, n - 1])
    if sub.included():
        assert _core.allreduce_algorithm(sub.process_set_id) == "shm"
        y = hvd.allreduce(data(5003, np.int64, "Sum", r), op=hvd.Max, process_set=sub, name="sub")
        want = np.maximum(data(5003, np.int64, "Sum", 0), data(5003, np.int64, "Sum", n - 1))
        check("subset", y, want)
    hvd.shutdown()
    # Default pipeline: one output larger than the streaming threshold.
    for k in ("HOROVODLITE_SHM_CHUNK_BYTES", "HOROVODLITE_SHM_SLOTS",
              "HOROVODLITE_SHM_STREAM_IN_THRESHOLD", "HOROVODLITE_SHM_STREAM_OUT_THRESHOLD"):
        del os.environ[k]
    hvd.init()
    big = 3_000_001
    y = hvd.allreduce(data(big, np.float32, "Sum", r), op=hvd.Sum, name="big")
    check("big", y, reference(big, np.float32, "Sum", n))
    results["big"] = y[::997].copy()
    return results
"""


@pytest.mark.parametrize("n", [2, 3, 4])
def test_shm_allreduce_matrix(n):
    res = run(n, MATRIX, init=False, timeout=300)
    for r in range(1, n):  # bitwise identical on every rank
        assert res[r].keys() == res[0].keys()
        for k in res[0]:
            assert res[r][k].tobytes() == res[0][k].tobytes(), f"rank {r} differs from rank 0 on {k}"


KILLED = """
import os, sys, time
import numpy as np
rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
if rank == 1:  # dies in the middle of the first allreduce, 5 pipeline steps in
    os.environ["HOROVODLITE_SHM_TEST_KILL_AT_STEP"] = "5"
import horovodlite as hvd
from horovodlite._loader import _core
hvd.init()
algo = _core.allreduce_algorithm(0)
x = np.ones(1 << 20, np.float32)
try:
    for i in range(50):
        hvd.allreduce(x, name=f"x{i}")
    msg = "finished without an error"
except hvd.HorovodInternalError as e:
    msg = "HorovodInternalError: " + str(e)
except BaseException as e:
    msg = f"{type(e).__name__}: {e}"
with open(os.path.join(sys.argv[1], f"rank{rank}.txt"), "w") as f:
    f.write(algo + "\\n" + msg)
# The job is broken: leave without the shutdown handshake, which needs every rank.
os._exit(0)
"""


def _our_segments():
    return {p.name for p in Path("/dev/shm").iterdir() if p.name.startswith("horovodlite-")}


@pytest.mark.parametrize("mechanism", ["memfd", "shm_open"])
def test_rank_killed_mid_allreduce(mechanism):
    before = _our_segments()
    with tempfile.TemporaryDirectory(prefix="hvdl-kill-") as tmp:
        script = Path(tmp) / "job.py"
        script.write_text(KILLED)
        # --enable-recovery keeps mpirun from killing the survivors itself, so they
        # must notice the death on their own.
        cmd = [mpirun_path(), "--oversubscribe", "--bind-to", "none", "--enable-recovery",
               "-np", "3", sys.executable, str(script), tmp]
        env = mpi_env({"HOROVODLITE_SHM_MECHANISM": mechanism})
        try:
            proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=120, start_new_session=True)
        except subprocess.TimeoutExpired as e:
            raise RankError(f"the survivors hung:\n{(e.stdout or '')[-4000:]}")
        out = {}
        for r in (0, 2):
            f = Path(tmp) / f"rank{r}.txt"
            assert f.exists(), f"rank {r} reported nothing:\n{proc.stdout[-4000:]}"
            out[r] = f.read_text().split("\n", 1)
        assert not (Path(tmp) / "rank1.txt").exists()
    for r, (algo, msg) in out.items():
        assert algo == "shm"
        assert msg.startswith("HorovodInternalError"), (r, msg)
        # the lost peer is named by its rank, host and pid (peer_health.h)
        assert "exited" in msg and "rank 1 (host" in msg and "pid" in msg, (r, msg)
    assert _our_segments() <= before, f"left behind in /dev/shm: {_our_segments() - before}"


HIERARCHICAL = COMMON + """
from horovodlite._loader import _core

CASES = [(dt, opname, count) for dt in DTYPES for opname in OPS for count in (1, 6, 1003, 40001)]

def reduce_all(hvd, r, tag):
    out = {}
    for dt, opname, count in CASES:
        key = f"{np.dtype(dt).name}/{opname}/{count}"
        out[key] = hvd.allreduce(data(count, dt, opname, r), op=OPS[opname], name=f"{tag}{key}")
    x = data(30001, np.float64, "Sum", r)
    out["scaled"] = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.25, postscale_factor=2.0,
                                  name=f"{tag}scaled")
    return out

def main(hvd):
    r = int(os.environ["OMPI_COMM_WORLD_RANK"])
    # Ranks r and r + HOSTS share a host: each host's ranks are not contiguous.
    os.environ["HOROVODLITE_HOSTNAME_OVERRIDE"] = f"pretend-host-{r % HOSTS}"
    os.environ.update(HOROVODLITE_SHM_CHUNK_BYTES="8192", HOROVODLITE_SHM_SLOTS="3")
    hvd.init()
    topo = (hvd.local_size(), hvd.cross_size(), _core.allreduce_algorithm(0))
    hier = reduce_all(hvd, r, "h.")
    hvd.shutdown()
    os.environ["HOROVODLITE_HIERARCHICAL_ALLREDUCE"] = "0"
    hvd.init()
    flat_algo = _core.allreduce_algorithm(0)
    flat = reduce_all(hvd, r, "f.")
    n = hvd.size()
    for dt, opname, count in CASES:
        key = f"{np.dtype(dt).name}/{opname}/{count}"
        assert same_bits(hier[key], reference(count, dt, opname, n)), key
    return topo, flat_algo, hier, flat
"""


@pytest.mark.parametrize("n,hosts", [(4, 2), (6, 3)])
def test_hierarchical_equals_flat_ring(n, hosts):
    res = run(n, f"HOSTS = {hosts}\n" + HIERARCHICAL, init=False, timeout=300)
    for r, (topo, flat_algo, hier, flat) in enumerate(res):
        assert topo == (n // hosts, hosts, "hierarchical"), (r, topo)
        assert flat_algo == "ring"
        for k in hier:
            assert same_bits_np(hier[k], flat[k]), f"rank {r}, {k}: hierarchical != flat ring"
            assert same_bits_np(hier[k], res[0][2][k]), f"rank {r}, {k}: differs from rank 0"


def same_bits_np(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_path_selection():
    """Uneven hosts fall back to the ring; forcing hierarchical on one host,
    switching shared memory off and handing large messages to the ring are honoured."""
    res = run(3, """
from horovodlite._loader import _core

def main(hvd):
    r = int(os.environ["OMPI_COMM_WORLD_RANK"])
    seen = []
    for env in ({"HOROVODLITE_HOSTNAME_OVERRIDE": "a" if r < 2 else "b"},
                {"HOROVODLITE_HIERARCHICAL_ALLREDUCE": "1"},
                {"HOROVODLITE_SHM": "0"},
                {"HOROVODLITE_SHM_RING_THRESHOLD": "4096"}):  # large ones take the ring
        saved = dict(os.environ)
        os.environ.update(env)
        hvd.init()
        y = hvd.allreduce(np.full(10007, r + 1, np.int64), op=hvd.Sum, name="x")
        assert (y == 6).all(), y
        seen.append(_core.allreduce_algorithm(0))
        hvd.shutdown()
        os.environ.clear()
        os.environ.update(saved)
    return seen
""", init=False, timeout=180)
    assert res == [["ring", "hierarchical", "ring", "shm"]] * 3


TUNED = COMMON + """
from horovodlite._loader import _core

def main(hvd):
    # Default options: allreduces of 1 MiB and more are timed, and during warm-up
    # each of the three ways (ordinary stores, non-temporal stores, the ring) runs
    # twice per size class, announced by rank 0. Single tensors and groups of large
    # and tiny tensors (the zero-copy span path) must all be exact and identical.
    n, r = hvd.size(), hvd.rank()
    assert _core.allreduce_algorithm(0) == "shm"
    results = {}
    for i in range(8):
        c = 300_001 + i
        y = hvd.allreduce(data(c, np.float32, "Sum", r), op=hvd.Sum, name=f"one{i}")
        check(f"one{i}", y, reference(c, np.float32, "Sum", n))
        results[f"one{i}"] = y[::101].copy()
    for i in range(8):
        counts = (5, 400_003, 17, 200_000 + i, 3)
        xs = [data(c, np.float64, "Sum", r + j) for j, c in enumerate(counts)]
        hs = [hvd.allreduce_async_(x, op=hvd.Average, prescale_factor=2.0, name=f"g{i}.{j}")
              for j, x in enumerate(xs)]
        for h in hs:
            hvd.synchronize(h)
        for j, (c, x) in enumerate(zip(counts, xs)):
            parts = [data(c, np.float64, "Sum", k + j).astype(np.float64) * 2.0 for k in range(n)]
            check(f"g{i}.{j}", x, np.sum(parts, axis=0) * (1.0 / n))
            results[f"g{i}.{j}"] = x[::101].copy()
    return results

def check(name, got, want):
    assert same_bits(got, want), f"{name}: {np.count_nonzero(got != want)} wrong"
"""


@pytest.mark.parametrize("n", [2, 3])
def test_shm_tuned_ways_and_spans(n):
    res = run(n, TUNED, timeout=300)
    for r in range(1, n):
        for k in res[0]:
            assert res[r][k].tobytes() == res[0][k].tobytes(), f"rank {r} differs from rank 0 on {k}"
