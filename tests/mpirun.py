"""Runs a snippet on N ranks under mpirun and returns what each rank returned.

    results = run(2, '''
    def main(hvd):
        return hvd.allreduce(np.ones(3), op=hvd.Sum)
    ''')

The snippet defines main(hvd) (numpy as np is imported for it); each rank's return
value (or its exception, re-raised here naming the rank) comes back as a list
indexed by rank. A job that does not finish within `timeout` is killed and fails the
test with its output, so nothing can hang the suite."""
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_PRELUDE = """
import faulthandler, os, pickle, signal, sys, traceback
import numpy as np
faulthandler.register(signal.SIGUSR1, all_threads=True)  # a hung job's stacks (dump_stacks)
_out = {out!r}
_init_kwargs = {init_kwargs!r}
import horovodlite as hvd

def _await_files(names, limit=15):
    # Waits (at most `limit` s) until every file of `names` exists in the job's folder.
    import time
    deadline = time.time() + limit
    while time.time() < deadline and not all(os.path.exists(os.path.join(_out, f)) for f in names):
        time.sleep(0.02)


def wait_for_ranks(me, ranks, limit=15):
    # Notes that rank `me` got this far, then waits until every rank of `ranks` has too.
    open(os.path.join(_out, f"reached{{me}}"), "w").close()
    _await_files([f"reached{{q}}" for q in ranks], limit)


_report_with = ()


def report_together(ranks):
    # For jobs where the first survivor to exit ends the job: the default launcher kills
    # the rest when a rank exits without finalizing a broken world (the farewell it says
    # tells the other ranks, not the launcher). After main() returns, each rank writes its
    # result and then waits (at most 15 s) until every rank of `ranks` has written its
    # own, so no survivor leaves before the others' results are on disk. (Waiting for
    # each other before writing is not enough: the last to arrive could exit while
    # another still sleeps in its poll, and the launcher would kill that one unwritten.)
    global _report_with
    _report_with = tuple(ranks)
"""

_EPILOGUE = """
def _run():
    result = None
    try:
        if _init_kwargs is not None:
            hvd.init(**_init_kwargs)
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
        result = ("ok", main(hvd))
    except BaseException as e:  # reported to the test, which re-raises it
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
        result = ("error", f"{{type(e).__name__}}: {{e}}", traceback.format_exc())
    # Written whole, then renamed: a rank the launcher kills mid-write leaves no torn file.
    path = os.path.join(_out, f"rank{{rank}}.pkl")
    with open(path + ".part", "wb") as f:
        pickle.dump(result, f)
    os.replace(path + ".part", path)
    _await_files([f"rank{{q}}.pkl" for q in _report_with])
    if _init_kwargs is not None:
        hvd.shutdown()

_run()
"""


def mpirun_path():
    cand = Path(sys.executable).parent / "mpirun"
    return str(cand) if cand.exists() else (shutil.which("mpirun") or "mpirun")


def mpi_env(extra=None, oversubscribe=True):
    env = dict(os.environ)
    env.update({
        "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "PYTHONUNBUFFERED": "1",
    })
    # libfabric's btl (ofi) probes the fabrics for 1 s in every MPI_Init here and is never
    # chosen: sm and tcp carry every test's messages. (horovodlite-run leaves it out on one
    # host too; the simulated hosts name their btls.)
    env.setdefault("OMPI_MCA_btl", "^ofi")
    if oversubscribe:  # tests must not depend on how many cores the machine has
        env["OMPI_MCA_rmaps_base_oversubscribe"] = "1"
    else:
        env.pop("OMPI_MCA_rmaps_base_oversubscribe", None)
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


class RankError(AssertionError):
    pass


def dump_stacks(marker, settle=2.0):
    """Asks every process whose command line holds `marker` (a job's script path or
    folder) for its threads' Python stacks (SIGUSR1, which the job registers with
    faulthandler), so a hung job's output says where each rank waits. Only those
    ranks' interpreters: mpirun forwards the signal (each stack twice) and the launcher
    would die of it."""
    import time
    hit = False
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
        except OSError:
            continue
        if (Path(argv[0]).name.startswith("python") and any(marker in a for a in argv)
                and "horovodlite.run" not in argv):
            try:
                os.kill(int(pid), signal.SIGUSR1)
                hit = True
            except OSError:
                pass
    if hit:
        time.sleep(settle)  # the dumps reach the job's output before it is killed


# PRRTE's words when its PMIx server's listener thread does not start (launch retries).
_LAUNCHER_FAILED = "listener thread failed to start"


def launch(np_, script_path, args=(), timeout=180, env=None, cluster=None, mpi_args=()):
    """Runs `python script args` on np_ ranks; returns CompletedProcess (killed on timeout).
    `cluster`: a started LocalCluster to run on (its hosts, its links; with
    --oversubscribe PRRTE would put every rank on its first host, so not then).
    `mpi_args`: more of mpirun's options (e.g. ("--with-ft", "ulfm"))."""
    where = cluster.mpirun_args() if cluster is not None else ["--oversubscribe"]
    cmd = [mpirun_path(), *where, *mpi_args, "--bind-to", "none", "-np", str(np_),
           sys.executable, str(script_path), *map(str, args)]
    done = _launch_once(cmd, np_, script_path, timeout, env, cluster)
    if done.returncode != 0 and _LAUNCHER_FAILED in done.stdout:
        # mpirun's own PMIx server now and then fails to start its listener (exit 213,
        # seen in a CI run) before any rank exists: nothing ran, so launching again
        # tests the same thing. Only that message retries; every other failure,
        # and a second one, goes to the test as it came.
        print(f"mpirun could not start its PMIx server; launching {script_path} again",
              file=sys.stderr)
        done = _launch_once(cmd, np_, script_path, timeout, env, cluster)
    return done


def _launch_once(cmd, np_, script_path, timeout, env, cluster):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=mpi_env(env, oversubscribe=cluster is None), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        dump_stacks(str(script_path))
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise RankError(f"mpirun -np {np_} timed out after {timeout}s (a hang):\n{out[-12000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, None)


def run(np_, code, timeout=180, env=None, init=True, init_kwargs=None, allow_failure=False,
        return_output=False, cluster=None, mpi_args=()):
    """Runs `code` (defining main(hvd)) on np_ ranks and returns per-rank results
    (and the job's combined output too, with return_output=True); on the simulated
    hosts of `cluster` (conftest.py's local_cluster fixture) when given."""
    with tempfile.TemporaryDirectory(prefix="hvdl-test-") as tmp:
        script = Path(tmp) / "job.py"
        ikw = (init_kwargs or {}) if init else None
        script.write_text(_PRELUDE.format(out=tmp, init_kwargs=ikw)
                          + textwrap.dedent(code) + _EPILOGUE.format())
        proc = launch(np_, script, timeout=timeout, env=env, cluster=cluster, mpi_args=mpi_args)
        results = []
        for r in range(np_):
            f = Path(tmp) / f"rank{r}.pkl"
            if not f.exists():
                if allow_failure:
                    results.append(None)
                    continue
                raise RankError(f"rank {r} reported nothing (exit code {proc.returncode}):\n"
                                f"{proc.stdout[-6000:]}")
            results.append(pickle.loads(f.read_bytes()))
        errors = [(r, res) for r, res in enumerate(results) if res and res[0] == "error"]
        if errors and not allow_failure:
            r, res = errors[0]
            raise RankError(f"rank {r} raised {res[1]}\n{res[2]}\n--- job output ---\n"
                            f"{proc.stdout[-4000:]}")
        if proc.returncode != 0 and not allow_failure:
            raise RankError(f"mpirun exited with {proc.returncode}:\n{proc.stdout[-6000:]}")
        results = [res[1] if res and res[0] == "ok" else res for res in results]
        return (results, proc.stdout) if return_output else results
