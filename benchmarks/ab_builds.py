"""Compare builds of horovodlite (worktrees of other commits) on one benchmark, interleaved.

    python benchmarks/ab_builds.py --build base=../base --build new=. --pairs 8 \
        [--np 2] [--resnet-steps 30]

(A checkout of another commit: `git worktree add ../base <commit>`, a virtualenv in it,
`pip install -e . --no-deps --no-build-isolation` there.)

Each build is a checkout with its own virtualenv (`.venv`, horovodlite installed
editable from that checkout). One round launches every build once, in an order that
rotates each round (A B C, B C A, ...), so a drift in the machine's load or in where
the vCPUs sit falls on all of them alike; each launch runs that checkout's own
launcher and `benchmarks/allreduce.py --skip-sizes` (the ResNet-50 gradient set). The
table gives, per build and row, the median over rounds of each launch's median step
time, the spread (min..max), the ratio to the first build, and how many rounds that
build was the fastest; the load average before and after is printed since other work
on the machine moves every number. A second table keeps only the quiet rounds: those in
which every launch's MPI control (MPI one Allreduce per tensor, which no build changes)
stayed within 15 % of its best, since other work on the machine shows there first.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROW = re.compile(r"^((?:hvd|MPI) .+?)\s+(\d+\.\d+)\s+\d+\.\d+\s+(\d+)$")


def launch(path, np_, steps, timeout):
    venv = os.path.join(path, ".venv", "bin")
    cmd = [os.path.join(venv, "horovodlite-run"), "-np", str(np_), os.path.join(venv, "python"),
           "benchmarks/allreduce.py", "--skip-sizes", "--resnet-steps", str(steps)]
    env = dict(os.environ, PATH=venv + os.pathsep + os.environ.get("PATH", ""))
    p = subprocess.run(cmd, cwd=path, env=env, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"{path}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line.strip())
        if m:
            rows[m.group(1).strip()] = (float(m.group(2)), int(m.group(3)))
    if not rows:
        raise RuntimeError(f"{path}: no result rows in\n{p.stdout[-2000:]}")
    return rows


CONTROL = "MPI one Allreduce per tensor"
QUIET = 1.15


def table(builds, times, rows, rounds, what):
    ref = builds[0][0]
    for row in rows:
        print(f"\n{row}: median over {what} of each launch's median step (ms)")
        print(f"{'build':12} {'median':>8} {'min..max':>16} {'vs ' + ref:>8} {'fastest':>8}")
        per_round = [[times[n][row][r] for n, _ in builds] for r in rounds]
        ref_med = statistics.median(times[ref][row][r] for r in rounds)
        for i, (name, _) in enumerate(builds):
            v = [times[name][row][r] for r in rounds]
            fastest = sum(1 for rnd in per_round if min(rnd) == rnd[i])
            print(f"{name:12} {statistics.median(v):>8.2f} {min(v):>7.2f}..{max(v):<7.2f} "
                  f"{statistics.median(v) / ref_med:>8.3f} {fastest:>8}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action="append", required=True, metavar="NAME=PATH")
    ap.add_argument("--pairs", type=int, default=8, help="rounds (each launches every build once)")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--resnet-steps", type=int, default=30)
    ap.add_argument("--timeout", type=float, default=300)
    args = ap.parse_args()
    builds = [b.split("=", 1) for b in args.build]
    print(f"# load average before: {os.getloadavg()}", flush=True)
    times = {name: {} for name, _ in builds}  # name -> row -> [ms per launch]
    wrong = {name: 0 for name, _ in builds}
    for r in range(args.pairs):
        order = builds[r % len(builds):] + builds[:r % len(builds)]
        for name, path in order:
            rows = launch(os.path.abspath(path), args.np, args.resnet_steps, args.timeout)
            for row, (ms, w) in rows.items():
                times[name].setdefault(row, []).append(ms)
                wrong[name] = max(wrong[name], w)
            print(f"round {r} {name}: " + ", ".join(f"{k} {v[0]:.2f}" for k, v in rows.items()),
                  flush=True)
    print(f"# load average after: {os.getloadavg()}")
    all_rows = sorted({row for t in times.values() for row in t})
    table(builds, times, all_rows, list(range(args.pairs)), "all rounds")
    # Other work on the machine shows first in MPI's own time (its busy-polling ranks
    # lose the most when a core is taken), which no build changes: the rounds in which
    # every launch's MPI control stayed within QUIET of its best are the quiet ones.
    if CONTROL in all_rows:
        best = min(min(times[n][CONTROL]) for n, _ in builds)
        quiet = [r for r in range(args.pairs)
                 if all(times[n][CONTROL][r] <= QUIET * best for n, _ in builds)]
        if quiet:
            table(builds, times, all_rows, quiet,
                  f"the {len(quiet)} quiet rounds {quiet} (every '{CONTROL}' within "
                  f"{QUIET:.2f}x of its best, {best:.2f} ms)")
    print(f"\n#wrong elements (max over launches): {wrong}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
