"""What the liveness heartbeat costs while training: allreduce loops with the heartbeat
off (HOROVODLITE_PEER_TIMEOUT_SECONDS=0) and on (the default 30 s, and a 1 s timeout,
i.e. ten beats a second), interleaved in one launch (A B C A B C ...), medians.

    horovodlite-run -np 2 python benchmarks/heartbeat_cost.py
"""
import os
import statistics
import time

import numpy as np

import horovodlite as hvd

SETTINGS = ("0", "30", "1")
SIZES = {"4 KiB x 2000": (1024, 2000), "1 MiB x 200": (1 << 18, 200), "16 MiB x 20": (1 << 22, 20)}


def loop(n_floats, iters):
    a = np.ones(n_floats, np.float32)
    out = np.empty_like(a)
    hvd.allreduce_(out, name="warm")
    t = time.perf_counter()
    for _ in range(iters):
        hvd.allreduce_(a, op=hvd.Sum, name="x")
    return (time.perf_counter() - t) / iters


def main():
    samples = {(s, k): [] for s in SETTINGS for k in SIZES}
    for _ in range(3):
        for s in SETTINGS:
            os.environ["HOROVODLITE_PEER_TIMEOUT_SECONDS"] = s
            hvd.init()
            for k, (n, iters) in SIZES.items():
                samples[(s, k)].append(loop(n, iters))
            hvd.shutdown()
    hvd.init()
    if hvd.rank() == 0:
        print(f"{'allreduce':>14} | " + " | ".join(f"timeout={s} s" if s != "0" else "heartbeat off"
                                                  for s in SETTINGS))
        for k in SIZES:
            base = statistics.median(samples[("0", k)])
            cells = []
            for s in SETTINGS:
                m = statistics.median(samples[(s, k)])
                cells.append(f"{m * 1e6:9.1f} us ({m / base:4.2f}x)")
            print(f"{k:>14} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
