"""Process sets: collectives over a subset of ranks. Each set negotiates and runs on
its own background thread, so collectives on different sets never wait on each other."""
from ._loader import _core


class ProcessSet:
    """A subset of ranks, given as a list of world ranks or an mpi4py communicator."""

    def __init__(self, ranks_or_comm):
        if hasattr(ranks_or_comm, "Get_group"):
            from mpi4py import MPI

            group = ranks_or_comm.Get_group()
            world = MPI.COMM_WORLD.Get_group()
            ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), world)
        else:
            ranks = ranks_or_comm
        self.ranks = sorted(int(r) for r in ranks)
        self.process_set_id = None

    def _require(self):
        if self.process_set_id is None:
            raise ValueError(f"process set {self.ranks} has not been registered; pass it to "
                             "hvd.init(process_sets=[...]) or hvd.add_process_set()")
        return self.process_set_id

    def size(self):
        self._require()
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or -1 if it is not a member."""
        return _core.process_set_rank(self._require())

    def included(self):
        return _core.process_set_rank(self._require()) >= 0

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks))

    def __repr__(self):
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self):
        self.ranks = []
        self.process_set_id = 0

    def size(self):
        from .basics import size

        return size()

    def rank(self):
        from .basics import rank

        return rank()

    def included(self):
        return True


global_process_set = _GlobalProcessSet()
_registered = {}
_dynamic = {"on": False}


def _check_static(process_sets):
    """hvd.init(process_sets=...): None, "dynamic" or a list of ProcessSet / rank lists,
    with no two sets of the same ranks (in any order); ValueError otherwise, as Horovod."""
    if process_sets is None or process_sets == "dynamic":
        return
    if isinstance(process_sets, (str, bytes)) or not hasattr(process_sets, "__iter__"):
        raise ValueError(f"hvd.init(process_sets=...) takes a list of ProcessSet or 'dynamic', "
                         f"got {process_sets!r}")
    seen = {}
    for i, ps in enumerate(process_sets):
        ranks = tuple(ps.ranks if isinstance(ps, ProcessSet) else sorted(int(r) for r in ps))
        if ranks in seen:
            raise ValueError(f"Detected duplicate process sets in hvd.init(process_sets=...): "
                             f"entries {seen[ranks]} and {i} both have ranks {list(ranks)}")
        seen[ranks] = i


def _on_init(process_sets, settings):
    from .basics import size

    global_process_set.ranks = list(range(size()))
    _registered.clear()
    # HOROVOD(LITE)_DYNAMIC_PROCESS_SETS=1 is Horovod's way to ask for dynamic sets.
    _dynamic["on"] = process_sets == "dynamic" or bool(settings["DYNAMIC_PROCESS_SETS"][0])
    if process_sets and process_sets != "dynamic":
        for ps in process_sets:
            _register(ps)


def _on_shutdown():
    for ps in _registered.values():
        ps.process_set_id = None
    _registered.clear()


def _register(ps):
    if not isinstance(ps, ProcessSet):
        ps = ProcessSet(ps)
    ps.process_set_id = _core.add_process_set(ps.ranks)
    _registered[ps.process_set_id] = ps
    return ps


def add_process_set(process_set):
    """Collective over all ranks: every rank must call it with the same ranks, in the
    same order relative to other add/remove calls."""
    if not _dynamic["on"]:
        raise ValueError("add_process_set needs hvd.init(process_sets='dynamic') "
                         "(or HOROVODLITE_DYNAMIC_PROCESS_SETS=1 / HOROVOD_DYNAMIC_PROCESS_SETS=1 "
                         "in the environment of hvd.init())")
    return _register(process_set)


def remove_process_set(process_set):
    """Collective over the set's members and all other ranks alike."""
    if not _dynamic["on"]:
        raise ValueError("remove_process_set needs hvd.init(process_sets='dynamic') "
                         "(or HOROVODLITE_DYNAMIC_PROCESS_SETS=1)")
    if process_set.process_set_id in (None, 0):
        return False
    _core.remove_process_set(process_set.process_set_id)
    _registered.pop(process_set.process_set_id, None)
    process_set.process_set_id = None
    return True


def _set_id(process_set):
    if process_set is None:
        return 0
    return process_set._require()
