"""Benchmark report: horovodlite (each of its allreduce paths) against MPI (mpi4py),
a numpy ring over Sendrecv, torch.distributed gloo and Horovod (when importable), all
in one launch:

    mpirun -np 2 python -m horovodlite.bench -o report_dir

writes report_dir/report.md with PNG plots (busbw vs size per collective, the
ResNet-50 gradient set, small-message latency) and results.json.

    python -m horovodlite.bench --cluster 2x2 --link-rate 1gbit -o report_dir

(no mpirun: as root) runs the allreduce comparison across simulated hosts instead:
horovodlite, MPI_Allreduce, a parameter server and a tree beside the cost model
(bench/cluster.py)."""
import argparse
import datetime
import importlib.util
import json
import os
import platform
import sys

from .workloads import human, sweep

COLLECTIVES = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")

# horovodlite's allreduce paths, chosen at init() through the environment.
PATHS = (
    {"HOROVODLITE_SHM": "0", "HOROVODLITE_HIERARCHICAL_ALLREDUCE": "0"},  # flat ring
    {},                                                                  # automatic
    {"HOROVODLITE_HIERARCHICAL_ALLREDUCE": "1"},                         # forced
)

METHOD = (
    "**Method.** Every call starts from freshly written inputs (not timed) after a barrier; "
    "a measurement is the slowest rank's mean time per call over enough calls to fill "
    "`--budget` seconds, and the table shows the median over rounds. Rounds alternate "
    "between implementations (the first one rotates), each engine running only in its own "
    "turn, so machine noise hits all alike. busbw = algbw × 2(n−1)/n for allreduce, "
    "× (n−1)/n for allgather, reducescatter and alltoall, × 1 for broadcast (nccl-tests); "
    "sizes follow nccl-tests too (allgather: the gathered output; reducescatter, alltoall: "
    "the whole input). #wrong: elements of the last timed call's result that differ from "
    "the exact expected one (inputs are small integers), summed over ranks and rounds. "
    "In place where the API allows (allreduce, broadcast); MPI writes into preallocated "
    "outputs, horovodlite's allgather/reducescatter/alltoall return new arrays. "
    "memcpy: every rank copies the message at the same time — the ceiling for a "
    "shared-memory allreduce, which also reads and writes each byte once.")


def _machine(n):
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return cpu, os.cpu_count(), load


def _versions():
    out = []
    import numpy

    import horovodlite

    out.append(f"horovodlite {horovodlite.__version__}")
    out.append(f"numpy {numpy.__version__}")
    try:
        import mpi4py

        out.append(f"mpi4py {mpi4py.__version__}")
    except ImportError:
        pass
    return ", ".join(out)


def build_impls(args, comm):
    from . import impls as I

    chosen, skipped = [], []
    want = lambda name: not args.impls or any(s.lower() in name.lower() for s in args.impls.split(","))
    seen = set()
    first_hvd = True
    for env in PATHS:
        env = dict(env)
        if env.get("HOROVODLITE_HIERARCHICAL_ALLREDUCE") == "1" and args.pretend_hosts:
            env["HOROVODLITE_HOSTNAME_OVERRIDE"] = f"bench-host-{comm.Get_rank() % args.pretend_hosts}"
        impl = I.Horovodlite(env, args.collectives)
        impl.enter()
        algo = impl.algorithm
        impl.exit()
        if algo in seen:
            continue
        seen.add(algo)
        impl.name = f"horovodlite {algo}"
        if algo == "hierarchical" and "HOROVODLITE_HOSTNAME_OVERRIDE" in env:
            impl.name += f" ({args.pretend_hosts} pretend hosts)"
        if not want(impl.name):
            continue
        if not first_hvd:  # the other collectives do not depend on the allreduce path
            impl.collectives = ("allreduce",)
        first_hvd = False
        chosen.append(impl)
    for make, label in ((lambda: I.Mpi(comm), "MPI (mpi4py)"),
                        (lambda: I.NumpyRing(comm), "numpy ring (Sendrecv)"),
                        (lambda: I.Gloo(comm), "torch gloo"),
                        (lambda: I.Horovod(), "Horovod"),
                        (lambda: I.Memcpy(), "memcpy")):
        if not want(label):
            continue
        if label == "torch gloo" and importlib.util.find_spec("torch") is None:
            skipped.append((label, "torch is not installed"))
            continue
        if label == "Horovod" and importlib.util.find_spec("horovod") is None:
            skipped.append((label, "horovod is not installed"))
            continue
        ok, why, impl = True, None, None
        try:
            impl = make()
        except Exception as e:
            ok, why = False, f"{type(e).__name__}: {e}"
        if comm.allreduce(1 if ok else 0, op=__import__("mpi4py").MPI.MIN) == 1:
            chosen.append(impl)
        else:
            skipped.append((label, why or "failed to start on another rank"))
    return chosen, skipped


def _row_names(impls):
    """Implementations in report order; horovodlite's other collectives follow its paths."""
    names = [i.name for i in impls]
    last = max((j for j, s in enumerate(names) if s.startswith("horovodlite")), default=-1)
    names.insert(last + 1, "horovodlite")
    return names


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--cluster" or a.startswith("--cluster=") for a in argv):
        from .cluster import main as cluster_main  # starts its own simulated hosts

        return cluster_main(argv)
    ap = argparse.ArgumentParser(prog="python -m horovodlite.bench", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", default="bench_report", help="directory for report.md and plots")
    ap.add_argument("--min-bytes", default="4", help="smallest allreduce (latency) size")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--factor", type=int, default=4, help="size step")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=0.1, help="seconds per measurement")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES))
    ap.add_argument("--impls", default="", help="comma list of name fragments to run (default all)")
    ap.add_argument("--pretend-hosts", type=int, default=0,
                    help="the forced hierarchical path sees ranks r %% K as K hosts")
    ap.add_argument("--no-resnet", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a few sizes, one round (smoke test)")
    args = ap.parse_args(argv)
    if args.quick:
        args.rounds, args.budget, args.factor = 1, 0.01, 64
        args.max_bytes = args.max_bytes if args.max_bytes != "64M" else "1M"
    args.collectives = tuple(c for c in args.collectives.split(",") if c)

    from mpi4py import MPI

    from .measure import Bench
    from .report import write

    comm = MPI.COMM_WORLD
    n, r = comm.Get_size(), comm.Get_rank()
    cpu, ncpu, load0 = _machine(n)
    impls, skipped = build_impls(args, comm)
    if r == 0:
        print(f"horovodlite.bench: {n} ranks; {', '.join(i.name for i in impls)}", flush=True)
    sizes = sweep(args.min_bytes, args.max_bytes, args.factor)
    big = [s for s in sizes if s >= 1024] or sizes[-1:]
    bench = Bench(comm, args.budget)
    for rnd in range(args.rounds):
        order = impls[rnd % len(impls):] + impls[:rnd % len(impls)]
        for impl in order:
            impl.enter()
            try:
                for coll in args.collectives:
                    if coll not in impl.collectives:
                        continue
                    for s in sizes if coll == "allreduce" else big:
                        bench.collective(impl, coll, s)
                if not args.no_resnet and hasattr(impl, "resnet") and not getattr(impl, "copies_input", False):
                    bench.resnet(impl)
            finally:
                impl.exit()
        if r == 0:
            print(f"round {rnd + 1}/{args.rounds} done", flush=True)
    for impl in impls:
        impl.close()
    rows = bench.results()
    if r == 0:
        load1 = os.getloadavg() if hasattr(os, "getloadavg") else None
        fmt_load = lambda l: "n/a" if l is None else " / ".join(f"{x:.2f}" for x in l)
        meta = {
            "command": "mpirun -np %d python -m horovodlite.bench %s" % (n, " ".join(argv if argv is not None else sys.argv[1:])),
            "n": n,
            "when": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
            "machine": [("CPU", f"{cpu}, {ncpu} logical cores"),
                        ("load average (1/5/15 min) before → after", f"{fmt_load(load0)} → {fmt_load(load1)}"),
                        ("MPI", next((i.note for i in impls if i.name == "MPI (mpi4py)"), "")),
                        ("software", _versions() + "".join(f", {i.note}" for i in impls
                                                           if i.note and not i.name.startswith("MPI"))),
                        ("sizes", f"{human(sizes[0])} … {human(sizes[-1])}, ×{args.factor}; "
                                  f"{args.rounds} rounds, {args.budget} s per measurement")],
            "method": METHOD,
            "impls": _row_names(impls),
        }
        path = write(args.output, rows, meta, bench.failed, skipped)
        with open(os.path.join(args.output, "results.json"), "w") as f:
            json.dump({"meta": meta, "rows": rows,
                       "failed": {f"{k[0]} {k[1][0]} {k[1][1]}": v for k, v in bench.failed.items()},
                       "skipped": skipped}, f, indent=1)
        print(f"report: {path}", flush=True)


if __name__ == "__main__":
    main()
