"""Timeline: what rank 0 writes (HOROVODLITE_TIMELINE and start_timeline/stop_timeline),
and the picture `python -m horovodlite.timeline` renders from it."""
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from mpirun import run

N = 3
STEPS = 3
SMALL = [17, 1000, 3, 4096]  # one group, so fused together
BIG = 300_000               # above the 1 MiB fusion threshold: reduced in place
LATE_RANK, LATE_MS = 2, 40


def _job(tmp):
    return f"""
import time
from horovodlite._loader import _core

def step(hvd, s):
    if hvd.rank() == {LATE_RANK}:
        time.sleep({LATE_MS} / 1000)  # the slowest rank to become ready
    small = [np.full(n, hvd.rank() + s, np.float32) for n in {SMALL}]
    # As a group (named grad.0 ... grad.3): separate async calls fuse only if none is
    # late for its cycle, which a loaded machine does not promise.
    hs = [hvd.grouped_allreduce_async(small, name="grad", op=hvd.Sum),
          hvd.allreduce_async(np.full({BIG}, 1.0, np.float32), name="grad.{len(SMALL)}", op=hvd.Sum)]
    outs = hvd.synchronize(hs[0]) + [hvd.synchronize(hs[1])]
    want = sum(range(hvd.size())) + hvd.size() * s
    assert all((o == want).all() for o in outs[:-1]) and (outs[-1] == hvd.size()).all()

def main(hvd):
    for s in range({STEPS}):
        step(hvd, s)
    # Runtime API on every rank with a per-rank path: only rank 0 may write.
    hvd.stop_timeline()
    for s in range(3):  # the response cache is warm now
        step(hvd, s)
    hvd.start_timeline({str(tmp)!r} + f"/api_rank{{hvd.rank()}}.json", mark_cycles=False)
    for s in range({STEPS}):
        step(hvd, s)
    hvd.stop_timeline()
    return _core.stats()
"""


def _events(path):
    data = json.loads(Path(path).read_text())  # complete JSON once stopped
    names = {e["pid"]: e["args"]["name"] for e in data if e["ph"] == "M" and e["name"] == "process_name"}
    by_tensor = defaultdict(list)
    for e in data:
        if e["ph"] != "M":
            by_tensor[names[e["pid"]]].append(e)
    return data, by_tensor


def _check_tensor(evs, nbytes, fused, steps):
    X = lambda name: sorted((e for e in evs if e["ph"] == "X" and e["name"] == name), key=lambda e: e["ts"])
    neg, queue, ops = X("NEGOTIATE"), X("QUEUE"), X("ALLREDUCE")
    assert len(neg) == len(queue) == len(ops) == steps
    ready = [e for e in evs if e["name"] == "READY"]
    for n, q, op in zip(neg, queue, ops):
        marks = {e["args"]["rank"]: e["ts"] for e in ready if n["ts"] - 1e-3 <= e["ts"] <= n["ts"] + n["dur"] + 1e-3}
        assert sorted(marks) == list(range(N)), marks  # when each rank became ready
        assert min(marks.values()) == pytest.approx(n["ts"], abs=1e-3)
        assert n["ts"] + n["dur"] <= q["ts"] + 1e-3 and q["ts"] + q["dur"] <= op["ts"] + 1e-3
        assert op["args"]["bytes"] == nbytes
        end = op["ts"] + op["dur"] + 1e-3
        phases = sorted((e for e in evs if e["ph"] == "X" and op["ts"] - 1e-3 <= e["ts"] <= end
                         and e["name"] not in ("ALLREDUCE", "NEGOTIATE", "QUEUE")), key=lambda e: e["ts"])
        for p in phases:
            assert p["ts"] + p["dur"] <= end  # nested in the op
            assert p["args"]["group"] == op["args"]["group"]
        want = ["RING_REDUCE_SCATTER", "RING_ALLGATHER"]
        if fused:
            want = ["MEMCPY_IN_FUSION_BUFFER"] + want + ["MEMCPY_OUT_FUSION_BUFFER"]
            assert op["args"]["group_size"] == len(SMALL)
        # else out of place on the host: the ring reads the input where it lies
        assert [p["name"] for p in phases] == want


def test_timeline_json_and_picture(tmp_path):
    trace = tmp_path / "timeline.json"
    stats = run(N, _job(tmp_path), env={"HOROVODLITE_SHM": "0",  # the phases checked below are the ring's
                                   "HOROVODLITE_TIMELINE": str(trace), "HOROVODLITE_TIMELINE_MARK_CYCLES": "1",
                                        "HOROVODLITE_FUSION_THRESHOLD": str(1 << 20)})
    # Rounds are collective; a rank read while a timer-driven round (the timeline's
    # readiness reports) is already under way counts one more.
    assert abs(stats[0]["rounds"] - stats[1]["rounds"]) <= 1

    # 1. env-started timeline, stopped by stop_timeline()
    data, by_tensor = _events(trace)
    assert sorted(by_tensor) == sorted([f"grad.{i}" for i in range(len(SMALL) + 1)] + ["negotiation cycles"])
    for i, n in enumerate(SMALL):
        _check_tensor(by_tensor[f"grad.{i}"], n * 4, fused=True, steps=STEPS)
    _check_tensor(by_tensor[f"grad.{len(SMALL)}"], BIG * 4, fused=False, steps=STEPS)
    cycles = [e for e in data if e["name"] == "CYCLE_START"]
    assert len(cycles) >= STEPS and all(e["ph"] == "i" and e["s"] == "g" for e in cycles)

    # 2. start_timeline on every rank after the cache is warm: only rank 0 wrote, and
    #    the coordinator still saw every rank's readiness (the cache is bypassed).
    assert not (tmp_path / "api_rank1.json").exists() and not (tmp_path / "api_rank2.json").exists()
    api, api_by_tensor = _events(tmp_path / "api_rank0.json")
    assert not [e for e in api if e["name"] == "CYCLE_START"]
    for i, n in enumerate(SMALL):
        _check_tensor(api_by_tensor[f"grad.{i}"], n * 4, fused=True, steps=STEPS)

    # 3. the picture and its summary
    pytest.importorskip("matplotlib")
    png = tmp_path / "timeline.png"
    out = subprocess.run([sys.executable, "-m", "horovodlite.timeline", str(trace), "-o", str(png)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"{len(SMALL) + 1} tensors" in out.stdout
    assert f"rank {LATE_RANK}:" in out.stdout.split("slowest to become ready")[1].splitlines()[1]
    assert png.stat().st_size > 30_000
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > 400 and img.shape[1] > 1000
    rgb = (img[..., :3] * 255).round().astype(int).reshape(-1, 3)
    for color in ("#f4a261", "#d62828", "#1d3557", "#2a9d8f", "#80b918"):  # the phases were drawn
        want = np.array([int(color[i:i + 2], 16) for i in (1, 3, 5)])
        assert (np.abs(rgb - want).sum(axis=1) <= 6).sum() > 50, color

    # 4. a trace whose writer died (no closing bracket) still renders
    cut = tmp_path / "cut.json"
    cut.write_text(trace.read_text().rstrip().rstrip("]").rstrip())
    out = subprocess.run([sys.executable, "-m", "horovodlite.timeline", str(cut), "--summary"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "tensors" in out.stdout, out.stderr
