"""What growing an elastic job costs the ranks already training: the pause they see at
the commit where the job grows (commit start -> train() running again on the bigger
world), and how much slower their steps are while the new process starts.

    python benchmarks/elastic_growth.py [--repeats 3] [--modes background,blocking]

Each repeat launches `horovodlite-run --elastic -np 2 --max-np 3` on a torch MLP with a
commit every 10 steps; at step 20 rank 0 makes the discovery script report a third
slot. Modes (HOROVODLITE_ELASTIC_GROW_IN_BACKGROUND): `background` spawns the new
process at a commit (held until it is in MPI_Init) and takes it in at the first commit
after its script reached hvd.init(), training going on meanwhile; `blocking` waits for
all of that at one commit. The modes alternate within each repeat; medians over
repeats and old ranks."""
import argparse
import glob
import os
import pickle
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"background": "1", "blocking": "0"}


def job(a):
    import torch

    import horovodlite.torch as hvd

    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    state = hvd.elastic.TorchState(model, opt, step=0)
    from horovodlite.elastic import world

    spawned = world.joined()
    log = {"steps": [], "entries": [], "commits": [], "spawned": spawned}

    @hvd.elastic.run
    def train(state):
        log["entries"].append((state.step, hvd.size(), time.perf_counter()))
        while state.step < a.steps:
            if state.step == a.grow_at and hvd.rank() == 0 and hvd.size() == 2:
                Path(a.slots).write_text("3\n")
                log["grow_requested"] = time.perf_counter()
            t = time.perf_counter()
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
            time.sleep(a.step_sleep)  # stands for the rest of a step (data, forward of a bigger model)
            state.step += 1
            log["steps"].append((state.step, hvd.size(), time.perf_counter() - t))
            if state.step % 10 == 0:
                c = [state.step, hvd.size(), time.perf_counter(), None]
                log["commits"].append(c)
                state.commit()  # HostsUpdatedInterrupt leaves c[3] None
                c[3] = time.perf_counter()

    train(state)
    with open(os.path.join(a.out, f"{os.getpid()}.pkl"), "wb") as f:
        pickle.dump(log, f)


def launch(mode, out, a):
    slots = out / "slots"
    slots.write_text("2\n")
    disc = out / "discover.sh"
    disc.write_text(f"echo localhost:$(cat {slots})\n")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               HOROVODLITE_ELASTIC_GROW_IN_BACKGROUND=MODES[mode],
               HOROVODLITE_ELASTIC_DISCOVERY_INTERVAL="0.2",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "horovodlite.run", "--elastic", "-np", "2", "--min-np", "2",
           "--max-np", "3", "--host-discovery-script", f"sh {disc}",
           sys.executable, __file__, "--job", str(out), "--slots", str(slots),
           "--steps", str(a.steps), "--step-sleep", str(a.step_sleep)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        raise SystemExit(f"{mode}: the job hung:\n{text[-3000:]}")
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: the job failed ({proc.returncode}):\n{text[-3000:]}")
    return [pickle.loads(Path(f).read_bytes()) for f in glob.glob(str(out / "*.pkl"))]


def measure(logs):
    """Per old rank: (seconds held at the commit that started the new process, at the
    commit that took it in, their sum, step-time ratio while it started (steps trained
    meanwhile over the steps before the request), steps trained meanwhile)."""
    out = []
    for log in logs:
        if log["spawned"]:
            continue
        grown_step, _, back = log["entries"][-1]
        joined = [c for c in log["commits"] if c[1] == 2 and c[3] is None][0]
        done = [c[3] - c[2] for c in log["commits"] if c[1] == 2 and c[3] is not None]
        normal = statistics.median(done[:2])  # commits before the request
        started = max(done[2:], default=normal) - normal  # the commit that spawned it
        held_join = back - joined[2]
        before = [d for s, n, d in log["steps"] if n == 2 and s <= 20]
        during = [d for s, n, d in log["steps"] if n == 2 and 20 < s <= grown_step]
        ratio = statistics.mean(during) / statistics.median(before) if during else float("nan")
        out.append((started, held_join, started + held_join, ratio, grown_step - 20))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="background,blocking")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--step-sleep", type=float, default=0.02)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--slots", help=argparse.SUPPRESS)
    ap.add_argument("--grow-at", type=int, default=20, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.job:
        a.out = a.job
        return job(a)
    modes = a.modes.split(",")
    rows = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="hvdl-growth-") as tmp:
        for r in range(a.repeats):
            for m in (modes if r % 2 == 0 else modes[::-1]):
                out = Path(tmp) / f"{m}{r}"
                out.mkdir()
                t = time.perf_counter()
                got = measure(launch(m, out, a))
                rows[m] += got
                print(f"repeat {r} {m}: " + "; ".join(
                    f"held {x[0]:.3f} + {x[1]:.3f} s" for x in got)
                    + f" ({time.perf_counter() - t:.1f} s job)", file=sys.stderr, flush=True)
    print(f"2 -> 3 ranks, a commit every 10 steps, {a.repeats} launches per mode, alternating "
          f"(medians over launches and the 2 old ranks; max in brackets)")
    print("| growth | held at the commit that starts it (s) | held at the commit that takes it "
          "in (s) | total held (s) | step time meanwhile (x before) | steps trained meanwhile |")
    print("|---|---|---|---|---|---|")

    def med(xs):
        xs = [x for x in xs if x == x]
        return (statistics.median(xs), max(xs)) if xs else (float("nan"), float("nan"))

    for m, got in rows.items():
        cols = [med(x[i] for x in got) for i in range(5)]
        print(f"| {m} | " + " | ".join(f"{c[0]:.3f} ({c[1]:.3f})" for c in cols[:3])
              + f" | {cols[3][0]:.2f} | {cols[4][0]:.0f} |")


if __name__ == "__main__":
    main()
