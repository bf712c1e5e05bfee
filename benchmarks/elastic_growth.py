"""What growing an elastic job costs the ranks already training: the pause they see at
the commit where the job grows (commit start -> train() running again on the bigger
world), and how much slower their steps are while the new process starts.

    python benchmarks/elastic_growth.py [--repeats 3] [--modes background,blocking]

Each repeat launches `horovodlite-run --elastic -np 2 --max-np 3` on a torch MLP with a
commit every 10 steps; at step 20 rank 0 makes the discovery script report a third
slot. Modes (HOROVODLITE_ELASTIC_GROW_IN_BACKGROUND): `background` starts the new
process from a helper thread of rank 0 while training goes on and merges it at the
first commit after it is ready; `blocking` spawns it at a commit, every rank waiting.
The modes alternate within each repeat; medians over repeats and old ranks."""
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
                log["commits"].append((state.step, hvd.size(), time.perf_counter()))
                state.commit()

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
    """Per old rank: (pause at the growing commit, step-time ratio while growing, steps
    trained between the request and the merge)."""
    out = []
    for log in logs:
        if log["spawned"]:
            continue
        (grown_step, _, back) = log["entries"][-1]
        commit_t = {s: t for s, n, t in log["commits"] if n == 2}[grown_step]
        before = [d for s, n, d in log["steps"] if n == 2 and s <= 20]
        during = [d for s, n, d in log["steps"] if n == 2 and 20 < s <= grown_step]
        base = statistics.median(before)
        ratio = statistics.mean(during) / base if during else float("nan")
        out.append((back - commit_t, ratio, grown_step - 20))
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
                print(f"repeat {r} {m}: pause {', '.join(f'{p:.3f}' for p, _, _ in got)} s, "
                      f"{time.perf_counter() - t:.1f} s job", file=sys.stderr, flush=True)
    print(f"2 -> 3 ranks at a commit every 10 steps, {a.repeats} launches per mode "
          f"(medians over launches and the 2 old ranks)")
    print("| growth | pause at the growing commit (s) | step time while the new rank starts "
          "(x before) | steps trained meanwhile |")
    print("|---|---|---|---|")
    for m, got in rows.items():
        print(f"| {m} | {statistics.median(p for p, _, _ in got):.3f} "
              f"(max {max(p for p, _, _ in got):.3f}) | "
              f"{statistics.median(x for _, x, _ in got if x == x) if any(x == x for _, x, _ in got) else float('nan'):.2f} | "
              f"{statistics.median(n for _, _, n in got):.0f} |")


if __name__ == "__main__":
    main()
