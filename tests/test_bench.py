"""The benchmark report runs end to end on 2 ranks: every implementation that is
installed gets rows, every row is correct (#wrong 0), and the plots are written."""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mpirun import mpi_env, mpirun_path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_report_quick():
    pytest.importorskip("mpi4py")
    with tempfile.TemporaryDirectory(prefix="hvdl-bench-") as tmp:
        out = Path(tmp) / "report"
        cmd = [mpirun_path(), "--oversubscribe", "--bind-to", "none", "-np", "2", sys.executable,
               str(ROOT / "benchmarks" / "run_all.py"), "--quick", "--max-bytes", "16K",
               "--no-resnet", "-o", str(out)]
        proc = subprocess.run(cmd, env=mpi_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-4000:]
        res = json.loads((out / "results.json").read_text())
        rows = res["rows"]
        impls = {r["impl"] for r in rows}
        assert {"horovodlite shm", "horovodlite ring", "MPI (mpi4py)", "numpy ring (Sendrecv)",
                "memcpy (all ranks at once)"} <= impls, impls
        try:
            import torch  # noqa: F401
            assert "torch gloo" in impls
        except ImportError:
            assert any(s[0] == "torch gloo" for s in res["skipped"])
        assert all(r["wrong"] == 0 for r in rows), [r for r in rows if r["wrong"]]
        colls = {r["coll"] for r in rows if r["impl"] == "horovodlite"}
        import horovodlite as hvd
        assert colls == {c for c in ("allgather", "broadcast", "reducescatter", "alltoall")
                         if hasattr(hvd, c)}
        report = (out / "report.md").read_text()
        assert "| size | implementation | time | algbw GB/s | busbw GB/s | #wrong |" in report
        assert "## Summary: allreduce of 16 KiB" in report
        try:
            import matplotlib  # noqa: F401
            assert (out / "allreduce_busbw.png").stat().st_size > 1000
            assert (out / "allreduce_latency.png").exists()
        except ImportError:
            assert "matplotlib is not installed" in report


TINY = ["--repeats", "1", "--num-iters", "1", "--num-batches-per-iter", "1",
        "--num-warmup-batches", "1", "--batch-size", "4", "--image-size", "32"]


@pytest.mark.parametrize("script, args, needs", [
    ("torch_training.py", ["--impls", "bound,idle,lockstep,horovodlite"], "torch"),
    ("framework_training.py", ["--framework", "jax"], "jax"),
    ("framework_training.py", ["--framework", "keras"], "tensorflow"),
], ids=["torch", "jax", "keras"])
def test_training_benchmarks_run_and_read_the_engine(script, args, needs, tmp_path):
    """The training benchmarks run end to end (tiny: one repeat, one batch) and print
    horovodlite's row with the engine's figures: framework_training.py once called a
    helper of torch_training.py that had been renamed, and no test noticed."""
    pytest.importorskip(needs)
    # Each way trains in launches of its own, and XLA compiled the same JAX step in each:
    # with a cache the later launches take it from there (the test 71 s -> 41 s here).
    xla_cache = {"JAX_COMPILATION_CACHE_DIR": str(tmp_path / "xla"),
                 "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                 "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"} if needs == "jax" else {}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args, *TINY],
                          env=mpi_env(xla_cache), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = re.sub(r"\([^)]*\)", "", line).split()  # the (ranges) out
        if cells and cells[0] in ("bound", "idle", "lockstep", "horovodlite") and len(cells) >= 11:
            rows[cells[0]] = cells
    asked = args[args.index("--impls") + 1].split(",") if "--impls" in args else []
    assert set(rows) == {"bound", "lockstep", "horovodlite", *asked}, proc.stdout[-3000:]
    if "idle" in rows:  # trained beside an idle engine
        assert float(rows["idle"][2]) > 0
    assert float(rows["bound"][2]) == 1.0  # the bound's fraction of itself
    assert float(rows["lockstep"][2]) > 0  # its fraction: it trained ...
    barriers = re.search(r"lockstep .* barriers_per_step (\S+)", proc.stdout)
    assert barriers and float(barriers.group(1)) == 1.0, proc.stdout[-3000:]  # ... in lockstep
    assert float(rows["horovodlite"][1]) > 0  # img/s
    assert float(rows["horovodlite"][6]) > 0, rows["horovodlite"]  # rounds/step, from the engine


def _step_phases(args, overlap):
    """benchmarks/step_phases.py on 2 ranks, tiny; its table's rows as lists of cells."""
    cmd = [mpirun_path(), "--oversubscribe", "--bind-to", "none", "-np", "2", sys.executable,
           str(ROOT / "benchmarks" / "step_phases.py"), "--warmup", "1", "--batch-size", "4",
           "--image-size", "32", *args]
    proc = subprocess.run(cmd, env=mpi_env({"HOROVODLITE_BACKWARD_OVERLAP": overlap}),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in proc.stdout.splitlines()
            if re.match(r"^\| [01] \|", line)]


def test_step_phases_times_the_hooks_and_runs_against_its_twin():
    """benchmarks/step_phases.py times every gradient's hook, and held gradients (=0)
    are submitted at the end of backward. --against-twin (here with gradients reduced
    during backward, =1) trains horovodlite, lockstep and the twin alone in the same
    processes and prints each way's phases per rank."""
    pytest.importorskip("torch")
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from pytorch_synthetic_benchmark import MODELS
    finally:
        sys.path.pop(0)
    params = sum(p.requires_grad for p in MODELS["smallcnn"]().parameters())
    rows = _step_phases(["--steps", "2"], "0")
    assert len(rows) == 2, rows
    for cells in rows:
        hooks, end_of_backward, per_step = float(cells[3]), float(cells[4]), float(cells[8])
        assert per_step == params and hooks > 0 and end_of_backward > 0, cells

    rows = _step_phases(["--against-twin", "--steps", "3", "--block", "1"], "1")
    assert sorted((r[0], r[1]) for r in rows) == sorted(
        (rank, way) for rank in "01" for way in ("horovodlite", "lockstep", "no exchange")), rows
    for r in rows:
        forward, backward, step, total = map(float, r[2:6])
        assert min(forward, backward, step) > 0 and abs(forward + backward + step - total) < 0.02
        if r[1] == "no exchange":  # its own measure
            assert float(r[6]) == 1.0, r
