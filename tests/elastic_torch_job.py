"""A small torch training job for tests/test_elastic.py, elastic or plain.

    elastic:   python elastic_torch_job.py elastic OUT --steps 40 --commit-every 5
                   [--kill RANK:STEP[,RANK:STEP]] [--grow-at STEP | --shrink-at STEP] --grow-file F
                   [--shrink-after-grow STEPS] [--kill-while-growing RANK]
                   [--kill-in-grow RANK:before-join|after-join]
    reference: python elastic_torch_job.py plain OUT --schedule 0:3,10:2 --save F

Each step every rank computes its gradient on data drawn from (step, rank, size), so a
run is determined by which world size ran which step; the plain mode replays one
segment of such a schedule. Each elastic process writes OUT/<pid>.pkl with its final
parameters, the (step, size) it entered train() at, its reset-callback calls and
timings."""
import argparse
import faulthandler
import os
import pickle
import signal
import sys
import time

import numpy as np
import torch

import horovodlite.torch as hvd
from horovodlite.elastic import world as elastic_world

torch.set_num_threads(1)
faulthandler.register(signal.SIGUSR1, all_threads=True)  # stacks of a hung job, for debugging


def model_and_optimizer():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    return model, hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())


def batch(step, rank, size):
    g = np.random.default_rng([step, rank, size])
    return (torch.from_numpy(g.standard_normal((8, 16), dtype=np.float32)),
            torch.from_numpy(g.standard_normal((8, 4), dtype=np.float32)))


def train_step(model, opt, step):
    x, y = batch(step, hvd.rank(), hvd.size())
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()


def flat_opt(opt):
    st = opt.state_dict()["state"]
    return b"".join(st[k]["momentum_buffer"].numpy().tobytes() for k in sorted(st))


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().tobytes()


def elastic(a):
    hvd.init()
    model, opt = model_and_optimizer()
    state = hvd.elastic.TorchState(model, opt, step=0)
    kills = dict(tuple(map(int, k.split(":"))) for k in a.kill.split(",")) if a.kill else {}
    # The rank in the job's first world; -1: spawned later (it is rank 0 of its own).
    me = -1 if elastic_world.joined() else int(os.environ.get("OMPI_COMM_WORLD_RANK", "-1"))
    log = {"entries": [], "resets": [], "step_times": [], "errors": []}

    def on_reset():
        log["resets"].append((hvd.rank(), hvd.size(), time.time()))
        if a.kill_in_reset is not None and me == a.kill_in_reset:
            os.kill(os.getpid(), signal.SIGKILL)  # while the world re-forms, before the sync

    state.register_reset_callbacks([on_reset])
    if a.kill_in_grow is not None and me == a.kill_in_grow[0]:
        _kill_in_grow(a.out, after_join=a.kill_in_grow[1] == "after-join")

    def grew():
        return any(size > a.np for _, size, *_ in log["entries"])

    @hvd.elastic.run
    def train(state):
        log["entries"].append((state.step, hvd.size(), time.time(), flat(state.model),
                               flat_opt(state.optimizer)))
        # Until --steps, and while the job waits to grow (spawning may take longer than
        # the steps do), until it grew: the same condition on every rank.
        while state.step < a.steps or (a.until_grown and not grew() and state.step < 20 * a.steps) \
                or (a.shrink_after_grow is not None and grew() and hvd.size() == 3
                    and state.step < 20 * a.steps):
            if kills.get(me) == state.step and hvd.size() == a.np:
                with open(os.path.join(a.out, "killed_at"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            if a.grow_at is not None and state.step == a.grow_at and hvd.rank() == 0 and a.grow_file:
                with open(a.grow_file, "w") as f:
                    f.write(f"{a.np + 1}\n")
            if a.shrink_at is not None and state.step == a.shrink_at and hvd.rank() == 0:
                with open(a.grow_file, "w") as f:
                    f.write("2\n")
            if a.shrink_after_grow is not None and hvd.rank() == 0 and hvd.size() == 3 and \
                    state.step == log["entries"][-1][0] + a.shrink_after_grow:
                with open(a.grow_file, "w") as f:  # the slot of the process that grew in goes
                    f.write("2\n")
            if a.kill_while_growing is not None and me == a.kill_while_growing and \
                    hvd.size() == a.np and elastic_world.growth() is not None:
                # A process was started for the new slot and has not joined yet.
                with open(os.path.join(a.out, "killed_at"), "w") as f:
                    f.write(repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(a.step_sleep)
            t = time.time()
            train_step(state.model, state.optimizer, state.step)
            state.step += 1
            log["step_times"].append((state.step, hvd.size(), time.time() - t))
            log.setdefault("trace", []).append((state.step, hash(flat(state.model))))
            if state.step % a.commit_every == 0:
                state.commit()

    t0 = time.time()
    try:
        train(state)
    except SystemExit as e:  # told to leave (its host's slots were taken away)
        log["left"] = (me, state.step, e.code)
        raise
    except BaseException as e:
        log["errors"].append(f"{type(e).__name__}: {e}")
        raise
    finally:
        log["total"] = time.time() - t0
        log["final"] = ((hvd.rank(), hvd.size()) if hvd.is_initialized() else (None, None)) + \
            (state.step, flat(state.model))
        from horovodlite.elastic import runner

        log["stats"] = dict(runner.stats)
        with open(os.path.join(a.out, f"{os.getpid()}.pkl"), "wb") as f:
            pickle.dump(log, f)


def _kill_in_grow(out, after_join):
    """A fault hook: this rank (rank 0 of the old world: it alone tells the new processes)
    dies inside world.grow(), the new processes ready and waiting, just before it tells
    them to join or just after (they and the other old ranks then start the engine on
    the merged world with it dead)."""
    from horovodlite.elastic import growth

    tell = growth.Growth.tell

    def dying_tell(self, word, lost):
        if word == growth._JOIN:
            if after_join:
                tell(self, word, lost)
            with open(os.path.join(out, "killed_at"), "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), signal.SIGKILL)
        return tell(self, word, lost)

    growth.Growth.tell = dying_tell


def plain(a):
    """Replays a schedule in one job of max(sizes) ranks: before each segment every rank
    re-initialises on the first `size` ranks (the others wait for a later segment), and
    a segment that grows takes rank 0's model and optimizer state, as a join would."""
    schedule = [tuple(map(int, seg.split(":"))) for seg in a.schedule.split(",")]
    bounds = [start for start, _ in schedule[1:]] + [a.steps]
    hvd.init()
    me = hvd.rank()
    model, opt = model_and_optimizer()
    trace, member_before = [], False
    for (start, size), stop in zip(schedule, bounds):
        hvd.shutdown()
        try:
            hvd.init(comm=list(range(size)))
        except Exception:  # not in this segment's world
            member_before = False
            continue
        if not member_before or size > 1:
            hvd.broadcast_parameters(model.state_dict(), root_rank=0)
            hvd.broadcast_optimizer_state(opt, root_rank=0)
        member_before = True
        for step in range(start, stop):
            train_step(model, opt, step)
            trace.append((step + 1, hash(flat(model))))
    if me == 0:
        with open(a.save, "wb") as f:
            pickle.dump({"flat": flat(model), "trace": trace}, f)
    hvd.shutdown()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["elastic", "plain"])
    p.add_argument("out")
    p.add_argument("--np", type=int, default=3)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--commit-every", type=int, default=5)
    p.add_argument("--kill", default="")
    p.add_argument("--kill-in-reset", type=int, default=None)
    p.add_argument("--grow-at", type=int, default=None)
    p.add_argument("--grow-file", default=None, help="the discovery script's slot count")
    p.add_argument("--until-grown", action="store_true", help="train on until the job grew to 3")
    p.add_argument("--shrink-at", type=int, default=None, help="step at which it becomes 2")
    p.add_argument("--shrink-after-grow", type=int, default=None,
                   help="steps after the job grew to 3 at which it becomes 2 (the new process leaves)")
    p.add_argument("--kill-while-growing", type=int, default=None,
                   help="this rank dies once a process was started for a new slot, before it joined")
    p.add_argument("--kill-in-grow", type=lambda v: (int(v.split(":")[0]), v.split(":")[1]),
                   default=None, metavar="RANK:before-join|after-join",
                   help="this rank dies in world.grow(), just before or after telling the new "
                        "processes to join")
    p.add_argument("--schedule", default="0:3", help="first step:world size, ...")
    p.add_argument("--save", default=None)
    p.add_argument("--step-sleep", type=float, default=0.0)
    a = p.parse_args()
    (elastic if a.mode == "elastic" else plain)(a)
