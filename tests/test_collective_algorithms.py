"""The collective algorithms alone (csrc/collectives), over an in-process transport
with ranks as threads: N = 1..8, empty and uneven blocks, many pipeline segments,
every broadcast root and algorithm; the engine's output pool; and the engine's
negotiation round on 2 ranks. Compiled here with the system C++ compiler."""
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _build_and_run(tmp_path, src):
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler found")
    exe = tmp_path / Path(src[0]).stem
    subprocess.run([cxx, "-O1", "-std=c++17", "-pthread", "-I", "csrc", *src, "-o", str(exe)],
                   cwd=ROOT, check=True, timeout=300)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-4000:]


def test_collective_algorithms_in_process(tmp_path):
    _build_and_run(tmp_path, ["tests/cpp/test_collectives.cc"] + [
        f"csrc/collectives/{f}.cc" for f in ("ring", "ring_allreduce", "broadcast", "alltoall", "cpu_reducer")
    ] + ["csrc/engine/output_pool.cc", "csrc/transport/transport.cc"] + sorted(str(p.relative_to(ROOT)) for p in (ROOT / "csrc/reduce").glob("*.cc")))


def test_negotiation_round_holds_back_a_cut_batch(tmp_path):
    """A round runs nothing while a rank is mid-burst and some cached tensors are ready
    on only some ranks, never twice in a row, and otherwise runs what is ready."""
    _build_and_run(tmp_path, ["tests/cpp/test_controller.cc"] + [
        f"csrc/engine/{f}.cc" for f in ("controller", "coordinator", "response_cache", "message",
                                        "timeline", "collective_op")
    ] + ["csrc/common/logging.cc", "csrc/transport/transport.cc"])
