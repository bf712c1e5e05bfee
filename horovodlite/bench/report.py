"""Writes the markdown report and its PNG plots (matplotlib, when installed)."""
import os

from . import plotting
from .workloads import human

ORDER = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")


def _fmt_time(t):
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    return f"{t * 1e3:.2f} ms"


def _plots(rows, impls, out_dir):
    from .._optional import MissingDependency, require

    try:
        matplotlib = require("matplotlib", "the report's plots")
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except MissingDependency as e:
        return {}, f"no plots: {e}"
    made = {}
    colls = [c for c in ORDER if any(r["coll"] == c for r in rows)]
    for coll in colls:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for impl in impls:
            pts = sorted((r["bytes"], r["busbw"]) for r in rows
                         if r["coll"] == coll and r["impl"] == impl and r["bytes"] >= 4096)
            if pts:
                style = "--" if impl.startswith("memcpy") else "-"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o", ms=3, label=impl)
        # log y: memcpy in cache is 10x the rest
        made[coll] = plotting.save(fig, ax, os.path.join(out_dir, f"{coll}_busbw.png"),
                                   "message size (bytes)", "busbw (GB/s)",
                                   f"{coll}: bus bandwidth vs size", logy=True)
    small = [r for r in rows if r["coll"] == "allreduce" and r["bytes"] <= 65536
             and not r["impl"].startswith("memcpy")]
    if small:
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for impl in impls:
            pts = sorted((r["bytes"], r["time"] * 1e6) for r in small if r["impl"] == impl)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=impl)
        made["latency"] = plotting.save(fig, ax, os.path.join(out_dir, "allreduce_latency.png"),
                                        "message size (bytes)", "time per allreduce (µs)",
                                        "allreduce latency, small messages", logy=True)
    rn = sorted((r["time"], r["impl"]) for r in rows if r["coll"] == "resnet50")
    if rn:
        fig, ax = plt.subplots(figsize=(7, 0.5 + 0.45 * len(rn)))
        ax.barh([i for _, i in rn][::-1], [t * 1e3 for t, _ in rn][::-1])
        for y, (t, _) in enumerate(rn[::-1]):
            ax.text(t * 1e3, y, f" {t * 1e3:.1f} ms", va="center", fontsize=8)
        ax.set_xlabel("time per step (ms), lower is better")
        ax.set_title("ResNet-50 gradients: 161 float32 tensors, 102 MB")
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, "resnet50.png"), dpi=110)
        plt.close(fig)
        made["resnet50"] = "resnet50.png"
    return made, None


def _pick_size(rows, target):
    sizes = sorted({r["bytes"] for r in rows if r["coll"] == "allreduce"})
    below = [s for s in sizes if s <= target]
    return below[-1] if below else (sizes[-1] if sizes else None)


def write(out_dir, rows, meta, failed, skipped):
    os.makedirs(out_dir, exist_ok=True)
    impls = list(dict.fromkeys(meta["impls"]))
    plots, plot_note = _plots(rows, impls, out_dir)
    L = []
    L.append("# horovodlite benchmark report\n")
    L.append(f"`{meta['command']}` — {meta['n']} ranks, {meta['when']}\n")
    L.append("| | |\n|---|---|")
    for k, v in meta["machine"]:
        L.append(f"| {k} | {v} |")
    L.append("")
    L.append(meta["method"] + "\n")

    size = _pick_size(rows, 64 << 20)
    if size:
        at = {r["impl"]: r for r in rows if r["coll"] == "allreduce" and r["bytes"] == size}
        mpi = at.get("MPI (mpi4py)")
        cp = next((r for i, r in at.items() if i.startswith("memcpy")), None)
        L.append(f"## Summary: allreduce of {human(size)}\n")
        L.append("| implementation | time | busbw GB/s | × MPI | % of memcpy | #wrong |")
        L.append("|---|---|---|---|---|---|")
        for impl in impls:
            r = at.get(impl)
            if not r:
                continue
            x_mpi = f"{r['busbw'] / mpi['busbw']:.2f}×" if mpi and not impl.startswith("memcpy") else ""
            pct = f"{100 * r['busbw'] / cp['busbw']:.0f} %" if cp and not impl.startswith("memcpy") else ""
            L.append(f"| {impl} | {_fmt_time(r['time'])} | {r['busbw']:.2f} | {x_mpi} | {pct} | {r['wrong']} |")
        L.append("")
    rn = sorted((r for r in rows if r["coll"] == "resnet50"), key=lambda r: r["time"])
    if rn:
        L.append("## ResNet-50 gradient set\n")
        L.append("161 float32 tensors (torchvision resnet50 parameter shapes, 25.6 M elements, "
                 "102 MB) summed over all ranks, as one training step would: horovodlite and "
                 "Horovod enqueue all and wait (their engines fuse), MPI one in-place "
                 "Allreduce per tensor, gloo and the numpy ring one packed buffer.\n")
        if "resnet50" in plots:
            L.append(f"![ResNet-50]({plots['resnet50']})\n")
        L.append("| implementation | time per step | × fastest | #wrong |")
        L.append("|---|---|---|---|")
        for r in rn:
            L.append(f"| {r['impl']} | {_fmt_time(r['time'])} | {r['time'] / rn[0]['time']:.2f} | {r['wrong']} |")
        L.append("")
    if "latency" in plots:
        L.append("## Small-message latency (allreduce)\n")
        L.append(f"![latency]({plots['latency']})\n")
    for coll in ORDER:
        crow = [r for r in rows if r["coll"] == coll]
        if not crow:
            continue
        L.append(f"## {coll}\n")
        if coll in plots:
            L.append(f"![{coll}]({plots[coll]})\n")
        L.append("| size | implementation | time | algbw GB/s | busbw GB/s | #wrong |")
        L.append("|---|---|---|---|---|---|")
        for s in sorted({r["bytes"] for r in crow}):
            for impl in impls:
                r = next((x for x in crow if x["bytes"] == s and x["impl"] == impl), None)
                if r:
                    L.append(f"| {human(s)} | {impl} | {_fmt_time(r['time'])} | {r['algbw']:.3f} | "
                             f"{r['busbw']:.3f} | {r['wrong']} |")
        L.append("")
    notes = []
    if plot_note:
        notes.append(plot_note)
    for name, why in skipped:
        notes.append(f"{name}: not run ({why})")
    for (impl, (coll, size)), why in sorted(failed.items()):
        what = coll if coll == "resnet50" else f"{coll} {human(size)}"
        notes.append(f"{impl}, {what}: {why}")
    if notes:
        L.append("## Not measured\n")
        L += [f"- {x}" for x in notes]
        L.append("")
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(L))
    return path
