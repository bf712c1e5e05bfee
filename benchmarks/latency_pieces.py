"""Where a lone allreduce's time goes: hvd.allreduce against mpi4py's MPI_Allreduce at a
few sizes (alternating blocks, A B A B, in one launch), and for horovodlite the engine's
own clocks (_core.stats: submission -> round start, negotiation, execution; with the
futex doorbell also a peer's ring -> this rank's round start), per call, median over
the blocks. What is left of the call is Python/binding overhead and the completion's
way back to the caller.

    mpirun -np 2 --oversubscribe --bind-to none python benchmarks/latency_pieces.py \\
        [--sizes 4K,1M] [--repeats 7] [--calls 400] [--unnamed] [--in-place]

--unnamed calls hvd.allreduce without a name, as a script averaging a metric does:
every call is a new name (allreduce.noname.N), so every call is negotiated in full
instead of answered from the response cache.

--in-place also times hvd.allreduce_ (no output array to make) in the same rotation,
with op Max so that the array stays the same from call to call (the same path and
work as a sum).

Settings come from the environment (HOROVODLITE_WAKEUP=auto|poll, ...)."""
import argparse
import os
import statistics
import time

import numpy as np
from mpi4py import MPI

import horovodlite as hvd
from horovodlite._loader import _core

comm = MPI.COMM_WORLD
PIECES = ("submit_to_round_ns", "negotiate_ns", "execute_ns", "ring_to_round_ns")
# Counters shown per call beside them: who ran the rounds, and the rings sent over the
# transport (a caller that waits for the set's thread to give up the turn pays turn_wait).
COUNTS = ("rounds", "ring_wakes", "caller_rounds", "turn_wait_ns", "rings_sent", "rider_groups")


def parse_size(text):
    text = text.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(float(text.rstrip("KMG")) * mult)


def block(fn, calls):
    """Median seconds per call (max over ranks)."""
    comm.Barrier()
    per = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        per.append(time.perf_counter() - t)
    return comm.allreduce(statistics.median(per), op=MPI.MAX)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K,1M")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--calls", type=int, default=400)
    ap.add_argument("--unnamed", action="store_true", help="a new name every call (no cache)")
    ap.add_argument("--in-place", action="store_true", help="also time hvd.allreduce_")
    args = ap.parse_args()
    hvd.init()
    rows = []
    for size in (parse_size(s) for s in args.sizes.split(",")):
        a = (np.arange(size // 4) % 251).astype(np.float32) + comm.rank
        out = np.empty_like(a)
        calls = max(5, min(args.calls, int(0.2 / max(size / 1e9, 1e-5))))
        mpi = lambda: comm.Allreduce(a, out)  # noqa: E731
        name = None if args.unnamed else f"lat.{size}"
        res = {}
        ours = lambda: res.__setitem__("r", hvd.allreduce(a, op=hvd.Sum, name=name))  # noqa: E731
        ways = {"mpi": mpi, "hvd": ours}
        if args.in_place:
            b = a.copy()
            in_place_name = None if args.unnamed else f"lat.inplace.{size}"
            ways["hvd_"] = lambda: hvd.allreduce_(b, op=hvd.Max, name=in_place_name)  # noqa: E731
        for fn in ways.values():
            fn()  # warm: negotiated once, cached from now on
        times, pieces = {w: [] for w in ways}, {k: [] for k in PIECES + COUNTS}
        order = list(ways)
        for rep in range(args.repeats):
            for which in (order if rep % 2 == 0 else order[::-1]):
                s0 = _core.stats(0) if which == "hvd" else None
                times[which].append(block(ways[which], calls))
                if s0 is not None:  # the engine's clocks: only while hvd.allreduce runs
                    s1 = _core.stats(0)
                    for k in pieces:
                        pieces[k].append((s1[k] - s0[k]) / calls)
        assert np.array_equal(res["r"], out), "horovodlite and MPI disagree"
        if args.in_place:
            assert np.array_equal(b, a + (comm.size - 1 - comm.rank)), "allreduce_ (Max) is wrong"
        per_rank = comm.gather({k: statistics.median(v) for k, v in pieces.items()}, 0)
        rows.append((size, statistics.median(times["mpi"]), statistics.median(times["hvd"]),
                     per_rank, statistics.median(times["hvd_"]) if args.in_place else None))
    if comm.rank == 0:
        load = " ".join(open("/proc/loadavg").read().split()[:3])
        wake = os.environ.get("HOROVODLITE_WAKEUP", "poll (default)")
        print(f"np={comm.size}, {'unnamed' if args.unnamed else 'named'} calls, "
              f"{args.repeats} alternating repeats, medians, "
              f"HOROVODLITE_WAKEUP={wake}, load {load}")
        for size, tm, th, per_rank, ti in rows:
            label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
            print(f"{label}: MPI_Allreduce {tm * 1e6:.1f} us, hvd.allreduce {th * 1e6:.1f} us "
                  f"({tm / th:.2f}x MPI's speed)"
                  + (f", hvd.allreduce_ {ti * 1e6:.1f} us ({tm / ti:.2f}x)" if ti else ""))
            for r, p in enumerate(per_rank):
                ring = (f", peer ring -> round {p['ring_to_round_ns'] / max(p['ring_wakes'], 1e-9) / 1e3:.1f} us"
                        f" ({p['ring_wakes']:.2f}/call)" if p["ring_wakes"] else "")
                print(f"   rank {r} per call: submit -> round {p['submit_to_round_ns'] / 1e3:.1f} us, "
                      f"negotiate {p['negotiate_ns'] / 1e3:.1f} us, execute {p['execute_ns'] / 1e3:.1f} us"
                      f" over {p['rounds']:.2f} rounds{ring}")
                print(f"      {p['caller_rounds']:.2f} run by the caller (turn wait "
                      f"{p['turn_wait_ns'] / 1e3:.1f} us), {p['rider_groups']:.2f} riders, "
                      f"{p['rings_sent']:.2f} transport rings sent")
    hvd.shutdown()


if __name__ == "__main__":
    main()
