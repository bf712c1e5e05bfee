"""The `run` decorator of elastic training (Horovod 0.28's behaviour).

    @hvd.elastic.run
    def train(state): ...
    train(state)

calls train(state) after syncing the state from rank 0. When a collective fails
because a peer died (HorovodInternalError), every survivor restores its last commit,
the world is re-formed from the survivors (world.reform), the reset callbacks run,
the state is synced from the new rank 0 and train(state) is called again. On
HostsUpdatedInterrupt (raised at a commit on every rank) the same happens without
the restore, the world growing onto the new hosts. After --reset-limit resets, or
when fewer than --min-np processes remain for HOROVODLITE_ELASTIC_TIMEOUT, it fails."""
import functools
import logging
import time

from . import hosts, world
from .state import HostsUpdatedInterrupt

log = logging.getLogger("horovodlite.elastic")

# Attempts at re-forming the world when more peers fail while it re-forms.
_REFORM_ATTEMPTS = 5

# For logs and measurements: resets done, the last one's duration, when the last failure
# surfaced here (time.time()) and its message.
stats = {"resets": 0, "last_reset_s": None, "last_error": None, "last_failure_at": None}


def _errors():
    from ..basics import HorovodInternalError

    errs = [HorovodInternalError]
    try:
        errs.append(world.mpi().Exception)
    except Exception:
        pass
    return tuple(errs)


def _registered_sets():
    from .. import process_sets as ps_mod

    return [(ps, list(ps.ranks)) for ps in ps_mod._registered.values()]


def _reform():
    """world.reform, again while more peers fail during it; a clear error if it cannot."""
    from ..basics import HorovodInternalError

    sets = _registered_sets()
    last = None
    for _ in range(_REFORM_ATTEMPTS):
        try:
            world.reform(sets)
            hosts.note_lost(world.lost_hosts())
            return
        except (HorovodInternalError, RuntimeError) + _errors() as e:
            last = e
            log.warning("horovodlite elastic: re-forming the world failed (%s); trying again", e)
    raise RuntimeError(f"horovodlite elastic: could not re-form the world after "
                       f"{_REFORM_ATTEMPTS} attempts; last error: {last}")


def _grow(plan):
    """Takes in the processes started for the hosts of `plan`."""
    world.grow(_registered_sets())


def _remove(ranks):
    """Ranks `ranks` leave (their hosts report fewer slots); they exit cleanly here."""
    if not world.remove(ranks, _registered_sets()):
        log.info("horovodlite elastic: this process's host left the job; exiting")
        raise SystemExit(0)


def reset(failure, update=None):
    """Re-forms the world: from the survivors after a failure; at a host update
    (hosts.Update), with the processes started for it or without the ranks that
    leave. Then waits for --min-np processes if fewer are left. A peer failing during
    a host update turns it into a failure's reset."""
    t0 = time.monotonic()
    if not failure and update is not None:
        try:
            if update.remove:
                _remove(update.remove)
            elif update.hosts:
                _grow(list(update.hosts))
        except _errors() as e:
            log.warning("horovodlite elastic: a peer failed during a host update (%s)", e)
            world.mark_lost()
            failure = True
    if failure:
        _reform()
    hosts.wait_for_min_np(_grow)
    stats["resets"] += 1
    stats["last_reset_s"] = time.monotonic() - t0
    return failure


def _finish_together():
    """Every rank leaves train() only once all have finished its collectives. A job that
    grew is not MPI_Finalized (world.start_growth), so nothing else holds a finished
    rank until its peers are done: one still completing its last commit took the
    others' exit for a failure, re-formed the world at the last step and started
    processes for their slots (seen in CI: a reset at step 60 of 60, two processes
    spawned and joined after two ranks had finished). The farewell a leaving process
    says (world._finalize) does not make this unneeded: it tells a peer that the rank
    left (its heartbeat names it so, a communicator's creation fails at once instead of
    waiting), but a rank still in its last commit fails all the same, and elastic
    training treats any failure as one to recover from. The end of training is a
    collective event, so the ranks agree on it here, before any leaves. A failure now
    changes nothing: training is over."""
    from ..basics import HorovodInternalError
    from ..ops import barrier

    try:
        hosts.finish()
        world.end_growth()  # processes still starting are told to exit, and took it
        barrier()
    except HorovodInternalError:
        pass


def run_fn(func, reset_fn=reset):
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        from ..basics import HorovodInternalError

        limit = hosts.reset_limit()
        resets = 0
        skip_sync = False
        while True:
            try:
                hosts.start_discovery()  # this rank 0's (a reset may have made a new one)
                if not skip_sync:
                    state.sync()
                result = func(state, *args, **kwargs)
                _finish_together()
                return result
            except HorovodInternalError as e:
                stats["last_failure_at"] = time.time()
                world.mark_lost()
                stats["last_error"] = str(e)
                state.restore()
                skip_sync, failure, plan = False, True, None
            except HostsUpdatedInterrupt as e:
                skip_sync, failure, plan = e.skip_sync, False, e.update
            resets += 1
            if limit is not None and resets > limit:
                raise RuntimeError(f"horovodlite elastic: the world was re-formed {limit} times "
                                   f"(--reset-limit {limit}); giving up")
            try:
                met_failure = reset_fn(failure, plan)
            except (RuntimeError, SystemExit, KeyboardInterrupt):
                raise  # the clear errors, raised on every rank alike; leaving
            except BaseException:
                # A bug: this rank cannot take part in re-forming the world, and the
                # others would wait for it there. Ending the job is better than a hang.
                log.exception("horovodlite elastic: re-forming the world failed; aborting the job")
                world.mpi().COMM_WORLD.Abort(1)
                raise
            if met_failure and not failure:  # a host update that met a failure
                state.restore()
                skip_sync = False
            state.reset()
            state.on_reset()

    return wrapper


def run(func):
    """Decorator: elastic training loop around `func(state, ...)`."""
    return run_fn(func)
