"""The collective algorithms alone (csrc/collectives), over an in-process transport
with ranks as threads: N = 1..8, empty and uneven blocks, many pipeline segments,
every broadcast root and algorithm; and the engine's output pool. Compiled here with
the system C++ compiler."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_collective_algorithms_in_process(tmp_path):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler found")
    src = ["tests/cpp/test_collectives.cc"] + [
        f"csrc/collectives/{f}.cc" for f in ("ring", "ring_allreduce", "broadcast", "alltoall", "cpu_reducer")
    ] + ["csrc/engine/output_pool.cc"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc/reduce").glob("*.cc"))
    exe = tmp_path / "test_collectives"
    subprocess.run([cxx, "-O1", "-std=c++17", "-pthread", "-I", "csrc", *src, "-o", str(exe)],
                   cwd=ROOT, check=True, timeout=300)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-4000:]
