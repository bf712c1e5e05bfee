"""The parameter-server baseline over MPI, on its own: the last P ranks are servers,
the others workers; each size is allreduced by the servers (push, sum, pull), by a
binomial tree and by MPI_Allreduce on the workers, in turns, and checked.

    mpirun -np 5 python benchmarks/parameter_server.py --servers 1        # 4 workers
    python -m horovodlite.bench --cluster 2x2 --servers 1                  # across simulated hosts, with the model

The algorithms live in horovodlite/bench/baselines.py, which the cluster benchmark uses too."""
import argparse
import time

import numpy as np
from mpi4py import MPI

from horovodlite.bench.baselines import ParameterServer, Tree, serve, stop_servers
from horovodlite.bench.workloads import human, pattern, sweep


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--servers", type=int, default=1)
    ap.add_argument("--min-bytes", default="4K")
    ap.add_argument("--max-bytes", default="16M")
    ap.add_argument("--iters", type=int, default=5)
    args = ap.parse_args()
    world = MPI.COMM_WORLD
    size, r = world.Get_size(), world.Get_rank()
    n = size - args.servers
    if n < 1 or args.servers < 1:
        raise SystemExit(f"need at least one worker and one server: {size} ranks, --servers {args.servers}")
    comm = world.Split(0 if r < n else 1, r)
    if r >= n:
        serve(world, list(range(n)))
        comm.Free()
        return
    impls = [ParameterServer(world, range(n, size)), Tree(comm)]
    results = []
    for s in sweep(args.min_bytes, args.max_bytes):
        e = s // 4
        inp, want = pattern(r, e), sum(pattern(k, e) for k in range(n))
        row = [human(s)]
        for name, fn in [(impls[0].name, impls[0].allreduce), (impls[1].name, impls[1].allreduce),
                         ("MPI_Allreduce", lambda b: comm.Allreduce(MPI.IN_PLACE, b, op=MPI.SUM) or b)]:
            buf = inp.copy()
            fn(buf)  # warm-up
            best = 1e9
            for _ in range(args.iters):
                buf[:] = inp
                comm.Barrier()
                t0 = time.perf_counter()
                fn(buf)
                best = min(best, comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
            bad = comm.allreduce(int(np.count_nonzero(buf != want)))
            row.append(f"{best * 1e3:.3f} ms" + (f" ({bad} wrong)" if bad else ""))
        results.append(row)
    stop_servers(world, range(n, size))
    if r == 0:
        print(f"{n} workers, {args.servers} server(s); best of {args.iters}")
        print(f"{'size':>8} | {'parameter server':>18} | {'binomial tree':>18} | {'MPI_Allreduce':>18}")
        for row in results:
            print(f"{row[0]:>8} | " + " | ".join(f"{c:>18}" for c in row[1:]))
    comm.Free()


if __name__ == "__main__":
    main()
