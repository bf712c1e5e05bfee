"""Horovod 0.28's public names and the parameters its users pass, written from its API
documentation (horovod.torch / horovod.common), and a checker that walks a module of
ours against them. Used by test_horovod_names_*.py; other frontends can add their lists.

A spec is {name: params}; params is None for a non-callable (a constant, a module, an
object) or a list of (parameter name, default) in Horovod's order, with REQUIRED for a
parameter without default. A default written "@x.y" is the object our module has at
x.y (global_process_set, Compression.none, Average, ...), compared by value.

Compatible means a call that works under Horovod works here: every Horovod parameter
exists under the same name, positional ones at the same position, a Horovod default
exists here with the same value, and whatever we add has a default."""
import inspect

REQUIRED = inspect.Parameter.empty

_PS = ("process_set", "@global_process_set")

# horovod.common.basics, exported by every frontend
BASICS = {
    "init": [("comm", None), ("process_sets", None)],
    "shutdown": [], "is_initialized": [],
    "start_timeline": [("file_path", REQUIRED), ("mark_cycles", False)],
    "stop_timeline": [],
    "size": [], "local_size": [], "cross_size": [],
    "rank": [], "local_rank": [], "cross_rank": [], "is_homogeneous": [],
    "mpi_threads_supported": [], "mpi_enabled": [], "mpi_built": [],
    "gloo_enabled": [], "gloo_built": [], "nccl_built": [], "ddl_built": [],
    "ccl_built": [], "cuda_built": [], "rocm_built": [],
    "ProcessSet": [("ranks_or_comm", REQUIRED)],
    "global_process_set": None,
    "add_process_set": [("process_set", REQUIRED)],
    "remove_process_set": [("process_set", REQUIRED)],
    "Average": None, "Sum": None, "Adasum": None, "Min": None, "Max": None, "Product": None,
    "HorovodInternalError": None,
}

_REDUCE_ASYNC = [("tensor", REQUIRED), ("average", None), ("name", None), ("op", None),
                 ("prescale_factor", 1.0), ("postscale_factor", 1.0), _PS]
_GROUPED_ASYNC = [("tensors", REQUIRED)] + _REDUCE_ASYNC[1:]
_BCAST = [("tensor", REQUIRED), ("root_rank", REQUIRED), ("name", None), _PS]
_RS = [("tensor", REQUIRED), ("name", None), ("compression", "@Compression.none"),
       ("op", "@Average"), _PS, ("prescale_factor", 1.0), ("postscale_factor", 1.0)]
_RS_ASYNC = [("tensor", REQUIRED), ("name", None), ("op", "@Average"), _PS,
             ("prescale_factor", 1.0), ("postscale_factor", 1.0)]

# the collectives of horovod.torch.mpi_ops (the numpy API has the same ones)
COLLECTIVES = {
    "allreduce": [("tensor", REQUIRED), ("average", None), ("name", None),
                  ("compression", "@Compression.none"), ("op", None),
                  ("prescale_factor", 1.0), ("postscale_factor", 1.0), _PS],
    "allreduce_async": _REDUCE_ASYNC, "allreduce_": _REDUCE_ASYNC,
    "allreduce_async_": _REDUCE_ASYNC,
    "grouped_allreduce": [("tensors", REQUIRED), ("average", None), ("name", None),
                          ("compression", "@Compression.none"), ("op", None),
                          ("prescale_factor", 1.0), ("postscale_factor", 1.0), _PS],
    "grouped_allreduce_async": _GROUPED_ASYNC, "grouped_allreduce_": _GROUPED_ASYNC,
    "grouped_allreduce_async_": _GROUPED_ASYNC,
    "allgather": [("tensor", REQUIRED), ("name", None), _PS],
    "allgather_async": [("tensor", REQUIRED), ("name", None), _PS],
    "grouped_allgather": [("tensors", REQUIRED), ("name", None), _PS],
    "grouped_allgather_async": [("tensors", REQUIRED), ("name", None), _PS],
    "broadcast": _BCAST, "broadcast_async": _BCAST, "broadcast_": _BCAST,
    "broadcast_async_": _BCAST,
    "alltoall": [("tensor", REQUIRED), ("splits", None), ("name", None), _PS],
    "alltoall_async": [("tensor", REQUIRED), ("splits", None), ("name", None), _PS],
    "reducescatter": _RS, "reducescatter_async": _RS_ASYNC,
    "grouped_reducescatter": [("tensors", REQUIRED)] + _RS[1:],
    "grouped_reducescatter_async": [("tensors", REQUIRED)] + _RS_ASYNC[1:],
    "join": [("device", -1)],
    "barrier": [_PS],
    "poll": [("handle", REQUIRED)],
    "synchronize": [("handle", REQUIRED)],
    "broadcast_object": [("obj", REQUIRED), ("root_rank", 0), ("name", None), _PS],
    "allgather_object": [("obj", REQUIRED), ("name", None)],
    "Compression": None,
}

# horovod.torch only
TORCH = {
    "sparse_allreduce_async": [("tensor", REQUIRED), ("name", REQUIRED), ("op", REQUIRED), _PS],
    "broadcast_parameters": [("params", REQUIRED), ("root_rank", REQUIRED)],
    "broadcast_optimizer_state": [("optimizer", REQUIRED), ("root_rank", REQUIRED)],
    "DistributedOptimizer": [("optimizer", REQUIRED), ("named_parameters", None),
                             ("compression", "@Compression.none"),
                             ("backward_passes_per_step", 1), ("op", "@Average"),
                             ("gradient_predivide_factor", 1.0), ("num_groups", 0),
                             ("groups", None), ("sparse_as_dense", False), _PS],
    "SyncBatchNorm": [("num_features", REQUIRED), ("eps", 1e-5), ("momentum", 0.1),
                      ("affine", True), ("track_running_stats", True)],
    "elastic": None,
}

# What Horovod 0.28 has and we do not, each with the reason (README, "Coming from
# Horovod"). The walk fails if one of these appears, so the list stays true.
KNOWN_MISSING = {
    "horovodlite.torch": {"elastic": "elastic training (horovod.torch.elastic) is not "
                                     "implemented"},
}


def _resolve(module, default):
    if isinstance(default, str) and default.startswith("@"):
        obj = module
        for part in default[1:].split("."):
            obj = getattr(obj, part)
        return obj
    return default


def _signature(obj):
    if inspect.isclass(obj):
        sig = inspect.signature(obj.__init__)
        return sig.replace(parameters=list(sig.parameters.values())[1:])  # drop self
    return inspect.signature(obj)


def check_params(module, name, obj, spec):
    """Problems (strings) with `obj` standing in for Horovod's `name`."""
    try:
        params = list(_signature(obj).parameters.values())
    except (TypeError, ValueError) as e:
        return [f"{name}: no signature ({e})"]
    ours = {p.name: (i, p) for i, p in enumerate(params)}
    problems = []
    for pos, (pname, default) in enumerate(spec):
        if pname not in ours:
            problems.append(f"{name}: no parameter '{pname}'")
            continue
        i, p = ours[pname]
        if p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) or i != pos:
            problems.append(f"{name}: '{pname}' is not positional parameter {pos}")
        if default is not REQUIRED:
            want = _resolve(module, default)
            if p.default is p.empty:
                problems.append(f"{name}: '{pname}' has no default (Horovod's: {want!r})")
            elif not (p.default is want or p.default == want):
                problems.append(f"{name}: '{pname}' defaults to {p.default!r}, Horovod's to "
                                f"{want!r}")
    named = {n for n, _ in spec}
    for p in params:
        if (p.name not in named and p.default is p.empty
                and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)):
            problems.append(f"{name}: our extra parameter '{p.name}' has no default")
    return problems


def walk(module, *specs):
    """(problems, checked names) for `module` against the merged specs."""
    missing_ok = KNOWN_MISSING.get(module.__name__, {})
    problems, checked = [], []
    for spec in specs:
        for name, params in spec.items():
            if name in missing_ok:
                if hasattr(module, name):
                    problems.append(f"{name}: listed as missing but now exists; drop it from "
                                    "KNOWN_MISSING and the README")
                continue
            if not hasattr(module, name):
                problems.append(f"{name}: missing from {module.__name__}")
                continue
            checked.append(name)
            if params is not None:
                problems += check_params(module, name, getattr(module, name), params)
    return problems, checked
