"""GPU allreduce through horovodlite, reported like nccl-tests: size, time per call,
algbw = bytes / time, busbw = algbw * 2(n-1)/n, and #wrong from checking each result.
In-place float32 sum on cupy arrays, one call at a time (enqueue + synchronize), so the
time includes negotiation. Which path carries it (NCCL, or MPI staged through pinned
host memory when ranks share a GPU) the core logs at HOROVODLITE_LOG_LEVEL=info.

    mpirun -np 2 python benchmarks/gpu_allreduce.py [--max-mib 1024] [--iters 10]
"""
import argparse
import os
import sys
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-mib", type=int, default=1024)
    ap.add_argument("--min-kib", type=int, default=64)
    ap.add_argument("--iters", type=int, default=10)
    args = ap.parse_args()

    import horovodlite as hvd
    from horovodlite._loader import _core

    if not hvd.cuda_built() or not _core.gpu_available():
        if int(os.environ.get("OMPI_COMM_WORLD_RANK", "0")) == 0:
            print("skip: gpu_allreduce needs a CUDA build of horovodlite and a GPU "
                  f"(cuda_built={hvd.cuda_built()}, gpu_available={_core.gpu_available()})")
        return 0
    try:
        import cupy
    except ImportError:
        print("skip: gpu_allreduce needs cupy (pip install cupy-cuda13x)")
        return 0
    import horovodlite.cupy as hc

    hvd.init()
    r, n = hvd.rank(), hvd.size()
    ngpu = cupy.cuda.runtime.getDeviceCount()
    cupy.cuda.Device(hvd.local_rank() % ngpu).use()
    # The first GPU collective sets up the path (NCCL or MPI) and its buffers.
    hc.allreduce_(cupy.ones(1, cupy.float32), op=hvd.Sum, name="warmup")
    if r == 0:
        # The core logs the path it chose (NCCL, or MPI and why) at HOROVODLITE_LOG_LEVEL=info.
        print(f"# ranks {n}, GPUs visible {ngpu}, nccl_built {hvd.nccl_built()}, "
              f"HOROVODLITE_GPU_OPERATIONS={os.environ.get('HOROVODLITE_GPU_OPERATIONS', '')}")
        print(f"{'size':>10} {'time us':>10} {'algbw GB/s':>11} {'busbw GB/s':>11} {'#wrong':>7}",
              flush=True)
    nbytes = args.min_kib << 10
    want = n * (n + 1) / 2
    while nbytes <= args.max_mib << 20:
        count = nbytes // 4
        a = cupy.empty(count, cupy.float32)
        iters = max(3, min(args.iters, int((4 << 30) // nbytes)))
        times, wrong = [], 0
        for i in range(iters + 1):
            a.fill(r + 1)
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            hc.allreduce_(a, op=hvd.Sum, name=f"bench.{nbytes}")
            t1 = time.perf_counter()
            if i:  # the first call of a size also sets up buffers
                times.append(t1 - t0)
            wrong += int(cupy.count_nonzero(a != want).get())
        t = float(np.median(times))
        algbw = nbytes / t / 1e9
        busbw = algbw * 2 * (n - 1) / n
        if r == 0:
            size = f"{nbytes >> 20} MiB" if nbytes >= 1 << 20 else f"{nbytes >> 10} KiB"
            print(f"{size:>10} {t * 1e6:10.1f} {algbw:11.2f} {busbw:11.2f} {wrong:7d}", flush=True)
        del a
        cupy.get_default_memory_pool().free_all_blocks()
        nbytes *= 4
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
