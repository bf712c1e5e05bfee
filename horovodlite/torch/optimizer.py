"""DistributedOptimizer: the user's optimizer, with gradients averaged over the ranks.

A hook on each parameter (register_post_accumulate_grad_hook) starts that gradient's
allreduce the moment autograd has finished accumulating it, so communication overlaps
the rest of backward; step() waits for all of them, then runs the user's step. Where
the engine has no core of its own the gradients are held until step() instead
(BACKWARD_OVERLAP, _overlap.py): their hooks then only note them, and the end of the
backward pass submits them all in one loop (see _note_held)."""
import contextlib
import warnings
import weakref

import torch

from .. import _overlap
from ..basics import Average, _topology
from ..handles import named, synchronize as _wait
from ..ops import predivide_scales, resolve_op
from ..process_sets import _set_id, global_process_set
from .compression import Compression
from .mpi_ops import _allreduce_submit, _full_name, allreduce
from .sparse import SparseAllreduceHandle, sparse_allreduce_async

# Messages and warnings open with Horovod's own sentence (scripts and tests match it);
# ours follows with what is in flight and what to do.
_MISUSE_ZERO_GRAD = (
    "optimizer.zero_grad() was called after loss.backward() but before optimizer.step() or "
    "optimizer.synchronize(). This is prohibited as it can cause a race condition. "
    "horovodlite: allreduces of these gradients are still in flight ({names}); call "
    "zero_grad() before backward() or after step().")
_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your "
    "code. horovodlite: the gradients are already reduced, so step() uses them as they are.")
_TOO_MANY_PASSES = (
    "Gradients were computed more than backward_passes_per_step times before call to "
    "step(). Increase backward_passes_per_step to accumulate gradients locally. "
    "horovodlite: the gradient of '{name}' was computed more than "
    "backward_passes_per_step={passes} times.")
_NUM_GROUPS_DEPRECATED = (
    "Parameter `num_groups` has been replaced by `groups` and will be removed in v0.23.0. "
    "horovodlite: pass groups= instead.")


class _DistributedOptimizer:
    """Mixed in front of the user's optimizer class; see DistributedOptimizer."""

    # ------------------------------------------------------------------ set-up
    def _hvdl_setup(self, named_parameters, compression, backward_passes_per_step, op,
                    gradient_predivide_factor, groups, sparse_as_dense, process_set):
        self._compression = compression
        self.op = op
        self.gradient_predivide_factor = float(gradient_predivide_factor)
        self._scales = predivide_scales(op, self.gradient_predivide_factor)
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._names = _parameter_names(self.param_groups, named_parameters)
        self._parameter_names = self._names  # Horovod's attribute: {parameter: name}
        params = [p for g in self.param_groups for p in g["params"]]
        self._requires_update = [p for p in params if p.requires_grad]
        self._group_of, self._groups = _split_groups(groups, self._requires_update)
        # Per parameter, by its index in _requires_update (the hook knows its index, so
        # the hot path indexes lists instead of hashing tensors: Tensor.__hash__ is a
        # Python call, and a gradient took eight of them): the allreduce's name.
        self._op_names = [_full_name("allreduce", self._names[p]) for p in self._requires_update]
        self._handles = {}      # param -> (handle or None, compression ctx, grad tensor)
        self._group_ready = {}  # group index -> params whose gradient is final
        self._sparse_seen = set()  # params whose gradient has been sparse
        self._overlap = _overlap.choice()
        self._hold = None  # hold host gradients until step() (_overlap.py); None: not decided
        self._noted = []  # (param, index): held gradients final in this backward pass
        self._should_synchronize = True
        self._synchronized = False
        self.set_backward_passes_per_step(backward_passes_per_step)
        ref = weakref.ref(self)

        def hook_for(i):
            def hook(p):
                opt = ref()
                if opt is not None:
                    opt._grad_ready(p, i)
            return hook

        self._hook_handles = [p.register_post_accumulate_grad_hook(hook_for(i))
                              for i, p in enumerate(self._requires_update)]

    def __del__(self):
        for h in getattr(self, "_hook_handles", ()):
            h.remove()

    # ------------------------------------------------------------------ public API
    def set_backward_passes_per_step(self, passes):
        """Gradients are accumulated locally over `passes` backward passes, then reduced."""
        passes = int(passes)
        if passes < 1:
            raise ValueError(f"horovodlite: backward_passes_per_step must be >= 1, got {passes}")
        self.backward_passes_per_step = passes
        self._reset_passes()

    def _reset_passes(self):
        """Every parameter's backward passes still to come before its gradient is final."""
        self._delay = [self.backward_passes_per_step] * len(self._requires_update)

    def synchronize(self):
        """Waits for every gradient's allreduce (starting those not started yet: parameters
        that got no gradient this step take part with zeros) and writes the results into
        the .grad tensors."""
        if self._noted:  # a backward pass that raised never reached its end
            self._submit_noted()
        for i, p in enumerate(self._requires_update):
            entry = self._handles.get(p)
            if entry is None or (entry[0] is None and not self._waiting_in_group(p)):
                self._start(p, i)
        error = None
        for p, (handle, ctx, grad) in list(self._handles.items()):
            try:
                if isinstance(handle, SparseAllreduceHandle):
                    p.grad = handle.wait()
                    continue
                out = _wait(handle)
                if out is not grad:
                    with torch.no_grad():
                        grad.copy_(self._compression.decompress(out, ctx))
                if p.grad is not grad:
                    p.grad = grad
            except Exception as e:  # noqa: BLE001 - every handle is waited for, then raised
                error = error or e
        self._handles.clear()
        self._group_ready.clear()
        self._reset_passes()
        self._synchronized = True
        if error is not None:
            raise error

    def _forget_step(self):
        """Drops the step in progress (gradients submitted or accumulated, the passes
        counted): elastic training calls it when it restores a commit after a peer
        failed mid-step, e.g. in a gradient's hook, which leaves the step half-counted
        (the next backward pass was then refused as one pass too many)."""
        from ..handles import orphan

        orphan([h for h, _, _ in self._handles.values() if isinstance(h, int)])
        self._handles.clear()
        self._noted.clear()
        self._group_ready.clear()
        self._reset_passes()
        self._synchronized = False
        self._new_world()

    def _new_world(self):
        """The world may have changed (elastic: ranks, hosts): whether gradients are held
        (_overlap.py) is decided again at the next gradient."""
        self._hold = None

    @contextlib.contextmanager
    def skip_synchronize(self):
        """step() inside this block does not synchronize: use after calling synchronize()
        yourself (e.g. to clip the reduced gradients)."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if closure is not None:
            closure = self._synchronized_closure(closure)
        if self._should_synchronize:
            if self._synchronized and not self._handles:
                warnings.warn(_STEP_AFTER_SYNCHRONIZE)
            elif closure is None or self._handles:
                self.synchronize()
        try:
            return super().step() if closure is None else super().step(closure)
        finally:
            self._synchronized = False

    def zero_grad(self, *args, **kwargs):
        pending = [self._names[p] for p, e in self._handles.items() if e[0] is not None]
        if self._handles:
            raise AssertionError(_MISUSE_ZERO_GRAD.format(
                names=", ".join(pending[:5]) + (" ..." if len(pending) > 5 else "")
                if pending else "local accumulation in progress"))
        return super().zero_grad(*args, **kwargs)

    # ------------------------------------------------------------------ internals
    def _grad_ready(self, p, i):
        left = self._delay[i]
        if left <= 0:
            raise AssertionError(_TOO_MANY_PASSES.format(
                name=self._names[p], passes=self.backward_passes_per_step))
        self._delay[i] = left - 1
        if left > 1:
            self._handles[p] = (None, None, None)  # accumulating locally
        elif self._group_of:
            self._start(p, i)
        elif self._holds(p):
            self._note_held(p, i)
        else:
            self._handles[p] = self._submit(p, self._op_names[i])

    def _holds(self, p):
        """Whether p's gradient is held until step() (_overlap.py)."""
        if self._hold is None:  # decided at the first gradient (torch's threads are set by then)
            self._hold = _overlap.holds_gradients(self._overlap, _set_id(self.process_set),
                                                  self.process_set.size(), torch.get_num_threads())
        return self._hold and p.is_cpu  # the engine holds host memory only

    def _note_held(self, p, i):
        """A held gradient is final: note it; the end of this backward pass submits all
        that were noted (torch's end-of-backward callback, as DDP's reducer uses).
        Submitting in each hook cost 45-57 us a gradient against 7 us in one loop: a
        hook runs between backward's kernels, which have just evicted the submission's
        code and data from the caches. The engine would not start held
        gradients before step() anyway, and they still reach its queue before backward()
        returns, so a peer that waits for them while this rank is blocked in something
        else still gets them (the queue's 2 s bound)."""
        if not self._noted:
            torch.autograd.Variable._execution_engine.queue_callback(self._submit_noted)
        self._noted.append((p, i))
        self._handles[p] = (None, None, None)

    def _submit_noted(self):
        """Submits the noted gradients in the order their hooks ran."""
        noted, self._noted = self._noted, []
        for p, i in noted:
            self._handles[p] = self._submit(p, self._op_names[i])

    def _waiting_in_group(self, p):
        g = self._group_of.get(p)
        return g is not None and p in self._group_ready.get(g, ())

    def _start(self, p, i):
        """p's gradient is final: reduce it now, or once its whole group is final."""
        self._delay[i] = 0
        g = self._group_of.get(p)
        if g is None:
            self._handles[p] = self._submit(p, self._op_names[i])
            return
        ready = self._group_ready.setdefault(g, set())
        ready.add(p)
        self._handles[p] = (None, None, None)
        if len(ready) == len(self._groups[g]):
            members = self._groups[g]
            base = f"allreduce.group.{g}"
            for k, q in enumerate(members):
                self._handles[q] = self._submit(q, f"{base}.{k}", base, len(members))

    def _final_grad(self, p, dense):
        if p.grad is None:
            # A parameter with sparse gradients on earlier steps takes part sparsely, as
            # it does on the ranks that have a gradient (a rank that never saw one cannot
            # know: give sparse parameters a gradient on every rank on the first step).
            p.grad = (torch.sparse_coo_tensor(torch.zeros(p.dim(), 0, dtype=torch.int64),
                                              torch.zeros(0, *p.shape[1:], dtype=p.dtype),
                                              p.shape, check_invariants=False)
                      if p in self._sparse_seen and not dense else torch.zeros_like(p))
        elif p.grad.is_sparse:
            if dense:
                p.grad = p.grad.to_dense()
        elif not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        return p.grad

    def _submit(self, p, name, group="", group_size=0):
        """Starts p's allreduce under `name` ("allreduce.<parameter name>", or a group
        member's); returns (handle, compression ctx, the gradient it writes)."""
        grad = self._final_grad(p, dense=self.sparse_as_dense or bool(group))
        if grad.is_sparse:
            self._sparse_seen.add(p)  # (never in a group: group members go dense)
            return sparse_allreduce_async(grad, named(name), self.op, self.process_set), None, grad
        compressed, ctx = self._compression.compress(grad)
        pre, post = self._scales
        h = _allreduce_submit(compressed, True, named(name), self.op, pre, post,
                              self.process_set, group=group, group_size=group_size,
                              held=self._holds(p))
        return h, ctx, grad

    def _synchronized_closure(self, closure):
        """Closures (LBFGS & co.) re-evaluate the loss: reduce their gradients right away
        and average the loss, so every rank takes the same decisions."""
        def wrapped():
            loss = closure()
            self.synchronize()
            if isinstance(loss, torch.Tensor):
                loss = allreduce(loss.detach(), op=Average, process_set=self.process_set)
            return loss

        return wrapped


def _parameter_names(param_groups, named_parameters):
    params = [p for g in param_groups for p in g["params"]]
    if named_parameters is None:
        # Horovod's made-up names: group i, position j, the same on every rank.
        return {p: f"allreduce.noname.{i}.{j}" for i, g in enumerate(param_groups)
                for j, p in enumerate(g["params"])}
    named = list(named_parameters)
    bad = [x for x in named if not isinstance(x, tuple) or len(x) != 2]
    if bad:
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters(). horovodlite: got "
                         f"{len(bad)} entries that are not pairs, e.g. a "
                         f"{type(bad[0]).__name__}")
    seen, dups = set(), []
    for name, _ in named:
        if name in seen:
            dups.append(name)
        seen.add(name)
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         f"duplicates: {', '.join(sorted(set(dups)))}")
    by_id = {id(p): name for name, p in named}
    missing = [p for p in params if id(p) not in by_id]
    if missing:
        shapes = ", ".join(str(tuple(p.shape)) for p in missing[:5])
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named. Python object ids: "
                         f"{', '.join(str(id(p)) for p in missing)}. horovodlite: "
                         f"{len(missing)} of the optimizer's parameters are not in it (shapes "
                         f"{shapes}); pass model.named_parameters() of the whole model")
    return {p: by_id[id(p)] for p in params}


def _split_groups(groups, params):
    """groups: None, a number of groups (parameters split in order into that many), or
    lists of parameters; returns ({param: group index}, [[params of group]])."""
    if groups is None:
        return {}, []
    if isinstance(groups, int):
        if groups <= 0:
            raise ValueError(f"horovodlite: groups must be a positive number, got {groups}")
        n = min(groups, len(params)) or 1
        q, r = divmod(len(params), n)
        lists, start = [], 0
        for i in range(n):
            end = start + q + (1 if i < r else 0)
            lists.append(params[start:end])
            start = end
    else:
        lists = [list(g) for g in groups]
        known = {id(p) for p in params}
        for g in lists:
            for p in g:
                if id(p) not in known:
                    raise ValueError("horovodlite: groups contains a tensor that is not a "
                                     "trainable parameter of this optimizer "
                                     f"(shape {tuple(p.shape)})")
    group_of, out = {}, []
    for g in lists:
        g = [p for p in g if p not in group_of]
        if not g:
            continue
        for p in g:
            group_of[p] = len(out)
        out.append(g)
    return group_of, out


_classes = {}


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False,
                         process_set=global_process_set):
    """Wraps a torch optimizer so that each gradient is averaged (or reduced with `op`)
    over the ranks before step(). Returns an instance of the optimizer's own class that
    shares its param_groups and state.

    named_parameters: model.named_parameters(), names the allreduces (recommended).
    compression: Compression.none / fp16 / bf16 for the wire.
    backward_passes_per_step: accumulate this many backward passes locally first.
    op: Average (default), Sum, Min, Max, Product.
    gradient_predivide_factor: with Average, divide by this before the sum and by
        size/factor after.
    groups: a number of groups, or lists of parameters, each reduced as one unit.
    sparse_as_dense: reduce sparse gradients as dense tensors."""
    _topology()  # like Horovod, which asks size() here: init() must come first
    if num_groups:
        warnings.warn(_NUM_GROUPS_DEPRECATED, DeprecationWarning)
        groups = groups or num_groups
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("horovodlite: this optimizer is already a DistributedOptimizer")
    op = resolve_op(op, None)  # raises for Adasum
    predivide_scales(op, gradient_predivide_factor)  # checks the combination now
    base = type(optimizer)
    cls = _classes.get(base)
    if cls is None:
        cls = type(base.__name__, (_DistributedOptimizer, base),
                   {"__module__": base.__module__, "__qualname__": base.__qualname__})
        _classes[base] = cls
    dist = cls.__new__(cls)
    state = dict(optimizer.__dict__)
    # An LR scheduler made before wrapping patches `step` on the instance; that wrapper
    # is bound to the old object and would skip synchronization.
    state.pop("step", None)
    dist.__dict__.update(state)
    dist._hvdl_setup(named_parameters, compression, backward_passes_per_step, op,
                     gradient_predivide_factor, groups, sparse_as_dense, process_set)
    return dist
