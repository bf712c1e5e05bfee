"""What the liveness heartbeat costs while training: allreduce loops with the heartbeat
off (HOROVODLITE_PEER_TIMEOUT_SECONDS=0) and on (the default 30 s, and a 1 s timeout,
i.e. ten beats a second), interleaved in one launch (A B C, B C A, C A B, ...), medians; and
the heartbeat thread's own CPU time and wake-ups (from /proc, immune to the noise of
a shared machine).

    horovodlite-run -np 2 python benchmarks/heartbeat_cost.py
"""
import os
import statistics
import time

import numpy as np

import horovodlite as hvd

SETTINGS = ("0", "30", "1")
REPEATS = int(os.environ.get("HEARTBEAT_COST_REPEATS", "5"))  # rounds of A B C
SIZES = {"4 KiB x 2000": (1024, 2000), "1 MiB x 200": (1 << 18, 200), "64 MiB x 5": (1 << 24, 5)}


def loop(n_floats, iters):
    a = np.ones(n_floats, np.float32)
    out = np.empty_like(a)
    hvd.allreduce_(out, name="warm")
    t = time.perf_counter()
    for _ in range(iters):
        hvd.allreduce_(a, op=hvd.Sum, name="x")
    return (time.perf_counter() - t) / iters


def heartbeat_thread():
    """(cpu seconds, voluntary context switches) of this process's heartbeat thread."""
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                if f.read().strip() != "hvdl-heartbeat":
                    continue
            with open(f"/proc/self/task/{task}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{task}/status") as f:
                switches = next(int(ln.split()[1]) for ln in f if ln.startswith("voluntary_ctxt"))
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), switches
        except (OSError, StopIteration):
            continue
    return None


def main():
    samples = {(s, k): [] for s in SETTINGS for k in SIZES}
    beat = {s: [] for s in SETTINGS}
    for i in range(REPEATS):
        # Rotated each round (A B C, B C A, ...): no setting always runs first after
        # the previous one's shutdown.
        for s in SETTINGS[i % len(SETTINGS):] + SETTINGS[:i % len(SETTINGS)]:
            os.environ["HOROVODLITE_PEER_TIMEOUT_SECONDS"] = s
            hvd.init()
            t0, h0 = time.perf_counter(), heartbeat_thread()
            for k, (n, iters) in SIZES.items():
                samples[(s, k)].append(loop(n, iters))
            h1, t1 = heartbeat_thread(), time.perf_counter()
            if h0 and h1:
                beat[s].append(((h1[0] - h0[0]) / (t1 - t0), (h1[1] - h0[1]) / (t1 - t0)))
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
        for s in SETTINGS:
            if beat[s]:
                cpu = max(b[0] for b in beat[s])
                wakes = max(b[1] for b in beat[s])
                print(f"heartbeat thread at timeout={s} s: {cpu * 1e3:.2f} ms CPU per second, "
                      f"{wakes:.1f} wake-ups per second (worst of {len(beat[s])})")


if __name__ == "__main__":
    main()
