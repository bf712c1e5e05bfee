"""report.md and plots of `python -m horovodlite.bench --cluster` (cluster.py): measured
times beside the cost model's (horovodlite/sim.py) and the link bound, and traffic."""
import dataclasses
import json
import os

from .. import sim
from . import plotting
from ..run.local_cluster import parse_rate
from .workloads import human


def _model_name(impl, auto_algo):
    if impl.startswith("horovodlite"):
        algo = impl.split()[1]
        return algo if algo in sim.ALGORITHMS else None
    if impl.startswith("parameter server"):
        return "ps"
    if impl == "binomial tree":
        return "tree"
    return None


def _ms(t):
    return f"{t * 1e3:.2f}" if t >= 1e-3 else f"{t * 1e3:.3f}"


def write(out_dir, res, meta):
    H, L, P = meta["hosts"], meta["local"], meta["servers"]
    n = H * L
    rate = parse_rate(meta["link_rate"])
    cl = sim.Cluster(H, L, rate, latency=res["alpha"], mem_bw=res["mem_bw"], mtu=meta["mtu"],
                     servers=max(P, 1), tcp_rate=res.get("tcp_rate", float("inf")),
                     burst=meta.get("burst", 0))
    rows = res["rows"]
    impls = res["impls"]
    sizes = sorted({r["bytes"] for r in rows})
    by = {(r["impl"], r["bytes"]): r for r in rows}
    # horovodlite's data crosses hosts over its own TCP connections: its model takes the
    # latency measured over TCP where the job measured one; the MPI-based baselines MPI's.
    ours = dataclasses.replace(cl, latency=res.get("tcp_alpha", res["alpha"]))
    ceiling = sim.payload_share(meta["mtu"])
    busy = res.get("tcp_cores_busy", float("nan"))
    if busy == busy and "tcp_measured" in res:  # not NaN: measured
        tcp = (f"{res['tcp_measured'] / 1e9:.2f} GB/s each way per host, the machine's cores "
               f"{busy:.2f} of {meta['cpus']} busy meanwhile: the model's CPU path "
               f"{cl.tcp_rate / 1e9:.2f} GB/s (all the cores at it)")
    else:
        tcp = (f"{cl.tcp_rate / 1e9:.2f} GB/s each way per host (the CPU path: below the link)"
               if cl.tcp_rate != float("inf") else "as fast as the link (the CPU path not seen)")
    lines = [f"# Allreduce on a simulated cluster: {H} hosts x {L} workers"
             + (f" + {P} parameter-server host{'s' * (P > 1)}" if P else ""), ""]
    lines += [f"Command: `{meta['command']}` ({meta['when']}, {meta['wall']:.0f} s).", "",
              f"- hosts: network namespaces {', '.join(meta['host_names'])}, each with its own "
              f"hostname, one veth link each into a bridge, shaped with tc tbf at "
              f"**{meta['link_rate']} each way**, MTU {meta['mtu']}; every byte between hosts "
              "crosses its sender's and its receiver's link over TCP.",
              f"- machine: {meta['cpus']} logical cores shared by all ranks (and by other work: "
              f"load average {meta['load'][0][0]:.2f} before, {meta['load'][1][0]:.2f} after), so "
              "compute-bound numbers are pessimistic; at 1 Gbit/s the link is the bottleneck.",
              f"- measured in the job and fed to the model: latency alpha = "
              f"{res['alpha'] * 1e6:.0f} us per message over MPI (half a ping-pong between hosts; "
              f"{ours.latency * 1e6:.0f} us over TCP, a token passed around the hosts, for "
              f"horovodlite's model), host "
              f"memory bandwidth {res['mem_bw'] / 1e9:.1f} GB/s (all of a host's workers copying "
              f"at once), TCP {tcp} (every worker streaming to the next host and taking from "
              f"the one before, all at once); link payload share at MTU {meta['mtu']}: {ceiling:.3f} (TCP/IP and "
              "Ethernet headers count against the rate, so no TCP transfer can exceed that "
              "fraction of the bound); tbf's bucket: "
              f"{meta.get('burst', 0) / 1024:.0f} KiB, which a link direction that idled sends "
              "at once (the model counts it).",
              "- bound = 2(H-1)/H x S / link rate: every host must send that much over its link. "
              "busbw = S/t x 2(n-1)/n (nccl-tests). model: horovodlite/sim.py. Time: the "
              "slowest worker's mean per call, median over rounds; implementations take turns "
              "size by size, the first one rotating each round.", ""]
    # Summary: ours against MPI, and against the bound.
    auto = next((i for i in impls if i.endswith("(automatic)")), impls[0])
    lines += ["## Summary (large messages)", "",
              "| size | bound ms | horovodlite (auto) ms | of bound | MPI_Allreduce ms | of bound "
              "| horovodlite / MPI time |", "|---|---|---|---|---|---|---|"]
    for s in sizes:
        if s < (1 << 20):
            continue
        a, m = by.get((auto, s)), by.get(("MPI_Allreduce", s))
        if not a or not m:
            continue
        b = sim.link_bound(cl, s)
        lines.append(f"| {human(s)} | {_ms(b)} | {_ms(a['time'])} | {b / a['time']:.3f} | "
                     f"{_ms(m['time'])} | {b / m['time']:.3f} | {a['time'] / m['time']:.3f} |")
    lines.append("")
    # Per implementation: measured, model, error against the median round and against
    # the best one. The model has no term for the scheduler: with more ranks than cores
    # a round in which some rank keeps losing its core runs slower as a whole (2x2 on 2
    # cores, 1 MiB: rounds of 13.7 and 17.5-18.6 ms for the tree, of one build in one
    # launch), and the best round is the one it shaped least, as with timeit's minimum.
    worst = {}
    for impl in impls:
        model = _model_name(impl, None)
        lines += [f"## {impl}", "", "| size | time ms | busbw GB/s | of bound | best round ms "
                  "| model ms | model error (median / best round) | #wrong |",
                  "|---|---|---|---|---|---|---|---|"]
        for s in sizes:
            r = by.get((impl, s))
            if not r:
                continue
            t = r["time"]
            best = min(r.get("times") or [t])
            b = sim.link_bound(cl, s)
            busbw = s / t * 2 * (n - 1) / n / 1e9
            if model:
                p = sim.predict(model, ours if impl.startswith("horovodlite") else cl, s)
                err, err_best = (p - t) / t, (p - best) / best
                if s >= (1 << 20):
                    w = worst.get(impl, (0, 0))
                    worst[impl] = (max(w[0], abs(err)), max(w[1], abs(err_best)))
                mcol, ecol = _ms(p), f"{err * 100:+.1f} % / {err_best * 100:+.1f} %"
            else:
                mcol, ecol = "-", "-"
            lines.append(f"| {human(s)} | {_ms(t)} | {busbw:.3f} | {b / t:.3f} | {_ms(best)} | {mcol} "
                         f"| {ecol} | {r['wrong']} |")
        lines.append("")
    lines += ["## The model's largest error at sizes >= 1 MiB", "",
              "| implementation | model | largest error, median round | largest error, best round |",
              "|---|---|---|---|"]
    for impl, (e, eb) in worst.items():
        lines.append(f"| {impl} | {_model_name(impl, None)} | {e * 100:.1f} % | {eb * 100:.1f} % |")
    lines.append("")
    # Traffic at the largest size: per host link, measured by the veths' counters.
    big = sizes[-1]
    lines += [f"## Traffic per host link, one allreduce of {human(big)} (measured)", "",
              "Bytes through each host's link per call (veth counters, headers included), "
              "as a multiple of the message size S. The ring and the hierarchical path send "
              "2(H-1)/H x S per host whatever the number of workers; a parameter server's link "
              "carries n x S / P each way.", "",
              "| implementation | " + " | ".join(f"{h} in / out" for h in meta["host_names"]) + " |",
              "|---|" + "---|" * len(meta["host_names"])]
    for impl in impls:
        r = by.get((impl, big))
        if not r or not r["traffic"]:
            continue
        cells = []
        for h in meta["host_names"]:
            i, o = r["traffic"].get(h, (0, 0))
            cells.append(f"{i / big:.2f} / {o / big:.2f}")
        lines.append(f"| {impl} | " + " | ".join(cells) + " |")
    lines.append("")
    plots = _plots(out_dir, cl, ours, impls, sizes, by, n)
    for title, name in plots:
        lines += [f"### {title}", "", f"![{title}]({name})", ""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as f:
        f.write("\n".join(lines))
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"meta": meta, "results": res}, f, indent=1)
    return path


def _plots(out_dir, cl, ours, impls, sizes, by, n):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for k, impl in enumerate(impls):
        pts = [(s, by[(impl, s)]["time"]) for s in sizes if (impl, s) in by]
        line, = ax.plot([p[0] for p in pts], [p[1] * 1e3 for p in pts], marker="o", ms=3, label=impl)
        model = _model_name(impl, None)
        if model:
            c = ours if impl.startswith("horovodlite") else cl
            ax.plot(sizes, [sim.predict(model, c, s) * 1e3 for s in sizes], "--",
                    color=line.get_color(), lw=1, label=f"model: {model}")
    ax.plot(sizes, [sim.link_bound(cl, s) * 1e3 for s in sizes], ":", color="k", label="link bound")
    made.append(("Time per allreduce, measured and modelled", plotting.save(
        fig, ax, os.path.join(out_dir, "time.png"), "message size (bytes)",
        "time per allreduce (ms)",
        f"{cl.hosts} hosts x {cl.local}: measured (solid) and modelled (dashed)", logy=True,
        legend_size=7)))

    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    for impl in impls:
        pts = [(s, s / by[(impl, s)]["time"] * 2 * (n - 1) / n / 1e9) for s in sizes if (impl, s) in by]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, label=impl)
    bw = cl.link_rate * n / cl.hosts / (cl.hosts - 1) * (n - 1) / n / 1e9 if cl.hosts > 1 else None
    if bw:
        ax.axhline(bw, color="k", ls=":", label="link bound")
    made.append(("Bus bandwidth", plotting.save(
        fig, ax, os.path.join(out_dir, "busbw.png"), "message size (bytes)", "busbw (GB/s)",
        "bus bandwidth", legend_size=7)))

    # Traffic per rank as the number of workers grows (one worker per host), model.
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ns = list(range(2, 33))
    S = 1.0
    for algo, label in (("ring", "ring: any rank"), ("tree", "tree: busiest rank (root)"),
                        ("ps", f"parameter server ({cl.servers}): a server")):
        ys = []
        for k in ns:
            c = sim.Cluster(k, 1, cl.link_rate, cl.latency, cl.mem_bw, cl.mtu, cl.servers)
            t = sim.traffic(algo, c, S)
            ys.append(max(a + b for a, b in t.values()))
        ax.plot(ns, ys, label=label)
    made.append(("Traffic per rank as N grows", plotting.save(
        fig, ax, os.path.join(out_dir, "traffic.png"), "workers N (one per host)",
        "bytes sent + received per allreduce / S",
        "Traffic of the busiest rank as N grows (model)", sizes=False)))
    return made
