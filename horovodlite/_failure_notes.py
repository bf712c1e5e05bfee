"""Rank side of horovodlite-run's first-failure report: when the launcher set
HOROVODLITE_FAILURE_REPORT_DIR, an exception that ends this rank's script is noted
there (with the time, rank and host), so the launcher can say which rank failed first
and why. The engine notes peers it declared dead in the same folder."""
import os
import socket
import sys
import time

_installed = False

# OpenMPI's shared-memory segments (btl/sm, and vader in older releases): a rank killed
# outright leaves its own in /dev/shm. Which ones this rank maps is noted for the
# launcher, which removes those of the job that still exist after it ended.
OPENMPI_SEGMENT_PREFIXES = ("sm_segment.", "vader")


def _note_segments(folder, rank):
    try:
        with open("/proc/self/maps") as f:
            paths = {ln.split()[-1] for ln in f if len(ln.split()) >= 6}
    except OSError:
        return
    mine = sorted(p for p in paths if os.path.basename(p).startswith(OPENMPI_SEGMENT_PREFIXES))
    if not mine:
        return
    try:
        with open(os.path.join(folder, f"shm.rank{rank}"), "w") as f:
            f.write("\n".join(mine) + "\n")  # one word a line: not a note for first_failure()
    except OSError:
        pass


def install(rank):
    global _installed
    from . import settings

    folder = settings.value("FAILURE_REPORT_DIR")
    if _installed or not folder or not os.path.isdir(folder):
        return
    _installed = True
    _note_segments(folder, rank)
    previous = sys.excepthook

    def note(kind, exc_type, exc):
        from .basics import HorovodInternalError

        # A HorovodInternalError from the core is a consequence of another rank's
        # failure; our own local argument errors (marked) and anything else start one.
        local = getattr(exc, "_hvdl_local", False)
        origin = local or not isinstance(exc, HorovodInternalError)
        first = (str(exc).strip().splitlines() or [""])[0][:500]
        line = (f"{'raised' if origin else 'consequence'} {time.time():.6f} {rank} "
                f"{socket.gethostname()} {exc_type.__name__}: {first}\n")
        try:
            with open(os.path.join(folder, f"raised.rank{rank}"), "a") as f:
                f.write(line)
        except OSError:
            pass

    def hook(exc_type, exc, tb):
        if not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            note("raised", exc_type, exc)
        previous(exc_type, exc, tb)

    sys.excepthook = hook
