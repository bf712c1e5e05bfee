"""Rank-side cases for test_torch.py: each function runs on every rank of one mpirun
launch, checks what it can locally against a single-process reference, and returns
values the test compares across ranks (bitwise where the contract says so)."""
import copy

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import horovodlite.torch as hvd

torch.set_num_threads(1)


def _np(t):
    return t.detach().to(torch.float64).numpy() if t.dtype == torch.bfloat16 else t.detach().numpy()


def _expect_raises(exc, fn, *words):
    try:
        fn()
    except exc as e:
        msg = str(e)
        missing = [w for w in words if w not in msg]
        assert not missing, f"{exc.__name__} message {msg!r} lacks {missing}"
        return msg
    raise AssertionError(f"expected {exc.__name__} from {fn}")


# ---------------------------------------------------------------------------- collectives

def allreduce_cases():
    r, n = hvd.rank(), hvd.size()
    out = {}
    dtypes = [torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
              torch.float32, torch.float64]
    for dt in dtypes:
        x = (torch.arange(7) % 3 + r).to(dt)
        s = hvd.allreduce(x, op=hvd.Sum, name=f"sum.{dt}")
        assert s.dtype == dt and s.shape == x.shape
        expect = sum((torch.arange(7) % 3 + q).to(torch.float64) for q in range(n))
        assert torch.equal(s.to(torch.float64), expect), (dt, s, expect)
        out[f"sum.{dt}"] = _np(s)
        if dt.is_floating_point:
            out[f"avg.{dt}"] = _np(hvd.allreduce(x, name=f"avg.{dt}"))
            np.testing.assert_allclose(out[f"avg.{dt}"], expect.numpy() / n, rtol=1e-2)
    for op, f in [(hvd.Min, np.min), (hvd.Max, np.max), (hvd.Product, np.prod)]:
        x = torch.tensor([1.0 + r, 3.0 - r, 2.0], dtype=torch.float64)
        y = hvd.allreduce(x, op=op)
        ref = f(np.stack([[1.0 + q, 3.0 - q, 2.0] for q in range(n)]), axis=0)
        np.testing.assert_array_equal(y.numpy(), ref)
    # deprecated average=, scale factors, zero elements, scalars
    x = torch.full((3,), float(r + 1))
    np.testing.assert_allclose(hvd.allreduce(x, average=False).numpy(), n * (n + 1) / 2)
    np.testing.assert_allclose(
        hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5).numpy(),
        n * (n + 1) / 2)
    assert hvd.allreduce(torch.zeros(0, 4)).shape == (0, 4)
    assert hvd.allreduce(torch.tensor(float(r)), op=hvd.Sum).item() == n * (n - 1) / 2
    # in place, non-contiguous in place, async
    t = torch.full((2, 3), float(r))
    assert hvd.allreduce_(t, op=hvd.Sum) is t and float(t[0, 0]) == n * (n - 1) / 2
    nc = torch.arange(6.0).reshape(2, 3).t() * (r + 1)
    assert not nc.is_contiguous()
    hvd.allreduce_(nc, op=hvd.Sum)
    np.testing.assert_array_equal(nc.numpy(), np.arange(6.0).reshape(2, 3).T * n * (n + 1) / 2)
    hs = [hvd.allreduce_async(torch.full((5,), float(i + r)), name=f"async.{i}", op=hvd.Sum)
          for i in range(4)]
    for i, h in enumerate(reversed(hs)):
        res = hvd.synchronize(h)
        assert float(res[0]) == n * (3 - i) + n * (n - 1) / 2
    h = hvd.allreduce_async_(t)
    hvd.synchronize(h)
    h = hvd.allreduce_async(t, name="polled", op=hvd.Sum)
    import time
    deadline = time.monotonic() + 120
    while not hvd.poll(h):  # becomes True once the peers took part, without synchronize
        assert time.monotonic() < deadline, "poll() never became True"
        time.sleep(0.001)
    assert hvd.poll(h) is True
    torch.testing.assert_close(hvd.synchronize(h), t * n)
    # grouped
    g = hvd.grouped_allreduce([torch.ones(2) * r, torch.ones(3, dtype=torch.float64) * r],
                              op=hvd.Sum)
    assert [x.dtype for x in g] == [torch.float32, torch.float64]
    assert all(float(x[0]) == n * (n - 1) / 2 for x in g)
    ts = [torch.ones(2) * r, torch.ones(1) * r]
    hvd.grouped_allreduce_(ts, op=hvd.Sum)
    assert float(ts[1][0]) == n * (n - 1) / 2
    # compression: the wire dtype is 16-bit, the result has the input's dtype
    for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
        y = hvd.allreduce(torch.full((4,), 0.5 + r), compression=comp, op=hvd.Sum)
        assert y.dtype == torch.float32 and float(y[0]) == sum(0.5 + q for q in range(n))
    assert hvd.Compression.fp16.compress(torch.ones(2, dtype=torch.int64))[0].dtype == torch.int64
    out["random.f32"] = _np(hvd.allreduce(torch.randn(1000, generator=torch.Generator()
                                                        .manual_seed(r))))
    return out


def allreduce_errors():
    r, n = hvd.rank(), hvd.size()
    _expect_raises(TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.uint32)),
                   "uint32")
    _expect_raises(TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.complex64)),
                   "complex64")
    _expect_raises(TypeError, lambda: hvd.allreduce(torch.ones(2, dtype=torch.bool)), "bool")
    _expect_raises(TypeError, lambda: hvd.allreduce([1.0, 2.0]), "torch.Tensor")
    _expect_raises(ValueError, lambda: hvd.allreduce(torch.ones(2), op=hvd.Sum, average=True))
    dt = torch.float32 if r == 0 else torch.float64
    msg = _expect_raises(hvd.HorovodInternalError,
                         lambda: hvd.allreduce(torch.ones(3, dtype=dt), name="mismatch.dtype"),
                         "mismatch.dtype")
    _expect_raises(RuntimeError, lambda: hvd.allreduce(torch.ones(2 + (r == n - 1)),
                                                       name="mismatch.shape"), "mismatch.shape")
    # the engine is still usable afterwards
    assert float(hvd.allreduce(torch.ones(1), op=hvd.Sum)[0]) == n
    return msg


def allreduce_autograd():
    r, n = hvd.rank(), hvd.size()
    w = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) * (r + 1)
    wsum = sum(torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) * (q + 1) for q in range(n))
    for op, expect in [(hvd.Sum, wsum), (hvd.Average, wsum / n)]:
        x = torch.tensor([0.3, 0.1, -0.7], dtype=torch.float64, requires_grad=True)
        (hvd.allreduce(x * (r + 1), op=op) * w).sum().backward()
        torch.testing.assert_close(x.grad, expect * (r + 1))
    # scale factors
    x = torch.ones(3, dtype=torch.float64, requires_grad=True)
    (hvd.allreduce(x, op=hvd.Sum, prescale_factor=3.0, postscale_factor=0.5) * w).sum().backward()
    torch.testing.assert_close(x.grad, wsum * 1.5)
    # Min/Max/Product: as in Horovod, the gradient is reduced with the same op
    wall = [torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64) * (q + 1) for q in range(n)]
    for op, fn in ((hvd.Max, torch.amax), (hvd.Min, torch.amin), (hvd.Product, torch.prod)):
        x = torch.tensor([float(r), float(-r), 1.0], dtype=torch.float64, requires_grad=True)
        (hvd.allreduce(x, op=op) * w).sum().backward()
        torch.testing.assert_close(x.grad, fn(torch.stack(wall), 0))
    # grouped, with compression on the way
    a = torch.ones(2, requires_grad=True)
    b = torch.ones(3, requires_grad=True)
    ya, yb = hvd.grouped_allreduce([a * (r + 1), b], op=hvd.Sum)
    (ya.sum() + 2 * yb.sum()).backward()
    torch.testing.assert_close(a.grad, torch.full((2,), float(n * (r + 1))))
    torch.testing.assert_close(b.grad, torch.full((3,), 2.0 * n))
    c = torch.ones(2, requires_grad=True)
    hvd.allreduce(c, compression=hvd.Compression.fp16, op=hvd.Sum).sum().backward()
    assert c.grad.dtype == torch.float32
    torch.testing.assert_close(c.grad, torch.full((2,), float(n)))
    return True


# ---------------------------------------------------------------------------- every dtype

def _refs():
    """tests/collective_refs.py's numpy references (data, reduce_ref, rows, same)."""
    from collective_refs import REFS
    ns = {"np": np, "hvd": hvd}
    exec(REFS, ns)
    return ns


def _to_np(t):
    """A tensor's exact bits as numpy (bfloat16 through ml_dtypes)."""
    import ml_dtypes
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _from_np(a):
    import ml_dtypes
    a = np.array(a, order="C")  # a copy; keeps 0-d arrays 0-d
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def dtype_matrix():
    """Every dtype Horovod takes (and bfloat16) through every torch collective and its
    grouped form, odd sizes, against numpy; results bitwise equal to the reference
    (and so across ranks). Returns the results' bytes for the cross-rank check."""
    R = _refs()
    r, n = hvd.rank(), hvd.size()
    seed = iter(range(1, 1_000_000))
    out, bad = {}, []

    def expect(case, got, want):
        g = _to_np(got)
        if not R["same"](g, want):
            bad.append(f"rank {r}: {case}: got {g.dtype}{g.shape} {g.ravel()[:6]}, "
                       f"want {want.dtype}{want.shape} {want.ravel()[:6]}")
        out[case] = g

    for dt in R["ALL_DTYPES"]:
        name = np.dtype(dt).name
        tdt = getattr(torch, name)
        reducible = dt in R["REDUCIBLE"]
        # allreduce, every op, and scale factors on Sum; a 0-d and an odd-length tensor
        ops = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product] if reducible else []
        for op in ops:
            for shape in [(), (2 * n + 3,), (3, 5)]:
                s = next(seed)
                ins = [R["data"](dt, shape, s, q) for q in range(n)]
                got = hvd.allreduce(_from_np(ins[r]), op=op, name=f"ar.{s}")
                if got.dtype != tdt:
                    bad.append(f"{name}: allreduce returned {got.dtype}")
                expect(f"allreduce {name} op {op} {shape}", got, R["reduce_ref"](ins, op, n))
        if reducible:
            s = next(seed)
            ins = [R["data"](dt, (7,), s, q) for q in range(n)]
            got = hvd.allreduce(_from_np(ins[r]), op=hvd.Sum, prescale_factor=2.0,
                                postscale_factor=0.5, name=f"ar.scaled.{s}")
            expect(f"allreduce {name} scaled", got,
                   R["reduce_ref"](ins, hvd.Sum, n, prescale=2.0, postscale=0.5))
            xs = [_from_np(R["data"](dt, (q + 2,), s, r)) for q in range(2)]
            for in_place in (False, True):
                ys = (hvd.grouped_allreduce_ if in_place else hvd.grouped_allreduce)(
                    xs if in_place else [x.clone() for x in xs], op=hvd.Max,
                    name=f"gar.{s}.{in_place}")
                for q, y in enumerate(ys):
                    expect(f"grouped_allreduce{'_' * in_place} {name} {q}", y, R["reduce_ref"](
                        [R["data"](dt, (q + 2,), s, k) for k in range(n)], hvd.Max, n))
        # allgather (varied first dims, one rank with none), grouped allgather
        s = next(seed)
        ins = [R["data"](dt, (k % 3, 3), s, k) for k in range(n)]
        expect(f"allgather {name}", hvd.allgather(_from_np(ins[r]), name=f"ag.{s}"),
               np.concatenate(ins))
        ys = hvd.grouped_allgather([_from_np(ins[r]), _from_np(ins[r][:1])], name=f"gag.{s}")
        expect(f"grouped_allgather {name} 0", ys[0], np.concatenate(ins))
        expect(f"grouped_allgather {name} 1", ys[1], np.concatenate([a[:1] for a in ins]))
        # broadcast from every root, out of place and in place
        for root in range(n):
            s = next(seed)
            mine = R["data"](dt, (5, 3), s, r)
            want = R["data"](dt, (5, 3), s, root)
            expect(f"broadcast {name} root {root}", hvd.broadcast(_from_np(mine), root), want)
            t = _from_np(mine)
            hvd.broadcast_(t, root)
            expect(f"broadcast_ {name} root {root}", t, want)
        # alltoall with uneven splits (some zero)
        s = next(seed)
        splits = [[(j + k) % 3 for k in range(n)] for j in range(n)]
        ins = [R["data"](dt, (sum(splits[j]), 2), s, j) for j in range(n)]
        y, recv = hvd.alltoall(_from_np(ins[r]), splits=torch.tensor(splits[r]))
        expect(f"alltoall {name}", y, np.concatenate(
            [ins[j][sum(splits[j][:r]):sum(splits[j][:r + 1])] for j in range(n)]))
        if recv.tolist() != [splits[j][r] for j in range(n)]:
            bad.append(f"alltoall {name}: received splits {recv.tolist()}")
        # reducescatter and grouped reducescatter; dim 0 not divisible by n
        if reducible:
            for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
                s = next(seed)
                ins = [R["data"](dt, (2 * n + 1, 2), s, q) for q in range(n)]
                off, cnt = R["rows"](2 * n + 1, n, r)
                full = R["reduce_ref"](ins, op, n)
                expect(f"reducescatter {name} op {op}",
                       hvd.reducescatter(_from_np(ins[r]), op=op, name=f"rs.{s}"),
                       full[off:off + cnt])
            s = next(seed)
            ins = [R["data"](dt, (n + 2,), s, q) for q in range(n)]
            off, cnt = R["rows"](n + 2, n, r)
            ys = hvd.grouped_reducescatter([_from_np(ins[r]), _from_np(ins[r])], op=hvd.Sum,
                                           name=f"grs.{s}")
            for y in ys:
                expect(f"grouped_reducescatter {name}", y,
                       R["reduce_ref"](ins, hvd.Sum, n)[off:off + cnt])
        else:
            _expect_raises(TypeError, lambda: hvd.allreduce(_from_np(R["data"](dt, (2,), 1, r))),
                           name)
    assert not bad, "\n".join(bad[:30])
    # what every rank must hold bit for bit (alltoall and reducescatter differ by rank)
    return {k: v for k, v in out.items() if not k.startswith(("alltoall", "reducescatter",
                                                              "grouped_reducescatter"))}


# ---------------------------------------------------------------------------- training

IN, HID, OUT = 6, 10, 4


class Net(nn.Module):
    """Two heads, summed; with a per-row head mask each row uses one head instead, so a
    rank whose rows all pick one head leaves the other without a gradient (rank-dependent
    unused parameters). `dead` is used by nobody."""

    def __init__(self, bias=True, norm=None, dead=False):
        super().__init__()
        self.fc1 = nn.Linear(IN, HID, bias=bias)
        self.norm = norm
        self.head_a = nn.Linear(HID, OUT, bias=bias)
        self.head_b = nn.Linear(HID, OUT, bias=bias)
        self.dead = nn.Linear(HID, OUT, bias=bias) if dead else None

    def forward(self, x, head=None):
        h = self.fc1(x)
        if self.norm is not None:
            h = self.norm(h)
        h = torch.tanh(h)
        if head is None:
            return self.head_a(h) + self.head_b(h)
        return torch.where(head[:, None], self.head_a(h), self.head_b(h))


def _net(seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    return Net(**kw).to(dtype)


def _batches(steps, micro, rows, dtype, seed=7):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(steps, micro, rows, IN, generator=g, dtype=torch.float64).to(dtype)
    y = torch.randn(steps, micro, rows, OUT, generator=g, dtype=torch.float64).to(dtype)
    return x, y


def _train(model, opt, data, shard, passes, heads=None, closure=False, clip=None,
           loss_scale=1.0):
    """`shard`: rows this process trains on. heads: per-row head mask or None."""
    x, y = data
    for s in range(x.shape[0]):
        if closure:
            def fn(s=s):
                opt.zero_grad()
                loss = F.mse_loss(model(x[s, 0, shard]), y[s, 0, shard])
                loss.backward()
                return loss
            opt.step(fn)
            continue
        opt.zero_grad()
        for m in range(passes):
            hm = None if heads is None else heads[shard]
            loss = F.mse_loss(model(x[s, m, shard], hm), y[s, m, shard]) * loss_scale / passes
            loss.backward()
        if clip is not None:
            if hasattr(opt, "synchronize"):
                opt.synchronize()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            if hasattr(opt, "skip_synchronize"):
                with opt.skip_synchronize():
                    opt.step()
            else:
                opt.step()
        else:
            opt.step()


def held_gradients():
    """DistributedOptimizer as the launch's HOROVODLITE_BACKWARD_OVERLAP says, for 3
    steps against one process training on the whole batch. After each backward a pause
    (no caller blocks in it, so nothing flushes held gradients), then how many
    gradients' allreduces had finished, and the rounds step() took. Returns (max
    difference from the reference, finished per step, rounds per step, weights)."""
    import time

    from horovodlite import _core

    n, r = hvd.size(), hvd.rank()
    x, y = _batches(3, 1, 4 * n, torch.float64)
    ref = _net()
    _train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), (x, y),
           slice(None), 1)
    model = _net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    shard = slice(4 * r, 4 * r + 4)
    finished, rounds, queued = [], [], []
    for s in range(3):
        opt.zero_grad()
        hvd.allreduce(torch.zeros(1), name=f"held.start.{s}")  # the ranks start together
        F.mse_loss(model(x[s, 0, shard]), y[s, 0, shard]).backward()
        queued.append(_queued(opt))
        time.sleep(0.2)
        finished.append(sum(bool(hvd.poll(h)) for h, _, _ in opt._handles.values()))
        before = _core.stats(0)["rounds"]
        opt.step()
        rounds.append(_core.stats(0)["rounds"] - before)
    return (_max_diff(model, ref), finished, rounds,
            [p.detach().numpy().copy() for p in model.parameters()], queued)


def _queued(opt):
    """How many of the optimizer's gradients are in the engine's queue (have a handle)."""
    return sum(isinstance(h, int) for h, _, _ in opt._handles.values())


class _StopOnce(nn.Module):
    """The identity, whose backward raises the first time: a backward pass that stops
    halfway, after the heads' gradients were final and before fc1's."""

    def __init__(self):
        super().__init__()
        self.armed = True

    def forward(self, h):
        return _StoppingIdentity.apply(h, self)


class _StoppingIdentity(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, owner):
        ctx.owner = owner
        return h.clone()

    @staticmethod
    def backward(ctx, g):
        if ctx.owner.armed:
            ctx.owner.armed = False
            raise RuntimeError("backward stopped halfway (made to)")
        return g, None


def held_gradients_after_a_stopped_backward():
    """The first backward pass stops halfway with an error, which the script catches;
    step() still reduces every gradient (fc1's, which never came, as zeros), and the
    next pass's gradients are all in the engine's queue when its backward() returns.
    Trained against one process doing the same on the whole batch. Returns (max
    difference from the reference, gradients queued when the second backward returned,
    trainable parameters, weights)."""
    n, r = hvd.size(), hvd.rank()
    x, y = _batches(2, 1, 4 * n, torch.float64)

    def train(model, opt, shard, after_backward=lambda: None):
        for s in range(2):
            opt.zero_grad()
            try:
                F.mse_loss(model(x[s, 0, shard]), y[s, 0, shard]).backward()
            except RuntimeError as e:
                assert s == 0 and "halfway" in str(e), (s, e)
            after_backward()
            opt.step()

    ref = _net(norm=_StopOnce())
    train(ref, torch.optim.SGD(ref.parameters(), lr=0.1), slice(None))
    model = _net(norm=_StopOnce())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    queued = []
    train(model, opt, slice(4 * r, 4 * r + 4), lambda: queued.append(_queued(opt)))
    return (_max_diff(model, ref), queued[1], len(list(model.parameters())),
            [p.detach().numpy().copy() for p in model.parameters()])


def held_gradients_while_a_rank_waits_elsewhere():
    """Rank 0 steps and then enters an MPI barrier; the others enter the barrier first,
    so no caller of theirs releases their held gradients while rank 0 waits for them:
    they go after the queue's kHeldWindow (2 s), as reduced during backward they would
    have gone (a hang otherwise). Returns the weights after it."""
    from mpi4py import MPI

    n, r = hvd.size(), hvd.rank()
    x, y = _batches(1, 1, 4 * n, torch.float64)
    model = _net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    opt.zero_grad()
    F.mse_loss(model(x[0, 0, 4 * r:4 * r + 4]), y[0, 0, 4 * r:4 * r + 4]).backward()
    if r == 0:
        opt.step()
        MPI.COMM_WORLD.Barrier()
    else:
        MPI.COMM_WORLD.Barrier()
        opt.step()
    return [p.detach().numpy().copy() for p in model.parameters()]

def _max_diff(a, b):
    return max(float((p - q).detach().abs().max()) for p, q in zip(a.parameters(), b.parameters()))


def _params(model):
    return np.concatenate([p.detach().to(torch.float64).numpy().ravel()
                           for p in model.parameters()])


OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
    "Adam": lambda p: torch.optim.Adam(p, lr=0.01),
    "AdamW": lambda p: torch.optim.AdamW(p, lr=0.01, amsgrad=True),
    "Adadelta": lambda p: torch.optim.Adadelta(p, lr=1.0),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
    "Adamax": lambda p: torch.optim.Adamax(p, lr=0.01),
    "ASGD": lambda p: torch.optim.ASGD(p, lr=0.05, t0=1),
    "NAdam": lambda p: torch.optim.NAdam(p, lr=0.01),
    "RAdam": lambda p: torch.optim.RAdam(p, lr=0.01),
    "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "Rprop": lambda p: torch.optim.Rprop(p, lr=0.01),
    "Adafactor": lambda p: torch.optim.Adafactor(p, lr=0.01),
    "Muon": lambda p: torch.optim.Muon(p, lr=0.02),
    "LBFGS": lambda p: torch.optim.LBFGS(p, lr=0.5, max_iter=4, history_size=3),
}


def _equivalence(name, make_opt, steps=3, passes=1, dtype=torch.float64, tol=1e-9, heads=False,
                 clip=None, op=None, named=True, **dist_kw):
    """K steps of DistributedOptimizer on this rank's shard vs one process on the whole
    batch; returns (max |difference|, final parameters)."""
    r, n = hvd.rank(), hvd.size()
    rows = 3
    kw = {"bias": name != "Muon", "dead": heads}
    data = _batches(steps, passes, rows * n, dtype)
    mask = (torch.arange(rows * n) // rows) % 2 == 0 if heads else None
    shard = slice(r * rows, (r + 1) * rows)
    model, ref = _net(dtype=dtype, **kw), _net(dtype=dtype, **kw)
    if callable(dist_kw.get("groups")):
        dist_kw["groups"] = dist_kw["groups"](model)
    opt = hvd.DistributedOptimizer(make_opt(model.parameters()),
                                   named_parameters=model.named_parameters() if named else None,
                                   backward_passes_per_step=passes,
                                   **({} if op is None else {"op": op}), **dist_kw)
    assert isinstance(opt, type(make_opt(_net(**kw).parameters())))
    _train(model, opt, data, shard, passes, heads=mask, closure=name == "LBFGS", clip=clip)
    _train(ref, make_opt(ref.parameters()), data, slice(None), passes, heads=mask,
           closure=name == "LBFGS", clip=clip, loss_scale=n if op == hvd.Sum else 1.0)
    moved = _max_diff(ref, _net(dtype=dtype, **kw))
    assert moved > 1e-3, f"{name}: training did not change the weights ({moved})"
    diff = _max_diff(model, ref)
    assert diff <= tol, f"{name}: distributed and single-process weights differ by {diff}"
    return diff, _params(model)


def training_equivalence():
    out = {}
    for name, make in OPTIMIZERS.items():
        out[name] = _equivalence(name, make)
    sgd = OPTIMIZERS["SGD"]
    out["passes=3"] = _equivalence("SGD", sgd, passes=3)
    out["passes=2.Adam"] = _equivalence("Adam", OPTIMIZERS["Adam"], passes=2)
    out["fp16"] = _equivalence("SGD", sgd, dtype=torch.float32, tol=5e-3,
                               compression=hvd.Compression.fp16)
    out["bf16"] = _equivalence("SGD", sgd, dtype=torch.float32, tol=3e-2,
                               compression=hvd.Compression.bf16)
    out["groups=2"] = _equivalence("SGD", sgd, groups=2)
    out["groups=lists"] = _equivalence("Adam", OPTIMIZERS["Adam"], groups=lambda m: [
        [m.fc1.weight, m.head_b.bias], [m.head_a.weight, m.fc1.bias]])
    out["predivide"] = _equivalence("SGD", sgd, gradient_predivide_factor=2.0)
    out["op=Sum"] = _equivalence("SGD", sgd, op=hvd.Sum)
    out["heads"] = _equivalence("SGD", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                heads=True)
    out["heads.Adam"] = _equivalence("Adam", OPTIMIZERS["Adam"], heads=True)
    out["clip"] = _equivalence("SGD", lambda p: torch.optim.SGD(p, lr=1.0), clip=0.05)
    out["no named_parameters"] = _equivalence("Adam", OPTIMIZERS["Adam"], named=False,
                                              groups=2)
    return out


# Horovod 0.28's first sentences, which scripts and tests match; ours may follow.
HOROVOD_WORDING = {
    "step_after_synchronize": "optimizer.step() called without optimizer.skip_synchronize() "
                              "context after optimizer.synchronize().",
    "zero_grad": "optimizer.zero_grad() was called after loss.backward() but before "
                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can "
                 "cause a race condition.",
    "passes": "Gradients were computed more than backward_passes_per_step times before call "
              "to step(). Increase backward_passes_per_step to accumulate gradients locally.",
    "duplicates": "Parameter names in named_parameters must be unique. Found duplicates:",
    "unnamed": "named_parameters was specified, but one or more model parameters were not "
               "named. Python object ids:",
    "not_tuples": "named_parameters should be a sequence of tuples (name, parameter), usually "
                  "produced by model.named_parameters().",
    "num_groups": "Parameter `num_groups` has been replaced by `groups` and will be removed in "
                  "v0.23.0.",
    "average": "Parameter `average` has been replaced with `op` and will be removed in v0.21.0",
    "op_and_average": "The op parameter supersedes average. Please provide only one of them.",
}


def _expect_horovod_wording(exc, key, fn, *words):
    msg = _expect_raises(exc, fn, *words)
    assert msg.startswith(HOROVOD_WORDING[key]), (key, msg)


def _expect_warning(key, category, fn):
    import warnings
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        result = fn()
    msgs = [str(w.message) for w in seen if issubclass(w.category, category)]
    assert any(m.startswith(HOROVOD_WORDING[key]) for m in msgs), (key, msgs)
    return result


def optimizer_misuse():
    m = _net()
    sgd = torch.optim.SGD(m.parameters(), lr=0.1)
    named = list(m.named_parameters())
    _expect_horovod_wording(ValueError, "duplicates", lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=named + [("fc1.weight", m.fc1.weight)]), "fc1.weight", "unique")
    _expect_horovod_wording(ValueError, "unnamed", lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=named[:2]), "not in it")
    _expect_horovod_wording(ValueError, "not_tuples", lambda: hvd.DistributedOptimizer(
        sgd, named_parameters=[p for _, p in named]))
    _expect_horovod_wording(ValueError, "op_and_average",
                            lambda: hvd.allreduce(torch.ones(1), op=hvd.Sum, average=True))
    y = _expect_warning("average", DeprecationWarning,
                        lambda: hvd.allreduce(torch.ones(1), average=False, name="avg.kw"))
    assert float(y[0]) == hvd.size()
    _expect_warning("num_groups", DeprecationWarning, lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(_net().parameters(), lr=0.1), num_groups=2))
    _expect_raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd, groups=[[torch.nn.Parameter(torch.ones(1))]]), "groups")
    _expect_raises(ValueError, lambda: hvd.DistributedOptimizer(
        sgd, op=hvd.Sum, gradient_predivide_factor=2.0), "gradient_predivide_factor")
    opt = hvd.DistributedOptimizer(sgd, named_parameters=named)
    _expect_raises(ValueError, lambda: hvd.DistributedOptimizer(opt), "already")
    x = torch.randn(4, IN, dtype=torch.float64)
    m(x).sum().backward()
    _expect_horovod_wording(AssertionError, "zero_grad", opt.zero_grad, "zero_grad", "in flight")
    _expect_horovod_wording(AssertionError, "passes", lambda: m(x).sum().backward(),
                            "backward_passes_per_step")
    opt.synchronize()  # finishes what the failed calls left in flight, on every rank
    _expect_warning("step_after_synchronize", UserWarning, opt.step)
    opt.zero_grad()
    opt.set_backward_passes_per_step(2)
    m(x).sum().backward()
    _expect_raises(AssertionError, opt.zero_grad, "local accumulation")
    m(x).sum().backward()
    opt.step()
    opt.zero_grad()
    # the optimizer's own state and hyper-parameters are shared, not copied
    assert opt.param_groups is sgd.param_groups and opt.state is sgd.state
    # Horovod's _parameter_names: given names, or made up per group and position
    assert opt._parameter_names == {p: name for name, p in named}
    m2 = _net()
    groups = [{"params": [m2.fc1.weight, m2.fc1.bias]},
              {"params": [p for q, p in m2.named_parameters() if not q.startswith("fc1.")],
               "lr": 0.01}]
    noname = hvd.DistributedOptimizer(torch.optim.SGD(groups, lr=0.1))
    assert noname._parameter_names == {
        p: f"allreduce.noname.{i}.{j}" for i, g in enumerate(noname.param_groups)
        for j, p in enumerate(g["params"])}, noname._parameter_names
    m2(x).sum().backward()
    noname.step()  # the made-up names agree across ranks: nothing waits for a peer
    noname.zero_grad()
    return True


def sync_batch_norm():
    """SyncBatchNorm on shards == BatchNorm on the concatenated batch (forward, running
    statistics, input gradient; weight gradients summed over ranks)."""
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(3)
    rows = 2
    x = torch.randn(rows * n, 3, 4, 5, generator=g, dtype=torch.float64) * 2 + 1
    w = torch.randn(rows * n, 3, 4, 5, generator=g, dtype=torch.float64)
    shard = slice(r * rows, (r + 1) * rows)
    ref = nn.BatchNorm2d(3, momentum=0.3).double()
    sbn = hvd.SyncBatchNorm(3, momentum=0.3).double()
    with torch.no_grad():
        for bn in (ref, sbn):
            bn.weight.copy_(torch.tensor([1.0, 2.0, -0.5]))
            bn.bias.copy_(torch.tensor([0.1, 0.0, 0.3]))
    xr = x.clone().requires_grad_()
    xs = x[shard].clone().requires_grad_()
    for _ in range(2):
        yr, ys = ref(xr), sbn(xs)
    torch.testing.assert_close(ys, yr[shard])
    (yr * w).sum().backward()
    (ys * w[shard]).sum().backward()
    torch.testing.assert_close(xs.grad, xr.grad[shard])
    torch.testing.assert_close(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), ref.weight.grad)
    torch.testing.assert_close(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), ref.bias.grad)
    torch.testing.assert_close(sbn.running_mean, ref.running_mean)
    torch.testing.assert_close(sbn.running_var, ref.running_var)
    assert int(sbn.num_batches_tracked) == 2
    sbn.eval()
    ref.eval()
    torch.testing.assert_close(sbn(x[shard]), ref(x[shard]))
    # converted inside a model and trained with DistributedOptimizer, float32
    model = _net(dtype=torch.float32, norm=nn.BatchNorm1d(HID))
    refm = copy.deepcopy(model)
    model = hvd.SyncBatchNorm.convert_sync_batchnorm(model)
    assert isinstance(model.norm, hvd.SyncBatchNorm)
    data = _batches(3, 1, 4 * n, torch.float32)
    sh = slice(r * 4, (r + 1) * 4)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    _train(model, opt, data, sh, 1)
    _train(refm, torch.optim.SGD(refm.parameters(), lr=0.1, momentum=0.9), data, slice(None), 1)
    assert _max_diff(model, refm) < 1e-5, _max_diff(model, refm)
    torch.testing.assert_close(model.norm.running_var, refm.norm.running_var)
    return _params(model)


# ---------------------------------------------------------------------------- other collectives

def _rows(first, r, cols=3, dtype=torch.float64):
    return (torch.arange(first * cols, dtype=torch.float64).reshape(first, cols) + 100 * r).to(dtype)


def gather_broadcast_cases():
    r, n = hvd.rank(), hvd.size()
    out = {}
    for dt in (torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
               torch.float32, torch.float64, torch.bool):
        x = _rows(r + 1, r, dtype=dt) if dt != torch.bool else torch.tensor([[r % 2 == 0]] * (r + 1))
        y = hvd.allgather(x, name=f"ag.{dt}")
        ref = torch.cat([_rows(q + 1, q, dtype=dt) if dt != torch.bool
                         else torch.tensor([[q % 2 == 0]] * (q + 1)) for q in range(n)])
        assert y.dtype == dt and torch.equal(y, ref), (dt, y, ref)
        out[f"ag.{dt}"] = _np(y)
        for root in (0, n - 1):
            b = hvd.broadcast(x[:1].clone(), root_rank=root, name=f"bc.{dt}.{root}")
            assert torch.equal(b, ref[sum(range(1, root + 1))][None]), (dt, root, b)
    # scalars, empty rows on some ranks, non-contiguous, grouped
    assert torch.equal(hvd.allgather(torch.tensor(float(r))), torch.arange(n, dtype=torch.float32))
    e = hvd.allgather(torch.ones(r % 2, 2))
    assert e.shape == (sum(q % 2 for q in range(n)), 2)
    nc = _rows(3, r).t()
    assert torch.equal(hvd.allgather(nc), torch.cat([_rows(3, q).t() for q in range(n)]))
    g = hvd.grouped_allgather([_rows(1, r), torch.full((2,), r, dtype=torch.int64)])
    assert torch.equal(g[1], torch.arange(n).repeat_interleave(2))
    # broadcast_ in place (also non-contiguous), async forms
    t = torch.full((2, 3), float(r))
    assert hvd.broadcast_(t, root_rank=n - 1) is t and bool((t == n - 1).all())
    nc = torch.full((3, 2), float(r)).t()
    hvd.broadcast_(nc, root_rank=0)
    assert bool((nc == 0).all())
    # a parameter (records gradients) comes back itself, not a detached alias
    p = torch.nn.Parameter(torch.full((3,), float(r)))
    assert hvd.broadcast_(p, root_rank=n - 1) is p and bool((p == n - 1).all())
    assert hvd.allreduce_(p, op=hvd.Sum) is p
    h = hvd.broadcast_async(torch.full((4,), float(r)), root_rank=1)
    assert bool((hvd.synchronize(h) == 1).all())
    src = torch.full((4,), float(r))
    hvd.synchronize(hvd.broadcast_async_(src, 1))
    assert bool((src == 1).all())
    x = torch.full((2,), float(r))
    y = hvd.broadcast(x, root_rank=0)
    assert bool((x == r).all()) and bool((y == 0).all())  # out of place leaves x alone
    _expect_raises(hvd.HorovodInternalError, lambda: hvd.broadcast(torch.ones(2), root_rank=n),
                   "root")
    # alltoall, equal splits: rank r gets rows [2r, 2r+1] of every rank's tensor
    a = torch.arange(2 * n, dtype=torch.float32) + 100 * r
    y = hvd.alltoall(a)
    assert isinstance(y, torch.Tensor)
    assert torch.equal(y, torch.cat([torch.tensor([2.0 * r, 2.0 * r + 1]) + 100 * q
                                     for q in range(n)]))
    # explicit splits: rank r sends j+1 rows to rank j
    rows = sum(j + 1 for j in range(n))
    a = _rows(rows, r, cols=2)
    y, recv = hvd.alltoall(a, splits=torch.tensor([j + 1 for j in range(n)]))
    assert recv.tolist() == [r + 1] * n
    start = sum(j + 1 for j in range(r))
    assert torch.equal(y, torch.cat([_rows(rows, q, cols=2)[start:start + r + 1] for q in range(n)]))
    _expect_raises(hvd.HorovodInternalError,
                   lambda: hvd.alltoall(torch.ones(4), splits=[1] * (n + 1)), "splits")
    # reducescatter: dim0 = 2n+1, so rank 0 gets one extra row
    x = _rows(2 * n + 1, r, cols=2)
    total = sum(_rows(2 * n + 1, q, cols=2) for q in range(n))
    counts = [2 + (1 if q == 0 else 0) for q in range(n)]
    off = sum(counts[:r])
    ys = hvd.reducescatter(x, op=hvd.Sum)
    assert torch.equal(ys, total[off:off + counts[r]]), (ys, total)
    ya = hvd.reducescatter(x.float(), op=hvd.Average)
    torch.testing.assert_close(ya, (total[off:off + counts[r]] / n).float())
    gs = hvd.grouped_reducescatter([x, x[:n]], op=hvd.Sum)
    assert torch.equal(gs[1], total[r:r + 1])
    hvd.barrier()
    return out


def gather_broadcast_autograd():
    r, n = hvd.rank(), hvd.size()
    w = [torch.randn(sum(q + 1 for q in range(n)), 2, generator=torch.Generator().manual_seed(q),
                     dtype=torch.float64) for q in range(n)]
    # allgather: this rank's rows of the rank-averaged upstream gradient
    x = torch.ones(r + 1, 2, dtype=torch.float64, requires_grad=True)
    (hvd.allgather(x) * w[r]).sum().backward()
    start = sum(q + 1 for q in range(r))
    torch.testing.assert_close(x.grad, (sum(w) / n)[start:start + r + 1])
    s = torch.tensor(2.0, dtype=torch.float64, requires_grad=True)
    (hvd.allgather(s) * torch.arange(n)).sum().backward()
    assert s.grad.shape == () and float(s.grad) == r
    # broadcast: the rank-averaged upstream gradient on the root, zero elsewhere
    for root in (0, n - 1):
        x = torch.ones(3, dtype=torch.float64, requires_grad=True)
        wr = [torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64) * (q + 1) for q in range(n)]
        (hvd.broadcast(x, root_rank=root) * wr[r]).sum().backward()
        torch.testing.assert_close(x.grad, sum(wr) / n if r == root else torch.zeros(3, dtype=torch.float64))
    # alltoall: gradient returns along the received splits
    rows = sum(j + 1 for j in range(n))
    x = torch.zeros(rows, 2, dtype=torch.float64, requires_grad=True)
    y, recv = hvd.alltoall(x, splits=[j + 1 for j in range(n)])
    upstream = torch.arange(float(y.numel()), dtype=torch.float64).reshape(y.shape) + 1000 * r
    (y * upstream).sum().backward()
    # my row block j went to rank j, where it is rows [r(j+1), (r+1)(j+1)) of the output,
    # whose upstream gradient there is arange(n(j+1)*2) + 1000 j
    expect = torch.cat([(torch.arange(float(n * (j + 1) * 2), dtype=torch.float64)
                         .reshape(-1, 2) + 1000 * j)[r * (j + 1):(r + 1) * (j + 1)]
                        for j in range(n)])
    torch.testing.assert_close(x.grad, expect)
    return horovod_gradients()


def horovod_gradients():
    """Horovod 0.28's gradient of every differentiable collective, as numbers: each rank
    weighs its output by w_r = (r + 1) (per element where it matters) and the expected
    .grad follows Horovod's definition of the backward pass."""
    r, n = hvd.rank(), hvd.size()
    f64 = torch.float64
    wsum = sum(q + 1.0 for q in range(n))

    def leaf(*shape):
        return torch.ones(*shape, dtype=f64, requires_grad=True)

    # reducescatter: allgather of the gradient, x size for Sum, x pre/postscale
    # (Sum at 2 ranks, every rank weighing its rows by 1: 2.0; Average: 1.0)
    wr = [torch.full((2, 2), float(q + 1), dtype=f64) for q in range(n)]
    for op, pre, post, factor in ((hvd.Sum, 1.0, 1.0, n), (hvd.Average, 1.0, 1.0, 1),
                                  (hvd.Sum, 0.5, 3.0, n * 1.5), (hvd.Average, 2.0, 0.25, 0.5)):
        x = leaf(2 * n, 2)
        (hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post)
         * wr[r]).sum().backward()
        torch.testing.assert_close(x.grad, torch.cat(wr) * factor)
        x = leaf(2 * n, 2)
        hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((2 * n, 2), float(factor), dtype=f64))
    # grouped_reducescatter: one grouped allgather of the gradients, same factors
    a, b = leaf(2 * n, 2), leaf(n, 3)
    ya, yb = hvd.grouped_reducescatter([a, b], op=hvd.Sum, postscale_factor=2.0)
    ((ya * (r + 1)).sum() + (yb * 10 * (r + 1)).sum()).backward()
    per_rank = torch.cat([torch.full((2, 2), q + 1.0, dtype=f64) for q in range(n)])
    torch.testing.assert_close(a.grad, per_rank * n * 2.0)
    per_rank = torch.cat([torch.full((1, 3), 10 * (q + 1.0), dtype=f64) for q in range(n)])
    torch.testing.assert_close(b.grad, per_rank * n * 2.0)
    # allreduce / grouped_allreduce: allreduce of the gradient, same op and factors
    for op, pre, post in ((hvd.Sum, 1.0, 1.0), (hvd.Average, 1.0, 1.0), (hvd.Sum, 2.0, 0.5),
                          (hvd.Average, 3.0, 2.0)):
        want = wsum * pre * post / (n if op == hvd.Average else 1)
        x = leaf(3)
        (hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post)
         * (r + 1)).sum().backward()
        torch.testing.assert_close(x.grad, torch.full((3,), want, dtype=f64))
        a, b = leaf(2), leaf(1, 2)
        ya, yb = hvd.grouped_allreduce([a, b], op=op, prescale_factor=pre, postscale_factor=post)
        ((ya + yb.sum()) * (r + 1)).sum().backward()
        torch.testing.assert_close(a.grad, torch.full((2,), want, dtype=f64))
        torch.testing.assert_close(b.grad, torch.full((1, 2), 2 * want, dtype=f64))
    # allgather / grouped_allgather: the Average-allreduced gradient, this rank's rows
    x = leaf(r + 1, 2)
    (hvd.allgather(x) * (r + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((r + 1, 2), wsum / n, dtype=f64))
    a, b = leaf(1), leaf(r + 2)
    ya, yb = hvd.grouped_allgather([a, b])
    (ya.sum() * (r + 1) + yb.sum() * 2 * (r + 1)).backward()
    torch.testing.assert_close(a.grad, torch.full((1,), wsum / n, dtype=f64))
    torch.testing.assert_close(b.grad, torch.full((r + 2,), 2 * wsum / n, dtype=f64))
    # broadcast: the Average-allreduced gradient on the root, zeros elsewhere
    x = leaf(2)
    (hvd.broadcast(x, root_rank=n - 1) * (r + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2,), wsum / n if r == n - 1 else 0.0,
                                                  dtype=f64))
    # alltoall, equal splits: the gradient comes back along the received splits
    x = leaf(2 * n)
    (hvd.alltoall(x) * (r + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.cat([torch.full((2,), q + 1.0, dtype=f64)
                                                  for q in range(n)]))
    return True


def objects_and_state():
    """broadcast/allgather of objects; parameters and optimizer state from rank-dependent
    starting points; then training agrees with one process started from the root's."""
    r, n = hvd.rank(), hvd.size()
    obj = hvd.broadcast_object({"rank": r, "list": list(range(r))}, root_rank=n - 1)
    assert obj == {"rank": n - 1, "list": list(range(n - 1))}
    assert hvd.allgather_object(("x", r)) == [("x", q) for q in range(n)]

    def start(rank):
        model = _net(seed=rank)
        opt = torch.optim.Adam(model.parameters(), lr=0.01 * (rank + 1),
                               betas=(0.9, 0.99 - 0.01 * rank))
        g = torch.Generator().manual_seed(rank)
        for _ in range(rank + 1):  # rank-dependent step counts
            opt.zero_grad()
            F.mse_loss(model(torch.randn(5, IN, generator=g, dtype=torch.float64)),
                       torch.zeros(5, OUT, dtype=torch.float64)).backward()
            opt.step()
        return model, opt

    model, opt = start(r)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    ref, ropt = start(0)
    assert _max_diff(model, ref) == 0
    a, b = opt.state_dict(), ropt.state_dict()
    assert a["param_groups"] == b["param_groups"]
    for k in b["state"]:
        for key, v in b["state"][k].items():
            assert torch.equal(a["state"][k][key], v), (k, key)
    data = _batches(3, 1, 3 * n, torch.float64)
    _train(model, opt, data, slice(3 * r, 3 * r + 3), 1)
    _train(ref, ropt, data, slice(None), 1)
    assert _max_diff(model, ref) < 1e-12
    # named_parameters() and lists work too; an empty root state empties the others'
    m2 = _net(seed=r)
    hvd.broadcast_parameters(m2.named_parameters(), root_rank=n - 1)
    hvd.broadcast_parameters(list(m2.parameters()), root_rank=n - 1)
    assert _max_diff(m2, _net(seed=n - 1)) == 0
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1 + r, momentum=0.9)
    if r != n - 1:
        m2(torch.ones(1, IN, dtype=torch.float64)).sum().backward()
        o2.step()
    hvd.broadcast_optimizer_state(o2, root_rank=n - 1)
    assert len(o2.state) == 0 and o2.param_groups[0]["lr"] == 0.1 + n - 1
    # LBFGS keeps lists of tensors in its state
    lb = torch.optim.LBFGS(m2.parameters(), history_size=2, max_iter=2)

    def closure():
        lb.zero_grad()
        loss = m2(torch.ones(2, IN, dtype=torch.float64) * (r + 1)).pow(2).sum()
        loss.backward()
        return loss

    lb.step(closure)
    hvd.broadcast_optimizer_state(lb, root_rank=0)
    return _params(model), [t.numpy() for t in lb.state_dict()["state"][0]["old_dirs"]]


class _NoGradModel(nn.Module):
    """Horovod's no-grad case: an integer index parameter that needs no gradient, a used
    weight, and one nobody uses (no gradient, so no lazily created state for it)."""

    def __init__(self, rank):
        super().__init__()
        g = torch.Generator().manual_seed(rank)
        self.a = nn.Parameter(torch.tensor([1, 3], dtype=torch.int32), requires_grad=False)
        self.b = nn.Parameter(torch.rand(4, generator=g, dtype=torch.float64))
        self.unused = nn.Parameter(torch.rand(2, 2, generator=g, dtype=torch.float64))

    def forward(self, x):
        return torch.index_select(self.b, 0, self.a.long()) * x


_OPTIMIZERS = {
    "SGD": lambda p, r: torch.optim.SGD(p, lr=0.1 * (r + 1)),
    "SGD.nesterov": lambda p, r: torch.optim.SGD(p, lr=0.001, weight_decay=1e-6 * (r + 1),
                                                 momentum=0.9, nesterov=True),
    "Adam.tensor_lr": lambda p, r: torch.optim.Adam(p, lr=torch.tensor(0.01 * (r + 1)),
                                                    foreach=False),
    "AdamW.amsgrad": lambda p, r: torch.optim.AdamW(p, lr=0.01, amsgrad=True,
                                                    betas=(0.9, 0.99 - 0.01 * r)),
    "Adagrad": lambda p, r: torch.optim.Adagrad(p, lr=0.1, initial_accumulator_value=0.1 * r),
    "Adadelta": lambda p, r: torch.optim.Adadelta(p, rho=0.9 - 0.01 * r),
    "Adamax": lambda p, r: torch.optim.Adamax(p, lr=0.02),
    "ASGD": lambda p, r: torch.optim.ASGD(p, lr=0.01, t0=10 + r),
    "NAdam": lambda p, r: torch.optim.NAdam(p, lr=0.01),
    "RAdam": lambda p, r: torch.optim.RAdam(p, lr=0.01),
    "RMSprop.centered": lambda p, r: torch.optim.RMSprop(p, lr=0.01, momentum=0.5, centered=True),
    "Rprop": lambda p, r: torch.optim.Rprop(p, lr=0.01 * (r + 1)),
}


def _state_arrays(opt):
    """An optimizer's state_dict as {key: numpy array} (hyper-parameters included), so
    ranks can be compared bit for bit (dtypes included: torch's load_state_dict would
    cast e.g. NAdam's float32 mu_product to the parameters' dtype)."""
    sd, out = opt.state_dict(), {}
    for i, g in enumerate(sd["param_groups"]):
        for k, v in g.items():
            if isinstance(v, torch.Tensor):
                out[f"group{i}.{k}"] = v.detach().numpy().copy()
            elif isinstance(v, (int, float, bool)) or v is None:
                out[f"group{i}.{k}"] = np.asarray(np.nan if v is None else v, np.float64)
    for pid, st in sd["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                out[f"state{pid}.{k}"] = v.detach().numpy().copy()
            elif v is not None:
                out[f"state{pid}.{k}"] = np.asarray(v, np.float64)
    return out


def optimizer_state_cases():
    """broadcast_optimizer_state for every torch.optim optimizer where the root has
    lazily created state for some parameters only, other ranks have none or more
    steps, hyper-parameters (scalar and tensor) differ per rank, one parameter needs no
    gradient and one never gets one. Afterwards every rank holds the root's state (the
    test compares bits across ranks), Horovod's no-grad expectations hold, and a step
    of DistributedOptimizer keeps the ranks identical."""
    r, n = hvd.rank(), hvd.size()
    out = {}
    for name, make in _OPTIMIZERS.items():
        model = _NoGradModel(r)
        opt = make(model.parameters(), r)
        steps = [1, 0, 2][r % 3]  # root: one step; others: none or two
        for step in range(steps):
            opt.zero_grad()
            model(torch.full((2,), float(r + step + 1), dtype=torch.float64)).sum().backward()
            opt.step()
        had_state = bool(opt.state_dict()["state"])  # Adagrad makes its state up front
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        hvd.broadcast_optimizer_state(opt, root_rank=0)
        assert model.a.grad is None, name
        grad = opt.param_groups[0]["params"][1].grad
        if steps or not had_state:  # Horovod's script broadcasts this gradient next
            assert isinstance(grad, torch.Tensor), (name, grad)
        has = grad is not None
        out[f"{name}/grad"] = hvd.broadcast(grad if has else torch.zeros_like(model.b),
                                            root_rank=0, name=f"{name}.grad").numpy()
        for key, v in _state_arrays(opt).items():
            out[f"{name}/{key}"] = v
        opt.zero_grad()
        model(torch.full((2,), float(r + 1), dtype=torch.float64)).sum().backward()
        opt.step()
        out[f"{name}/after_step"] = np.concatenate([p.detach().numpy().ravel().astype(np.float64)
                                                    for p in model.parameters()])
    # an optimizer that never stepped anywhere: nothing to broadcast, no failure
    model = _NoGradModel(r)
    opt = torch.optim.Adam(model.parameters(), lr=0.01 * (r + 1))
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    assert opt.param_groups[0]["lr"] == 0.01 and model.b.grad is not None
    return out


def join_uneven():
    """Rank r has r+2 batches; after its last one it joins. Plain SGD, so the expected
    weights follow directly: at step k the ranks still training contribute, and the
    average divides by the full size."""
    r, n = hvd.rank(), hvd.size()
    data = _batches(n + 1, 1, 3 * n, torch.float64)
    x, y = data
    model = _net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    for k in range(r + 2):
        opt.zero_grad()
        F.mse_loss(model(x[k, 0, 3 * r:3 * r + 3]), y[k, 0, 3 * r:3 * r + 3]).backward()
        opt.step()
    last = hvd.join()
    assert last == n - 1, last
    hvd.broadcast_parameters(model.state_dict(), root_rank=last)
    ref = _net()
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for k in range(n + 1):
        ropt.zero_grad()
        for q in range(n):
            if k < q + 2:
                (F.mse_loss(ref(x[k, 0, 3 * q:3 * q + 3]), y[k, 0, 3 * q:3 * q + 3]) / n).backward()
        ropt.step()
    assert _max_diff(model, ref) < 1e-12, _max_diff(model, ref)
    return _params(model)


def sparse_equivalence():
    """Sparse embedding gradients: allgathered as indices + values (SparseAdam, SGD), or
    reduced dense with sparse_as_dense; against one process on the whole batch."""
    r, n = hvd.rank(), hvd.size()
    g = torch.Generator().manual_seed(11)
    idx = torch.randint(0, 30, (3, 4 * n, 3), generator=g)
    target = torch.randn(3, 4 * n, 5, generator=g, dtype=torch.float64)
    out = {}
    cases = {"SparseAdam": (lambda p: torch.optim.SparseAdam(p, lr=0.05), {}),
             "SGD.sparse": (lambda p: torch.optim.SGD(p, lr=0.5), {}),
             "Adam.sparse_as_dense": (lambda p: torch.optim.Adam(p, lr=0.05),
                                      {"sparse_as_dense": True})}
    for name, (make, kw) in cases.items():
        torch.manual_seed(0)
        model = nn.Embedding(30, 5, sparse=True).double()
        ref = copy.deepcopy(model)
        opt = hvd.DistributedOptimizer(make(model.parameters()),
                                       named_parameters=model.named_parameters(), **kw)
        ropt = make(ref.parameters())
        sh = slice(4 * r, 4 * r + 4)
        for s in range(3):
            opt.zero_grad()
            F.mse_loss(model(idx[s, sh]).sum(1), target[s, sh]).backward()
            opt.step()
            ropt.zero_grad()
            F.mse_loss(ref(idx[s]).sum(1), target[s]).backward()
            if kw.get("sparse_as_dense"):
                ref.weight.grad = ref.weight.grad.to_dense()
            ropt.step()
        diff = _max_diff(model, ref)
        assert diff < 1e-12, (name, diff)
        out[name] = _params(model)
    # hvd.sparse_allreduce_async (Horovod's signature): every rank's rows, rank order;
    # rank 0 contributes nothing, rows repeat within and across ranks
    def grad_of(q):
        rows = torch.tensor([q % 5, (2 * q) % 5, q % 5], dtype=torch.int64)[:2 * (q > 0) + (q > 1)]
        vals = torch.arange(rows.numel() * 3, dtype=torch.float64).reshape(-1, 3) + 10 * q
        return torch.sparse_coo_tensor(rows[None], vals, (5, 3))
    for op, div in ((hvd.Sum, 1), (hvd.Average, n)):
        h = hvd.sparse_allreduce_async(grad_of(r), name=f"sparse.{op}", op=op)
        got = h()
        assert got.is_sparse and got.shape == (5, 3) and got is h.wait()
        want = sum(grad_of(q).to_dense() for q in range(n)) / div
        torch.testing.assert_close(got.to_dense(), want, rtol=0, atol=0)
        out[f"sparse_allreduce_async.{op}"] = got.coalesce().values().numpy()
    _expect_raises(ValueError, lambda: hvd.sparse_allreduce_async(grad_of(r), "s.max", hvd.Max),
                   "sparse_as_dense")
    _expect_raises(TypeError, lambda: hvd.sparse_allreduce_async(torch.ones(2), "s.dense",
                                                                 hvd.Sum), "sparse")
    return out
