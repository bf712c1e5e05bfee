"""Where a GPU allreduce's time goes at one rank, in two tables:

1. one 4 MiB `horovodlite.cupy.allreduce_` after an idle gap of 0 us to 10 ms, with the
   engine's own clocks per call (submission -> round, negotiation, execution). Back to
   back it shows our overhead; after a gap every piece slows alike when the machine
   itself is waking up (seen on an H200 VM: 17-23 us back to back, 170-270 us after 10 ms).
2. K async tensors, then `synchronize` of each: the time to submit them and the total,
   with the rounds they took (run it with HOROVODLITE_FUSION_THRESHOLD=0 to compare).

    mpirun -np 1 python benchmarks/gpu_latency.py [--calls 200]
"""
import argparse
import os
import statistics
import sys
import time


def pieces(s0, s1, calls):
    return {k: (s1[k] - s0[k]) / calls / 1e3
            for k in ("submit_to_round_ns", "negotiate_ns", "execute_ns")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=200)
    args = ap.parse_args()
    try:
        import cupy
    except ImportError:
        print("cupy is not installed: nothing to measure")
        return 0
    import horovodlite as hvd
    import horovodlite.cupy as hc
    from horovodlite._loader import _core

    hvd.init()
    cupy.cuda.Device(hvd.local_rank() % cupy.cuda.runtime.getDeviceCount()).use()
    settings = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                        if k.startswith("HOROVODLITE_")) or "defaults"
    print(f"# ranks {hvd.size()}, settings: {settings}")

    a = cupy.ones(1 << 20, cupy.float32)
    hc.allreduce_(a, name="gap")
    print(f"{'idle gap us':>12} {'per call us':>12} {'p90 us':>8} {'submit->round':>14} "
          f"{'negotiate':>10} {'execute':>8}")
    for gap_us in (0, 30, 100, 300, 1000, 10000):
        times = []
        s0 = _core.stats(0)
        for _ in range(args.calls):
            cupy.cuda.Device().synchronize()
            end = time.perf_counter() + gap_us / 1e6
            while time.perf_counter() < end:  # busy: the core stays awake, nothing runs
                pass
            t0 = time.perf_counter()
            hc.allreduce_(a, name="gap")
            times.append(time.perf_counter() - t0)
        p = pieces(s0, _core.stats(0), args.calls)
        times.sort()
        print(f"{gap_us:12d} {statistics.median(times) * 1e6:12.1f} "
              f"{times[int(0.9 * len(times))] * 1e6:8.1f} {p['submit_to_round_ns']:14.1f} "
              f"{p['negotiate_ns']:10.1f} {p['execute_ns']:8.1f}", flush=True)

    print(f"\n{'async tensors':>14} {'submit us':>10} {'total us':>9} {'rounds':>7} "
          f"{'execute us':>11}")
    iters = max(10, args.calls // 2)
    for kib, k in ((64, 10), (1024, 10), (64, 50)):
        xs = [cupy.ones(kib * 256, cupy.float32) for _ in range(k)]
        for i, x in enumerate(xs):
            hc.allreduce_(x, name=f"async.{kib}.{i}")
        submit, total = [], []
        s0 = _core.stats(0)
        for _ in range(iters):
            cupy.cuda.Device().synchronize()
            t0 = time.perf_counter()
            hs = [hc.allreduce_async_(x, name=f"async.{kib}.{i}") for i, x in enumerate(xs)]
            t1 = time.perf_counter()
            for h in hs:
                hc.synchronize(h)
            submit.append(t1 - t0)
            total.append(time.perf_counter() - t0)
        s1 = _core.stats(0)
        label = f"{k} x {kib} KiB"
        print(f"{label:>14} {statistics.median(submit) * 1e6:10.1f} "
              f"{statistics.median(total) * 1e6:9.1f} {(s1['rounds'] - s0['rounds']) / iters:7.2f} "
              f"{(s1['execute_ns'] - s0['execute_ns']) / iters / 1e3:11.1f}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
