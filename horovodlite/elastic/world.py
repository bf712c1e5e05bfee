"""The elastic world: the MPI communicator the engine runs on, and how it is re-formed.

Elastic training needs ULFM (`mpirun --with-ft ulfm`, which `horovodlite-run --elastic`
passes): after a peer died, the survivors shrink the last world to the living
(MPIX_Comm_shrink, a consensus that tolerates further failures while it runs) and start
the engine again on it.

A job grows without waiting for its new processes to start up (growth.py): they are
spawned and merged at one commit, training goes on on the old world, and the engine
moves to the merged world at the first commit after they all reached hvd.init(). A
job also shrinks when discovery reports fewer slots: the ranks that leave split off
and exit (remove()).

MPI_Finalize after a member died can wait for it forever (seen about one exit in six),
so a process whose world ever lost a member exits without finalizing. Finalizing or
not, every process says farewell as it exits (the core's, transport/world.h), so a
peer waiting for it in a communicator's creation fails at once instead of waiting."""
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


def _will_not_finalize():
    """A process that lost a member (or whose engine saw one fail, or gave up making a
    communicator) does not finalize: MPI_Finalize waits for every process of the job
    (seen hanging in about one exit in six after a death). It is all or none: a
    process that finalizes while another of the job exits without it makes mpirun
    abort the job or report a failure."""
    if _state["lost"]:
        return True
    try:
        from .._loader import _core

        return not _core.may_finalize()
    except Exception:
        return False


def _finalize():
    MPI = _state["mpi"]
    if MPI.Is_finalized():
        return
    try:  # finalizing or not (a grown job never does): tell the others we left
        from .._loader import _core

        _core.say_farewell()
    except Exception:  # noqa: BLE001 - leaving must not fail on it
        pass
    if _state.get("spawned"):
        # Never MPI_Finalize here (see start_growth); without PMIx_Finalize mpirun
        # would fail the job for this exit (pmix.py).
        from . import pmix

        pmix.finalize_runtime()
        return
    if _will_not_finalize():
        return
    MPI.Finalize()


def setting(name):
    """One setting, as hvd.init() read it (settings.at_init)."""
    from .. import settings

    return settings.at_init(name)


def enabled():
    """Launched by `horovodlite-run --elastic` (or told so)."""
    return bool(setting("ELASTIC"))


def default_comm():
    """What hvd.init() runs on when given no communicator: the elastic world in an
    elastic job (joining the job first if this process was spawned to grow it), else
    None (MPI_COMM_WORLD)."""
    if _state["comm"] is None and _state.get("joining") is None and not enabled():
        return None
    return comm()


def comm():
    """The current world communicator (errors return instead of aborting)."""
    if _state["comm"] is None:
        MPI = mpi()
        if _state.get("joining") is not None:
            # Spawned to grow the job: the old ranks take us in at a commit (grow()).
            from . import growth as growth_mod

            c = growth_mod.join_at_init(_state.pop("joining"))
            _state["joined"] = _state["join_pending"] = True
        else:
            from .._loader import _core

            # The core's farewells (it opens them itself only where it starts MPI):
            # collective over MPI_COMM_WORLD as the Dup is, on every process.
            _core.open_farewells()
            c = MPI.COMM_WORLD.Dup()
        c.Set_errhandler(MPI.ERRORS_RETURN)
        _state["comm"] = c
    return _state["comm"]


def join_failed(exc):
    """In a process spawned to grow the job, when its first hvd.init() (the engine's
    start on the merged world, or join_sets) failed because a member of that world died
    after telling it to join: the old ranks re-form without it (a failure during a host
    update), so it leaves like a process told to exit, with code 0, instead of the
    traceback that failed the whole job though its survivors went on. Returns False
    (re-raise) in any other process or at any later init."""
    if not _state.get("join_pending"):
        return False
    import logging

    _state["join_pending"] = False
    mark_lost()
    logging.getLogger("horovodlite.elastic").warning(
        "horovodlite elastic: a member of the job failed while this process joined it (%s); "
        "the job goes on without this process, which exits", exc)
    try:
        from .. import basics

        basics.shutdown()
    except Exception:
        pass
    return True


def join_done():
    _state["join_pending"] = False


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
    handles.reset_auto_names()
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
    if _state.get("growth") is not None:
        # Their merged world holds the dead: they are told to exit (by the new rank 0)
        # and the next commits start others for the free slots.
        _state["comm"] = shrunk
        _cancel_growth(lost=True)
    shrunk.Set_errhandler(MPI.ERRORS_RETURN)
    old_rank = base.Get_rank()
    _restart(shrunk, process_sets, old_rank)
    return old_rank


def adopt(MPI, merged):
    """In a process spawned to grow the job (growth.spawned_main): MPI is running, and
    `merged` is what its hvd.init() joins."""
    _state["mpi"], _state["own_mpi"], _state["joining"] = MPI, True, merged
    _state["spawned"] = True


def start_growth(hosts):
    """Collective over the current world: starts one process per host name in `hosts`
    (growth.spawn); they join later, at world.grow()."""
    from . import growth as growth_mod

    assert _state.get("growth") is None
    _state["growth"] = growth_mod.spawn(comm(), hosts)
    # A job that spawned processes is not MPI_Finalized anywhere: a spawned process's
    # MPI_Finalize disconnects from every parent, and when its TCP BTL finds no
    # address for one of them (opal_modex_recv: -46, "unreachable proc") it crashed
    # with SIGSEGV (about one growth benchmark launch in 14; every time in a 3-process
    # trial where the child finalized), or hung when the parents finalized too. The
    # parents are under ULFM, where exiting without it is fine; the spawned processes
    # call PMIx_Finalize instead (pmix.py).
    mark_lost()
    if not _state.get("cancel_registered"):
        atexit.register(_cancel_growth)  # before _finalize, registered earlier
        _state["cancel_registered"] = True
    return _state["growth"]


def grows_in_background():
    return bool(setting("ELASTIC_GROW_IN_BACKGROUND"))


def growth():
    """The processes started for the job that have not joined yet (a growth.Growth)."""
    return _state.get("growth")


def _cancel_growth(lost=None):
    """Processes started but not joined are told to exit (the job ends first, or lost a
    member), so none waits forever, nor makes MPI_Finalize wait. Sent by one rank."""
    from . import growth as growth_mod

    g = _state.pop("growth", None)
    if g is None or comm().Get_rank() != 0:
        return
    try:
        g.tell(growth_mod._CANCEL, _will_not_finalize() if lost is None else lost)
    except mpi().Exception:
        pass


def end_growth():
    """At the end of training, collective over the current world (before the ranks'
    last barrier): processes started but not joined are told to exit, rank 0 waiting
    until each took the word (bounded by HOROVODLITE_START_TIMEOUT: they have to reach
    hvd.init() for it). The other ranks wait in the barrier meanwhile, so that none
    leaves first: a new process may take a peer's exit for a failure of the world it
    was merged with, and then never takes rank 0's word, which rank 0 would wait for."""
    import logging

    from . import growth as growth_mod

    g = _state.pop("growth", None)
    if g is None or comm().Get_rank() != 0:
        return
    timeout = setting("START_TIMEOUT")
    try:
        missing = g.tell_and_confirm(growth_mod._CANCEL, _will_not_finalize(), timeout)
    except mpi().Exception as e:
        missing = f"({e})"
    if missing:
        logging.getLogger("horovodlite.elastic").warning(
            "horovodlite elastic: processes started for the job (merged ranks %s) did not take "
            "the word to exit within %g s (HOROVODLITE_START_TIMEOUT); leaving without them",
            missing, timeout)


def grow(process_sets=None):
    """Takes in the processes started by start_growth(), waiting on rank 0 until each
    reached hvd.init() (at once when growth().ready() said so), and starts the engine
    on the merged world, old ranks first. Collective over the current world."""
    from .. import basics
    from . import growth as growth_mod

    g = _state["growth"]
    base = comm()
    basics.shutdown()
    if base.Get_rank() == 0:
        g.ready(wait=True)
        g.tell(growth_mod._JOIN, _will_not_finalize())
    _state["growth"] = None
    _restart(g.merged, process_sets, base.Get_rank())


def remove(ranks, process_sets=None):
    """Ranks `ranks` of the current world leave (their host left the discovery output,
    or reports fewer slots): every rank stops the engine and the world is split; those
    leaving get False (they are to exit), the others start the engine on the rest and
    get True. Collective over the current world."""
    from .. import basics

    MPI = mpi()
    base = comm()
    me = base.Get_rank()
    basics.shutdown()
    leaving = me in set(ranks)
    rest = base.Split(MPI.UNDEFINED if leaving else 0, me)
    # A process that leaves exits without finalizing while the others go on, which MPI
    # takes for a failure: no MPI_Finalize may wait for it.
    mark_lost()
    if leaving:
        return False
    rest.Set_errhandler(MPI.ERRORS_RETURN)
    _restart(rest, process_sets, me)
    return True


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
    join_done()


def host_name():
    """This process's host, as the engine names it (HOSTNAME_OVERRIDE lets tests pretend)."""
    import socket

    return setting("HOSTNAME_OVERRIDE") or socket.gethostname()


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
