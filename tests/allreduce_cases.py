"""Inputs and numpy references for the allreduce tests, shared by the ranks (which
check their own results) and the pytest process.

Every rank can regenerate every other rank's input (seeded by case and rank), so
each rank compares its result with a numpy reference of the whole reduction and
returns failures plus a digest of each result; pytest then checks that the
digests are identical on all ranks (bitwise identical results).

Inputs are chosen so that the reduction is exact in every dtype (integer-valued
floats, powers of two for products, no integer overflow); the only rounding left
is the engine's documented scaling (prescale per rank, then sum, then
postscale x 1/N for Average), which the reference performs the same way:
floats in their own precision (fp16/bf16 via float32), integers in double and
truncated toward zero."""
import hashlib
import zlib

import ml_dtypes
import numpy as np

from horovodlite.basics import Average as AVERAGE, Max as MAX, Min as MIN
from horovodlite.basics import Product as PRODUCT, Sum as SUM

OPS = {"Sum": SUM, "Average": AVERAGE, "Min": MIN, "Max": MAX, "Product": PRODUCT}
DTYPES = ["uint8", "int8", "uint16", "int16", "int32", "int64", "float16", "bfloat16",
          "float32", "float64"]
HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def dtype_of(name):
    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)


def is_int(dt):
    return np.issubdtype(dt, np.integer)


def shapes(n):
    """0-d, empty, 1, 17, 17x17 and a length not divisible by n (for n > 1)."""
    return [(), (0,), (1,), (17,), (17, 17), (n * 1031 + max(1, n - 1),)]


def make_input(dtname, shape, op, rank, n, key):
    """Rank `rank`'s input for case `key`; reductions over n ranks stay exact."""
    dt = dtype_of(dtname)
    rng = np.random.default_rng([zlib.crc32(str(key).encode()), rank])
    size = int(np.prod(shape, dtype=np.int64))
    if is_int(dt):
        info = np.iinfo(dt)
        if op in (SUM, AVERAGE):
            lo, hi = (0, info.max // n) if info.min == 0 else (info.min // n, info.max // n)
        elif op == PRODUCT:
            lo, hi = (0, 3) if info.min == 0 else (-2, 2)
        else:
            lo, hi = info.min, info.max
        v = rng.integers(lo, hi, size, endpoint=True, dtype=dt)
    else:
        if op in (SUM, AVERAGE):
            v = rng.integers(-8, 8, size, endpoint=True).astype(np.float64)
        elif op == PRODUCT:
            v = rng.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0], size)
        else:
            v = rng.standard_normal(size) * 100
        v = v.astype(np.float32).astype(dt)
    return v.astype(dt).reshape(shape)


def scale(x, factor):
    """The core's scale_buffer in numpy."""
    dt = x.dtype
    if factor == 1.0:
        return x.copy()
    if is_int(dt):
        info = np.iinfo(dt)
        v = np.trunc(x.astype(np.float64) * factor)
        hi, lo = v >= float(info.max) + 1.0, v <= info.min
        out = np.zeros(x.shape, dt)
        mid = ~(hi | lo | np.isnan(v))
        out[mid] = v[mid].astype(dt)
        out[hi], out[lo] = info.max, info.min
        return out
    if dt in HALF:
        return (x.astype(np.float32) * np.float32(factor)).astype(dt)
    return (x * dt.type(factor)).astype(dt)


def combine(a, b, op):
    dt = a.dtype
    wide = np.float32 if dt in HALF else dt
    a, b = a.astype(wide), b.astype(wide)
    with np.errstate(over="ignore", invalid="ignore"):
        if op in (SUM, AVERAGE):
            r = a + b
        elif op == PRODUCT:
            r = a * b
        elif op == MIN:
            r = np.minimum(a, b)
        else:
            r = np.maximum(a, b)
    return r.astype(dt)


def reference(inputs, op, prescale=1.0, postscale=1.0):
    n = len(inputs)
    xs = [scale(x, prescale) for x in inputs]
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = combine(acc, x, op)
    with np.errstate(all="ignore"):
        return scale(acc, postscale * (1.0 / n if op == AVERAGE else 1.0))


def digest(a):
    return f"{a.dtype.name}{a.shape}:" + hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def same_bits(got, want):
    return (isinstance(got, np.ndarray) and got.dtype == want.dtype and got.shape == want.shape
            and got.tobytes() == want.tobytes())


def describe(got, want):
    if not isinstance(got, np.ndarray):
        return f"got {type(got).__name__}"
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{got.shape}, want {want.dtype}{want.shape}"
    g, w = got.ravel(), want.ravel()
    isz = g.dtype.itemsize
    differs = (g.view(np.uint8).reshape(-1, isz) != w.view(np.uint8).reshape(-1, isz)).any(axis=1)
    idx = np.flatnonzero(differs)
    return f"{idx.size} of {g.size} differ: " + "; ".join(
        f"[{i}] got {g[i]!r} want {w[i]!r}" for i in idx[:3])


class Checker:
    """Collects failures (instead of stopping at the first) and result digests."""

    def __init__(self):
        self.failures, self.digests = [], {}

    def check(self, key, got, want):
        if not same_bits(got, want):
            self.failures.append(f"{key}: {describe(got, want)}")
        self.digests[key] = digest(got) if isinstance(got, np.ndarray) else repr(got)

    def result(self):
        return {"failures": self.failures, "digests": self.digests}


def all_inputs(dtname, shape, op, n, key):
    return [make_input(dtname, shape, op, r, n, key) for r in range(n)]


# ---- what the ranks run --------------------------------------------------------

def run_matrix(hvd, big=True, sync_subset=True):
    """Every op x dtype x shape submitted async with explicit names, in reversed order
    on odd ranks, all in flight at once; then synchronous, in-place and one >= 64 MiB
    float32 allreduce."""
    n, r = hvd.size(), hvd.rank()
    ck = Checker()
    cases = [(dt, opname, shape) for dt in DTYPES for opname in OPS for shape in shapes(n)]
    order = cases if r % 2 == 0 else cases[::-1]
    handles, mine = {}, {}
    for dt, opname, shape in order:
        key = f"m/{dt}/{opname}/{shape}"
        x = make_input(dt, shape, OPS[opname], r, n, key)
        mine[key] = (x, x.copy())
        handles[key] = hvd.allreduce_async(x, name=key, op=hvd.__dict__[opname])
    for dt, opname, shape in cases:
        key = f"m/{dt}/{opname}/{shape}"
        got = hvd.synchronize(handles[key])
        ck.check(key, got, reference(all_inputs(dt, shape, OPS[opname], n, key), OPS[opname]))
        x, orig = mine[key]
        if x.tobytes() != orig.tobytes():
            ck.failures.append(f"{key}: the input was modified by the out-of-place allreduce")

    if sync_subset:
        # Synchronous, unnamed (named in call order), and in place.
        for dt in DTYPES:
            for opname in OPS:
                key = f"s/{dt}/{opname}"
                x = make_input(dt, (17,), OPS[opname], r, n, key)
                got = hvd.allreduce(x, op=hvd.__dict__[opname])
                ck.check(key, got, reference(all_inputs(dt, (17,), OPS[opname], n, key), OPS[opname]))
                key = f"i/{dt}/{opname}"
                x = make_input(dt, (5, 3), OPS[opname], r, n, key)
                res = hvd.allreduce_(x, op=hvd.__dict__[opname], name=key)
                if res is not x:
                    ck.failures.append(f"{key}: allreduce_ did not return its argument")
                ck.check(key, x, reference(all_inputs(dt, (5, 3), OPS[opname], n, key), OPS[opname]))

    if big:
        count = 16 * 1024 * 1024 + 3  # 64 MiB of float32 and a bit, not divisible by 2 or 4
        base = np.arange(count, dtype=np.int32) % 13
        x = (base + r).astype(np.float32)
        got = hvd.allreduce(x, op=hvd.Sum, name="big")
        want = (n * base + n * (n - 1) // 2).astype(np.float32)
        ck.check("big", got, want)
    return ck.result()


def run_api(hvd):
    """Scale factors, the deprecated average=, default op, async in place, poll,
    grouped allreduce, non-exact floats within a dtype-derived tolerance."""
    n, r = hvd.size(), hvd.rank()
    ck = Checker()
    pre, post = 0.5, 1.5
    for dt in DTYPES:
        for opname in ("Sum", "Average", "Max"):
            for shape in ((17,), (n * 1031 + 1,)):
                key = f"scale/{dt}/{opname}/{shape}"
                op = OPS[opname]
                x = make_input(dt, shape, op, r, n, key)
                got = hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post, name=key)
                ck.check(key, got, reference(all_inputs(dt, shape, op, n, key), op, pre, post))

    # deprecated average= and the default op (Average)
    for key, kwargs, op in (("avg-true", {"average": True}, AVERAGE),
                            ("avg-false", {"average": False}, SUM),
                            ("default-op", {}, AVERAGE)):
        x = make_input("float32", (33,), op, r, n, key)
        ck.check(key, hvd.allreduce(x, name=key, **kwargs),
                 reference(all_inputs("float32", (33,), op, n, key), op))
    try:
        hvd.allreduce(np.ones(3), op=hvd.Sum, average=True)
        ck.failures.append("op= together with average= was accepted")
    except ValueError:
        pass

    # async in place: poll until done, synchronize returns the same array
    key = "async-inplace"
    x = make_input("int32", (9, 4), SUM, r, n, key)
    h = hvd.allreduce_async_(x, op=hvd.Sum, name=key)
    import time
    t0 = time.time()
    while not hvd.poll(h):
        if time.time() - t0 > 60:
            ck.failures.append("poll() never became true")
            break
        time.sleep(0.001)
    res = hvd.synchronize(h)
    if res is not x:
        ck.failures.append("allreduce_async_: synchronize did not return the input array")
    ck.check(key, x, reference(all_inputs("int32", (9, 4), SUM, n, key), SUM))

    # grouped, out of place and in place, mixed dtypes and shapes
    specs = [("float32", (5,)), ("int64", (3, 3)), ("float16", ()), ("float32", (0,)),
             ("bfloat16", (40,))]
    for in_place in (False, True):
        key = f"grouped-{in_place}"
        xs = [make_input(dt, shape, SUM, r, n, f"{key}/{i}") for i, (dt, shape) in enumerate(specs)]
        if in_place:
            outs = hvd.grouped_allreduce_(xs, op=hvd.Sum, name=key)
            if any(o is not x for o, x in zip(outs, xs)):
                ck.failures.append("grouped_allreduce_ did not return its arguments")
        else:
            outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name=key)
        if len(outs) != len(specs):
            ck.failures.append(f"{key}: {len(outs)} results for {len(specs)} tensors")
        for i, ((dt, shape), out) in enumerate(zip(specs, outs)):
            ck.check(f"{key}/{i}", out,
                     reference(all_inputs(dt, shape, SUM, n, f"{key}/{i}"), SUM))

    # real-valued floats: summation order is the ring's, so compare with a tolerance
    for dt in ("float16", "bfloat16", "float32", "float64"):
        d = dtype_of(dt)
        eps = float(ml_dtypes.finfo(d).eps) if d in HALF else float(np.finfo(d).eps)
        for opname in ("Sum", "Average"):
            key = f"real/{dt}/{opname}"
            xs = [(np.random.default_rng([zlib.crc32(key.encode()), q]).standard_normal(1000)
                   .astype(np.float32).astype(d)) for q in range(n)]
            got = hvd.allreduce(xs[r], op=OPS[opname], name=key)
            exact = sum(x.astype(np.float64) for x in xs)
            mag = sum(np.abs(x.astype(np.float64)) for x in xs)
            if opname == "Average":
                exact, mag = exact / n, mag / n
            tol = 2 * n * eps * mag + eps * np.abs(exact) + 1e-300
            err = np.abs(got.astype(np.float64) - exact)
            if got.dtype != d or got.shape != (1000,) or not np.all(err <= tol):
                ck.failures.append(f"{key}: max error {err.max():.3g} > tolerance")
            ck.digests[key] = digest(got)
    return ck.result()


def run_many_in_flight(hvd, count=300):
    """`count` small async tensors in flight at once; returns the engine's counters
    for them so the test can see whether they were fused."""
    n, r = hvd.size(), hvd.rank()
    ck = Checker()
    hvd.allreduce(np.zeros(1), name="warmup")  # every rank is up before we count
    from horovodlite._loader import _core
    before = _core.stats(0)
    keys = [f"many/{i}" for i in range(count)]
    order = keys if r % 2 == 0 else keys[::-1]
    handles = {}
    for k in order:
        handles[k] = hvd.allreduce_async(make_input("float32", (7,), SUM, r, n, k), op=hvd.Sum, name=k)
    for k in reversed(keys):
        ck.check(k, hvd.synchronize(handles[k]), reference(all_inputs("float32", (7,), SUM, n, k), SUM))
    after = _core.stats(0)
    res = ck.result()
    res["groups"] = after["groups"] - before["groups"]
    res["tensors"] = after["tensors"] - before["tensors"]
    return res


def run_mixed_in_flight(hvd, per_kind=4):
    """Small async tensors in flight together that differ in dtype, op or scale
    factors: only equal ones may share a fusion buffer, and every result must still be
    its own reference. Returns the engine's counters for them."""
    n, r = hvd.size(), hvd.rank()
    ck = Checker()
    hvd.allreduce(np.zeros(1), name="warmup")
    from horovodlite._loader import _core
    before = _core.stats(0)
    kinds = [(dt, op, pre, post) for dt in ("float32", "float64", "int32") for op in ("Sum", "Max")
             for pre, post in ((1.0, 1.0), (0.5, 3.0), (2.0, 1.0)) if dt != "int32" or pre == 1.0]
    cases = [(f"mixed/{dt}/{op}/{pre}/{post}/{i}", dt, op, pre, post)
             for dt, op, pre, post in kinds for i in range(per_kind)]
    order = cases if r % 2 == 0 else cases[::-1]
    handles = {}
    for key, dt, op, pre, post in order:
        x = make_input(dt, (5,), OPS[op], r, n, key)
        handles[key] = hvd.allreduce_async(x, op=OPS[op], prescale_factor=pre, postscale_factor=post,
                                           name=key)
    for key, dt, op, pre, post in cases:
        want = reference(all_inputs(dt, (5,), OPS[op], n, key), OPS[op], pre, post)
        ck.check(key, hvd.synchronize(handles[key]), want)
    after = _core.stats(0)
    res = ck.result()
    res["kinds"] = len(kinds)
    res["groups"] = after["groups"] - before["groups"]
    res["tensors"] = after["tensors"] - before["tensors"]
    return res


def run_segments(hvd):
    """Blocks of several pipelined segments, and blocks that differ by one element
    across a segment boundary (run with a small HOROVODLITE_RING_SEGMENT_BYTES)."""
    import os
    n, r = hvd.size(), hvd.rank()
    seg_bytes = int(os.environ["HOROVODLITE_RING_SEGMENT_BYTES"])
    ck = Checker()
    for dt in DTYPES:
        seg = max(1, seg_bytes // dtype_of(dt).itemsize)
        for count in (seg - 1, n * seg + 1, 3 * n * seg + 2, 5 * n * seg - 1):
            for opname in ("Sum", "Max"):
                key = f"seg/{dt}/{opname}/{count}"
                x = make_input(dt, (count,), OPS[opname], r, n, key)
                got = hvd.allreduce(x, op=OPS[opname], name=key)
                ck.check(key, got, reference(all_inputs(dt, (count,), OPS[opname], n, key), OPS[opname]))
    return ck.result()


def run_repeated(hvd, process_set=None, repeats=3, unnamed=False):
    """Synchronous allreduces one at a time, each name called `repeats` times with new
    data: from the second call on the response cache answers, and on a set of two
    ranks a small one rides with the vote (HOROVODLITE_VOTE_RIDER_BYTES). `unnamed`:
    the same calls without names (each a new name the cache never answers). Every op x
    dtype, out of place and in place, postscale and prescale (which never rides), and
    one tensor above the rider limit. Returns the set's rider count, and how many of its
    rounds a blocked caller ran itself (of them, how many the large tensor's), with the
    results."""
    from horovodlite._loader import _core
    ps = process_set or hvd.global_process_set
    if not ps.included():
        return {"failures": [], "digests": {}, "rider_groups": None}
    n, r = ps.size(), ps.rank()
    kw = {} if process_set is None else {"process_set": process_set}
    ck = Checker()
    before = _core.stats(ps.process_set_id)
    cases = [(dt, opname, shape) for dt in DTYPES for opname in OPS
             for shape in ((), (17, 17), (n * 1031 + 1,))]
    large = (200000,)  # 800000 bytes: above the riders' limit, within a lone caller's on one host
    cases += [("float32", "Sum", large)]
    large_caller_rounds = 0
    for rep in range(repeats):
        for dt, opname, shape in cases:
            if shape == large:
                at_start = _core.stats(ps.process_set_id)["caller_rounds"]
            key = f"rep/{dt}/{opname}/{shape}"
            data = f"{key}#{rep}"  # same name (cached), other data each time
            op = OPS[opname]
            x = make_input(dt, shape, op, r, n, data)
            got = hvd.allreduce(x, op=op, name=None if unnamed else key, **kw)
            ck.check(f"{data}", got, reference(all_inputs(dt, shape, op, n, data), op))
            y = make_input(dt, shape, op, r, n, data + "/in")
            hvd.allreduce_(y, op=op, name=None if unnamed else key + "/in", **kw)
            ck.check(f"{data}/in", y, reference(all_inputs(dt, shape, op, n, data + "/in"), op))
            if shape == large:
                large_caller_rounds += _core.stats(ps.process_set_id)["caller_rounds"] - at_start
        for dt in ("float32", "int32"):
            for pre, post in ((1.0, 3.0), (0.5, 1.0)):
                key = f"rep/scaled/{dt}/{pre}/{post}"
                data = f"{key}#{rep}"
                x = make_input(dt, (33,), SUM, r, n, data)
                got = hvd.allreduce(x, op=SUM, prescale_factor=pre, postscale_factor=post,
                                    name=None if unnamed else key, **kw)
                ck.check(data, got, reference(all_inputs(dt, (33,), SUM, n, data), SUM, pre, post))
    after = _core.stats(ps.process_set_id)
    res = ck.result()
    res["rider_groups"] = after["rider_groups"] - before["rider_groups"]
    res["caller_rounds"] = after["caller_rounds"] - before["caller_rounds"]
    res["large_caller_rounds"] = large_caller_rounds
    res["rounds"] = after["rounds"] - before["rounds"]
    res["rings_sent"] = after["rings_sent"] - before["rings_sent"]
    return res
