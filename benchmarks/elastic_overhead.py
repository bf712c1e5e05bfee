"""What elastic training costs when nothing fails: the same torch training steps plain
(DistributedOptimizer) and under hvd.elastic.run with a TorchState committed every
--commit-every steps, interleaved in blocks in one launch; prints steps/s of each.

    horovodlite-run --elastic -np 3 python benchmarks/elastic_overhead.py
    horovodlite-run --elastic -np 3 --host-discovery-script "echo localhost:3" \
        python benchmarks/elastic_overhead.py   # commits also ask rank 0 about hosts
"""
import argparse
import time

import torch

import horovodlite.torch as hvd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=512, help="hidden width of the MLP")
    ap.add_argument("--steps", type=int, default=20, help="steps per block")
    ap.add_argument("--blocks", type=int, default=30, help="blocks of each kind, interleaved")
    ap.add_argument("--commit-every", type=int, default=10)
    a = ap.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                                torch.nn.Linear(a.width, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    state = hvd.elastic.TorchState(model, opt, step=0)
    times = {"plain": [], "elastic": []}
    commit_s = []

    # One run() (as a training script has): inside it, blocks of plain steps and blocks
    # of steps with a commit every --commit-every, interleaved. The commits are all that
    # elastic training adds to a step when nothing fails.
    @hvd.elastic.run
    def train(state):
        for _ in range(5):
            step()  # warm-up
        for b in range(a.blocks):
            for kind in (("plain", "elastic") if b % 2 == 0 else ("elastic", "plain")):
                hvd.barrier()
                t = time.perf_counter()
                for i in range(1, a.steps + 1):
                    step()
                    state.step += 1
                    if kind == "elastic" and i % a.commit_every == 0:
                        c = time.perf_counter()
                        state.commit()
                        commit_s.append(time.perf_counter() - c)
                times[kind].append(time.perf_counter() - t)

    train(state)
    if hvd.rank() == 0:
        params = sum(p.numel() for p in model.parameters())
        print(f"{hvd.size()} ranks, MLP of {params / 1e6:.2f} M parameters, commit every "
              f"{a.commit_every} steps, {a.blocks} interleaved blocks of {a.steps} steps")
        print("| training | steps/s (median block) | best block |")
        print("|---|---|---|")
        med = {}
        for kind, ts in times.items():
            ts = sorted(ts)
            med[kind] = a.steps / ts[len(ts) // 2]
            print(f"| {kind} | {med[kind]:.1f} | {a.steps / ts[0]:.1f} |")
        # Each elastic block against the plain block next to it (the machine's load
        # drifts less between neighbours than across the run).
        pairs = sorted(e / p for e, p in zip(times["elastic"], times["plain"]))
        commit = sorted(commit_s)[len(commit_s) // 2]
        print(f"elastic costs {100 * (1 - med['elastic'] / med['plain']):.1f} % of plain throughput "
              f"(median blocks), {100 * (1 - 1 / pairs[len(pairs) // 2]):.1f} % (median of "
              f"neighbouring pairs); a commit takes {1e3 * commit:.2f} ms (median), "
              f"{100 * commit * med['plain'] / a.commit_every:.2f} % of {a.commit_every} plain steps "
              f"(bound: 2 %)")


if __name__ == "__main__":
    main()
