"""Cost of handing tf tensors to the core: hvd.allreduce on a tf tensor (eager, and inside
tf.function where it is a tf.numpy_function) against the same allreduce on the equal numpy
array, interleaved in one launch (numpy, eager, graph, numpy, ...), median per size.

    mpirun -np 2 python benchmarks/tf_handoff.py [--sizes 4K,64K,1M,16M,64M] [--json out.json]

Columns as in nccl-tests: algbw = bytes / time, busbw = algbw * 2(n-1)/n, #wrong counts
results that differ from the expected sum; overhead = tf time - numpy time."""
import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import horovodlite as hvd  # noqa: E402
import horovodlite.tensorflow as htf  # noqa: E402


def parse_size(s):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def reps_for(nbytes):
    return 200 if nbytes <= 64 << 10 else 50 if nbytes <= 1 << 20 else 12 if nbytes <= 16 << 20 else 6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    hvd.init()
    n, r = hvd.size(), hvd.rank()
    rows = []
    for label in args.sizes.split(","):
        nbytes = parse_size(label)
        count = nbytes // 4
        a = np.full(count, r + 1, np.float32)
        t = tf.constant(a)
        expect = np.float32(n * (n + 1) / 2)
        graph = tf.function(lambda x: htf.allreduce(x, op=htf.Sum, name=f"bench.graph.{label}"))
        # A tf.function holding one numpy_function that only returns the reduced value:
        # the graph path's fixed cost without any communication.
        floor = tf.function(lambda x: tf.numpy_function(lambda v: np.full_like(v, expect), [x],
                                                         tf.float32, stateful=True))
        modes = {
            "numpy": lambda: hvd.allreduce(a, op=hvd.Sum, name=f"bench.np.{label}"),
            "tf eager": lambda: htf.allreduce(t, op=htf.Sum, name=f"bench.eager.{label}"),
            "tf.function": lambda: graph(t),
            "numpy_function only": lambda: floor(t),
        }
        times = {m: [] for m in modes}
        wrong = {m: 0 for m in modes}
        for m, fn in modes.items():  # warm up: tracing, response cache, first-touch pages
            fn()
        for _ in range(reps_for(nbytes)):
            for m, fn in modes.items():
                t0 = time.perf_counter()
                out = fn()
                times[m].append(time.perf_counter() - t0)
                arr = np.asarray(out)
                wrong[m] += int(arr.shape != (count,) or not (arr == expect).all())
        row = {"bytes": nbytes}
        for m in modes:
            med = float(np.median(times[m]))
            row[m] = {"time_us": med * 1e6, "algbw": nbytes / med / 1e9,
                      "busbw": nbytes / med / 1e9 * 2 * (n - 1) / n, "wrong": wrong[m]}
        rows.append(row)
        if r == 0 and len(rows) == 1:
            print(f"# allreduce (Sum, float32), np={n}; time = median, us; bw in GB/s")
            print(f"{'size':>8} | " + " | ".join(f"{m:>24}" for m in modes)
                  + " | eager-np us | graph-np us")
            print(f"{'':>8} | " + " | ".join(f"{'time':>9} {'busbw':>6} {'#wrong':>7}"
                                             for _ in modes) + " |")
        if r == 0:
            cells = [f"{row[m]['time_us']:9.1f} {row[m]['busbw']:6.2f} {row[m]['wrong']:7d}"
                     for m in modes]
            print(f"{label:>8} | " + " | ".join(cells)
                  + f" | {row['tf eager']['time_us'] - row['numpy']['time_us']:11.1f}"
                  + f" | {row['tf.function']['time_us'] - row['numpy']['time_us']:11.1f}",
                  flush=True)
    if r == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump({"np": n, "rows": rows}, f, indent=1)
    hvd.shutdown()


if __name__ == "__main__":
    main()
