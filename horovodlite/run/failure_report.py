"""Which rank failed first, and why: the launcher gives the ranks a folder
(HOROVODLITE_FAILURE_REPORT_DIR) where each notes the exception that ended its script
(horovodlite/_failure_notes.py) and the engine notes every peer it declared dead
(rank, host, reason: its process exited, no heartbeat, MPI's error). After a failed
job the earliest note is the first failure; a rank killed outright leaves no note of
its own, but its peers' notes name it."""
import shutil
import tempfile
import time
from pathlib import Path

ENV = "HOROVODLITE_FAILURE_REPORT_DIR"


def make_folder():
    return tempfile.mkdtemp(prefix="horovodlite-run-failures-")


def make_shm_folder():
    """A private folder in /dev/shm (None where there is none)."""
    try:
        return tempfile.mkdtemp(prefix="horovodlite-run-", dir="/dev/shm")
    except OSError:
        return None


def _notes(folder):
    out = []
    for f in sorted(Path(folder).glob("*.rank*")):
        noticed_by = f.name.rsplit(".rank", 1)[-1]
        try:
            lines = f.read_text(errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.split(" ", 4)
            if len(parts) < 5:
                continue
            kind, when, rank, host, why = parts
            try:
                out.append((float(when), kind, int(rank), host, why, noticed_by))
            except ValueError:
                continue
    return out


def first_failure(folder):
    """One line naming the rank and host that failed first and why, or None."""
    notes = [n for n in _notes(folder) if n[1] in ("raised", "detected")]
    if not notes:
        return None
    when, kind, rank, host, why, noticed_by = min(notes)
    who = f"rank {rank} (host {host})" if rank >= 0 else "a rank MPI could not name"
    if kind == "raised":
        return f"{who} failed first: {why}"
    return f"{who} failed first: {why} (noticed by rank {noticed_by})"


def remove_job_segments(folder):
    """Removes the OpenMPI shared-memory segments the job's ranks noted (shm.rank*:
    what each mapped at init) that are still there now that the job has ended: a rank
    killed outright never unlinks its own. Only those files, and only where no live
    process maps them still (a path reused by a later job stays). Returns the paths
    removed."""
    noted = set()
    for f in Path(folder).glob("shm.rank*"):
        try:
            noted.update(ln.strip() for ln in f.read_text().splitlines() if ln.strip())
        except OSError:
            continue
    noted = {p for p in noted if Path(p).name.startswith(("sm_segment.", "vader"))
             and Path(p).is_file()}
    if not noted:
        return []
    mapped = set()
    for maps in Path("/proc").glob("[0-9]*/maps"):
        try:
            with open(maps) as f:
                mapped.update(ln.split()[-1] for ln in f if ln.rstrip().endswith(tuple(noted)))
        except OSError:
            continue
    removed = []
    for p in sorted(noted - mapped):
        try:
            Path(p).unlink()
            removed.append(p)
        except OSError:
            pass
    return removed


def remove_folder(folder):
    # A rank still being torn down as mpirun returns may write a last file: retry.
    for _ in range(50):
        shutil.rmtree(folder, ignore_errors=True)
        if not Path(folder).exists():
            return
        time.sleep(0.1)
