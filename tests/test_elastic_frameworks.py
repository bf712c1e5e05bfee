"""Elastic Keras (model.fit with KerasState and the elastic callbacks) and JAX/optax
(ObjectState over pytrees): kill -9 one of 3 ranks mid-training; the two survivors
re-form the world, go on from the last commit and finish with identical parameters."""
import glob
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from mpirun import mpi_env

ROOT = Path(__file__).resolve().parent.parent
JOB = str(Path(__file__).resolve().parent / "elastic_frameworks_job.py")
TIMEOUT = 300


def run_job(tmp_path, mode, kill):
    out = tmp_path / mode
    out.mkdir()
    env = mpi_env({"KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "2"})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "horovodlite.run", "--elastic", "-np", "3", sys.executable, JOB,
           mode, str(out), "--kill", kill]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        pytest.fail(f"elastic {mode} job hung for {TIMEOUT}s:\n{text[-5000:]}")
    logs = [pickle.loads(Path(f).read_bytes()) for f in sorted(glob.glob(str(out / "*.pkl")))]
    return proc.returncode, text, logs


def check_survivors(rc, text, logs):
    assert rc == 0, text[-5000:]
    assert len(logs) == 2, text[-5000:]
    for log in logs:
        assert not log["errors"], log["errors"]
        assert log["resets"] == [2]
        assert log["entries"][0][-1] == 3 and log["entries"][1][-1] == 2
    assert sorted(log["final"][0] for log in logs) == [0, 1]
    assert len({log["final"][3] for log in logs}) == 1, "survivors differ"


def test_keras_fit_survives_a_kill(tmp_path):
    pytest.importorskip("tensorflow")
    rc, text, logs = run_job(tmp_path, "keras", "1:10")
    check_survivors(rc, text, logs)
    for log in logs:
        assert log["entries"][1][:2] == (0, 8)  # resumed from the commit after batch 8
        assert log["final"][2] == 4  # all epochs done


def test_jax_optax_survives_killing_rank_0(tmp_path):
    pytest.importorskip("jax")
    pytest.importorskip("optax")
    rc, text, logs = run_job(tmp_path, "jax", "0:12")
    check_survivors(rc, text, logs)
    for log in logs:
        assert log["entries"][1][0] == 10 and log["final"][2] == 30
