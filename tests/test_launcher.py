"""horovodlite-run end to end: the command it builds, exit codes, environment forwarding,
a failing rank ending the job with its message, --check-build."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from horovodlite.run import launcher

ROOT = Path(__file__).resolve().parent.parent


def launch(args, timeout=150, env=None):
    """Runs `python -m horovodlite.run ARGS`; a hang fails the test instead of the suite."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    e["PYTHONUNBUFFERED"] = "1"
    e.update(env or {})
    proc = subprocess.Popen([sys.executable, "-m", "horovodlite.run", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=e, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"horovodlite-run {' '.join(args)} hung for {timeout}s:\n{out[-4000:]}")
    return proc.returncode, out


def script(tmp_path, body):
    p = tmp_path / "job.py"
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_command_line_has_what_users_forget(tmp_path, monkeypatch):
    monkeypatch.setenv("HOROVOD_CACHE_CAPACITY", "7")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/nonexistent")
    args = launcher.parse_args(["-np", "64", "--fusion-threshold-mb", "2.5", "--cycle-time-ms", "3",
                                "--timeline-filename", "tl.json", "--autotune", "--log-level", "debug",
                                "train.py", "--lr", "0.1"])
    env = launcher.job_env(args)
    cmd = launcher.build_command(args, env)
    assert cmd[0] == launcher.find_mpirun() and os.path.basename(cmd[0]) == "mpirun"
    assert cmd[1:3] == ["-n", "64"]
    assert cmd[cmd.index("--bind-to") + 1] == "none"
    assert "--oversubscribe" in cmd  # 64 ranks on this host exceed its cores
    # ... and then ranks blocked in MPI yield their core (issue 19)
    assert cmd[cmd.index("mpi_yield_when_idle") - 1:][:3] == ["--mca", "mpi_yield_when_idle", "1"]
    # OpenMPI 5 rejects single-dash long options: only -n and -x may have one dash.
    flags = [a for a in cmd[1:cmd.index("train.py") - 1] if a.startswith("-")]
    assert all(a.startswith("--") or a in ("-n", "-x") for a in flags), flags
    forwarded = {cmd[i + 1] for i, a in enumerate(cmd) if a == "-x"}
    assert {"HOROVODLITE_FUSION_THRESHOLD", "HOROVODLITE_CYCLE_TIME", "HOROVODLITE_TIMELINE",
            "HOROVODLITE_AUTOTUNE", "HOROVODLITE_LOG_LEVEL", "HOROVOD_CACHE_CAPACITY", "PATH",
            "LD_LIBRARY_PATH"} <= forwarded
    assert env["HOROVODLITE_FUSION_THRESHOLD"] == str(int(2.5 * 1024 * 1024))
    assert env["HOROVODLITE_TIMELINE"] == str(Path("tl.json").absolute())
    # `train.py` that exists is run with this interpreter; arguments after it are the script's.
    (tmp_path / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    cmd = launcher.build_command(launcher.parse_args(["-np", "1", "train.py", "-np", "3"]), env)
    assert cmd[-4:] == [sys.executable, "train.py", "-np", "3"]
    assert "--oversubscribe" not in cmd and "mpi_yield_when_idle" not in cmd
    if os.geteuid() == 0:
        assert env["OMPI_ALLOW_RUN_AS_ROOT"] == env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] == "1"
    hosts = launcher.build_command(launcher.parse_args(["-H", "a:2,b:3", "python", "x.py"]), env)
    assert hosts[1:3] == ["-n", "5"] and hosts[hosts.index("--host") + 1] == "a:2,b:3"
    with pytest.raises(SystemExit):
        launcher.parse_args(["python", "x.py"])  # -np is needed without hosts


def test_binds_one_rank_per_core_on_one_host(monkeypatch):
    """One rank per core on one host: each rank bound to its core (issue 19: trained
    faster than unbound); fewer ranks than cores, other hosts, or oversubscription: not."""
    monkeypatch.setattr(launcher, "_cores", lambda: 4)
    env = {}

    def bind(argv):
        cmd = launcher.build_command(launcher.parse_args(argv + ["python", "x.py"]), env)
        return cmd[cmd.index("--bind-to") + 1]

    assert bind(["-np", "4"]) == "core"
    assert bind(["-np", "2"]) == "none"
    assert bind(["-np", "4", "--oversubscribe"]) == "none"
    assert bind(["-np", "4", "-H", "a:2,b:2"]) == "none"


def test_leaves_libfabric_out_on_one_host():
    """One host: `--mca btl ^ofi` (its probe cost every MPI_Init 1 s here, and sm carries
    the messages); not when the user names btls, nor across hosts."""
    def mca_btl(argv, env=None):
        cmd = launcher.build_command(launcher.parse_args(argv + ["python", "x.py"]), env or {})
        i = [j for j in range(len(cmd) - 1) if cmd[j] == "--mca" and cmd[j + 1] == "btl"]
        return cmd[i[0] + 2] if i else None

    assert mca_btl(["-np", "2"]) == "^ofi"
    assert mca_btl(["-np", "2"], {"OMPI_MCA_btl": "self,tcp"}) is None
    assert mca_btl(["-np", "2", "--mpi-args", "--mca btl self,tcp"]) == "self,tcp"
    assert mca_btl(["-np", "4", "-H", "a:2,b:2"]) is None


def test_env_forwarding_and_exit_code(tmp_path):
    job = script(tmp_path, """
        import os, sys
        import numpy as np
        import horovodlite as hvd
        hvd.init()
        from horovodlite._loader import _core
        t = _core.tunables()
        out = hvd.allreduce(np.full(3, hvd.rank() + 1.0), op=hvd.Sum)
        print(f"rank={hvd.rank()} size={hvd.size()} fusion={t['fusion_threshold']} "
              f"cycle={t['cycle_time_ms']} var={os.environ.get('HVDL_LAUNCHER_TEST')} "
              f"sum={out[0]:g}", flush=True)
        rank = hvd.rank()
        hvd.shutdown()
        sys.exit(7 if rank == 1 and os.environ.get("FAIL_WITH_7") else 0)
        """)
    n = 3
    rc, out = launch(["-np", str(n), "--verbose", "--fusion-threshold-mb", "2", "--cycle-time-ms", "0.5",
                      "--env", "HVDL_LAUNCHER_TEST=forwarded", "python", job])
    assert rc == 0, out
    cmdline = next(line for line in out.splitlines() if line.startswith("horovodlite-run: "))
    assert "--bind-to none" in cmdline and "-x HOROVODLITE_FUSION_THRESHOLD" in cmdline
    assert ("--oversubscribe" in cmdline) == (n > launcher._cores())
    for r in range(n):
        assert (f"rank={r} size={n} fusion={2 << 20} cycle=0.5 var=forwarded sum={n * (n + 1) // 2}"
                in out), out
    rc, out = launch(["-np", "2", "--env", "FAIL_WITH_7=1", "python", job])
    assert rc == 7, out
    assert "exit code 7" in out


def test_failing_rank_ends_the_job_with_its_message(tmp_path):
    job = script(tmp_path, """
        import numpy as np
        import horovodlite as hvd
        hvd.init()
        if hvd.rank() == 1:
            raise ValueError("rank 1 exploded on purpose")
        hvd.allreduce(np.ones(4, np.float32), name="waits_for_rank_1")  # rank 1 never sends it
        print("rank 0 went on", flush=True)
        """)
    rc, out = launch(["-np", "2", "python", job], timeout=120)
    assert rc != 0, out
    assert "ValueError: rank 1 exploded on purpose" in out
    assert "rank 0 went on" not in out


def test_check_build():
    rc, out = launch(["--check-build"], timeout=60)
    assert rc == 0, out
    assert "horovodlite v" in out
    assert "[X] MPI: mpirun (Open MPI)" in out
    assert "[X] CPU ring collectives" in out
    assert ("[X] CUDA kernels" in out) == __import__("horovodlite").cuda_built()
    for name in ("PyTorch", "TensorFlow", "JAX"):
        assert name in out


def test_console_script_is_installed():
    exe = Path(sys.executable).parent / "horovodlite-run"
    if not exe.exists() and not shutil.which("horovodlite-run"):
        pytest.skip("horovodlite is not pip-installed in this environment (no console script)")
    out = subprocess.run([str(exe) if exe.exists() else "horovodlite-run", "--help"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and "--timeline-filename" in out.stdout
