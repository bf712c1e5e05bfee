"""Allreduce benchmark: horovodlite against the MPI underneath it, in one launch.

    mpirun -np 2 python benchmarks/allreduce.py [--sizes 4K:256M] [--repeats 5] [--csv out.csv]

Part 1, an nccl-tests style table for float32 sums from 4 KiB to 256 MiB: mpi4py's
MPI_Allreduce against hvd.allreduce (out of place) and MPI_Allreduce(IN_PLACE)
against hvd.allreduce_ (in place). The implementations alternate A B A B within
each size, each block is timed on every rank (max over ranks), and the median of
the repeats is printed: time = mean per call (as nccl-tests), p50 = median call,
algbw = bytes / time, busbw = algbw * 2(n-1)/n and #wrong = elements of the last
result that differ from the expected sum.

Part 2, the 161 gradient tensors of ResNet-50 (25.6 M float32): all submitted to
horovodlite asynchronously one by one (in backward order) then synchronized,
against MPI one Allreduce per tensor and MPI on one packed buffer (pack +
Allreduce + unpack). Ratios > 1 mean horovodlite is faster. horovodlite runs twice:
on ordinary numpy arrays, and on the same tensors allocated with hvd.shared_empty,
which single-host ranks reduce where they lie (zero-copy). MPI gains nothing from
the latter, so it runs on the ordinary arrays.
"""
import argparse
import csv
import math
import statistics
import sys
import time

import numpy as np
from mpi4py import MPI

import horovodlite as hvd
from horovodlite._loader import _core

# torchvision.models.resnet50() parameter shapes, in named_parameters() order.
RESNET50_SHAPES = [
    (64, 3, 7, 7), (64,), (64,),
    # layer1
    (64, 64, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    (256, 64, 1, 1), (256,), (256,),
    (64, 256, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    (64, 256, 1, 1), (64,), (64,), (64, 64, 3, 3), (64,), (64,), (256, 64, 1, 1), (256,), (256,),
    # layer2
    (128, 256, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,),
    (512,), (512, 256, 1, 1), (512,), (512,),
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    (128, 512, 1, 1), (128,), (128,), (128, 128, 3, 3), (128,), (128,), (512, 128, 1, 1), (512,), (512,),
    # layer3
    (256, 512, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,),
    (1024,), (1024, 512, 1, 1), (1024,), (1024,),
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    (256, 1024, 1, 1), (256,), (256,), (256, 256, 3, 3), (256,), (256,), (1024, 256, 1, 1), (1024,), (1024,),
    # layer4
    (512, 1024, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,),
    (2048,), (2048, 1024, 1, 1), (2048,), (2048,),
    (512, 2048, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,), (2048,),
    (512, 2048, 1, 1), (512,), (512,), (512, 512, 3, 3), (512,), (512,), (2048, 512, 1, 1), (2048,), (2048,),
    # fc
    (1000, 2048), (1000,),
]
assert len(RESNET50_SHAPES) == 161 and sum(math.prod(s) for s in RESNET50_SHAPES) == 25_557_032

comm = MPI.COMM_WORLD
CHUNK = 32  # in-place sums grow n-fold per call: reset (untimed) at least this often


def parse_size(text):
    text = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def parse_sizes(spec):
    """"4K:256M" (x4 steps), "4K:256M:2" (x2 steps) or "4K,64M"."""
    if ":" in spec:
        parts = spec.split(":")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        step = int(parts[2]) if len(parts) > 2 else 4
        out = []
        while lo <= hi:
            out.append(lo)
            lo *= step
        return out
    return [parse_size(s) for s in spec.split(",")]


def human(nbytes):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div}{unit}"
    return str(nbytes)


class Impl:
    """One way to allreduce `count` float32: run() once, reset() before a chunk
    (untimed), wrong(calls) = elements differing from the expected result."""

    def __init__(self, name, count):
        self.name, self.count = name, count
        n, r = comm.size, comm.rank
        pattern = (np.arange(count, dtype=np.int64) % 251).astype(np.float32)
        self.send = pattern + np.float32(r)
        self.expect_oop = pattern * n + np.float32(n * (n - 1) // 2)
        self.buf = np.ones(count, np.float32)
        self.out = None
        self.key = f"bench.{name}.{count}"

    def reset(self):
        if self.in_place:
            self.buf.fill(1.0)

    def wrong(self, calls_since_reset):
        if self.in_place:
            return int(np.count_nonzero(self.buf != np.float32(float(comm.size) ** calls_since_reset)))
        out = self.out if self.out is not None else self.buf
        return int(np.count_nonzero(out != self.expect_oop))


class MpiOop(Impl):
    in_place = False

    def run(self):
        comm.Allreduce(self.send, self.buf, op=MPI.SUM)


class MpiInPlace(Impl):
    in_place = True

    def run(self):
        comm.Allreduce(MPI.IN_PLACE, self.buf, op=MPI.SUM)


class HvdOop(Impl):
    in_place = False

    def run(self):
        self.out = hvd.allreduce(self.send, op=hvd.Sum, name=self.key)


class HvdInPlace(Impl):
    in_place = True

    def run(self):
        hvd.allreduce_(self.buf, op=hvd.Sum, name=self.key)


def timed_block(impl, iters):
    """Mean and median seconds per call over `iters` calls (each the max over ranks),
    and #wrong after them. On a shared machine the mean (what nccl-tests reports)
    includes the calls that lost their core for a while; the median shows the
    latency of an undisturbed call."""
    per_call, done, wrong = [], 0, 0
    while done < iters:
        k = min(CHUNK, iters - done)
        impl.reset()
        comm.Barrier()
        for _ in range(k):
            t0 = time.perf_counter()
            impl.run()
            per_call.append(time.perf_counter() - t0)
        done += k
        wrong = impl.wrong(k)
    mean = comm.allreduce(sum(per_call) / iters, op=MPI.MAX)
    p50 = comm.allreduce(statistics.median(per_call), op=MPI.MAX)
    return mean, p50, comm.allreduce(wrong, op=MPI.SUM)


def size_table(sizes, repeats, rows):
    n = comm.size
    pairs = [("out-of-place", MpiOop, HvdOop), ("in-place", MpiInPlace, HvdInPlace)]
    results = {}
    for nbytes in sizes:
        count = nbytes // 4
        impls = [cls(cls.__name__, count) for _, a, b in pairs for cls in (a, b)]
        for impl in impls:  # warm up: first-call costs (negotiation, buffers, page faults)
            impl.reset()
            impl.run()
        impl0 = impls[0]
        comm.Barrier()
        t0 = time.perf_counter()
        impl0.run()
        est = comm.bcast(time.perf_counter() - t0, root=0)
        iters = comm.bcast(max(3, min(2000, int(0.08 / max(est, 1e-6)))), root=0)
        times = {impl.name: [] for impl in impls}
        p50s = {impl.name: [] for impl in impls}
        wrongs = {impl.name: 0 for impl in impls}
        for _ in range(repeats):
            for impl in impls:  # A B A B ...
                t, p50, w = timed_block(impl, iters)
                times[impl.name].append(t)
                p50s[impl.name].append(p50)
                wrongs[impl.name] = max(wrongs[impl.name], w)
        for impl in impls:
            t = statistics.median(times[impl.name])
            p50 = statistics.median(p50s[impl.name])
            algbw = nbytes / t / 1e9
            results[(impl.name, nbytes)] = (t, p50, algbw, algbw * 2 * (n - 1) / n, wrongs[impl.name])
            rows.append({"part": "sizes", "impl": impl.name, "bytes": nbytes, "count": count,
                         "time_us": t * 1e6, "p50_us": p50 * 1e6, "algbw_GBps": algbw,
                         "busbw_GBps": algbw * 2 * (n - 1) / n, "wrong": wrongs[impl.name]})
        del impls
    if comm.rank != 0:
        return
    for title, a, b in pairs:
        print(f"\n# {title}: float32 sum, {n} ranks, median of {repeats} repeats")
        print(f"{'':20}| {a.__name__:^43} | {b.__name__:^43} |")
        head = f"{'size':>8} {'count':>10} |"
        for _ in (a, b):
            head += f" {'time(us)':>10} {'p50(us)':>9} {'algbw':>6} {'busbw':>6} {'#wrong':>6} |"
        print(head + " hvd/MPI busbw")
        for nbytes in sizes:
            line = f"{human(nbytes):>8} {nbytes // 4:>10} |"
            for cls in (a, b):
                t, p50, alg, bus, w = results[(cls.__name__, nbytes)]
                line += f" {t * 1e6:>10.1f} {p50 * 1e6:>9.1f} {alg:>6.2f} {bus:>6.2f} {w:>6} |"
            ratio = results[(b.__name__, nbytes)][3] / results[(a.__name__, nbytes)][3]
            print(line + f" {ratio:>8.2f}x")
    sys.stdout.flush()


def resnet(repeats, rows):
    n, r = comm.size, comm.rank
    tensors = [np.empty(s, np.float32) for s in RESNET50_SHAPES]
    shared = [hvd.shared_empty(s, np.float32) for s in RESNET50_SHAPES]
    total = sum(t.size for t in tensors)
    flat = np.empty(total, np.float32)
    offsets = np.cumsum([0] + [t.size for t in tensors])
    expect = np.float32(n * (n + 1) // 2)

    def hvd_step(ts=tensors, tag="resnet50"):
        hs = [hvd.allreduce_async_(ts[i], op=hvd.Sum, name=f"{tag}.{i}")
              for i in reversed(range(len(ts)))]  # backward order
        for h in hs:
            hvd.synchronize(h)

    def mpi_each():
        for t in tensors:
            comm.Allreduce(MPI.IN_PLACE, t, op=MPI.SUM)

    def mpi_packed():
        for t, o in zip(tensors, offsets):
            flat[o:o + t.size] = t.ravel()
        comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)
        for t, o in zip(tensors, offsets):
            t.ravel()[:] = flat[o:o + t.size]

    # (name, step, the tensors it reduces)
    impls = [("hvd async, one by one", hvd_step, tensors),
             ("hvd same, hvd.shared_empty arrays", lambda: hvd_step(shared, "resnet50s"), shared),
             ("MPI one Allreduce per tensor", mpi_each, tensors),
             ("MPI packed (pack+Allreduce+unpack)", mpi_packed, tensors)]
    times = {name: [] for name, _, _ in impls}
    wrong = {name: 0 for name, _, _ in impls}
    rings, floor = [], []
    for rep in range(repeats + 1):  # the first round is a warm-up
        # What no in-place allreduce can beat: every rank reading and writing its bytes
        # once. On a VM it moves with where the vCPUs sit, and MPI's time with it.
        comm.Barrier()
        t0 = time.perf_counter()
        np.add(flat, 0, out=flat)
        dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        if rep:
            floor.append(dt)
        for name, fn, used in impls:
            for t in used:
                t.fill(np.float32(r + 1))
            s0 = _core.stats(0)
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
            if name == impls[0][0]:
                rings.append(_core.stats(0)["groups"] - s0["groups"])
            w = comm.allreduce(sum(int(np.count_nonzero(t != expect)) for t in used), op=MPI.SUM)
            if rep:
                times[name].append(dt)
                wrong[name] = max(wrong[name], w)
    med = {name: statistics.median(v) for name, v in times.items()}
    for name, _, _ in impls:
        rows.append({"part": "resnet50", "impl": name, "bytes": total * 4, "count": total,
                     "time_us": med[name] * 1e6, "algbw_GBps": total * 4 / med[name] / 1e9,
                     "busbw_GBps": total * 4 / med[name] / 1e9 * 2 * (n - 1) / n,
                     "wrong": wrong[name]})
    if r != 0:
        return
    print(f"\n# ResNet-50 gradients: {len(tensors)} tensors, {total / 1e6:.1f} M float32 "
          f"({total * 4 / 1e6:.0f} MB), {n} ranks, median of {repeats} steps")
    print(f"{'':36} {'time(ms)':>9} {'busbw':>6} {'#wrong':>6}")
    for name, _, _ in impls:
        t = med[name]
        print(f"{name:36} {t * 1e3:>9.2f} {total * 4 / t / 1e9 * 2 * (n - 1) / n:>6.2f} {wrong[name]:>6}")
    each, packed = med[impls[2][0]], med[impls[3][0]]
    best_mpi = min(each, packed)
    f = statistics.median(floor)
    print(f"memory floor (np.add in place over {total * 4 / 1e6:.0f} MB, every rank at once): "
          f"{f * 1e3:.2f} ms")
    print(f"hvd rings per step: {statistics.median(rings[1:]) if len(rings) > 1 else rings}")
    for name, _, _ in impls[:2]:
        h = med[name]
        print(f"{name.split(',')[-1].strip()}: {h / f:.2f}x the floor; speedup vs MPI per tensor "
              f"{each / h:.2f}x, vs MPI packed {packed / h:.2f}x, vs MPI's best {best_mpi / h:.2f}x")
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="4K:256M", help="'4K:256M' (x4 steps), '4K:256M:2' or '4K,64M'")
    p.add_argument("--repeats", type=int, default=5, help="timed blocks per implementation and size")
    p.add_argument("--resnet-steps", type=int, default=10, help="timed ResNet-50 steps per implementation")
    p.add_argument("--csv", help="also write every row to this CSV file (rank 0)")
    p.add_argument("--skip-sizes", action="store_true")
    p.add_argument("--skip-resnet", action="store_true")
    args = p.parse_args()
    hvd.init()
    if comm.rank == 0:
        print(f"# horovodlite {hvd.__version__}, {comm.size} ranks, reduce kernels: {_core.reduce_isa()}, "
              f"MPI: {MPI.Get_library_version().replace(chr(0), '').split(',')[0].strip()}")
    rows = []
    if not args.skip_sizes:
        size_table(parse_sizes(args.sizes), args.repeats, rows)
    if not args.skip_resnet:
        resnet(args.resnet_steps, rows)
    if args.csv and comm.rank == 0:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=["part", "impl", "bytes", "count", "time_us", "p50_us",
                                              "algbw_GBps", "busbw_GBps", "wrong"])
            w.writeheader()
            w.writerows(rows)
    hvd.shutdown()


if __name__ == "__main__":
    main()
