"""Where a training step's time goes on the training thread, per rank: forward, backward,
the DistributedOptimizer's gradient hooks inside backward, the submission of held
gradients at the end of backward, the wait for the slower rank, synchronize (the
allreduces) and the optimizer's own step.

    horovodlite-run -np 2 python benchmarks/step_phases.py [--model smallcnn --steps 30]
    HOROVODLITE_BACKWARD_OVERLAP=1 horovodlite-run -np 2 python benchmarks/step_phases.py
    horovodlite-run -np 2 python benchmarks/step_phases.py --against-twin

The hooks and the end-of-backward submission are timed by wrapping the optimizer's own
methods (the hook calls `_grad_ready`, the end of backward `_submit_noted`), so the
numbers include nothing but them. Before synchronize the ranks meet in an MPI barrier:
the barrier's time is the wait for the slower rank, and synchronize's is then the
exchange itself. Step times swing from launch to launch on a shared machine: compare
launches that alternate.

--against-twin instead trains three ways in the same processes, in blocks of steps
whose order rotates: horovodlite as a user trains (no barrier), `lockstep` (a twin model
from the same seed with its plain optimizer and an MPI barrier before each step: what
waiting for the slower rank costs alone) and `no exchange` (the twin alone). It prints
each way's forward, backward and step (the barrier and the exchange included) per rank.
"""
import argparse
import collections
import os
import statistics
import time

import torch.nn.functional as F

import horovodlite.torch as hvd
# The example's models and arguments, and a model with its twin from one seed, as the
# training benchmark builds them (this folder is on the path).
from torch_training import _example, _models_and_step

PHASES = ("forward", "backward", "hooks", "end of backward", "wait for peers", "synchronize",
          "optimizer step")


def _timed(totals, key, fn):
    """fn, adding its time to totals[key] and its calls to totals[key + " calls"]."""
    def wrapper(*args):
        t = time.perf_counter()
        try:
            return fn(*args)
        finally:
            totals[key] += time.perf_counter() - t
            totals[key + " calls"] += 1
    return wrapper


def _forward_backward(model, opt, data, target):
    """One step's zero_grad, forward and backward; the times around forward and backward."""
    opt.zero_grad()
    t0 = time.perf_counter()
    loss = F.cross_entropy(model(data), target)
    t1 = time.perf_counter()
    loss.backward()
    return t0, t1, time.perf_counter()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="--model, --batch-size, --image-size, --threads: "
                                        "as examples/pytorch_synthetic_benchmark.py")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--against-twin", action="store_true")
    ap.add_argument("--block", type=int, default=5, help="steps per block (--against-twin)")
    args, rest = ap.parse_known_args()
    defaults = {"--model": "smallcnn", "--batch-size": "32"}
    rest += [x for k, v in defaults.items() if k not in rest for x in (k, v)]
    vars(args).update(vars(_example().parse_args(rest)))

    from mpi4py import MPI

    hvd.init()
    comm = MPI.COMM_WORLD
    model, twin, sgd, _, (data, target) = _models_and_step(args, hvd.size(), args.against_twin)
    opt = hvd.DistributedOptimizer(sgd(model), named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    if args.against_twin:
        return _against_twin(args, comm, (model, opt), (twin, sgd(twin)), data, target)

    totals = collections.defaultdict(float)
    opt._grad_ready = _timed(totals, "hooks", opt._grad_ready)
    opt._submit_noted = _timed(totals, "end of backward", opt._submit_noted)
    for step in range(args.warmup + args.steps):
        if step == args.warmup:
            totals.clear()  # in place: the wrappers hold it
        t0, t1, t2 = _forward_backward(model, opt, data, target)
        comm.Barrier()
        t3 = time.perf_counter()
        opt.synchronize()
        t4 = time.perf_counter()
        with opt.skip_synchronize():
            opt.step()
        t5 = time.perf_counter()
        for phase, dt in zip(("forward", "backward", "wait for peers", "synchronize",
                              "optimizer step"), (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4)):
            totals[phase] += dt

    n = args.steps
    hooks = totals["hooks calls"] / n
    row = {phase: totals[phase] / n * 1e3 for phase in PHASES}
    rows = comm.gather((hvd.rank(), row, hooks), root=0)
    if hvd.rank() == 0:
        overlap = os.environ.get("HOROVODLITE_BACKWARD_OVERLAP", "auto")
        print(f"model {args.model}, batch {args.batch_size}/rank, np={hvd.size()}, "
              f"{n} steps timed, BACKWARD_OVERLAP={overlap}; ms per step (hooks and the end "
              "of backward are part of backward)")
        print("| rank | " + " | ".join(PHASES) + " | hooks / step | us / hook |")
        print("|---" * (len(PHASES) + 3) + "|")
        for rank, r, k in rows:
            per_hook = r["hooks"] / k * 1e3 if k else float("nan")
            print(f"| {rank} | " + " | ".join(f"{r[p]:.2f}" for p in PHASES)
                  + f" | {k:.0f} | {per_hook:.1f} |")


WAYS = ("horovodlite", "lockstep", "no exchange")


def _against_twin(args, comm, exchanging, alone, data, target):
    """exchanging, alone: (model, optimizer) with and without DistributedOptimizer."""
    ways = {"horovodlite": (*exchanging, None), "lockstep": (*alone, comm.Barrier),
            "no exchange": (*alone, None)}
    times = {w: [] for w in WAYS}  # each timed step's (forward, backward, step), s
    blocks = -(-(args.warmup + args.steps) // args.block)
    warm_blocks = -(-args.warmup // args.block)
    for b in range(blocks):
        for w in WAYS[b % 3:] + WAYS[:b % 3]:  # the order rotates every block
            m, o, barrier = ways[w]
            # The ranks drift apart in a block without exchange; the first exchange
            # after it would wait out that drift and charge it to its own way.
            comm.Barrier()
            for _ in range(args.block):
                t0, t1, t2 = _forward_backward(m, o, data, target)
                if barrier is not None:
                    barrier()
                o.step()
                t3 = time.perf_counter()
                if b >= warm_blocks:
                    times[w].append((t1 - t0, t2 - t1, t3 - t2))
    # Per way: the mean forward, backward and step, and the sd of forward + backward, ms.
    per_step = {w: [statistics.fmean(col) * 1e3 for col in zip(*times[w])]
                + [statistics.pstdev(f + b for f, b, _ in times[w]) * 1e3] for w in WAYS}
    rows = comm.gather((hvd.rank(), per_step), root=0)
    if hvd.rank() == 0:
        print(f"model {args.model}, batch {args.batch_size}/rank, np={hvd.size()}, "
              f"{len(times['horovodlite'])} steps each way in blocks of {args.block}, "
              f"BACKWARD_OVERLAP={os.environ.get('HOROVODLITE_BACKWARD_OVERLAP', 'auto')}; "
              "ms per step")
        print("| rank | way | forward | backward | step (with any wait) | total | x no exchange's "
              "| sd of forward + backward |")
        print("|---|---|---|---|---|---|---|---|")
        for rank, ps in rows:
            alone = sum(ps["no exchange"][:3])
            for w in WAYS:
                total = sum(ps[w][:3])
                print(f"| {rank} | {w} | " + " | ".join(f"{t:.2f}" for t in ps[w][:3])
                      + f" | {total:.2f} | {total / alone:.3f} | {ps[w][3]:.1f} |")


if __name__ == "__main__":
    main()
