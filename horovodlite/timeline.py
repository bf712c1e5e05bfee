"""Reads a horovodlite timeline (Chrome-trace JSON, HOROVODLITE_TIMELINE) and renders it
as a picture a person can read: one row per tensor with its phases over time
(negotiation with the moment each rank was ready, queueing, copies into and out of
the fusion buffer, the algorithm's transfer phases) above a summary: bytes per
second, where the time went, and which ranks were slowest to become ready.

    python -m horovodlite.timeline timeline.json -o timeline.png
    python -m horovodlite.timeline timeline.json --summary          # text only

The same file loads in Perfetto (ui.perfetto.dev) or chrome://tracing."""
import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

PHASE_COLORS = {
    "NEGOTIATE": "#f4a261",
    "QUEUE": "#e9c46a",
    "MEMCPY_IN_FUSION_BUFFER": "#2a9d8f",
    "MEMCPY_IN_OUTPUT": "#48cae4",
    "RING_REDUCE_SCATTER": "#d62828",
    "RING_ALLGATHER": "#1d3557",
    "MEMCPY_OUT_FUSION_BUFFER": "#80b918",
}
OP_COLOR = "#cfe3f3"  # the collective's whole span, behind its phases
EXTRA_COLORS = ["#9d4edd", "#ff66c4", "#00b4d8", "#6c757d", "#b5838d", "#3a86ff"]
OPS = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL", "REDUCESCATTER", "BARRIER", "JOIN"}


def load(path):
    """The trace's events. A trace whose writer was killed lacks the closing bracket;
    like chrome://tracing, accept it."""
    text = Path(path).read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = json.loads(text.rstrip().rstrip(",") + "]")
    return data["traceEvents"] if isinstance(data, dict) else data


class Trace:
    """Events grouped per tensor track, in milliseconds from the start of the recording."""

    def __init__(self, events):
        self.names = {}  # pid -> tensor name
        self.spans = defaultdict(list)  # pid -> [(phase, start_ms, dur_ms, args)]
        self.ready = defaultdict(list)  # pid -> [(rank, ms)]
        self.cycles = []
        for e in events:
            ph, pid = e.get("ph"), e.get("pid", 0)
            if ph == "M" and e.get("name") == "process_name":
                self.names[pid] = e["args"]["name"]
            elif ph == "X":
                self.spans[pid].append((e["name"], e["ts"] / 1e3, e.get("dur", 0) / 1e3, e.get("args", {})))
            elif ph in ("i", "I"):
                if e.get("name") == "CYCLE_START":
                    self.cycles.append(e["ts"] / 1e3)
                elif e.get("name") == "READY":
                    self.ready[pid].append((e["args"]["rank"], e["ts"] / 1e3))
        for v in self.spans.values():
            v.sort(key=lambda s: s[1])
        self.tensors = sorted((p for p in self.spans if p != 0), key=lambda p: (self.spans[p][0][1], p))

    def negotiations(self):
        """(pid, [(rank, ms)]) per NEGOTIATE: the READY marks inside it (a name is never
        negotiated twice at once, so containment pairs them up)."""
        for pid in self.tensors:
            marks = sorted(self.ready.get(pid, []), key=lambda m: m[1])
            for name, start, dur, _ in self.spans[pid]:
                if name == "NEGOTIATE":
                    inside = [m for m in marks if start - 1e-6 <= m[1] <= start + dur + 1e-6]
                    if inside:
                        yield pid, inside

    def all_spans(self):
        for pid in self.tensors:
            for s in self.spans[pid]:
                yield pid, s

    def extent(self):
        starts = [s[1] for _, s in self.all_spans()] + self.cycles
        ends = [s[1] + s[2] for _, s in self.all_spans()] + self.cycles
        return (min(starts), max(ends)) if starts else (0.0, 0.0)


def _union(intervals):
    """Total length of the union of (start, end) intervals."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def _category(phase):
    if phase == "NEGOTIATE":
        return "negotiation"
    if phase == "QUEUE":
        return "queue"
    if phase.startswith("MEMCPY"):
        return "copies"
    if phase in OPS:
        return None
    return "transfer"


def summarize(trace):
    """Numbers for the summary panel (wall-clock ms, overlaps counted once)."""
    by_cat = defaultdict(list)
    op_iv, phase_iv = [], []
    total_bytes, groups = 0, set()
    for pid, (name, start, dur, args) in trace.all_spans():
        iv = (start, start + dur)
        cat = _category(name)
        if cat is None:
            op_iv.append(iv)
            total_bytes += args.get("bytes", 0)
            groups.add(args.get("group", (pid, start)))
        else:
            by_cat[cat].append(iv)
            if cat in ("copies", "transfer"):
                phase_iv.append(iv)
    t0, t1 = trace.extent()
    busy = _union(op_iv)
    time_ms = {c: _union(v) for c, v in by_cat.items()}
    time_ms["other (in op)"] = max(0.0, busy - _union(phase_iv))
    lag = defaultdict(list)  # rank -> ms behind the first rank, per negotiation
    last = defaultdict(int)
    for pid, marks in trace.negotiations():
        if len(marks) < 2:
            continue
        first = min(t for _, t in marks)
        for r, t in marks:
            lag[r].append(t - first)
        last[max(marks, key=lambda m: m[1])[0]] += 1
    ranks = sorted(lag, key=lambda r: -sum(lag[r]) / len(lag[r]))
    return {
        "tensors": len(trace.tensors),
        "groups": len(groups),
        "bytes": total_bytes,
        "span_ms": t1 - t0,
        "busy_ms": busy,
        "bytes_per_s": total_bytes / (t1 - t0) * 1e3 if t1 > t0 else 0.0,
        "busy_bytes_per_s": total_bytes / busy * 1e3 if busy > 0 else 0.0,
        "time_ms": dict(time_ms),
        "ready_lag_ms": {r: (sum(lag[r]) / len(lag[r]), max(lag[r]), last[r]) for r in ranks},
        "cycles": len(trace.cycles),
    }


def _fmt_bytes(n):
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.3g} {unit}"
        n /= 1000.0


def summary_text(s, width=None):
    """The summary as lines of text (what the picture's top-left panel shows)."""
    total = sum(s["time_ms"].values()) or 1.0
    kinds = sorted(s["time_ms"].items(), key=lambda kv: -kv[1])
    lines = [
        f"{s['tensors']} tensors, {s['groups']} executed groups, {_fmt_bytes(s['bytes'])} reduced",
        f"span {s['span_ms']:.1f} ms; collectives busy {s['busy_ms']:.1f} ms",
        f"throughput: {_fmt_bytes(s['bytes_per_s'])}/s over the span,",
        f"            {_fmt_bytes(s['busy_bytes_per_s'])}/s while collectives ran",
        "time: " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in kinds[:3]),
    ]
    if len(kinds) > 3:
        lines.append("      " + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in kinds[3:]))
    if s["ready_lag_ms"]:
        lines.append("slowest to become ready (mean/max lag, times last):")
        for r, (m, x, n) in list(s["ready_lag_ms"].items())[:3]:
            lines.append(f"  rank {r}: {m:.3f} / {x:.3f} ms, last {n}x")
    if s["cycles"]:
        lines.append(f"{s['cycles']} negotiation cycles marked")
    return "\n".join(lines)


def render(trace, out_path, title=None, max_tensors=250, window=None):
    from ._optional import require

    matplotlib = require("matplotlib", "drawing a timeline (python -m horovodlite.timeline)")

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    s = summarize(trace)
    pids = trace.tensors[:max_tensors]
    rows = max(1, len(pids))
    t0, t1 = window or trace.extent()
    label_pt = max(6.0, min(9.0, 700 / rows))
    gantt_h = max(3.5, max(0.17, label_pt * 1.45 / 72) * rows + 1.2)
    fig = plt.figure(figsize=(16, 3.6 + gantt_h))
    gs = fig.add_gridspec(2, 3, height_ratios=[3.6, gantt_h], width_ratios=[1.35, 1, 1],
                          hspace=1.1 / (3.6 + gantt_h) + 0.05, wspace=0.35)

    # --- summary text ---
    ax_txt = fig.add_subplot(gs[0, 0])
    ax_txt.axis("off")
    ax_txt.set_title(title or "horovodlite timeline", loc="left", fontsize=13, fontweight="bold")
    ax_txt.text(0, 1, summary_text(s), va="top", ha="left", fontsize=9, family="monospace",
                transform=ax_txt.transAxes)

    # --- where the time went ---
    ax_cat = fig.add_subplot(gs[0, 1])
    cats = sorted(s["time_ms"].items(), key=lambda kv: kv[1])
    cat_colors = {"negotiation": PHASE_COLORS["NEGOTIATE"], "queue": PHASE_COLORS["QUEUE"],
                  "copies": PHASE_COLORS["MEMCPY_IN_FUSION_BUFFER"],
                  "transfer": PHASE_COLORS["RING_REDUCE_SCATTER"], "other (in op)": OP_COLOR}
    ax_cat.barh([c for c, _ in cats], [v for _, v in cats],
                color=[cat_colors.get(c, "#999999") for c, _ in cats], edgecolor="#444444")
    for i, (_, v) in enumerate(cats):
        ax_cat.text(v, i, f" {v:.1f}", va="center", fontsize=8)
    ax_cat.set_xlabel("ms (wall clock)")
    ax_cat.set_title("time by kind", fontsize=10)
    ax_cat.margins(x=0.25)

    # --- ready lag per rank ---
    ax_lag = fig.add_subplot(gs[0, 2])
    lag = list(s["ready_lag_ms"].items())[:8]
    if lag:
        ax_lag.barh([f"rank {r}" for r, _ in lag][::-1], [m for _, (m, _, _) in lag][::-1],
                    xerr=None, color="#6c757d")
        for i, (_, (m, x, n)) in enumerate(lag[::-1]):
            ax_lag.text(m, i, f" {m:.2f} (max {x:.2f})", va="center", fontsize=8)
        ax_lag.margins(x=0.6)
        ax_lag.set_xlabel("mean ms behind the first ready rank")
    else:
        ax_lag.text(0.5, 0.5, "no per-rank readiness\n(single rank or cached)", ha="center",
                    va="center", transform=ax_lag.transAxes)
        ax_lag.set_xticks([])
        ax_lag.set_yticks([])
    ax_lag.set_title("slowest ranks to become ready", fontsize=10)

    # --- gantt ---
    ax = fig.add_subplot(gs[1, :])
    extra = {}
    used = set()
    for row, pid in enumerate(pids):
        y = rows - 1 - row
        for name, start, dur, _args in trace.spans[pid]:
            if start + dur < t0 or start > t1:
                continue
            if name in OPS:
                ax.broken_barh([(start, dur)], (y - 0.42, 0.84), facecolors=OP_COLOR, edgecolor="none")
                used.add(name)
                continue
            color = PHASE_COLORS.get(name)
            if color is None:
                color = extra.setdefault(name, EXTRA_COLORS[len(extra) % len(EXTRA_COLORS)])
            h = 0.84 if name in ("NEGOTIATE", "QUEUE") else 0.56
            ax.broken_barh([(start, max(dur, 1e-4))], (y - h / 2, h), facecolors=color, edgecolor="none")
            used.add(name)
        marks = [t for _, t in trace.ready.get(pid, []) if t0 <= t <= t1]
        if marks:
            ax.plot(marks, [y] * len(marks), "|", color="black", markersize=max(3, min(9, 600 / rows)),
                    markeredgewidth=0.8)
    for c in trace.cycles:
        if t0 <= c <= t1:
            ax.axvline(c, color="#999999", lw=0.4, alpha=0.4, zorder=0)
    ax.set_ylim(-0.6, rows - 0.4)
    pad = (t1 - t0) * 0.01
    ax.set_xlim(t0 - pad, t1 + pad)
    ax.set_yticks(range(rows))
    labels = [trace.names.get(p, str(p)) for p in pids][::-1]
    ax.set_yticklabels([lb if len(lb) <= 32 else lb[:15] + "…" + lb[-16:] for lb in labels],
                       fontsize=label_pt)
    ax.set_xlabel("time since the timeline started (ms)")
    ax.grid(axis="x", alpha=0.3)
    more = f" (first {len(pids)} of {len(trace.tensors)})" if len(trace.tensors) > len(pids) else ""
    ax.set_title(f"per-tensor phases{more}; | = a rank became ready", fontsize=10, loc="left")
    legend = [Patch(facecolor=PHASE_COLORS[n], label=n) for n in PHASE_COLORS
              if n in used and n != "MEMCPY_IN_OUTPUT"]
    if "MEMCPY_IN_OUTPUT" in used:
        legend.append(Patch(facecolor=PHASE_COLORS["MEMCPY_IN_OUTPUT"], label="MEMCPY_IN_OUTPUT"))
    legend += [Patch(facecolor=c, label=n) for n, c in extra.items()]
    legend += [Patch(facecolor=OP_COLOR, label=f"{n} (whole op)") for n in sorted(used & OPS)]
    ax.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.5 / gantt_h),
              ncol=min(6, len(legend)), fontsize=9, frameon=False)
    fig.savefig(out_path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return s


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m horovodlite.timeline",
                                description="Render a horovodlite timeline as a PNG/SVG/PDF.")
    p.add_argument("trace", help="timeline JSON written by HOROVODLITE_TIMELINE / start_timeline()")
    p.add_argument("-o", "--output", help="image to write (default: TRACE with .png)")
    p.add_argument("--window", metavar="START:END", help="only this time range, in ms")
    p.add_argument("--max-tensors", type=int, default=250, help="rows to draw (default 250)")
    p.add_argument("--title")
    p.add_argument("--summary", action="store_true", help="print the summary only, draw nothing")
    args = p.parse_args(argv)
    trace = Trace(load(args.trace))
    if not trace.tensors:
        print(f"{args.trace}: no tensor events recorded", file=sys.stderr)
        return 1
    if args.summary:
        print(summary_text(summarize(trace)))
        return 0
    window = None
    if args.window:
        a, _, b = args.window.partition(":")
        window = (float(a), float(b))
    out = args.output or str(Path(args.trace).with_suffix(".png"))
    from ._optional import MissingDependency

    try:
        s = render(trace, out, title=args.title or Path(args.trace).name,
                   max_tensors=args.max_tensors, window=window)
    except MissingDependency as e:
        print(f"{e} (or pass --summary for the text alone)", file=sys.stderr)
        return 2
    print(summary_text(s))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
