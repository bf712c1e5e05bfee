"""Timing and checking. Every call starts from freshly written inputs (untimed) and a
barrier, so the time is the collective's own; a measurement's time is the slowest
rank's mean per call. Rounds alternate between implementations, and the first
implementation of each round rotates, so drifting machine load hits all of them alike.
The result of the last timed call is compared with the exact expected result (#wrong:
elements that differ, summed over ranks and rounds)."""
import time

import numpy as np

from .impls import Unsupported
from .workloads import RESNET50_SHAPES, pattern

BUSBW_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def case(coll, size, n, r):
    """(input, expected, bytes) for `size` bytes in nccl-tests' convention: allgather
    counts the gathered output, reducescatter and alltoall the whole input."""
    e = max(1, size // 4)
    if coll == "allreduce":
        return pattern(r, e), sum(pattern(k, e) for k in range(n)), e * 4
    if coll == "broadcast":
        root = pattern(0, e)
        return (root if r == 0 else np.zeros(e, np.float32)), root, e * 4
    c = max(1, e // n)
    if coll == "allgather":
        return pattern(r, c), np.concatenate([pattern(k, c) for k in range(n)]), c * n * 4
    if coll == "reducescatter":
        total = sum(pattern(k, c * n) for k in range(n))
        return pattern(r, c * n), total[r * c:(r + 1) * c], c * n * 4
    if coll == "alltoall":
        want = np.concatenate([pattern(k, c * n)[r * c:(r + 1) * c] for k in range(n)])
        return pattern(r, c * n), want, c * n * 4
    raise ValueError(coll)


def _warmups(nbytes):
    """Untimed calls first: connections, caches, negotiation, and from 1 MiB the shm
    allreduce's six exploring calls (csrc/collectives/path_tuner.h)."""
    return 7 if nbytes >= 1 << 20 else 1


class Bench:
    def __init__(self, comm, budget):
        from mpi4py import MPI

        self.comm, self.MPI, self.budget = comm, MPI, budget
        self.n, self.r = comm.Get_size(), comm.Get_rank()
        self.iters = {}    # (impl, key) -> calls per measurement, fixed after round 0
        self.times = {}    # (impl, key) -> [seconds per call, one per round]
        self.wrong = {}    # (impl, key) -> elements wrong
        self.failed = {}   # (impl, key) -> error text
        self._cases = {}

    def _case(self, coll, size):
        if (coll, size) not in self._cases:
            self._cases = {(coll, size): case(coll, size, self.n, self.r)}  # keep one: memory
        return self._cases[(coll, size)]

    def _agree(self, ok):
        return self.comm.allreduce(1 if ok else 0, op=self.MPI.MIN) == 1

    def _iters_for(self, key, one_call):
        """Same on every rank: from the slowest rank's time of one call."""
        if key not in self.iters:
            t = self.comm.allreduce(one_call(), op=self.MPI.MAX)
            self.iters[key] = int(min(500, max(2, self.budget / max(t, 1e-7))))
        return self.iters[key]

    def collective(self, impl, coll, size):
        key = (impl.label(coll), (coll, size))
        if key in self.failed:
            return
        inp, want, _ = self._case(coll, size)
        if getattr(impl, "copies_input", False):
            want = inp
        try:
            buf, run = impl.prepare(coll, inp)
            ok = True
        except Unsupported:
            ok = False
        if not self._agree(ok):
            self.failed[key] = "not supported"
            return
        comm = self.comm

        def one_call():
            np.copyto(buf, inp)
            comm.Barrier()
            t0 = time.perf_counter()
            out = run()
            return time.perf_counter() - t0, out

        try:
            for _ in range(_warmups(np.asarray(buf).nbytes)):
                one_call()
            iters = self._iters_for(key, lambda: one_call()[0])
            total, out = 0.0, None
            for _ in range(iters):
                dt, out = one_call()
                total += dt
            bad = int(np.count_nonzero(np.asarray(out).reshape(-1) != want)) if out is not None else want.size
            err = None
        except Exception as e:  # a failing implementation must not stop the others
            total, iters, bad, err = 0.0, 1, want.size, f"{type(e).__name__}: {e}"
        self._record(key, total, iters, bad, err)

    def resnet(self, impl):
        key = (impl.label("resnet50"), ("resnet50", 0))
        if key in self.failed:
            return
        comm = self.comm
        if not hasattr(self, "_rn"):
            sizes = [int(np.prod(s)) for s in RESNET50_SHAPES]
            self._rn = ([pattern(self.r, s).reshape(sh) for s, sh in zip(sizes, RESNET50_SHAPES)],
                        [sum(pattern(k, s) for k in range(self.n)) for s in sizes])
        inputs, wants = self._rn
        tensors = [t.copy() for t in inputs]

        def one_step():
            for t, i in zip(tensors, inputs):
                np.copyto(t, i)
            comm.Barrier()
            t0 = time.perf_counter()
            impl.resnet(tensors)
            return time.perf_counter() - t0

        try:
            for _ in range(_warmups(sum(t.nbytes for t in tensors))):
                one_step()
            iters = self._iters_for(key, one_step)
            total = sum(one_step() for _ in range(iters))
            bad = sum(int(np.count_nonzero(t.reshape(-1) != w)) for t, w in zip(tensors, wants))
            err = None
        except Exception as e:
            total, iters, bad, err = 0.0, 1, 0, f"{type(e).__name__}: {e}"
        self._record(key, total, iters, bad, err)

    def _record(self, key, total, iters, bad, err):
        """Every rank's outcome of one measurement: the slowest rank's mean time, the
        wrong elements summed, or the first error (then the key is skipped from now on)."""
        comm = self.comm
        errs = comm.allgather(err)
        if any(errs):
            self.failed[key] = next(e for e in errs if e)
            return
        self.times.setdefault(key, []).append(comm.allreduce(total / iters, op=self.MPI.MAX))
        self.wrong[key] = self.wrong.get(key, 0) + comm.allreduce(bad, op=self.MPI.SUM)

    def results(self):
        """Rows: impl, coll, size (bytes), time (median over rounds), busbw, #wrong."""
        rows = []
        for (impl, (coll, size)), ts in self.times.items():
            t = float(np.median(ts))
            row = {"impl": impl, "coll": coll, "size": size, "time": t, "rounds": len(ts),
                   "wrong": self.wrong[(impl, (coll, size))]}
            if coll != "resnet50":
                nbytes = case_bytes(coll, size, self.n)
                row["bytes"] = nbytes
                row["algbw"] = nbytes / t / 1e9
                factor = 1.0 if impl.startswith("memcpy") else BUSBW_FACTOR[coll](self.n)
                row["busbw"] = row["algbw"] * factor
            rows.append(row)
        return rows


def case_bytes(coll, size, n):
    e = max(1, size // 4)
    if coll in ("allreduce", "broadcast"):
        return e * 4
    return max(1, e // n) * n * 4
