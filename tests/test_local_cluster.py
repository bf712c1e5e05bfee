"""`horovodlite-run --local-cluster`: a job on simulated hosts end to end, and that a
malformed spec, a rate tc refuses, a delay the kernel cannot add, a missing root and
a failing or terminated job all leave nothing behind (no namespace, link or process),
with a one-line error for the bad input."""
import os
import signal
import subprocess
import sys
import time

import pytest

from horovodlite.run import local_cluster as lc
from test_launcher import launch, script

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="simulated hosts need root")


def _gone(names, within=10):
    deadline = time.monotonic() + within
    while set(names) & set(lc.leftovers()) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not set(names) & set(lc.leftovers())


def _ours():
    return set(lc.leftovers())


JOB = """
import socket, sys
import numpy as np
import horovodlite as hvd
hvd.init()
x = hvd.allreduce(np.full(3, hvd.rank(), np.int64), op=hvd.Sum)
print("rank", hvd.rank(), "on", socket.gethostname(), "local", hvd.local_rank(), "sum", int(x[0]), flush=True)
hvd.shutdown()
"""


@needs_root
def test_job_runs_on_simulated_hosts_and_cleans_up(tmp_path):
    before = _ours()
    rc, out = launch(["--local-cluster", "2x2", "--link-rate", "500mbit", sys.executable,
                      script(tmp_path, JOB)], timeout=300)
    assert rc == 0, out
    lines = sorted(l for l in out.splitlines() if l.startswith("rank "))
    assert len(lines) == 4, out
    hosts = {l.split()[3] for l in lines}
    assert len(hosts) == 2 and all(h.startswith("hvdl") for h in hosts), lines
    assert all(l.endswith("sum 6") for l in lines), lines
    assert "500mbit each way" in out
    assert _gone(_ours() - before)


@pytest.mark.parametrize("args, words", [
    (["--local-cluster", "2by2"], "expected HOSTSxSLOTS"),
    (["--local-cluster", "0x1"], "need 1..64 hosts"),
    (["--local-cluster", "2x1", "-np", "3"], "exceeds the 2 slots"),
    (["--local-cluster", "2x1", "--link-rate", "fast"], "--link-rate 'fast'"),
    (["-H", "a:0"], "slots must be a positive integer"),
    (["-H", "a,:2"], "empty host name"),
])
def test_bad_input_one_line(args, words):
    before = _ours()
    rc, out = launch(args + [sys.executable, "-c", "pass"], timeout=60)
    assert rc != 0 and words in out, out
    assert _ours() <= before


def test_bad_hostfile_names_the_line(tmp_path):
    hf = tmp_path / "hosts"
    hf.write_text("# two hosts\nnode1 slots=2\nnode2 slots=two\n")
    rc, out = launch(["--hostfile", str(hf), sys.executable, "-c", "pass"], timeout=60)
    assert rc != 0 and f"--hostfile {hf} line 3" in out, out


@needs_root
@pytest.mark.parametrize("args, words", [
    (["--link-rate", "900tbit"], "--link-rate 900tbit"),  # tc refuses the bucket it needs
    (["--link-delay", "0.2ms"], "--link-delay 0.2ms"),
])
def test_refused_link_leaves_nothing(args, words):
    if "--link-delay" in args and lc.netem_available():
        pytest.skip("this kernel has netem: the delay is applied")
    before = _ours()
    rc, out = launch(["--local-cluster", "2x1", *args, sys.executable, "-c", "pass"], timeout=60)
    msgs = [l for l in out.splitlines() if l.strip()]
    assert rc == 2 and len(msgs) == 1 and words in msgs[0], out
    assert _ours() <= before


def test_not_root_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(lc.ClusterError, match="needs root"):
        lc.LocalCluster(2, 1).start()


@needs_root
@pytest.mark.parametrize("how", ["failing rank", "SIGTERM", "SIGINT"])
def test_cleanup_on_failure_and_signals(tmp_path, how):
    body = """
import sys, time
import horovodlite as hvd
hvd.init()
print("started", flush=True)
if %r and hvd.rank() == 1:
    sys.exit(3)
time.sleep(%d)
""" % (how == "failing rank", 2 if how == "failing rank" else 120)
    before = _ours()
    e = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "horovodlite.run", "--local-cluster", "2x1",
                             sys.executable, script(tmp_path, body)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=e, start_new_session=True)
    try:
        if how != "failing rank":
            deadline = time.monotonic() + 120
            while len(_ours() - before) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(3)  # the ranks are up
            proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"launcher did not end:\n{out[-3000:]}")
    assert proc.returncode != 0, out
    assert _gone(_ours() - before), out
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout
    assert not left.strip(), f"processes left: {left}"


@needs_root
def test_stale_cluster_swept():
    """A cluster whose owner was SIGKILLed is removed by the next one that starts."""
    code = ("from horovodlite.run.local_cluster import LocalCluster\n"
            "c = LocalCluster(2, 1); c.start(); print(' '.join(c.names), flush=True)\n"
            "import time; time.sleep(300)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    names = p.stdout.readline().split()
    p.kill()
    p.wait()
    assert names and set(names) <= _ours()
    with lc.LocalCluster(1, 1):
        pass
    assert _gone(names)


@needs_root
def test_cluster_benchmark_report(tmp_path):
    """`python -m horovodlite.bench --cluster` end to end on small sizes: every
    implementation measured and right, the model beside it, plots written."""
    before = _ours()
    out = tmp_path / "rep"
    e = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.run([sys.executable, "-m", "horovodlite.bench", "--cluster", "2x1",
                        "--link-rate", "1gbit", "--min-bytes", "4K", "--max-bytes", "64K",
                        "--rounds", "1", "--budget", "0.02", "-o", str(out)],
                       capture_output=True, text=True, timeout=400, env=e)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    import json

    res = json.loads((out / "results.json").read_text())["results"]
    names = {r["impl"] for r in res["rows"]}
    assert {"MPI_Allreduce", "binomial tree", "parameter server (1 server)"} <= names
    assert any(n.startswith("horovodlite ring") for n in names)
    assert all(r["wrong"] == 0 for r in res["rows"]), res["rows"]
    # The machine's cores busy while TCP streamed: some work, no more than it has (the
    # clock ticks' granularity allowed for).
    assert 0 < res["tcp_cores_busy"] <= 1.1 * os.cpu_count() + 0.05, res["tcp_cores_busy"]
    text = (out / "report.md").read_text()
    assert "model ms" in text and "hvdl" in text
    assert f"of {os.cpu_count()} busy meanwhile" in text
    assert all((out / f).exists() for f in ("time.png", "busbw.png", "traffic.png"))
    assert _gone(_ours() - before)
