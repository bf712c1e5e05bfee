"""Training throughput against the no-exchange bound: the synthetic ResNets of
examples/pytorch_synthetic_benchmark.py at 2 ranks, one torch thread per rank, with

  bound        the same 2 ranks training with no gradient exchange at all
  idle         the bound with horovodlite initialised beside it (its engine's thread up,
               nothing submitted): what an idle engine costs the training
  lockstep     the bound plus one MPI barrier per step (before optimizer.step): nothing
               exchanged, but the ranks wait for each other every step, as synchronous
               data-parallel training must. On a machine whose step times vary, that
               wait alone costs throughput, so this is the most any synchronous
               implementation can reach; the gap between it and the bound is the
               machine's, the gap below it the implementation's
  horovodlite  DistributedOptimizer
  ddp-gloo     torch DistributedDataParallel over gloo (under torchrun)
  horovod      Horovod's DistributedOptimizer, when `horovod.torch` imports (never a
               dependency): from this python, else from --horovod-python, else from
               the repository's .venv-horovod/ (a venv of its own, so that nothing
               else imports Horovod by accident; built as below)

run interleaved (every implementation once per repeat, the order rotating between
repeats) so that machine noise hits all alike. Each implementation's img/s is divided by
the bound *of the same repeat*; the table shows the median fraction and its range.

    python benchmarks/torch_training.py [--model smallcnn --batch-size 32 --repeats 5]
        [--launch mpirun-yield|mpirun|horovodlite-run] [--pin] [--paired]
        [--impls bound,horovodlite,...]

--paired also times each implementation against a twin in the same launch: the same
model trained with nothing exchanged, in alternating blocks (see _paired_blocks); its
table has one fraction per pair of blocks, free of the spread between launches.

--launch says how the MPI-based implementations start: `mpirun-yield` (default):
`mpirun --bind-to none --mca mpi_yield_when_idle 1`; `mpirun`: plain `mpirun -np N`
(OpenMPI's defaults: each rank bound to a core); `mpirun-unbound`: `mpirun --bind-to
none`; `horovodlite-run`: our launcher with its defaults. --pin pins each rank's main thread to one core after start-up.

Per-step engine costs are printed beside the throughput (from /proc, so immune to the
noise of a shared machine): CPU time of the threads other than the training thread, and
their context switches (wake-ups), per step and rank; for horovodlite also negotiation
rounds per step.

Horovod 0.28.1 for the `horovod` impl, into .venv-horovod/ layered on this venv (its
base.pth names this venv's site-packages, as the worktree venvs do); 0.28.1 says C++14,
torch 2.x headers need C++17:

    python3 -m venv .venv-horovod && echo '*' > .venv-horovod/.gitignore
    echo $VIRTUAL_ENV/lib/python3.11/site-packages > .venv-horovod/lib/python3.11/site-packages/base.pth
    .venv-horovod/bin/pip install psutil cffi
    .venv-horovod/bin/pip download horovod==0.28.1 --no-binary :all: --no-deps
    tar xzf horovod-0.28.1.tar.gz && cd horovod-0.28.1
    sed -i 's/CMAKE_CXX_STANDARD 14/CMAKE_CXX_STANDARD 17/' CMakeLists.txt horovod/torch/CMakeLists.txt
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
        HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_GLOO=1 \
        ../.venv-horovod/bin/pip install --no-build-isolation --no-deps .   (mpicc on PATH)"""
import argparse
import importlib.util
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMPLS = ("bound", "idle", "lockstep", "horovodlite", "ddp-gloo", "horovod")


def _example():
    spec = importlib.util.spec_from_file_location(
        "pytorch_synthetic_benchmark", ROOT / "examples" / "pytorch_synthetic_benchmark.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _pin(rank):
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})


def _threads():
    """{tid: (name, ns on cpu, context switches)} of this process's threads."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            base = f"/proc/self/task/{tid}/"
            name = open(base + "comm").read().strip()
            ns = int(open(base + "schedstat").read().split()[0])
            sw = 0
            for line in open(base + "status"):
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    sw += int(line.split()[-1])
            out[int(tid)] = (name, ns, sw)
        except (OSError, ValueError, IndexError):
            pass
    return out


def _others(before, after, steps):
    """CPU ms and context switches per step of every thread but the calling one."""
    me = __import__("threading").get_native_id()
    ms = sw = total = 0.0
    by_name = {}
    for tid, (name, ns, s) in after.items():
        total += (ns - before.get(tid, (name, 0, 0))[1]) / 1e6
        if tid == me:
            continue
        b = before.get(tid, (name, 0, 0))
        ms += (ns - b[1]) / 1e6
        sw += s - b[2]
        by_name[name] = by_name.get(name, 0) + (ns - b[1]) / 1e6 / steps
    return {"other_ms_per_step": ms / steps, "other_switches_per_step": sw / steps,
            "cpu_ms_per_step": total / steps,
            "by_thread": {k: round(v, 2) for k, v in by_name.items() if v >= 0.01}}


def _steps(args):
    return args.num_warmup_batches + args.num_batches_per_iter * args.num_iters


def _report(rank, size, img_secs, extra):
    # Every rank's figures: the job is as fast as its slowest rank. (Staggered, so the
    # launcher's forwarding does not interleave them.)
    __import__("time").sleep(0.2 * rank)
    print("RESULT " + json.dumps({"rank": rank, "size": size, "img_secs": img_secs, **extra}),
          flush=True)


class _NoExchange:
    """Stands in for a framework module: the bound trains with nothing exchanged."""

    class Compression:
        none = fp16 = None

    def __init__(self):
        self._size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
        self._rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))

    def size(self):
        return self._size

    def rank(self):
        return self._rank

    def DistributedOptimizer(self, opt, **kwargs):  # noqa: N802 - Horovod's name
        return opt

    def broadcast_parameters(self, *a, **k):
        pass

    def broadcast_optimizer_state(self, *a, **k):
        pass

    def shutdown(self):
        pass


def _barrier():
    """One barrier of the launch's ranks (mpi4py: MPI is up under mpirun)."""
    from mpi4py import MPI
    MPI.COMM_WORLD.Barrier()
    _barrier.calls += 1


_barrier.calls = 0  # reported per step, so a test sees that lockstep waited


class _Lockstep(_NoExchange):
    """The lockstep reference: the bound's stand-in, but every optimizer step first
    waits at a barrier, where a synchronous exchange would wait for the last rank's
    gradients."""

    def DistributedOptimizer(self, opt, **kwargs):  # noqa: N802 - Horovod's name
        step = opt.step

        def lockstep(*a, **k):
            _barrier()
            return step(*a, **k)
        opt.step = lockstep
        return opt

    def allreduce(self, tensor, name=None):  # --paired's sync between blocks
        _barrier()
        return tensor


class _Idle(_NoExchange):
    """The bound's stand-in with horovodlite's engine up beside it, nothing submitted."""

    def __init__(self):
        import horovodlite.torch
        super().__init__()
        self._engine = horovodlite.torch
        self._engine.init()

    def shutdown(self):
        self._engine.shutdown()


def worker_framework(args, impl):
    if impl == "bound":
        hvd = _NoExchange()
    elif impl == "idle":
        hvd = _Idle()
    elif impl == "lockstep":
        hvd = _Lockstep()
    elif impl == "horovod":
        import horovod.torch as hvd
        hvd.init()
    else:
        import horovodlite.torch as hvd
        hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if args.pin:
        _pin(int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", rank)))
    before = _threads()
    stats0 = _stats(impl)
    paired = {}
    if args.paired and impl != "bound":
        img_secs, paired = _paired_framework(args, hvd)
    else:
        img_secs = _example().run(args, hvd, log=lambda *a, **k: None)
    extra = _others(before, _threads(), _steps(args))
    extra.update(_engine_extra(impl, stats0, _steps(args)), **paired)
    if paired:  # twice the steps, half of them the twin's: no CPU time per exchanging step
        extra.pop("cpu_ms_per_step")
    _report(rank, size, img_secs, extra)
    if impl != "bound":
        hvd.shutdown()


def _stats(impl):
    if impl != "horovodlite":
        return {}
    from horovodlite._loader import _core
    return _core.stats(0)


def _engine_extra(impl, stats0, steps):
    """horovodlite's per-step engine figures since _stats() gave `stats0`, lockstep's
    barriers per step (also used by benchmarks/framework_training.py); nothing for the
    other implementations."""
    if impl == "lockstep":
        return {"barriers_per_step": _barrier.calls / steps}
    if impl != "horovodlite":
        return {}
    s1 = _stats(impl)
    d = {k: s1[k] - stats0[k] for k in s1}
    if "fresh_rounds" not in d:  # an installation from before those clocks
        d.update(fresh_rounds=0, submit_to_round_ns=0, ring_wakes=0, ring_to_round_ns=0,
                 negotiate_ns=0)
    # The engine's clocks (worker.h, WorkerStats): how long fresh gradients wait for a
    # round, and a peer's ring for this rank's round (futex doorbell only).
    return {"rounds_per_step": d["rounds"] / steps,
            "submit_to_round_us": d["submit_to_round_ns"] / max(d["fresh_rounds"], 1) / 1e3,
            "ring_to_round_us": d["ring_to_round_ns"] / max(d["ring_wakes"], 1) / 1e3,
            "negotiate_ms_per_step": d["negotiate_ns"] / steps / 1e6}


# ---- --paired: the bound inside the same launch ----
#
# Launches differ more than the exchange costs (the bound alone moved 291-401 img/s
# between the repeats of one run), so the fraction of a bound measured in another
# launch carries that spread. --paired also measures each implementation against a
# twin in the same processes: the same model and seed, trained with a plain optimizer
# and nothing exchanged. Blocks of --num-batches-per-iter steps alternate E P, P E, ...
# after a sync of the ranks, and each pair gives one fraction: the job's exchanging
# block (its slowest rank) over its twin's. The framework stays initialised during the
# twin's blocks, so what the pairs measure is the cost of exchanging, not an idle
# engine's (issue 19's third target, measured apart: benchmarks/idle_engine_cost.py).

def _paired_blocks(args, exchanging, twin, sync):
    """Per pair, this rank's img/s of the exchanging step's block and of the twin's."""
    timeit.timeit(exchanging, number=args.num_warmup_batches)
    timeit.timeit(twin, number=args.num_warmup_batches)
    e_ips, p_ips = [], []
    for i in range(args.num_iters):
        for step, out in ((exchanging, e_ips), (twin, p_ips))[::1 if i % 2 == 0 else -1]:
            sync()
            out.append(args.batch_size * args.num_batches_per_iter /
                       timeit.timeit(step, number=args.num_batches_per_iter))
    return e_ips, p_ips


def _models_and_step(args, size, paired):
    """The model from one seed, and with `paired` its twin from the same seed (else
    None), sgd(model): its optimizer, step(model, optimizer) on one fixed batch, and
    that batch (data, target)."""
    import torch
    import torch.nn.functional as F

    ex = _example()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = ex.MODELS[args.model]()
    twin = None
    if paired:
        torch.manual_seed(0)
        twin = ex.MODELS[args.model]()
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, model.fc.out_features, (args.batch_size,))

    def step(m, opt):
        opt.zero_grad()
        F.cross_entropy(m(data), target).backward()
        opt.step()
    sgd = lambda m: torch.optim.SGD(m.parameters(), lr=0.01 * size, momentum=0.9)  # noqa: E731
    return model, twin, sgd, step, (data, target)


def _paired_framework(args, hvd):
    import torch

    model, twin, sgd, step, _ = _models_and_step(args, hvd.size(), True)
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    twin_opt = sgd(twin)
    e, p = _paired_blocks(args, lambda: step(model, opt), lambda: step(twin, twin_opt),
                          lambda: hvd.allreduce(torch.zeros(1), name="paired.sync"))
    return e, {"paired_e": e, "paired_p": p}


def worker_ddp(args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    if args.pin:
        _pin(int(os.environ.get("LOCAL_RANK", rank)))
    net, twin, sgd, train, _ = _models_and_step(args, size, args.paired)
    model = DDP(net)
    opt = sgd(model)

    def step():
        train(model, opt)

    before = _threads()
    paired = {}
    if args.paired:
        twin_opt = sgd(twin)
        img_secs, p = _paired_blocks(args, step, lambda: train(twin, twin_opt), dist.barrier)
        paired = {"paired_e": img_secs, "paired_p": p}
    else:
        timeit.timeit(step, number=args.num_warmup_batches)
        img_secs = [args.batch_size * args.num_batches_per_iter /
                    timeit.timeit(step, number=args.num_batches_per_iter)
                    for _ in range(args.num_iters)]
    extra = {**_others(before, _threads(), _steps(args)), **paired}
    if paired:  # as in worker_framework
        extra.pop("cpu_ms_per_step")
    _report(rank, size, img_secs, extra)
    dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _mpi_command(launch, np_):
    bindir = Path(sys.executable).parent
    if launch == "horovodlite-run":
        return [str(bindir / "horovodlite-run"), "-np", str(np_)]
    mpirun = bindir / "mpirun"
    cmd = [str(mpirun) if mpirun.exists() else shutil.which("mpirun"), "-np", str(np_)]
    if launch == "mpirun-yield":
        cmd += ["--oversubscribe", "--bind-to", "none", "--mca", "mpi_yield_when_idle", "1"]
    elif launch == "mpirun-unbound":  # what horovodlite-run did at np <= cores before
        cmd += ["--bind-to", "none"]
    return cmd


def _launch(impl, np_, passthrough, own, script=None):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    python = sys.executable
    impl, _, launch = impl.partition("@")  # impl@LAUNCH: this one starts another way
    launch = launch or own.launch
    if impl == "horovodlite-before":  # the same worker, another installation
        python, impl = own.before, "horovodlite"
    elif impl == "horovod":
        python = horovod_python(own.horovod_python)
    elif "=" in impl:  # horovodlite with settings: horovodlite:NAME=VALUE
        for item in impl.split(":")[1:]:
            k, _, v = item.partition("=")
            env["HOROVODLITE_" + k] = v
        impl = "horovodlite"
    script = [str(script or Path(__file__).resolve()), "--worker", impl, *passthrough]
    if impl == "ddp-gloo":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
               "--nproc_per_node", str(np_), "--master_addr", "127.0.0.1",
               "--master_port", str(_free_port()), *script]
    else:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        cmd = [*_mpi_command(launch, np_), python, *script]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env, timeout=own.timeout)
    # Ranks print at once, so two RESULT lines may interleave: decode each object.
    ranks, dec, at = [], json.JSONDecoder(), proc.stdout.find("RESULT {")
    while at >= 0:
        try:
            obj, end = dec.raw_decode(proc.stdout, at + len("RESULT "))
            ranks.append(obj)
        except ValueError:
            end = at + 1
        at = proc.stdout.find("RESULT {", end)
    if len(ranks) != np_:
        raise RuntimeError(f"{impl} np={np_} failed (exit {proc.returncode}):\n"
                           f"{proc.stdout[-3000:]}")
    # Total img/s: every rank does the same batches, so the job runs at its slowest
    # rank's median per-iteration speed, times the ranks.
    total = min(statistics.median(r["img_secs"]) for r in ranks) * np_
    costs = {k: statistics.mean(r[k] for r in ranks)
             for k in ("other_ms_per_step", "other_switches_per_step", "rounds_per_step",
                       "submit_to_round_us", "ring_to_round_us", "negotiate_ms_per_step",
                       "cpu_ms_per_step", "barriers_per_step")
             if k in ranks[0]}
    if "paired_e" in ranks[0]:  # per pair: the job's (slowest rank's) blocks
        costs["paired"] = [min(r["paired_e"][j] for r in ranks) /
                           min(r["paired_p"][j] for r in ranks)
                           for j in range(len(ranks[0]["paired_e"]))]
    # The other threads' CPU as a share of the step (steps stretch under load).
    costs["other_cpu_share"] = costs["other_ms_per_step"] * total / np_ / args_batch(passthrough) / 1e3
    if own.verbose:
        print(f"    threads (ms/step): {[(r['rank'], r['other_ms_per_step'], r.get('by_thread')) for r in ranks]}", flush=True)
    return total, costs


def args_batch(passthrough):
    return int(passthrough[passthrough.index("--batch-size") + 1])


def _imports(python, module):
    return subprocess.run([python, "-c", f"import {module}"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def horovod_python(explicit=None):
    """The first python that imports horovod.torch: --horovod-python, this one, the
    repository's .venv-horovod; None when none does."""
    own_venv = ROOT / ".venv-horovod" / "bin" / "python"
    for python in (explicit, sys.executable, str(own_venv) if own_venv.exists() else None):
        if python and _imports(python, "horovod.torch"):
            return python
    return None


def _available(impl, own):
    if impl.partition("@")[0] != "horovod":
        return True
    return horovod_python(own.horovod_python) is not None


def compare_arguments(ap, impls, timeout, own_arguments=None):
    """Adds to `ap` the options compare() and its launcher read (--worker, --repeats,
    --np, --impls, --launch, --timeout, --verbose), alike in every script that uses
    them (framework_training.py too). `impls`: the script's implementations (--worker's
    choices, --impls' default); `timeout`: --timeout's default, seconds per launch;
    `own_arguments(ap)`: adds the script's own options, listed after --launch."""
    ap.add_argument("--worker", choices=impls, help=argparse.SUPPRESS)
    # --impls also takes horovodlite:NAME=VALUE[:NAME=VALUE] (HOROVODLITE_ settings)
    # and IMPL@LAUNCH (that implementation started the --launch way LAUNCH).
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--impls", default=",".join(impls))
    ap.add_argument("--launch", default="mpirun-yield",
                    choices=("mpirun-yield", "mpirun", "mpirun-unbound", "horovodlite-run"))
    if own_arguments:
        own_arguments(ap)
    ap.add_argument("--timeout", type=int, default=timeout)
    ap.add_argument("--verbose", action="store_true", help="CPU per thread name")


def compare(impls, own, passthrough, script=None):
    """Runs every impl once per repeat (the order rotating) and prints the table: img/s
    and the fraction of the same repeat's bound. `script`: the worker (default: this
    file), started as `script --worker IMPL *passthrough`."""
    ips = {i: [] for i in impls}
    frac = {i: [] for i in impls}
    # CPU time per step, all threads of all ranks, the bound's over the impl's: what the
    # fraction of the bound would be if every CPU cycle came out of compute. Immune to
    # other processes on the machine, which the img/s fraction is not: under foreign
    # load a job whose ranks sleep while they wait for each other is favoured by the
    # scheduler over the bound's ranks, which never sleep (measured above 1.0).
    cpu_frac = {i: [] for i in impls}
    costs = {i: [] for i in impls}
    for rep in range(own.repeats):
        order = impls[rep % len(impls):] + impls[:rep % len(impls)]
        this = {}
        for impl in order:
            this[impl], c = _launch(impl, own.np, passthrough, own, script)
            costs[impl].append(c)
            print(f"  repeat {rep + 1}: {impl:12s} {this[impl]:7.1f} img/s  " +
                  "  ".join(f"{k} {v:.2f}" for k, v in c.items() if k != "paired") +
                  (f"  paired {statistics.median(c['paired']):.3f}" if "paired" in c else ""),
                  flush=True)
        for impl in impls:
            ips[impl].append(this[impl])
            frac[impl].append(this[impl] / this["bound"])
            cpu = [costs[k][-1].get("cpu_ms_per_step") for k in (impl, "bound")]
            if all(cpu):
                cpu_frac[impl].append(cpu[1] / cpu[0])
    load = open("/proc/loadavg").read().split()[:3]
    print(f"\nload average after the runs: {' '.join(load)}")
    print(f"{'':12s} {'img/s median (range)':>24s} {'fraction of bound':>26s} "
          f"{'other threads ms/step':>22s} {'cpu share':>10s} {'switches/step':>14s} "
          f"{'rounds/step':>12s} {'submit->round us':>17s} {'ring->round us':>15s} "
          f"{'negotiate ms/step':>18s} {'cpu-time fraction':>24s}")
    for impl in impls:
        med = lambda k: statistics.median(c[k] for c in costs[impl]) if k in costs[impl][0] else float("nan")  # noqa: E731
        print(f"{impl:12s} {statistics.median(ips[impl]):8.1f} ({min(ips[impl]):6.1f}-"
              f"{max(ips[impl]):6.1f}) {statistics.median(frac[impl]):10.3f} "
              f"({min(frac[impl]):.3f}-{max(frac[impl]):.3f}) "
              f"{med('other_ms_per_step'):22.2f} {med('other_cpu_share'):10.3f} "
              f"{med('other_switches_per_step'):14.1f} "
              f"{med('rounds_per_step'):12.1f} {med('submit_to_round_us'):17.1f} "
              f"{med('ring_to_round_us'):15.1f} {med('negotiate_ms_per_step'):18.2f} " +
              (f"{statistics.median(cpu_frac[impl]):10.3f} ({min(cpu_frac[impl]):.3f}-"
               f"{max(cpu_frac[impl]):.3f})" if cpu_frac[impl] else ""))
    # What the repeats resolve: a 3 % claim needs an interval narrower than 3 %.
    print("\nfraction of the bound, 95 % bootstrap interval of the median over the repeats:")
    for impl in impls:
        if impl != "bound":
            lo, hi = median_interval(frac[impl])
            print(f"  {impl:12s} {statistics.median(frac[impl]):.3f}  [{lo:.3f}, {hi:.3f}]  "
                  f"({len(frac[impl])} repeats)")
    _print_paired(impls, costs)


def _print_paired(impls, costs):
    """--paired's table: every pair of every repeat, per implementation."""
    rows = [(i, [f for c in costs[i] for f in c.get("paired", ())]) for i in impls]
    rows = [(i, v) for i, v in rows if v]
    if not rows:
        return
    print("\nfraction of the twin's img/s in the same launch (--paired: the exchanging "
          "block over the nothing-exchanged block beside it), median over all pairs, 95 % "
          "bootstrap interval:")
    for impl, v in rows:
        lo, hi = median_interval(v)
        print(f"  {impl:12s} {statistics.median(v):.3f}  [{lo:.3f}, {hi:.3f}]  ({len(v)} pairs, "
              f"range {min(v):.3f}-{max(v):.3f})")


def median_interval(values, level=0.95, draws=4000):
    """Percentile bootstrap interval of the median of `values` (fixed seed: a rerun on
    the same numbers prints the same interval)."""
    import numpy as np

    rng = np.random.default_rng(0)
    v = np.asarray(values, dtype=float)
    meds = np.median(rng.choice(v, size=(draws, len(v))), axis=1)
    lo, hi = np.quantile(meds, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)



def _own_arguments(ap):
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--paired", action="store_true",
                    help="also time each implementation against a nothing-exchanged twin in "
                         "the same launch, in alternating blocks")
    ap.add_argument("--before", metavar="PYTHON",
                    help="also run horovodlite-before: the python of another installation "
                         "(before/after comparisons in one launch)")
    ap.add_argument("--horovod-python", metavar="PYTHON",
                    help="a python that imports horovod.torch (default: this one, then "
                         ".venv-horovod/bin/python)")


def main():
    ex = _example()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    compare_arguments(ap, IMPLS, timeout=600, own_arguments=_own_arguments)
    own, rest = ap.parse_known_args()
    if "--model" not in rest:
        rest += ["--model", "smallcnn"]
    if "--batch-size" not in rest:
        rest += ["--batch-size", "32"]
    args = ex.parse_args(rest)
    args.pin, args.paired = own.pin, own.paired
    if own.worker == "ddp-gloo":
        return worker_ddp(args)
    if own.worker:
        return worker_framework(args, own.worker)

    passthrough = rest + (["--pin"] if own.pin else []) + (["--paired"] if own.paired else [])
    impls = [i for i in own.impls.split(",") if i]
    if "bound" not in impls:
        impls.insert(0, "bound")
    if own.before and "horovodlite-before" not in impls:
        impls.append("horovodlite-before")
    skipped = [i for i in impls if not _available(i, own)]
    impls = [i for i in impls if i not in skipped]
    print(f"model {args.model}, batch {args.batch_size}/rank, image {args.image_size}px, "
          f"{args.threads} thread/rank, np={own.np}, {args.num_iters} x "
          f"{args.num_batches_per_iter} batches timed, {own.repeats} interleaved repeats, "
          f"launch: {own.launch}, pinned: {own.pin}"
          + (f"; not importable, skipped: {', '.join(skipped)}" if skipped else ""), flush=True)
    compare(impls, own, passthrough)


if __name__ == "__main__":
    main()
