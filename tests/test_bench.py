"""The benchmark report runs end to end on 2 ranks: every implementation that is
installed gets rows, every row is correct (#wrong 0), and the plots are written."""
import json
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
