"""Does HOROVODLITE_AUTOTUNE find settings as good as the best hand-picked ones on
ResNet-50's gradients, and do results stay exact while it changes settings?

    horovodlite-run -np 2 python benchmarks/autotune_resnet50.py

One step = in-place Average allreduce of torchvision resnet50's 161 parameter-shaped
float32 tensors (25,557,032 elements, 102 MB), all enqueued, then all synchronized,
like an optimizer step. Every rank holds the same values, multiples of 1/16, so the
average must give back exactly the input: a wrong byte at any step (a tensor mixed up
by a fusion plan that differs between ranks, a dropped contribution, ...) changes the
data for good, and the bitwise checks every few steps and at the end catch it.

Three parts, in one launch so they share the machine's conditions:
  1. hand-picked grid: fusion threshold x ring segment size (fresh init per setting),
     interleaved over several passes, median step time per setting;
  2. the autotuner from the defaults until it settles (HOROVODLITE_AUTOTUNE_LOG);
  3. its final setting against the three best hand-picked ones, interleaved A B A B.
Pass: the tuned setting's step time is within 10 % of the best hand-picked one."""
import argparse
import os
import statistics
import sys
import time

import numpy as np

MiB = 1 << 20

# torchvision.models.resnet50() parameter shapes, in named_parameters() order.
def resnet50_shapes():
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if b == 0:
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]
    return shapes


SHAPES = resnet50_shapes()
assert len(SHAPES) == 161 and sum(int(np.prod(s)) for s in SHAPES) == 25_557_032

KNOB_ENV = ("HOROVODLITE_FUSION_THRESHOLD", "HOROVODLITE_CYCLE_TIME", "HOROVODLITE_RING_SEGMENT_BYTES",
            "HOROVODLITE_AUTOTUNE", "HOROVODLITE_AUTOTUNE_LOG")


class Workload:
    def __init__(self, hvd, seed=1234):
        rng = np.random.default_rng(seed)  # same seed on every rank: same values
        self.hvd = hvd
        self.reference = [(rng.integers(-4096, 4096, size=s).astype(np.float32) / 16) for s in SHAPES]
        self.tensors = [r.copy() for r in self.reference]
        self.nbytes = sum(t.nbytes for t in self.tensors)
        self.checks = 0

    def step(self):
        hvd = self.hvd
        handles = [hvd.allreduce_async_(t, name=f"resnet50.grad.{i}", op=hvd.Average)
                   for i, t in enumerate(self.tensors)]
        for h in handles:
            hvd.synchronize(h)

    def check(self, where):
        for i, (t, r) in enumerate(zip(self.tensors, self.reference)):
            if not np.array_equal(t, r):
                bad = int(np.count_nonzero(t != r))
                raise AssertionError(f"rank {self.hvd.rank()}: tensor {i} {t.shape} differs from the exact "
                                     f"result in {bad} elements ({where})")
        self.checks += 1


def set_env(fusion=None, segment=None, cycle=None, autotune_log=None):
    for k in KNOB_ENV:
        os.environ.pop(k, None)
    if fusion is not None:
        os.environ["HOROVODLITE_FUSION_THRESHOLD"] = str(fusion)
    if segment is not None:
        os.environ["HOROVODLITE_RING_SEGMENT_BYTES"] = str(segment)
    if cycle is not None:
        os.environ["HOROVODLITE_CYCLE_TIME"] = str(cycle)
    if autotune_log is not None:
        os.environ["HOROVODLITE_AUTOTUNE"] = "1"
        os.environ["HOROVODLITE_AUTOTUNE_LOG"] = autotune_log


def agree(hvd, flag):
    """True when `flag` is true on every rank."""
    return hvd.allreduce(np.array([1.0 if flag else 0.0], np.float32), op=hvd.Min)[0] == 1.0


def timed_steps(hvd, wl, warmup, steps):
    for _ in range(warmup):
        wl.step()
    times = []
    for _ in range(steps):
        t = time.perf_counter()
        wl.step()
        times.append(time.perf_counter() - t)
    wl.check("after a timed run")
    # Every rank reports the slowest rank's time for the step (the job's step time).
    return float(hvd.allreduce(np.array([statistics.median(times)]), op=hvd.Max)[0])


def measure_fixed(hvd, wl, setting, warmup, steps):
    fusion, segment, cycle = setting
    set_env(fusion=fusion, segment=segment, cycle=cycle)
    hvd.init()
    try:
        return timed_steps(hvd, wl, warmup, steps)
    finally:
        hvd.shutdown()


def label(setting):
    f, s, c = setting
    return f"fusion {f / MiB:>5g} MiB, segment {s // 1024:>4} KiB, cycle {c:g} ms"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--passes", type=int, default=3, help="interleaved passes over the hand-picked grid")
    p.add_argument("--steps", type=int, default=8, help="timed steps per setting and pass")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--verify-passes", type=int, default=5, help="interleaved passes of part 3")
    p.add_argument("--max-tune-steps", type=int, default=3000)
    p.add_argument("--log", default="autotune_resnet50.csv", help="the autotuner's CSV log (rank 0)")
    p.add_argument("--quick", action="store_true", help="small grid, for a smoke run")
    args = p.parse_args()

    import horovodlite as hvd
    from horovodlite._loader import _core

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    hvd.shutdown()
    wl = Workload(hvd)
    say = print if rank == 0 else (lambda *a, **k: None)
    say(f"ResNet-50 gradient set: {len(SHAPES)} tensors, {wl.nbytes / 1e6:.1f} MB float32, {size} ranks")

    # Wider than the autotuner's own candidate list (it never tries 512 KiB, 2 or 8 MiB).
    fusions = [0, MiB // 2, 1 * MiB, 2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 64 * MiB, 128 * MiB]
    segments = [256 * 1024, 1 * MiB, 4 * MiB]
    if args.quick:
        fusions, segments = [0, 4 * MiB, 128 * MiB], [1 * MiB]
    grid = [(f, s, 1.0) for f in fusions for s in segments]

    # 1. hand-picked grid
    t0 = time.perf_counter()
    results = {g: [] for g in grid}
    for ps in range(args.passes):
        order = grid if ps % 2 == 0 else grid[::-1]
        for g in order:
            results[g].append(measure_fixed(hvd, wl, g, args.warmup, args.steps))
    hand = sorted(((statistics.median(v), g) for g, v in results.items()))
    say(f"\n1. hand-picked grid ({args.passes} interleaved passes x {args.steps} steps, "
        f"{time.perf_counter() - t0:.0f} s): median step time")
    for t, g in hand:
        say(f"   {label(g)}: {t * 1e3:7.1f} ms  {wl.nbytes / t / 1e9:5.2f} GB/s")

    # 2. autotune from the defaults
    log_path = os.path.abspath(args.log)
    set_env(autotune_log=log_path)
    hvd.init()
    t0 = time.perf_counter()
    seen, steps, exact_checks = [], 0, 0
    while steps < args.max_tune_steps:
        wl.step()
        steps += 1
        tun = _core.tunables()
        cur = (tun["fusion_threshold"], tun["ring_segment_bytes"], tun["cycle_time_ms"])
        if not seen or seen[-1] != cur:
            seen.append(cur)
            wl.check(f"autotune step {steps}, now {label(cur)}")  # exact right after each change
        elif steps % 50 == 0:
            wl.check(f"autotune step {steps}")
        if agree(hvd, tun["autotune_final"]):
            break
    tune_s = time.perf_counter() - t0
    final = seen[-1]
    after = timed_steps(hvd, wl, 2, args.steps * 2)
    exact_checks = wl.checks
    hvd.shutdown()
    say(f"\n2. autotune: settled after {steps} steps ({tune_s:.1f} s), {len(seen) - 1} setting changes, "
        f"results bitwise exact at all {exact_checks} checks so far")
    say(f"   final: {label(final)}; {after * 1e3:.1f} ms/step right after settling "
        f"({wl.nbytes / after / 1e9:.2f} GB/s); log: {log_path}")

    # 3. tuned vs the best hand-picked ones, interleaved
    contenders = [final] + [g for _, g in hand if g != final][:3]
    again = {c: [] for c in contenders}
    for ps in range(args.verify_passes):
        for c in (contenders if ps % 2 == 0 else contenders[::-1]):
            again[c].append(measure_fixed(hvd, wl, c, args.warmup, args.steps))
    med = {c: statistics.median(v) for c, v in again.items()}
    best = min((c for c in contenders if c != final), key=med.get)
    ratio = med[best] / med[final]
    say(f"\n3. interleaved re-measurement ({args.verify_passes} passes x {args.steps} steps):")
    for c in contenders:
        tag = "autotuned" if c == final else "hand-picked"
        say(f"   {tag:11s} {label(c)}: {med[c] * 1e3:7.1f} ms  {wl.nbytes / med[c] / 1e9:5.2f} GB/s")
    say(f"   autotuned speed / best hand-picked speed = {ratio:.3f} "
        f"({'PASS' if ratio >= 0.9 else 'FAIL'}: within 10 % means >= 0.900)")
    wl.check("end")
    say(f"   results bitwise exact at all {wl.checks} checks")
    return 0 if ratio >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
