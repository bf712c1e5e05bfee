"""allgather, broadcast, reducescatter and alltoall: horovodlite against mpi4py's
Allgather, Bcast, Reduce_scatter and Alltoallv, in the same launch, alternating
rounds (MPI, hvd, MPI, hvd, ...) so both see the same machine. nccl-tests style:

    mpirun -np 2 python benchmarks/collectives.py [--max-bytes 256M] [--ops allgather,...]

size: nccl-tests' convention: allgather the gathered output, reducescatter the
(full) input, alltoall the send buffer, broadcast the message. time: the slowest
rank's mean per call, median (or --stat min: best) over the alternating rounds. algbw = size / time; busbw = algbw x
(n-1)/n for allgather, reducescatter and alltoall, x 1 for broadcast. #wrong:
elements that differ from the expected result, checked after timing in the same run.
Both sides are timed as a user calls them: MPI into preallocated buffers, horovodlite
through its numpy API (which returns a new array each call)."""
import argparse
import time

import numpy as np
from mpi4py import MPI

import horovodlite as hvd


def parse_bytes(s):
    s = s.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1], 1)
    return int(float(s.rstrip("KMG")) * mult)


def human(b):
    for unit, f in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= f:
            return f"{b / f:g}{unit}"
    return f"{b}"


class Case:
    """One collective at one size: inputs, the two callables, the expected result."""

    def __init__(self, op, size, comm):
        n, r = comm.Get_size(), comm.Get_rank()
        self.op, self.n, self.r = op, n, r
        f = np.float32
        elems = size // 4
        if op == "allgather":
            c = max(1, elems // n)
            self.bytes = c * n * 4
            self.x = self.pattern(r, c)
            self.out = np.empty(c * n, f)
            self.want = np.concatenate([self.pattern(j, c) for j in range(n)])
            self.mpi = lambda: comm.Allgather(self.x, self.out)
            self.hvd = lambda: hvd.allgather(self.x, name="bench.ag")
        elif op == "broadcast":
            self.bytes = elems * 4
            self.root = self.pattern(0, elems)
            self.x = self.root.copy() if r == 0 else np.zeros(elems, f)
            self.out = self.x
            self.want = self.root
            self.mpi = lambda: comm.Bcast(self.x, root=0)
            self.hvd = lambda: hvd.broadcast_(self.x, 0, name="bench.bc")
        elif op == "reducescatter":
            c = max(1, elems // n)
            self.bytes = c * n * 4
            self.x = self.pattern(r, c * n)
            self.out = np.empty(c, f)
            total = sum(self.pattern(j, c * n) for j in range(n))
            self.want = total[r * c:(r + 1) * c]
            self.mpi = lambda: comm.Reduce_scatter(self.x, self.out, recvcounts=[c] * n, op=MPI.SUM)
            self.hvd = lambda: hvd.reducescatter(self.x, op=hvd.Sum, name="bench.rs")
        elif op == "alltoall":
            c = max(1, elems // n)  # elements sent to each peer
            self.bytes = c * n * 4
            self.x = self.pattern(r, c * n)
            self.out = np.empty(c * n, f)
            counts, displs = [c] * n, [c * j for j in range(n)]
            self.want = np.concatenate([self.pattern(j, c * n)[r * c:(r + 1) * c] for j in range(n)])
            self.mpi = lambda: comm.Alltoallv([self.x, (counts, displs)], [self.out, (counts, displs)])
            self.hvd = lambda: hvd.alltoall(self.x, name="bench.a2a")[0]
        self.busbw_factor = 1.0 if op == "broadcast" else (n - 1) / n

    @staticmethod
    def pattern(rank, count):
        return ((np.arange(count) % 7) + rank + 1).astype(np.float32)

    def wrong(self, result):
        return int(np.count_nonzero(result != self.want))

    def check_mpi(self):
        if self.op == "broadcast" and self.r != 0:
            self.x[:] = 0
        self.mpi()
        return self.wrong(self.out)

    def check_hvd(self):
        if self.op == "broadcast" and self.r != 0:
            self.x[:] = 0
        out = self.hvd()
        return self.wrong(self.x if self.op == "broadcast" else out)


def timed(fn, iters, comm):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    dt = (time.perf_counter() - t0) / iters
    return comm.allreduce(dt, op=MPI.MAX)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--min-bytes", default="4K")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--ops", default="allgather,broadcast,reducescatter,alltoall")
    ap.add_argument("--rounds", type=int, default=9, help="alternating rounds per size")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="per-size statistic over rounds (min: best round, for a loaded machine)")
    ap.add_argument("--budget", type=float, default=0.05,
                    help="seconds of one implementation per round (sets the iterations)")
    args = ap.parse_args()

    hvd.init()
    comm = MPI.COMM_WORLD
    n, r = comm.Get_size(), comm.Get_rank()
    sizes, s = [], parse_bytes(args.min_bytes)
    while s <= parse_bytes(args.max_bytes):
        sizes.append(s)
        s *= 4
    if r == 0:
        print(f"# horovodlite vs MPI (mpi4py), np={n}; busbw factor (n-1)/n = {(n - 1) / n:g} "
              f"(broadcast: 1); time = {args.stat} over {args.rounds} alternating rounds of the slowest "
              "rank's mean per call")
        print(f"{'op':>14} {'size':>7} | {'MPI time us':>11} {'algbw':>6} {'busbw':>6} {'#wrong':>6} | "
              f"{'hvd time us':>11} {'algbw':>6} {'busbw':>6} {'#wrong':>6} | {'hvd/MPI':>7}")
    for op in args.ops.split(","):
        for size in sizes:
            case = Case(op, size, comm)
            for fn in (case.mpi, case.hvd):  # warm-up: caches, pools, negotiation
                fn()
            t = timed(case.hvd, 1, comm)
            iters = int(max(1, min(1000, args.budget / max(t, 1e-6))))
            iters = comm.bcast(iters, root=0)
            t_mpi, t_hvd = [], []
            for _ in range(args.rounds):
                t_mpi.append(timed(case.mpi, iters, comm))
                t_hvd.append(timed(case.hvd, iters, comm))
            wrong_mpi = comm.allreduce(case.check_mpi())
            wrong_hvd = comm.allreduce(case.check_hvd())
            if r == 0:
                stat = np.median if args.stat == "median" else np.min
                tm, th = float(stat(t_mpi)), float(stat(t_hvd))
                bm, bh = case.bytes / tm / 1e9, case.bytes / th / 1e9
                print(f"{op:>14} {human(case.bytes):>7} | {tm * 1e6:11.1f} {bm:6.2f} {bm * case.busbw_factor:6.2f} "
                      f"{wrong_mpi:6d} | {th * 1e6:11.1f} {bh:6.2f} {bh * case.busbw_factor:6.2f} "
                      f"{wrong_hvd:6d} | {tm / th:6.2f}x", flush=True)
            del case
    hvd.shutdown()


if __name__ == "__main__":
    main()
