"""Whether a DistributedOptimizer's gradients are reduced during backward or held until
step() (the BACKWARD_OVERLAP setting).

Overlapping the reduction with backward pays where the engine's thread has a core to
itself (or the work is a GPU's or a network's). Where every core this rank may run on
already runs a training thread, each round during backward takes the core from
backward: on 2 ranks on 2 cores (smallcnn, benchmarks/torch_training.py --paired) the
engine woke ~15 times a step for rounds of a few tensors, using 4.3-7.5 ms of CPU and
155-490 context switches per ~190 ms step. Held until step(), the gradients go in one
round while the callers wait anyway: one round a step and a third of the switches (the
measurements are in the README). Across hosts the link's time is what overlap hides,
so a set that spans hosts always overlaps."""
import os

from . import basics, settings
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
    value = settings.value("BACKWARD_OVERLAP", basics._state["settings"])
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
