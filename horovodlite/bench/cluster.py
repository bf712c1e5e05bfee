"""The classic comparison on a simulated cluster, measured and modelled:

    python -m horovodlite.bench --cluster 2x2 --link-rate 1gbit -o report_dir

starts H hosts x L workers plus P parameter-server hosts (horovodlite/run/local_cluster.py),
runs one mpirun job in which horovodlite (its automatic path, and the flat ring and the
hierarchical path where they differ), MPI_Allreduce, a parameter server and a binomial
tree take turns size by size, round by round, and writes report_dir/report.md with
plots: time and busbw per size beside the cost model's prediction (horovodlite/sim.py,
fed with the link rate and the latency and memory bandwidth measured in the same job),
and the traffic per rank as N grows. Needs root, like --local-cluster."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from .. import sim
from .workloads import human, parse_bytes, sweep

# name -> cost-model algorithm
MODEL_OF = {"horovodlite ring": "ring", "horovodlite hierarchical": "hierarchical",
            "binomial tree": "tree"}


# ---------------------------------------------------------------- in the ranks
def _link_counters():
    """{host link: (bytes into the host, bytes out of it)} from the root namespace's
    veths (pid 1's view; the namespaces only see their own eth0)."""
    out = {}
    try:
        with open("/proc/1/net/dev") as f:
            for line in f.readlines()[2:]:
                name, data = line.split(":", 1)
                name = name.strip()
                if name.startswith("hvdl") and name.endswith("-o"):
                    v = data.split()
                    out[name[:-2]] = (int(v[8]), int(v[0]))  # tx of the outer end = into the host
    except OSError:
        pass
    return out


def _calibrate(world, comm, L, n):
    """alpha: half the round trip of an 8-byte message between hosts; memory: the
    bytes one host's workers copy per second, all at once."""
    import numpy as np
    from mpi4py import MPI

    r = world.Get_rank()
    alpha = 0.0
    peer = L if n > L else None
    msg = np.zeros(1, np.float64)
    if peer is not None and r in (0, peer):
        other = peer if r == 0 else 0
        for i in range(220):
            if i == 20:
                t0 = time.perf_counter()
            if r == 0:
                world.Send(msg, dest=other, tag=5)
                world.Recv(msg, source=other, tag=5)
            else:
                world.Recv(msg, source=other, tag=5)
                world.Send(msg, dest=other, tag=5)
        alpha = (time.perf_counter() - t0) / 200 / 2
    alpha = comm.allreduce(alpha, op=MPI.MAX)
    a = np.ones(16 << 18, np.float32)  # 64 MiB
    b = np.empty_like(a)
    np.copyto(b, a)
    ts = []
    for _ in range(5):
        comm.Barrier()
        t0 = time.perf_counter()
        np.copyto(b, a)
        ts.append(_span(comm, t0, time.perf_counter()))
    # The median: on a loaded machine one rank may copy while the others wait for a core.
    mem_bw = L * 2 * a.nbytes / sorted(ts)[len(ts) // 2]  # a host's ranks at once: read + write
    return alpha, mem_bw


def _span(comm, t0, t1):
    """From the first rank's start to the last one's end (one clock: CLOCK_MONOTONIC is
    the machine's, namespaces or not). Not the slowest rank's own time: on a loaded
    machine the ranks leave a barrier one after another, and when each runs alone the
    longest own time is far shorter than the span all of them needed (measured: 44.7
    GB/s of host memory bandwidth for 2x2 at load 15 that way)."""
    from mpi4py import MPI

    return comm.allreduce(t1, op=MPI.MAX) - comm.allreduce(t0, op=MPI.MIN)


def _cpu_busy_s():
    """Seconds the machine's cores have been busy (user, nice, system, irq, softirq) since
    boot, all cores together: every simulated host runs on them, and the kernel's TCP
    work (softirqs included) shows up here whichever process it ran for."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:8]]
    except (OSError, ValueError):
        return float("nan")
    return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")


def _tcp_rate(comm, H, L, addresses, link_payload, nbytes=32 << 20):
    """(rate, alpha, cores busy): the bytes per second one host's TCP carries each way
    while every worker streams 32 MiB to its ring neighbour on the next host and takes
    32 MiB from the one before,
    all at once (so every host's kernel sends and receives, like in a ring step). It is
    the lesser of the link and the CPU path; with the cores busy meanwhile it gives the
    model's CPU path (sim.tcp_cpu_rate), seen also where the link bound the streams.
    Every simulated host's kernel runs on the same shared cores, which is why at 10
    Gbit/s the CPU, not the link, binds.
    The fastest of five streams: other work on the cores only ever slows one down, and
    the median of three had put 2x1 at 10 Gbit/s at 0.78 GB/s in a launch where the
    engine's own ring then moved 0.93 GB/s at 64 MiB (the model 42-133 % slow).
    Cores busy: how many of the machine's cores were busy on average while the streams
    ran (2x1 at 10 Gbit/s: 1.68-1.80 of 2 at 0.92-0.97 GB/s each way, so there TCP
    alone takes the machine, and the model's CPU term, not the link, is the bound)."""
    import socket
    import threading

    from mpi4py import MPI

    r = comm.Get_rank()
    h, i = divmod(r, L)
    srv = socket.socket()
    srv.bind((addresses[h], 0))
    srv.listen(2)
    ports = comm.allgather(srv.getsockname()[1])
    right = ((h + 1) % H) * L + i
    comm.Barrier()
    tx = socket.create_connection((addresses[(h + 1) % H], ports[right]), timeout=60)
    srv.settimeout(60)
    rx, _ = srv.accept()
    rx.settimeout(60)  # a lost peer ends the calibration, not the job's timeout
    srv.close()
    out = bytearray(nbytes)
    into = memoryview(bytearray(nbytes))
    ts = []
    try:
        # Latency first: every worker passes an 8-byte token to the next host and waits
        # for the one from the host before, all at once, as in a ring step; no rank
        # spins in MPI meanwhile (MPI's ping-pong alpha, with the others polling in a
        # collective, came out at 4 ms for 2x2 at load 14, against 0.04-0.6 ms elsewhere).
        token = bytearray(8)
        comm.Barrier()
        for k in range(120):
            if k == 20:
                t0 = time.perf_counter()
            tx.sendall(token)
            got = 0
            while got < 8:
                m = rx.recv_into(memoryview(token)[got:])
                if m == 0:
                    raise RuntimeError("TCP calibration: the connection closed")
                got += m
        alpha = comm.allreduce((time.perf_counter() - t0) / 100, op=MPI.MAX)
        busy0, wall0 = _cpu_busy_s(), time.perf_counter()
        for _ in range(5):
            comm.Barrier()
            t0 = time.perf_counter()
            th = threading.Thread(target=tx.sendall, args=(out,))
            th.start()
            got = 0
            while got < nbytes:
                k = rx.recv_into(into[got:])
                if k == 0:
                    raise RuntimeError("TCP calibration: the connection closed")
                got += k
            th.join()
            ts.append(_span(comm, t0, time.perf_counter()))
        comm.Barrier()
        busy = comm.bcast((_cpu_busy_s() - busy0) / (time.perf_counter() - wall0), root=0)
    finally:
        tx.close()
        rx.close()
    return L * nbytes / min(ts), alpha, busy


class _Hvdl:
    """horovodlite on the workers' communicator, one allreduce path."""

    def __init__(self, comm, env):
        from .impls import Horovodlite

        self.inner = Horovodlite(env, ("allreduce",))
        self.comm = comm
        self.collectives = ("allreduce",)

    def enter(self):
        inner = self.inner
        inner._saved = {k: os.environ.get(k) for k in inner._PATH_VARS}
        for k in inner._PATH_VARS:
            os.environ.pop(k, None)
        os.environ.update(inner.env)
        inner.hvd.init(comm=self.comm)
        inner.algorithm = inner._core.allreduce_algorithm(0)

    def exit(self):
        self.inner.exit()

    def prepare(self, coll, inp):
        return self.inner.prepare(coll, inp)


def _impls(world, comm, H, L, P, only):
    from .baselines import ParameterServer, Tree
    from .impls import Mpi

    out, seen = [], set()
    for env in ({}, {"HOROVODLITE_HIERARCHICAL_ALLREDUCE": "0"},
                {"HOROVODLITE_HIERARCHICAL_ALLREDUCE": "1"}):
        h = _Hvdl(comm, env)
        h.enter()
        algo = h.inner.algorithm
        h.exit()
        if algo in seen:
            continue
        seen.add(algo)
        h.name = f"horovodlite {algo}" + (" (automatic)" if not env else "")
        out.append(h)
    m = Mpi(comm)
    m.name = "MPI_Allreduce"
    out.append(m)
    if P:
        out.append(ParameterServer(world, range(H * L, H * L + P)))
    out.append(Tree(comm))
    if only:
        out = [i for i in out if any(s.lower() in i.name.lower() for s in only.split(","))]
    return out


def job(opts):
    import numpy as np
    from mpi4py import MPI

    from .baselines import serve, stop_servers
    from .measure import case

    H, L, P = opts["hosts"], opts["local"], opts["servers"]
    n = H * L
    world = MPI.COMM_WORLD
    wr = world.Get_rank()
    worker = wr < n
    comm = world.Split(0 if worker else 1, wr)
    if not worker:
        serve(world, list(range(n)))
        comm.Free()
        return
    alpha, mem_bw = _calibrate(world, comm, L, n)
    tcp_seen, tcp_alpha, tcp_busy = (_tcp_rate(comm, H, L, opts["addresses"], opts["link_payload"])
                                     if H > 1 else (float("inf"), alpha, float("nan")))
    tcp_rate = sim.tcp_cpu_rate(tcp_seen, opts["link_payload"], tcp_busy, os.cpu_count())
    impls = _impls(world, comm, H, L, P, opts.get("impls"))
    sizes = opts["sizes"]
    times, wrong, traffic, iters = {}, {}, {}, {}
    r = comm.Get_rank()
    for rnd in range(opts["rounds"]):
        k = rnd % len(impls)
        for impl in impls[k:] + impls[:k]:
            impl.enter()
            try:
                for s in sizes:
                    inp, want, nbytes = case("allreduce", s, n, r)
                    buf, run = impl.prepare("allreduce", inp)
                    key = (impl.name, nbytes)

                    def once():
                        buf[...] = inp
                        comm.Barrier()
                        t0 = time.perf_counter()
                        got = run()
                        return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX), got

                    for _ in range(3 if impl.name.startswith("horovodlite") else 1):
                        t, _ = once()  # connections, negotiation, the path tuner's probes
                    if key not in iters:
                        iters[key] = int(max(1, min(20, opts["budget"] / max(t, 1e-6))))
                    c0 = _link_counters() if r == 0 else None
                    total, got = 0.0, None
                    for _ in range(iters[key]):
                        t, got = once()
                        total += t
                    if r == 0:
                        c1 = _link_counters()
                        traffic[key] = {h: ((c1[h][0] - c0[h][0]) / iters[key],
                                            (c1[h][1] - c0[h][1]) / iters[key]) for h in c1 if h in c0}
                    times.setdefault(key, []).append(total / iters[key])
                    bad = int(np.count_nonzero(np.asarray(got) != want))
                    wrong[key] = wrong.get(key, 0) + comm.allreduce(bad)
            finally:
                impl.exit()
        if r == 0:
            print(f"round {rnd + 1}/{opts['rounds']} done", flush=True)
    stop_servers(world, range(n, n + P))
    if r == 0:
        rows = [{"impl": k[0], "bytes": k[1], "time": statistics.median(v), "times": v,
                 "wrong": wrong[k], "traffic": traffic.get(k, {})} for k, v in times.items()]
        with open(opts["out"], "w") as f:
            json.dump({"alpha": alpha, "mem_bw": mem_bw, "tcp_rate": tcp_rate, "tcp_alpha": tcp_alpha,
                       "tcp_measured": tcp_seen, "tcp_cores_busy": tcp_busy, "rows": rows,
                       "impls": [i.name for i in impls]}, f, indent=1)
    comm.Free()


# ---------------------------------------------------------------- the launcher side
def _parse(argv):
    ap = argparse.ArgumentParser(prog="python -m horovodlite.bench --cluster",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", required=True, help="HOSTSxWORKERS_PER_HOST, e.g. 2x2")
    ap.add_argument("--link-rate", default="1gbit", help="each host's link, each way (tc units)")
    ap.add_argument("--link-mtu", type=int, default=1500)
    ap.add_argument("--servers", type=int, default=1, help="parameter servers (0: none)")
    ap.add_argument("-o", "--output", default="cluster_report")
    ap.add_argument("--min-bytes", default="4K")
    ap.add_argument("--max-bytes", default="64M")
    ap.add_argument("--factor", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=float, default=1.0, help="seconds per measurement (at most 20 calls)")
    ap.add_argument("--impls", default="", help="comma list of name fragments to run (default all)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds before the job is killed")
    return ap.parse_args(argv)


def main(argv):
    from ..run.launcher import find_mpirun
    from ..run.local_cluster import ClusterError, LocalCluster, parse_spec
    from ..sim import payload_share

    args = _parse(argv)
    try:
        H, L = parse_spec(args.cluster)
    except ClusterError as e:
        sys.exit(f"python -m horovodlite.bench: {e}")
    P = max(0, args.servers)
    os.makedirs(args.output, exist_ok=True)
    sizes = sweep(args.min_bytes, args.max_bytes, args.factor)
    with tempfile.TemporaryDirectory(prefix="hvdl-cluster-bench-") as tmp:
        out = os.path.join(tmp, "results.json")
        opts = {"hosts": H, "local": L, "servers": P, "sizes": sizes, "rounds": args.rounds,
                "budget": args.budget, "out": out, "impls": args.impls}
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   PYTHONUNBUFFERED="1")
        env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
        load0 = os.getloadavg()
        try:
            with LocalCluster(H + P, [L] * H + [1] * P, link_rate=args.link_rate,
                              mtu=args.link_mtu) as c:
                print(c.describe(), flush=True)
                opts["addresses"] = list(c.addresses)
                opts["link_payload"] = c.rate_bytes * payload_share(args.link_mtu) if c.rate_bytes \
                    else float("inf")
                cmd = [find_mpirun(), "-n", str(H * L + P), "--bind-to", "none", *c.mpirun_args()]
                # The engine's knobs too, as horovodlite-run forwards them: each host
                # reads its own environment at init().
                knobs = sorted(v for v in env if v.startswith(("HOROVODLITE_", "HOROVOD_")))
                for v in ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED", *knobs):
                    if v in env:
                        cmd += ["-x", v]
                cmd += [sys.executable, "-m", "horovodlite.bench.cluster", "--job", json.dumps(opts)]
                t0 = time.time()
                rc = subprocess.run(cmd, env=env, timeout=args.timeout).returncode
                hosts = list(c.names)
                burst = c.burst_bytes
        except ClusterError as e:
            sys.exit(f"python -m horovodlite.bench: {e}")
        except subprocess.TimeoutExpired:
            sys.exit(f"python -m horovodlite.bench: the job did not finish in {args.timeout:.0f}s")
        if rc != 0 or not os.path.exists(out):
            sys.exit(f"python -m horovodlite.bench: the job failed (exit code {rc})")
        with open(out) as f:
            res = json.load(f)
    from .cluster_report import write

    meta = {"command": "python -m horovodlite.bench " + " ".join(argv), "hosts": H, "local": L,
            "servers": P, "link_rate": args.link_rate, "mtu": args.link_mtu, "host_names": hosts,
            "burst": burst,
            "load": (load0, os.getloadavg()), "wall": time.time() - t0, "cpus": os.cpu_count(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    path = write(args.output, res, meta)
    print(f"report: {path}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        job(json.loads(sys.argv[2]))
    else:
        main(sys.argv[1:])
