"""The CPU reduction kernels (reduce_into / scale_buffer / fill_identity) against numpy.

The kernels are reached through the core's test entry points with raw pointers, so
every dtype x op x length (0..67 covers every vector tail) and odd alignments can be
checked directly. Each ISA the CPU has is forced in a subprocess and must give
bitwise the same bytes. The C++ unit tests (kernels, ring chunk arithmetic) are
compiled and run from here when g++ is available."""
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from horovodlite import Average, Max, Min, Product, Sum, dtypes
from horovodlite._loader import _core

ROOT = Path(__file__).resolve().parent.parent

DTYPES = [np.uint8, np.int8, np.uint16, np.int16, np.int32, np.int64, np.float16,
          ml_dtypes.bfloat16, np.float32, np.float64]
DT_IDS = [np.dtype(d).name for d in DTYPES]
OPS = {"sum": Sum, "average": Average, "min": Min, "max": Max, "product": Product}
HALF = (np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16))


def code(dt):
    return dtypes.code_of(dt)


def is_int(dt):
    return np.issubdtype(np.dtype(dt), np.integer)


def ref_reduce(d, s, op):
    """What the kernel must produce for dst (op) src, computed by numpy."""
    dt = d.dtype
    wide = np.float32 if dt in HALF else dt
    a, b = d.astype(wide), s.astype(wide)
    with np.errstate(over="ignore", invalid="ignore"):
        if op in (Sum, Average):
            r = a + b  # integers wrap like numpy
        elif op == Product:
            r = a * b
        elif op == Min:
            r = np.minimum(a, b)  # a NaN in either operand wins
        else:
            r = np.maximum(a, b)
    return r.astype(dt)  # fp16/bf16: one round to nearest even from float32


def ref_scale(x, factor):
    dt = x.dtype
    if is_int(dt):
        info = np.iinfo(dt)
        v = np.trunc(x.astype(np.float64) * factor)  # truncate toward zero
        hi, lo = v >= float(info.max) + 1.0, v <= info.min  # saturate, do not wrap
        out = np.zeros(x.shape, dt)
        mid = ~(hi | lo | np.isnan(v))
        out[mid] = v[mid].astype(dt)
        out[hi], out[lo] = info.max, info.min
        return out
    if dt in HALF:
        return (x.astype(np.float32) * np.float32(factor)).astype(dt)
    return (x * dt.type(factor)).astype(dt)


def random_values(dt, n, rng, op=Sum):
    """Values whose reductions are interesting but stay in range for products."""
    dt = np.dtype(dt)
    if is_int(dt):
        info = np.iinfo(dt)
        if op == Product:
            return rng.integers(-3 if info.min < 0 else 0, 4, n).astype(dt)
        return rng.integers(info.min, info.max, n, endpoint=True, dtype=dt)
    v = rng.standard_normal(n) * (4.0 if op != Product else 1.5)
    return v.astype(np.float32).astype(dt) if dt in HALF else v.astype(dt)


def aligned_empty(n, dt, offset_bytes=0):
    """n elements of dt starting offset_bytes past a 64-byte boundary, plus a guard tail."""
    dt = np.dtype(dt)
    raw = np.empty(n * dt.itemsize + 128 + offset_bytes + 64, np.uint8)
    start = (-raw.ctypes.data) % 64 + offset_bytes
    view = raw[start:start + n * dt.itemsize].view(dt)
    assert n == 0 or view.ctypes.data % 64 == offset_bytes % 64
    return view, raw


def kernel_reduce(d, s, op):
    out = d.copy()
    _core.reduce_into(out.ctypes.data, s.ctypes.data, out.size, code(out.dtype), op)
    return out


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def assert_bits(got, want, what):
    if not same_bits(got, want):
        bad = np.flatnonzero(got.view(np.uint8) != want.view(np.uint8))
        i = bad[0] // got.dtype.itemsize if bad.size else -1
        raise AssertionError(f"{what}: first difference at element {i}: got {got.ravel()[i]!r} "
                             f"want {want.ravel()[i]!r}")


@pytest.mark.parametrize("dt", DTYPES, ids=DT_IDS)
def test_reduce_every_op_and_length(dt):
    rng = np.random.default_rng(1)
    for opname, op in OPS.items():
        for n in list(range(68)) + [1000, 4099]:
            d = random_values(dt, n, rng, op)
            s = random_values(dt, n, rng, op)
            assert_bits(kernel_reduce(d, s, op), ref_reduce(d, s, op), f"{opname} n={n}")


@pytest.mark.parametrize("dt", DTYPES, ids=DT_IDS)
def test_reduce_large(dt):
    rng = np.random.default_rng(2)
    n = (3 << 20) + 13
    d, s = random_values(dt, n, rng), random_values(dt, n, rng)
    for op in (Sum, Max):
        assert_bits(kernel_reduce(d, s, op), ref_reduce(d, s, op), f"op {op} n={n}")


@pytest.mark.parametrize("dt", DTYPES, ids=DT_IDS)
def test_reduce_unaligned(dt):
    """Element-aligned but not vector-aligned starts, dst and src misaligned differently;
    the bytes just past the end must stay untouched."""
    rng = np.random.default_rng(3)
    isz = np.dtype(dt).itemsize
    for n in (1, 7, 31, 64, 129, 1031):
        for doff, soff in ((isz, 0), (0, 3 * isz), (5 * isz, 7 * isz), (isz, isz)):
            for op in (Sum, Min, Product):
                d, draw = aligned_empty(n, dt, doff)
                s, _ = aligned_empty(n, dt, soff)
                d[...] = random_values(dt, n, rng, op)
                s[...] = random_values(dt, n, rng, op)
                tail = draw[(d.ctypes.data - draw.ctypes.data) + n * isz:].copy()
                want = ref_reduce(d, s, op)
                _core.reduce_into(d.ctypes.data, s.ctypes.data, n, code(dt), op)
                assert_bits(d, want, f"op {op} n={n} offsets {doff},{soff}")
                after = draw[(d.ctypes.data - draw.ctypes.data) + n * isz:]
                assert after.tobytes() == tail.tobytes(), "wrote past the end"


def test_reduce_in_place_aliasing():
    """dst == src: x (op) x."""
    rng = np.random.default_rng(4)
    for dt in DTYPES:
        for op in (Sum, Max, Product):
            x = random_values(dt, 101, rng, op)
            want = ref_reduce(x, x.copy(), op)
            _core.reduce_into(x.ctypes.data, x.ctypes.data, x.size, code(dt), op)
            assert_bits(x, want, f"{np.dtype(dt).name} op {op}")


@pytest.mark.parametrize("dt", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64],
                         ids=["float16", "bfloat16", "float32", "float64"])
def test_min_max_nan(dt):
    """A NaN in either operand makes the result NaN (np.minimum / np.maximum), at every
    position of the vector and tail; infinities behave as ordinary values."""
    n = 67
    base = np.arange(n, dtype=np.float32).astype(dt)
    for op, npop in ((Min, np.minimum), (Max, np.maximum)):
        for where in ("dst", "src", "both"):
            for pos in (0, 5, 15, 16, 31, 32, 63, 66):
                d, s = base.copy(), (base[::-1]).copy()
                if where in ("dst", "both"):
                    d[pos] = np.nan
                if where in ("src", "both"):
                    s[pos] = np.nan
                d[(pos + 1) % n] = np.inf
                s[(pos + 2) % n] = -np.inf
                got = kernel_reduce(d, s, op)
                want = npop(d.astype(np.float64), s.astype(np.float64))
                assert np.isnan(got.astype(np.float64)[pos]), (op, where, pos)
                np.testing.assert_array_equal(got.astype(np.float64), want,
                                              err_msg=f"op {op} NaN in {where} at {pos}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_half_rounding():
    """fp16/bf16 sums and products are computed in float32 and rounded to nearest even
    once: values chosen so the exact result falls on and around rounding ties, plus
    subnormals and overflow to inf."""
    for dt in HALF:
        f = np.float32
        info = ml_dtypes.finfo(dt) if dt == np.dtype(ml_dtypes.bfloat16) else np.finfo(dt)
        one = np.array(1.0, dt)
        eps = float(info.eps)
        a = np.array([1.0, 1.0, 1.0, 1.0 + eps, -1.0, float(info.max), float(info.max),
                      float(info.smallest_subnormal), float(info.smallest_normal), 3.0, 0.1, 1e-3],
                     np.float32).astype(dt)
        b = np.array([eps / 2, eps / 4, 3 * eps / 4, eps / 2, -eps / 2, float(info.max),
                      -float(info.max), float(info.smallest_subnormal),
                      -float(info.smallest_subnormal), 1.0 / 3, 0.2, 7e-4], np.float32).astype(dt)
        for op in (Sum, Product):
            got = kernel_reduce(a, b, op)
            if op == Sum:
                want = (a.astype(f) + b.astype(f)).astype(dt)
            else:
                want = (a.astype(f) * b.astype(f)).astype(dt)
            assert_bits(got, want, f"{dt.name} op {op}")
        # ties: 1 + eps/2 rounds to 1 (even), (1+eps) + eps/2 rounds up to 1+2eps
        s = kernel_reduce(a[:4], b[:4], Sum)
        assert s[0] == one and s[3] == np.array(1.0 + 2 * eps, np.float32).astype(dt)
        assert np.isinf(kernel_reduce(a[5:6], b[5:6], Sum).astype(np.float32))[0]


@pytest.mark.parametrize("dt", DTYPES, ids=DT_IDS)
def test_scale_buffer(dt):
    rng = np.random.default_rng(5)
    factors = [1.0, 0.5, 1.0 / 3, 2.0, -1.5, 0.0, 1e-3]
    if is_int(dt):
        factors.append(1e30)  # saturates instead of wrapping
    for n in list(range(0, 68, 3)) + [1001, 70001]:
        x = random_values(dt, n, rng)
        for factor in factors:
            got = x.copy()
            with np.errstate(over="ignore", invalid="ignore"):
                want = ref_scale(x, factor)
            _core.scale_buffer(got.ctypes.data, n, code(dt), factor)
            assert_bits(got, want, f"factor {factor} n={n}")


def test_integer_average_truncates_toward_zero():
    """Average of integers = (sum * (1/N)) truncated toward zero, not floor."""
    x = np.array([-7, -5, -1, 0, 1, 5, 7, 2**31 - 1], np.int64)
    got = x.copy()
    _core.scale_buffer(got.ctypes.data, x.size, code(np.int64), 1.0 / 3)
    np.testing.assert_array_equal(got, [-2, -1, 0, 0, 0, 1, 2, int((2**31 - 1) * (1.0 / 3))])


@pytest.mark.parametrize("dt", DTYPES, ids=DT_IDS)
def test_fill_identity(dt):
    dt = np.dtype(dt)
    rng = np.random.default_rng(6)
    if is_int(dt):
        lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    else:
        lo, hi = -np.inf, np.inf
    expect = {Sum: 0, Average: 0, Product: 1, Min: hi, Max: lo}
    for op, value in expect.items():
        for n in (0, 1, 17, 67, 1000):
            buf = np.full(n, 7, dt) if n else np.empty(0, dt)
            _core.fill_identity(buf.ctypes.data, n, code(dt), op)
            np.testing.assert_array_equal(buf.astype(np.float64), np.full(n, value, np.float64))
            # reducing anything with the identity leaves it unchanged
            x = random_values(dt, n, rng, op)
            assert_bits(kernel_reduce(buf, x, op), x, f"identity op {op} n={n}")


def test_rejects_bad_dtype_and_op():
    buf = np.zeros(4, np.uint8)
    with pytest.raises(Exception, match="bool"):
        _core.reduce_into(buf.ctypes.data, buf.ctypes.data, 4, dtypes.BOOL, Sum)
    with pytest.raises(Exception, match="Adasum"):
        _core.reduce_into(buf.ctypes.data, buf.ctypes.data, 4, dtypes.UINT8, 2)
    with pytest.raises(Exception, match="bool"):
        _core.scale_buffer(buf.ctypes.data, 4, dtypes.BOOL, 2.0)


# ---- every ISA the CPU has gives the same bytes -----------------------------------

_ISA_SCRIPT = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_reduce_kernels import DTYPES, OPS, random_values, code, aligned_empty
    import horovodlite as hvd
    from horovodlite._loader import _core
    hvd.init()  # where HOROVODLITE_REDUCE_ISA is read
    rng = np.random.default_rng(7)
    h = hashlib.sha256()
    for dt in DTYPES:
        for op in OPS.values():
            for n in list(range(68)) + [255, 4097, 100003]:
                d, _ = aligned_empty(n, dt, (n % 3) * np.dtype(dt).itemsize)
                s, _ = aligned_empty(n, dt, 0)
                d[...] = random_values(dt, n, rng, op)
                s[...] = random_values(dt, n, rng, op)
                if n > 8 and (d.dtype.kind == "f" or d.dtype.name == "bfloat16"):
                    d[3] = np.nan; s[n - 2] = np.nan
                _core.reduce_into(d.ctypes.data, s.ctypes.data, n, code(dt), op)
                h.update(d.tobytes())
        for n in (0, 1, 17, 67, 4097):
            for f in (0.5, 1.0 / 3, -2.5):
                x = random_values(dt, n, rng)
                with np.errstate(all="ignore"):
                    _core.scale_buffer(x.ctypes.data, n, code(dt), f)
                h.update(x.tobytes())
    print(json.dumps({"isa": _core.reduce_isa(), "digest": h.hexdigest()}))
""")


def _cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _isa_available(isa):
    flags = _cpu_flags()
    return {"generic": True, "avx2": {"avx2", "f16c"} <= flags,
            "avx512": {"avx512f", "avx512bw"} <= flags}[isa]


def test_every_isa_gives_identical_bytes():
    results = {}
    for isa in ("generic", "avx2", "avx512"):
        if not _isa_available(isa):
            continue
        env = dict(os.environ, HOROVODLITE_REDUCE_ISA=isa, OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        proc = subprocess.run([sys.executable, "-c", _ISA_SCRIPT, str(Path(__file__).parent)],
                              env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        results[isa] = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["generic"]["isa"] == "generic"
    if "avx2" in results:
        assert results["avx2"]["isa"] == "avx2"
    if len(results) < 2:
        pytest.skip("this CPU runs only the generic kernels")
    digests = {isa: r["digest"] for isa, r in results.items()}
    assert len(set(digests.values())) == 1, f"kernel sets disagree: {results}"


# ---- C++ unit tests ---------------------------------------------------------------

def _compile(tmp_path, source, extra_sources=()):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ is not installed")
    src = ROOT / "tests" / "cpp" / source
    if not src.exists():
        pytest.skip(f"{src.name} is not there yet")
    exe = tmp_path / src.stem
    cmd = [gxx, "-O2", "-std=c++17", "-pthread", "-I", str(ROOT / "csrc"), str(src),
           *map(str, extra_sources), "-o", str(exe)]
    comp = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert comp.returncode == 0, f"compiling {src.name} failed:\n{comp.stderr[-4000:]}"
    return exe


def _run(exe, env=None, args=()):
    run = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, **(env or {})))
    assert run.returncode == 0, f"{exe.name} failed:\n{run.stdout[-4000:]}\n{run.stderr[-2000:]}"
    return run.stdout


def test_cpp_reduce(tmp_path):
    _run(_compile(tmp_path, "test_reduce.cc", sorted((ROOT / "csrc" / "reduce").glob("*.cc"))))


def test_cpp_partition_and_ring(tmp_path):
    exe = _compile(tmp_path, "test_partition.cc", [ROOT / "csrc" / "collectives" / f for f in ("ring_allreduce.cc", "ring.cc")] + [ROOT / "csrc" / "transport" / "transport.cc"])
    # 4096: several segments per block; 200: segments that are no multiple of 8 bytes
    for seg in ("4096", "200"):
        out = _run(exe, args=[seg])
        assert f"segment bytes {seg}" in out and " 0 failed" in out, out


def test_cpp_path_tuner(tmp_path):
    out = _run(_compile(tmp_path, "test_path_tuner.cc"))
    assert " 0 failed" in out, out


def test_python_codes_come_from_the_core():
    """Every dtype the core has maps from numpy and torch (one table each, built from the
    core's names), and the op codes are the core's."""
    import horovodlite as hvd

    names = dict(_core.DTYPE_CODES)
    assert {"int16", "uint16", "bfloat16", "bool"} <= names.keys() and len(names) == 11
    for name, code in names.items():
        np_dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
        assert dtypes.code_of(np_dt) == code and dtypes.numpy_dtype(code) == np_dt
        assert (code in dtypes.REDUCIBLE) == (name != "bool")
    assert {n: getattr(hvd, n) for n in _core.REDUCE_OP_CODES} == dict(_core.REDUCE_OP_CODES)
    torch = pytest.importorskip("torch")
    from horovodlite.torch._tensors import code_of as torch_code
    for name, code in names.items():
        assert torch_code(getattr(torch, name)) == code
