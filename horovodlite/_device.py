"""GPU tensors of any framework -> what `_core.enqueue` takes, without importing any
framework: torch CUDA tensors, cupy arrays and anything else with
`__cuda_array_interface__` (numba, ...), and jax arrays on a GPU.

`describe(t)` gives a DeviceTensor (pointer, core dtype code, shape, CUDA ordinal,
producer stream). The stream is the one whose queued work writes the tensor: the core
records an event on it at enqueue and its own stream waits for that event before
reading (no device-wide synchronisation), so the caller need not synchronise first.
A handle completes only after the GPU work has finished, so once `synchronize`
returns the result is visible to every stream and the tensors may be reused or freed.

For a frontend (e.g. horovodlite.torch) the whole hand-off is::

    d = _device.describe(tensor)                      # checks contiguity, device
    h = handles.submit(keep, finish, op=..., input=d.ptr, output=out.ptr,
                       dtype=d.dtype, shape=list(d.shape), device=d.device,
                       stream=d.stream, ...)          # same kwargs as host tensors
or, for allreduce, `submit_allreduce(src, dst, ...)` below.
"""
from typing import NamedTuple, Optional

import numpy as np

from . import dtypes

__all__ = ["DeviceTensor", "describe", "is_gpu_tensor", "submit_allreduce"]


class DeviceTensor(NamedTuple):
    ptr: int
    dtype: int               # core DataType code (horovodlite.dtypes)
    shape: tuple
    device: int              # CUDA ordinal; -1 = host memory
    stream: Optional[int]    # producer's cudaStream_t (0 = legacy default); None = ready now
    nbytes: int


def _module_of(t):
    return type(t).__module__.split(".", 1)[0]


def is_gpu_tensor(t):
    """True for a torch CUDA tensor, an object exporting __cuda_array_interface__, or a
    jax array on a GPU; False for everything else (numpy, CPU tensors, ...)."""
    mod = _module_of(t)
    if mod == "torch":
        return bool(getattr(t, "is_cuda", False))
    if mod in ("jax", "jaxlib"):
        return _jax_platform(t) == "gpu"
    return hasattr(t, "__cuda_array_interface__")


def describe(t):
    """DeviceTensor for a C-contiguous GPU tensor; TypeError/ValueError otherwise."""
    mod = _module_of(t)
    if mod == "torch":
        return _describe_torch(t)
    if mod in ("jax", "jaxlib"):
        return _describe_jax(t)
    if hasattr(t, "__cuda_array_interface__"):
        return _describe_cai(t)
    raise TypeError(f"horovodlite: {type(t).__name__} is not a GPU tensor "
                    "(torch CUDA tensor, cupy array or jax GPU array)")


def _numel(shape):
    n = 1
    for d in shape:
        n *= int(d)
    return n


# ---- torch ----
def _describe_torch(t):
    import torch

    from .torch._tensors import code_of  # the one torch dtype table

    if not t.is_cuda:
        raise TypeError("horovodlite: the torch tensor is on the CPU, not a GPU")
    if not t.is_contiguous():
        raise ValueError("horovodlite: GPU tensors must be contiguous (call .contiguous())")
    code = code_of(t.dtype)
    stream = torch.cuda.current_stream(t.device).cuda_stream
    return DeviceTensor(t.data_ptr(), code, tuple(t.shape), t.device.index, int(stream),
                        t.numel() * t.element_size())


# ---- __cuda_array_interface__ (cupy, numba, ...) ----
def _describe_cai(t):
    cai = t.__cuda_array_interface__
    shape = tuple(int(d) for d in cai["shape"])
    # cupy: its dtype object also tells bfloat16 (ml_dtypes) apart from other 2-byte
    # types, which the typestr ("<V2") cannot.
    dt = getattr(t, "dtype", None)
    dt = np.dtype(dt) if dt is not None else np.dtype(cai["typestr"])
    code = dtypes.code_of(dt)
    if not _c_contiguous(shape, cai.get("strides"), dt.itemsize):
        raise ValueError("horovodlite: GPU arrays must be C-contiguous "
                         "(use cupy.ascontiguousarray)")
    ptr = int(cai["data"][0])
    device = _cai_device(t, ptr)
    stream = _cai_stream(t, cai)
    return DeviceTensor(ptr, code, shape, device, stream, _numel(shape) * dt.itemsize)


def _c_contiguous(shape, strides, itemsize):
    if strides is None:  # CAI: None means C-contiguous
        return True
    expect = itemsize
    for d, st in zip(reversed(shape), reversed(strides)):
        if d == 0:
            return True
        if d != 1 and st != expect:
            return False
        expect *= d
    return True


def _cai_device(t, ptr):
    dev = getattr(t, "device", None)
    if dev is not None and hasattr(dev, "id"):  # cupy.cuda.Device
        return int(dev.id)
    from ._loader import _core

    d = _core.pointer_device(ptr) if ptr else -1
    if d < 0:
        raise ValueError("horovodlite: cannot tell which GPU holds this array")
    return d


def _cai_stream(t, cai):
    if _module_of(t) == "cupy":
        import cupy

        return int(cupy.cuda.get_current_stream().ptr)  # 0: the legacy default stream
    # CAI v3: None = no synchronisation needed, 1 = legacy default, 2 = per-thread
    # default, else a cudaStream_t; the CUDA runtime takes 1 and 2 as those handles.
    s = cai.get("stream") if cai.get("version", 0) >= 3 else 0
    return None if s is None else int(s)


# ---- jax ----
def _jax_platform(t):
    try:
        devs = list(t.devices())
    except Exception:  # noqa: BLE001 - tracers and other non-concrete values
        return None
    return devs[0].platform if len(devs) == 1 else None


def _describe_jax(t):
    if _jax_platform(t) != "gpu":
        raise TypeError("horovodlite: the jax array is not on exactly one GPU")
    # jax exposes no stream: wait for the producer instead, then nothing is pending.
    t.block_until_ready()
    dev = next(iter(t.devices()))
    dt = np.dtype(t.dtype)
    shape = tuple(int(d) for d in t.shape)
    ptr = int(t.unsafe_buffer_pointer()) if _numel(shape) else 0
    return DeviceTensor(ptr, dtypes.code_of(dt), shape, int(dev.local_hardware_id), None,
                        _numel(shape) * dt.itemsize)


# ---- allreduce hand-off shared by the GPU frontends ----
def submit_allreduce(src, dst, name, op, prescale, postscale, process_set_id, group="",
                     group_size=0):
    """Enqueues an allreduce of GPU tensor `src` into `dst` (may be `src`: in place),
    through the core's allreduce entry point like host arrays; synchronize returns
    `dst`. Returns the handle."""
    from . import handles

    s = describe(src)
    d = s if dst is src else describe(dst)
    if s.dtype not in dtypes.REDUCIBLE:
        raise TypeError(f"horovodlite: allreduce '{name}': dtype {dtypes.numpy_dtype(s.dtype)} "
                        "cannot be reduced")
    if (d.device, d.dtype, d.nbytes) != (s.device, s.dtype, s.nbytes):
        raise ValueError(f"horovodlite: allreduce '{name}': output must match the input's "
                         f"GPU, dtype and size (input GPU {s.device}, output GPU {d.device})")
    return handles.submit_allreduce((src, dst), None, name, s.ptr, d.ptr, s.dtype, op,
                                    float(prescale), float(postscale), process_set_id, group,
                                    group_size, s.shape, s.device, s.stream)
