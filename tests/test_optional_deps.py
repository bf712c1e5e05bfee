"""Commands whose optional dependency is missing say in one line how to get it (the
extra of horovodlite that brings it), instead of ending in a traceback."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs a module's main() with `hidden` made unimportable (None in sys.modules).
_HIDING = """
import sys
for m in {hidden!r}:
    sys.modules[m] = None
import runpy
sys.argv = {argv!r}
runpy.run_module({module!r}, run_name="__main__")
"""


def _run_without(hidden, module, args):
    code = _HIDING.format(hidden=hidden, argv=[module] + args, module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))


def _trace(tmp_path):
    # A real timeline of one rank: a few allreduces.
    p = tmp_path / "t.json"
    code = ("import numpy as np, horovodlite as hvd\n"
            "hvd.init()\n"
            "for i in range(3): hvd.allreduce(np.ones(10), name=f'x{i}')\n"
            "hvd.shutdown()\n")
    env = dict(os.environ, HOROVODLITE_TIMELINE=str(p), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0 and p.exists(), proc.stderr
    return p


def test_timeline_without_matplotlib_says_how_to_get_it(tmp_path):
    trace = _trace(tmp_path)
    proc = _run_without(["matplotlib", "matplotlib.pyplot"], "horovodlite.timeline", [str(trace)])
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "matplotlib" in lines[0] and "horovodlite[plot]" in lines[0], lines[0]
    # The text summary needs nothing optional.
    proc = _run_without(["matplotlib"], "horovodlite.timeline", [str(trace), "--summary"])
    assert proc.returncode == 0, proc.stderr


def test_bench_report_without_matplotlib_names_the_extra(tmp_path):
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from horovodlite.bench import report\n"
            f"made, note = report._plots([], [], {str(tmp_path)!r})\n"
            "print(note)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr
    assert "horovodlite[plot]" in proc.stdout, proc.stdout
