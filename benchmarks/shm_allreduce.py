"""The shared-memory target, side by side in one launch: horovodlite's allreduce
paths (flat ring over MPI, shared memory) in place and out of place, OpenMPI's
Allreduce (mpi4py) both ways, and a memcpy of the same size on every rank at once.
By default ("shm") each size is timed each way (window with ordinary or
non-temporal stores, or the ring) and the fastest kept; the "window, ..." rows
fix one way. Each hvd row warms up with 8 calls, past the tuner's 6 exploring ones.

    mpirun -np 2 --bind-to core python benchmarks/shm_allreduce.py [--size 64M] [--rounds 5]

Rounds alternate between the implementations (the first one rotates). A call starts
after a barrier; its time is the slowest rank's; the table shows the median over
all calls. busbw = algbw x 2(n-1)/n (memcpy: bytes / time). #wrong: elements of a
correctness check with fresh inputs after the timing, summed over ranks."""
import argparse
import os
import time

import numpy as np
from mpi4py import MPI

import horovodlite as hvd
from horovodlite._loader import _core
from horovodlite.bench.workloads import human, parse_bytes, pattern


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="64M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5, help="calls per implementation per round")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    n, r = comm.Get_size(), comm.Get_rank()
    size = parse_bytes(args.size)
    count = size // 4
    x = pattern(r, count)
    y = np.empty_like(x)
    want = sum(pattern(k, count) for k in range(n))

    def hvd_path(env, in_place):
        def setup():
            for k in ("HOROVODLITE_SHM", "HOROVODLITE_HIERARCHICAL_ALLREDUCE",
                      "HOROVODLITE_SHM_RING_THRESHOLD", "HOROVODLITE_SHM_STREAM_IN_THRESHOLD"):
                os.environ.pop(k, None)
            os.environ.update(env)
            hvd.init()
            return _core.allreduce_algorithm(0)

        call = ((lambda b: hvd.allreduce_(b, op=hvd.Sum, name="t")) if in_place
                else (lambda b: hvd.allreduce(b, op=hvd.Sum, name="t")))
        return setup, call, hvd.shutdown

    impls = [
        ("ring", "in place", *hvd_path({"HOROVODLITE_SHM": "0"}, True)),
        ("shm", "in place", *hvd_path({}, True)),
        ("shm", "in place, window, ordinary stores",
         *hvd_path({"HOROVODLITE_SHM_RING_THRESHOLD": "0",
                    "HOROVODLITE_SHM_STREAM_IN_THRESHOLD": str(1 << 60)}, True)),
        ("shm", "in place, window, non-temporal",
         *hvd_path({"HOROVODLITE_SHM_RING_THRESHOLD": "0",
                    "HOROVODLITE_SHM_STREAM_IN_THRESHOLD": "0"}, True)),
        ("ring", "out of place", *hvd_path({"HOROVODLITE_SHM": "0"}, False)),
        ("shm", "out of place", *hvd_path({}, False)),
        ("MPI Allreduce", "out of place", lambda: "MPI",
         lambda b: (comm.Allreduce(b, y, op=MPI.SUM), y)[1], lambda: None),
        ("MPI Allreduce", "in place", lambda: "MPI",
         lambda b: (comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM), b)[1], lambda: None),
        ("memcpy", "every rank at once", lambda: "memcpy",
         lambda b: (np.copyto(y, b), y)[1], lambda: None),
    ]
    times = {i: [] for i in range(len(impls))}
    names = {}
    wrong = {}
    for rnd in range(args.rounds):
        order = list(range(len(impls)))
        order = order[rnd % len(order):] + order[:rnd % len(order)]
        for i in order:
            label, form, setup, call, teardown = impls[i]
            names[i] = setup()
            buf = x.copy()
            for _ in range(8 if names[i] not in ("MPI", "memcpy") else 1):
                call(buf)  # warm-up
            for _ in range(args.iters):
                comm.Barrier()
                t0 = time.perf_counter()
                call(buf)
                times[i].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            if rnd == args.rounds - 1:
                buf = x.copy()
                out = call(buf)
                expect = x if names[i] == "memcpy" else want
                wrong[i] = comm.allreduce(int(np.count_nonzero(out != expect)), op=MPI.SUM)
            teardown()
    if r != 0:
        return
    med = {i: float(np.median(t)) for i, t in times.items()}
    busbw = {i: size / med[i] / 1e9 * (1.0 if impls[i][0] == "memcpy" else 2 * (n - 1) / n)
             for i in med}
    mpi = min(busbw[i] for i in busbw if impls[i][0].startswith("MPI"))
    cp = next(busbw[i] for i in busbw if impls[i][0] == "memcpy")
    load = " / ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"allreduce of {human(size)} float32, {n} ranks, {args.rounds} rounds x {args.iters} calls, "
          f"load average {load}")
    print(f"{'implementation':<42} {'median':>9} {'best':>9} {'busbw GB/s':>10} {'x best MPI':>10} "
          f"{'% memcpy':>9} {'#wrong':>6}")
    for i, (label, form, *_rest) in enumerate(impls):
        name = f"horovodlite {names[i]}, {form}" if label in ("ring", "shm") else f"{label}, {form}"
        print(f"{name:<42} {med[i] * 1e3:7.2f}ms {min(times[i]) * 1e3:7.2f}ms {busbw[i]:10.2f} "
              f"{busbw[i] / mpi:9.2f}x {100 * busbw[i] / cp:8.0f}% {wrong[i]:6d}")


if __name__ == "__main__":
    main()
