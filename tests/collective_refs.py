"""numpy references shared by the collective tests, also pasted into the rank
snippets (tests/mpirun.py runs code strings): deterministic per-rank data, so every
rank can compute what every other rank contributed."""
REFS = r'''
import ml_dtypes

# Every dtype Horovod 0.28 takes, plus bfloat16.
REDUCIBLE = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16,
             ml_dtypes.bfloat16, np.float32, np.float64]
ALL_DTYPES = REDUCIBLE + [np.bool_]


def data(dt, shape, seed, rank, lo=-3, hi=4):
    """Small integers (exact in every dtype, sums and products of up to 4 too)."""
    rng = np.random.default_rng(seed * 1000 + rank)
    if np.dtype(dt) == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.dtype(dt).kind == "u":
        lo = max(lo, 0)
    return rng.integers(lo, hi, shape).astype(dt)


def rows(d0, n, r):
    """Partition rule: the first d0 % n ranks get one extra row."""
    base, extra = divmod(d0, n)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


def reduce_ref(arrays, op, n, prescale=1.0, postscale=1.0):
    """What the engine computes: prescale, reduce, then scale by postscale (and 1/n
    for Average), with the kernels' rounding rules."""
    dt = arrays[0].dtype
    def scale(x, f):
        if f == 1.0:
            return x
        if dt.kind in "iu":
            return np.trunc(x.astype(np.float64) * f).astype(dt)
        if dt == np.float64:
            return (x * f).astype(dt)
        return (x.astype(np.float32) * np.float32(f)).astype(dt)
    # Inputs are small integers, so every partial result is exact in every dtype and
    # the reduction order does not matter.
    fn = {hvd.Sum: np.add, hvd.Average: np.add, hvd.Min: np.minimum, hvd.Max: np.maximum,
          hvd.Product: np.multiply}[op]
    acc = scale(arrays[0], prescale)
    for a in arrays[1:]:
        acc = fn(acc, scale(a, prescale)).astype(dt)
    post = postscale * (1.0 / n if op == hvd.Average else 1.0)
    return scale(acc, post)


def same(got, want):
    """Bitwise equality with dtype and shape."""
    got = np.asarray(got)
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()
'''
