"""Whether a DistributedOptimizer's gradients are reduced during backward or held until
step() (the BACKWARD_OVERLAP setting).

Overlapping the reduction with backward pays where the engine's thread has a core to
itself (or the work is a GPU's or a network's). Where every core this rank may run on
already runs a training thread, each round during backward takes the core from
backward: on 2 ranks on 2 cores (smallcnn, benchmarks/torch_training.py --paired) the
engine ran 14-18 rounds a step, using 3.7-8.3 ms of CPU and 97-579 context switches per
~190 ms step. Held until step(), the gradients go in one round while the callers wait
anyway: 1.4 rounds a step, 3.0-4.6 ms, 76-182 switches (the README has the table).
Across hosts the link's time is what overlap hides, so a set that spans hosts always
overlaps."""
import os

from . import settings
from ._loader import _core


def engine_has_a_core(training_threads, ranks_here):
    """Whether this rank's engine thread can run beside `training_threads` threads of
    training without taking a core from them: this rank may run on more cores than its
    own training threads, and the host has more cores than all `ranks_here` ranks'."""
    mine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return mine > training_threads and (os.cpu_count() or 1) > ranks_here * training_threads


def choice():
    """BACKWARD_OVERLAP's value: "1", "0" or "auto"; ValueError naming the variable for
    anything else (read when the optimizer is made, so a typo fails there)."""
    value = settings.at_init("BACKWARD_OVERLAP")
    if value in (None, "auto", "1", "0"):
        return value or "auto"
    raise ValueError(f"horovodlite: HOROVODLITE_BACKWARD_OVERLAP={value!r}; use 1, 0 or auto")


def holds_gradients(overlap, process_set_id, set_size, training_threads):
    """True: hold this set's host gradients until step(); `overlap` is choice()'s."""
    if overlap != "auto":
        return overlap == "0"
    if set_size < 2 or _core.engine_report(process_set_id).get("one_host") != "1":
        return False
    return not engine_has_a_core(training_threads, set_size)
