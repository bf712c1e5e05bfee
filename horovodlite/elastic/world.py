"""The elastic world: the MPI communicator the engine runs on, and how it is re-formed.

Elastic training needs ULFM (`mpirun --with-ft ulfm`, which `horovodlite-run --elastic`
passes): after a peer died, the survivors shrink the last world to the living
(MPIX_Comm_shrink, a consensus that tolerates further failures while it runs) and start
the engine again on it. A job grows by MPI_Comm_spawn: the new processes run the same
command, find their parent communicator in hvd.init() and merge with it, while the
old ranks merge from inside state.commit().

MPI_Finalize after a member died can wait for it forever (seen about one exit in six),
so a process whose world ever lost a member exits without finalizing."""
import atexit
import os
import sys

_state = {"mpi": None, "comm": None, "lost": False, "joined": False, "own_mpi": False}


def mpi():
    """mpi4py's MPI module. If MPI is not running yet, it is started here (threads:
    multiple, as the engine needs) and finalized at exit only if no member was lost."""
    if _state["mpi"] is None:
        if "mpi4py.MPI" not in sys.modules:
            import mpi4py

            mpi4py.rc.initialize = False
            mpi4py.rc.finalize = False
        from mpi4py import MPI

        if not MPI.Is_initialized():
            MPI.Init_thread(MPI.THREAD_MULTIPLE)
            _state["own_mpi"] = True
            atexit.register(_finalize)  # before hvd.init's shutdown hook, so it runs after it
        _state["mpi"] = MPI
    return _state["mpi"]


def _finalize():
    MPI = _state["mpi"]
    if _state["lost"] or MPI.Is_finalized():
        return
    try:
        from .._loader import _core

        if _core.ever_failed():
            return
    except Exception:
        pass
    MPI.Finalize()


def enabled():
    """Launched by `horovodlite-run --elastic` (or told so)."""
    from .. import settings

    return bool(settings.value("ELASTIC"))


def default_comm():
    """What hvd.init() runs on when given no communicator: the elastic world in an
    elastic job (joining the job first if this process was spawned to grow it), else
    None (MPI_COMM_WORLD)."""
    if _state["comm"] is None and not enabled():
        return None
    return comm()


def comm():
    """The current world communicator (errors return instead of aborting)."""
    if _state["comm"] is None:
        MPI = mpi()
        parent = MPI.Comm.Get_parent()
        if parent != MPI.COMM_NULL:
            # Spawned to grow the job: the old ranks merge with us from commit().
            parent.Set_errhandler(MPI.ERRORS_RETURN)
            c = parent.Merge(high=True)
            _state["joined"] = True
        else:
            c = MPI.COMM_WORLD.Dup()
        c.Set_errhandler(MPI.ERRORS_RETURN)
        _state["comm"] = c
    return _state["comm"]


def must_join_sets():
    """True once, at the first hvd.init() of a process spawned to grow a job."""
    if _state["joined"] and not _state.get("sets_joined"):
        _state["sets_joined"] = True
        return True
    return False


def joined():
    """True in a process that was spawned to grow a running job."""
    return _state["joined"]


def mark_lost():
    _state["lost"] = True


def _restart(new_comm, process_sets, old_rank):
    """The engine again, on `new_comm`."""
    from .. import basics
    from .. import handles

    _state["comm"] = new_comm
    _state["old_rank"] = old_rank
    # Unnamed collectives are numbered per rank; the ranks of the new world must start
    # counting together (a failure may have cut them off at different counts).
    handles._counters.clear()
    from .. import process_sets as ps_mod

    basics.init(comm=new_comm, process_sets="dynamic" if ps_mod._dynamic["on"] else None)
    _recreate_sets(process_sets)


def reform(process_sets=None):
    """After a peer failed: stop the broken engine, shrink the last world to the living
    and start the engine on it. Collective over the survivors. `process_sets`:
    [(ProcessSet, old world ranks)] to re-create over their surviving members.
    Returns this process's rank in the old world."""
    from .. import basics

    MPI = mpi()
    mark_lost()
    # The engine's last world: ours, or (hvd.init() outside an elastic launch) MPI's own.
    base = _state["comm"] if _state["comm"] is not None else MPI.COMM_WORLD
    base.Set_errhandler(MPI.ERRORS_RETURN)
    basics.shutdown()  # returns promptly: a broken world is neither barriered nor freed
    try:
        base.Revoke()  # wakes a survivor still blocked in it (an earlier, interrupted reset)
    except MPI.Exception:
        pass
    shrunk = base.Shrink()
    shrunk.Set_errhandler(MPI.ERRORS_RETURN)
    old_rank = base.Get_rank()
    _restart(shrunk, process_sets, old_rank)
    return old_rank


def _spawn_info(MPI, hosts):
    """Where to start them: this machine is in mpirun's allocation already (and is
    'localhost' to it); other hosts are added to the allocation."""
    info = MPI.Info.Create()
    info.Set("wdir", os.getcwd())
    me = host_name()
    names = ["localhost" if h == me else h for h in hosts]
    if any(n != "localhost" for n in names):
        info.Set("host", ",".join(names))
        info.Set("PMIX_ADD_HOST", ",".join(sorted({n for n in names if n != "localhost"})))
    return info


def _spawn_and_merge(base, count, hosts):
    """MPI_Comm_spawn of `count` processes running this command, merged with `base`
    (collective over `base`; the new processes merge from their hvd.init())."""
    MPI = mpi()
    info = _spawn_info(MPI, hosts)
    argv = list(getattr(sys, "orig_argv", [sys.executable] + sys.argv))[1:]
    try:
        inter = base.Spawn(sys.executable, args=argv, maxprocs=count, root=0, info=info)
    finally:
        info.Free()
    inter.Set_errhandler(MPI.ERRORS_RETURN)
    merged = inter.Merge(high=False)
    merged.Set_errhandler(MPI.ERRORS_RETURN)
    return merged


def grow(count, hosts=(), process_sets=None):
    """Spawns `count` new processes running this command (on `hosts`, one host name per
    process, where given) and starts the engine on the merged world, waiting for them.
    Collective over the current world. (Spawning from a background thread while the
    engine runs, so training would go on while they start, crashed OpenMPI 5.0's
    progress engine: the old ranks wait here instead.)"""
    from .. import basics

    base = comm()
    basics.shutdown()
    if count <= 0:
        _restart(base, process_sets, base.Get_rank())
        return
    _restart(_spawn_and_merge(base, count, hosts), process_sets, base.Get_rank())


def _recreate_sets(process_sets):
    """Each set's surviving members, renumbered in the new world: old ranks are
    exchanged, so every rank maps them alike. Rank 0 then sends the sets' new ranks, so
    that a process that just joined registers them too (see join_sets)."""
    from ..objects import allgather_object, broadcast_object

    info = allgather_object((_state.get("old_rank"), host_name()), name="elastic.old_ranks")
    old_of_new = [old for old, _ in info]
    new_of_old = {old: new for new, old in enumerate(old_of_new) if old is not None}
    old_hosts = _state.get("hosts") or []
    _state["lost_hosts"] = [h for r, h in enumerate(old_hosts) if r not in new_of_old]
    _state["hosts"] = [h for _, h in info]
    spec = []
    for ps, old_ranks in process_sets or ():
        ranks = sorted(new_of_old[r] for r in old_ranks if r in new_of_old)
        spec.append(ranks)
    spec = broadcast_object(spec, 0, name="elastic.process_sets")
    _register_sets([ps for ps, _ in process_sets or ()], spec)


def join_sets(user_sets):
    """In a process spawned to grow the job, at its first hvd.init(): take part in the
    old ranks' _recreate_sets. `user_sets`: the ProcessSet objects this script passed
    to init(process_sets=...), matched to the job's sets in order."""
    from ..objects import allgather_object, broadcast_object

    info = allgather_object((None, host_name()), name="elastic.old_ranks")
    _state["hosts"] = [h for _, h in info]
    _state["lost_hosts"] = []
    spec = broadcast_object(None, 0, name="elastic.process_sets")
    _register_sets(list(user_sets or ()), spec)


def host_name():
    """This process's host, as the engine names it (HOSTNAME_OVERRIDE lets tests pretend)."""
    import socket

    from .. import settings

    return settings.value("HOSTNAME_OVERRIDE") or socket.gethostname()


def running_hosts():
    """The host of each rank of the current world (collective the first time)."""
    if _state.get("hosts") is None:
        from ..objects import allgather_object

        _state["hosts"] = allgather_object(host_name(), name="elastic.hosts")
    return _state["hosts"]


def lost_hosts():
    """The hosts of the ranks lost at the last reform (one entry per rank)."""
    return _state.get("lost_hosts") or []


def _register_sets(objects, spec):
    from .. import process_sets as ps_mod

    for i, ranks in enumerate(spec):
        ps = objects[i] if i < len(objects) else ps_mod.ProcessSet(ranks)
        ps.ranks = ranks
        if ranks:
            ps_mod._register(ps)
