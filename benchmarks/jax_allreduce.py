"""Time per allreduce from JAX, interleaved in one launch (A B C D A B C D ...) so
machine noise hits all variants alike:
  jit      k allreduces inside one jitted program (a fori_loop): the XLA FFI custom
           call into the core, no Python in the loop;
  jitcall  one jitted allreduce per Python call (adds jax's dispatch);
  eager    horovodlite.jax.allreduce on a concrete jax array (no compilation);
  numpy    horovodlite.allreduce on numpy arrays (the reference).

    mpirun -np 2 python benchmarks/jax_allreduce.py [--sizes 4K,64K,1M,16M,64M] [--iters N]

Columns as nccl-tests: size, time, algbw = bytes/time, busbw = algbw * 2(n-1)/n, and
#wrong from checking the last result of each variant. Rank 0 prints the table.
"""
import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

import horovodlite as hvd_np
import horovodlite.jax as hvd


def parse_size(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(s[:-1]) * mult[s[-1].upper()]) if s[-1].upper() in mult else int(s)


def human(n):
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m:
            return f"{n / m:g} {unit}"
    return f"{n} B"


def iters_for(nbytes, budget_bytes):
    return int(max(5, min(200, budget_bytes // max(nbytes, 1))))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="4K,64K,1M,16M,64M")
    ap.add_argument("--budget", default="1G", help="bytes reduced per variant and size")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds; median kept")
    args = ap.parse_args()
    hvd.init()
    n, r = hvd.size(), hvd.rank()

    # Inside jit: `chain` allreduces k times in one program (a fori_loop), so the time
    # per call excludes the dispatch of the jitted function itself.
    def make_jit(k):
        @jax.jit
        def chain(x):
            return jax.lax.fori_loop(
                0, k, lambda i, v: hvd.allreduce(v, op=hvd.Average, name="bench.jit"), x)
        return chain

    rows = []
    for size in [parse_size(s) for s in args.sizes.split(",")]:
        count = size // 4
        k = iters_for(size, parse_size(args.budget))
        base = np.full(count, 1.0 + r, np.float32)
        expect = np.float32(sum(range(1, n + 1)) / n)  # the mean of 1..n, a fixed point
        chain = make_jit(k)
        x_j = jnp.asarray(base)
        chain(x_j).block_until_ready()  # compile + warm
        x_np = base.copy()
        single = jax.jit(lambda v: hvd.allreduce(v, op=hvd.Average, name="bench.jitcall"))
        single(x_j).block_until_ready()
        times = {"jit": [], "jitcall": [], "eager": [], "numpy": []}
        wrong = {}
        for _ in range(args.rounds):
            hvd_np.allreduce(np.zeros(1, np.float32), name="bench.barrier")
            t = time.perf_counter()
            y = chain(x_j).block_until_ready()
            times["jit"].append((time.perf_counter() - t) / k)
            wrong["jit"] = int(np.count_nonzero(np.asarray(y) != expect))

            hvd_np.allreduce(np.zeros(1, np.float32), name="bench.barrier")
            v = x_j
            t = time.perf_counter()
            for _ in range(k):
                v = single(v)
            v.block_until_ready()
            times["jitcall"].append((time.perf_counter() - t) / k)
            wrong["jitcall"] = int(np.count_nonzero(np.asarray(v) != expect))

            hvd_np.allreduce(np.zeros(1, np.float32), name="bench.barrier")
            v = x_j
            t = time.perf_counter()
            for _ in range(k):
                v = hvd.allreduce(v, op=hvd.Average, name="bench.eager")
            v.block_until_ready()
            times["eager"].append((time.perf_counter() - t) / k)
            wrong["eager"] = int(np.count_nonzero(np.asarray(v) != expect))

            hvd_np.allreduce(np.zeros(1, np.float32), name="bench.barrier")
            w = x_np
            t = time.perf_counter()
            for _ in range(k):
                w = hvd_np.allreduce(w, op=hvd_np.Average, name="bench.numpy")
            times["numpy"].append((time.perf_counter() - t) / k)
            wrong["numpy"] = int(np.count_nonzero(w != expect))
        for name in ("jit", "jitcall", "eager", "numpy"):
            sec = float(np.median(times[name]))
            algbw = size / sec / 1e9
            rows.append((human(size), name, sec * 1e6, algbw, algbw * 2 * (n - 1) / n,
                         wrong[name], k))
    if r == 0:
        print(f"# horovodlite.jax allreduce, float32, np={n}, jax {jax.__version__}, "
              f"median of {args.rounds} interleaved rounds")
        print(f"{'size':>9} {'variant':>8} {'time(us)':>10} {'algbw(GB/s)':>12} "
              f"{'busbw(GB/s)':>12} {'#wrong':>7} {'iters':>6}")
        for row in rows:
            print(f"{row[0]:>9} {row[1]:>8} {row[2]:>10.1f} {row[3]:>12.3f} {row[4]:>12.3f} "
                  f"{row[5]:>7} {row[6]:>6}")


if __name__ == "__main__":
    main()
