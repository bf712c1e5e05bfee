"""Memory bandwidth of our GPU reduction kernel next to cupy's `a += b` and a
device-to-device copy, float32 and bfloat16, 1 MiB ... 1 GiB per buffer.

GB/s counts memory traffic (1e9 B/s): a copy reads and writes the buffer once (2x its
bytes), a reduction reads two buffers and writes one (3x). The kernel is memory-bound
when its traffic rate reaches the copy's; "% copy" is that ratio (target >= 90 %).

    python benchmarks/gpu_kernels.py [--max-mib 1024]
"""
import argparse
import sys

import ml_dtypes
import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mib", type=int, default=1024)
    args = ap.parse_args()

    import horovodlite as hvd
    from horovodlite import dtypes
    from horovodlite._loader import _core

    if not hvd.cuda_built() or not _core.gpu_available():
        print("skip: gpu_kernels needs a CUDA build of horovodlite and a GPU "
              f"(cuda_built={hvd.cuda_built()}, gpu_available={_core.gpu_available()})")
        return 0
    try:
        import cupy
    except ImportError:
        print("skip: gpu_kernels needs cupy (pip install cupy-cuda13x)")
        return 0

    dev = cupy.cuda.Device(0)
    dev.use()
    props = cupy.cuda.runtime.getDeviceProperties(0)
    print(f"device: {props['name'].decode()}, {props['multiProcessorCount']} SMs")
    stream = cupy.cuda.Stream(non_blocking=True)

    def timed(fn, iters):
        with stream:
            for _ in range(2):
                fn()
            a, b = cupy.cuda.Event(), cupy.cuda.Event()
            a.record()
            for _ in range(iters):
                fn()
            b.record()
            b.synchronize()
        return cupy.cuda.get_elapsed_time(a, b) / iters * 1e-3  # seconds

    print(f"{'dtype':>8} {'size':>9} {'copy GB/s':>10} {'ours GB/s':>10} {'% copy':>7} "
          f"{'cupy a+=b':>10} {'% copy':>7} {'#wrong':>6}")
    for name, dt, code in [("float32", np.float32, dtypes.FLOAT32),
                           ("bfloat16", ml_dtypes.bfloat16, dtypes.BFLOAT16)]:
        mib = 1
        while mib <= args.max_mib:
            nbytes = mib << 20
            count = nbytes // np.dtype(dt).itemsize
            # Same buffers for all three: same alignment, same pages.
            raw_a = cupy.empty(nbytes, cupy.uint8)
            raw_b = cupy.empty(nbytes, cupy.uint8)
            # Known values for the correctness column: a = 1, b = i % 7 (exact in bf16).
            b_host = (np.arange(count) % 7).astype(dt)
            raw_b.set(b_host.view(np.uint8))
            raw_a.set(np.ones(count, dt).view(np.uint8))
            _core.gpu_reduce_into(raw_a.data.ptr, raw_b.data.ptr, count, code, hvd.Sum,
                                  stream=stream.ptr)
            stream.synchronize()
            got = raw_a.get().view(dt)
            wrong = int(np.count_nonzero(got != (b_host.astype(np.float32) + 1).astype(dt)))

            iters = int(min(200, max(5, (8 << 30) // nbytes)))
            t_copy = timed(lambda: raw_a.data.copy_from_device_async(raw_b.data, nbytes, stream),
                           iters)
            t_ours = timed(lambda: _core.gpu_reduce_into(raw_a.data.ptr, raw_b.data.ptr, count,
                                                         code, hvd.Sum, stream=stream.ptr), iters)
            try:
                va, vb = raw_a.view(dt), raw_b.view(dt)

                def add():
                    va.__iadd__(vb)

                t_cupy = timed(add, iters)
                cupy_col = f"{3 * nbytes / t_cupy / 1e9:10.1f} {100 * t_copy * 3 / 2 / t_cupy:6.0f}%"
            except Exception as e:  # noqa: BLE001 - cupy without bfloat16 arithmetic
                cupy_col = f"{'n/a':>10} {'':>7}"
                if mib == 1:
                    print(f"  (cupy a += b on {name}: {type(e).__name__}: {str(e)[:80]})")
            copy_bw = 2 * nbytes / t_copy / 1e9
            ours_bw = 3 * nbytes / t_ours / 1e9
            size = f"{mib} MiB" if mib < 1024 else f"{mib >> 10} GiB"
            print(f"{name:>8} {size:>9} {copy_bw:10.1f} {ours_bw:10.1f} "
                  f"{100 * ours_bw / copy_bw:6.0f}% {cupy_col} {wrong:6d}", flush=True)
            del raw_a, raw_b
            cupy.get_default_memory_pool().free_all_blocks()
            mib *= 4
    return 0


if __name__ == "__main__":
    sys.exit(main())
