"""The whole benchmark report in one command:

    python benchmarks/run_all.py [-np 2] [-o bench_report] [options of python -m horovodlite.bench]

Started outside MPI it launches itself with mpirun; under mpirun it runs the report
(horovodlite.bench) directly, so `mpirun -np 4 python benchmarks/run_all.py` works too."""
import os
import shutil
import subprocess
import sys


def main():
    argv = sys.argv[1:]
    if "OMPI_COMM_WORLD_SIZE" in os.environ or "PMI_SIZE" in os.environ:
        from horovodlite.bench.__main__ import main as bench

        return bench(argv)
    np_ = "2"
    if "-np" in argv:
        i = argv.index("-np")
        np_ = argv[i + 1]
        del argv[i:i + 2]
    mpirun = os.path.join(os.path.dirname(sys.executable), "mpirun")
    mpirun = mpirun if os.path.exists(mpirun) else (shutil.which("mpirun") or "mpirun")
    cmd = [mpirun, "-np", np_]
    if os.geteuid() == 0:
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
        os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    if int(np_) > (os.cpu_count() or 1):
        cmd.append("--oversubscribe")
    cmd += [sys.executable, "-m", "horovodlite.bench", *argv]
    print(" ".join(cmd), flush=True)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main() or 0)
