"""An alpha-beta cost model of allreduce on H hosts x L ranks per host.

Each algorithm is written down as the steps it takes; a step is a set of concurrent
transfers (source rank, destination rank, bytes) plus the reductions each rank does
in it. A step costs

    alpha + max( bytes over the busiest host link direction / link payload rate,
                 bytes a host moves through its memory / its share of memory bandwidth,
                 bytes it sends and receives across hosts / (2 x its TCP rate) )

so contention falls out of the layout: when several ranks of one host send across at
once they share that host's link, which is what separates the flat ring from the
hierarchical one. Ranks are numbered host-major (host h holds h*L .. h*L+L-1), as
mpirun places them. The link's payload rate is the link rate times the TCP payload
share of each frame (MSS / frame: 0.956 at MTU 1500, 0.993 at MTU 9000): the simulated
links, like real ones, count Ethernet, IP and TCP headers against the rate. A link
shaped by a token bucket (`burst`: tc tbf's, 256 KiB on the simulated cluster at 1
Gbit/s) sends what its bucket refilled while it idled at once (steps_time).

The other two terms are the host's CPU: reductions and copies, and the kernel's work
for every byte that crosses hosts (a copy into the socket on the sender, out of it on
the receiver, the protocol on both). `tcp_rate` is what one host's TCP carries each way
while it sends and receives at once with the machine's cores at it (tcp_cpu_rate), so a
byte sent costs half of 1/tcp_rate and a byte received the other half. The two overlap
(the ranks' threads reduce while the kernel's softirqs move bytes, on either core), so
a step takes the larger. On one set of 10 Gbit/s reports on the simulated cluster
(1-64 MiB), the sum with the probe's own rate put the model +52..+75 % above the
measurement on 2x1, +11..+31 % on 2x2 and +3..+43 % on 3x1; the larger with the
all-cores rate -25..+19 % (the measurements move 10-20 % between reports). At 1 Gbit/s
the link hides both; at 10 Gbit/s on a few shared cores the CPU is the bound (there TCP
alone kept 1.7-1.9 of two cores busy).

    from horovodlite.sim import Cluster, predict
    c = Cluster(hosts=2, local=2, link_rate=125e6, latency=60e-6, mem_bw=8e9)
    predict("hierarchical", c, 64 << 20)      # seconds
    python -m horovodlite.sim --cluster 2x2 --link-rate 1gbit

Algorithms (ALGORITHMS): "ring" (flat ring over all ranks, horovodlite's and the
textbook one), "hierarchical" (reduce-scatter in shared memory inside each host, L
concurrent rings across hosts, allgather in shared memory; from 4 MiB pipelined in
chunks as horovodlite runs it), "tree" (binomial tree
reduce to rank 0, then broadcast, whole messages), "ps" (parameter server: P extra
server ranks, each on a host of its own; every worker pushes 1/P of its buffer to
each server, which sums as pushes arrive and sends the sum back)."""
import argparse
import math
from dataclasses import dataclass, field

ALGORITHMS = ("ring", "hierarchical", "tree", "ps")


def tcp_cpu_rate(measured, link_payload, busy=None, cpus=None):
    """The model's `tcp_rate`: bytes per second one host's TCP would carry each way with
    all of the machine's `cpus` cores at it, from a probe that moved `measured` while
    `busy` of them were busy (the simulated hosts share the machine's cores). Without
    that figure, a probe at 0.9 of the link's payload rate or more saw the link, not the
    CPU: infinity."""
    if busy and cpus and busy > 0:
        return measured * cpus / busy
    return math.inf if measured >= 0.9 * link_payload else measured


def payload_share(mtu):
    """TCP payload bytes per byte the link carries: MSS (MTU - IP, TCP, timestamp
    headers) over the Ethernet frame (MTU + 14)."""
    return (mtu - 52) / (mtu + 14)


@dataclass
class Cluster:
    hosts: int
    local: int                 # ranks per host
    link_rate: float           # bytes/s each way per host link (the tc rate / 8)
    latency: float = 50e-6     # seconds per message (alpha)
    mem_bw: float = 8e9        # bytes/s one host's memory moves, shared by its ranks
    mtu: int = 1500
    servers: int = 1           # parameter servers, each an extra rank on its own host
    tcp_rate: float = math.inf  # bytes/s one host's TCP carries each way, sending and receiving
    burst: float = 0.0         # bytes a link direction that idled may send at once (tbf's bucket)
    payload_rate: float = field(init=False)

    def __post_init__(self):
        self.payload_rate = self.link_rate * payload_share(self.mtu)

    @property
    def n(self):
        return self.hosts * self.local

    def host_of(self, rank):
        """Worker ranks are host-major; server ranks (n, n+1, ...) sit on hosts of their own."""
        return rank // self.local if rank < self.n else self.hosts + (rank - self.n)


class Step:
    """Concurrent transfers and per-rank memory work of one step."""

    def __init__(self):
        self.flows = []   # (src, dst, bytes)
        self.memory = {}  # rank -> bytes it reads + writes in memory (reductions, copies)

    def send(self, src, dst, nbytes):
        if nbytes > 0:
            self.flows.append((src, dst, nbytes))
        return self

    def touch(self, rank, nbytes):
        self.memory[rank] = self.memory.get(rank, 0) + nbytes
        return self


def step_time(c, step, alpha=True):
    lat, link, cpu = step_parts(c, step)
    return (lat if alpha else 0.0) + max(link, cpu)


def step_parts(c, step, tokens=None):
    """(latency, link seconds, CPU seconds) of a step: it takes latency + the larger.
    `tokens`: {(host, "out" | "in"): payload bytes its bucket holds}, which each
    direction sends at once before the rate holds it (see steps_time)."""
    return _parts(c, step, _loads(c, step), tokens or {})


def _loads(c, step):
    """{(host, "out" | "in"): bytes} the step's transfers put on each link direction."""
    out = {}
    for src, dst, b in step.flows:
        hs, hd = c.host_of(src), c.host_of(dst)
        if hs != hd:
            out[(hs, "out")] = out.get((hs, "out"), 0) + b
            out[(hd, "in")] = out.get((hd, "in"), 0) + b
    return out


def _parts(c, step, loads, tokens):
    """step_parts with the step's link loads (_loads) already known."""
    mem_host, tcp_host = {}, {}
    for src, dst, b in step.flows:
        hs, hd = c.host_of(src), c.host_of(dst)
        if hs == hd:  # inside a host: a copy through memory on both ends
            mem_host[hs] = mem_host.get(hs, 0) + 2 * b
    for (h, _), b in loads.items():  # across hosts: the kernel's TCP work on both ends
        tcp_host[h] = tcp_host.get(h, 0) + b
    for r, b in step.memory.items():
        h = c.host_of(r)
        mem_host[h] = mem_host.get(h, 0) + b
    link = max([max(0.0, b - tokens.get(d, 0.0)) for d, b in loads.items()] or [0]) / c.payload_rate
    # The larger, not the sum: see the module's docstring.
    cpu = max([max(mem_host.get(h, 0) / c.mem_bw, tcp_host.get(h, 0) / (2 * c.tcp_rate))
               for h in {*mem_host, *tcp_host}] or [0.0])
    return (c.latency if step.flows else 0.0), link, cpu


def steps_time(c, steps):
    """Seconds for `steps` in order, the call run back to back with itself, as a
    training loop or a benchmark runs it. With a bucket (`c.burst`, tc tbf's) a link
    direction refills it at the rate while it idles, and sends what it holds at once:
    the tree's broadcast leaves at once for its first 256 KiB after the reduce, whose
    direction was the other one (measured 2x1, 1 MiB: 13.2 ms, against 16.9 ms for the
    rate alone). The call is run twice and the second time taken, so the bucket holds
    what the previous call left it."""
    if not c.burst:
        return sum(step_time(c, s) for s in steps)
    cap = c.burst * payload_share(c.mtu)
    directions = [(h, w) for h in range(c.hosts + c.servers) for w in ("out", "in")]
    loads = [_loads(c, s) for s in steps]
    tokens = {}
    for _ in range(2):
        total = 0.0
        for s, load in zip(steps, loads):
            lat, link, cpu = _parts(c, s, load, tokens)
            took = lat + max(link, cpu)
            for d in directions:
                have, b = tokens.get(d, 0.0), load.get(d, 0.0)
                busy = max(0.0, b - have) / c.payload_rate  # at the rate, after the burst
                left = max(0.0, have - b)
                tokens[d] = min(cap, left + (took - busy) * c.payload_rate)
            total += took
    return total


def _ring_steps(c, ranks, nbytes):
    """Reduce-scatter then allgather around `ranks`: 2(k-1) steps of nbytes/k each."""
    k = len(ranks)
    if k < 2:
        return []
    blk = nbytes / k
    steps = []
    for phase in ("rs", "ag"):
        for _ in range(k - 1):
            s = Step()
            for i, r in enumerate(ranks):
                s.send(r, ranks[(i + 1) % k], blk)
                if phase == "rs":
                    s.touch(r, 3 * blk)  # read both operands, write the sum
            steps.append(s)
    return steps


def _pair_steps(c, ranks, nbytes):
    """Two ranks: one exchange of the whole buffer (csrc/collectives/ring_allreduce.h's
    pair exchange), each folding the peer's copy into its own (read both, write one)."""
    a, b = ranks
    return [Step().send(a, b, nbytes).send(b, a, nbytes).touch(a, 3 * nbytes).touch(b, 3 * nbytes)]


def _two_or_ring(c, ranks, nbytes):
    """What the code runs across `ranks`: the pair exchange on two, else the ring."""
    return (_pair_steps if len(ranks) == 2 else _ring_steps)(c, ranks, nbytes)


def ring_steps(c, nbytes):
    return _two_or_ring(c, list(range(c.n)), nbytes)


# The window's passes (csrc/collectives/shm_allreduce.cc), bytes each rank reads and
# writes for S bytes on L ranks. A rank's own block never goes through the window raw,
# so the model once charged more than the code moves: 3.5 S and 2.5 S for L = 2 where
# the window moves 2.5 S and 2 S. That shows where the CPU is the bound: on 2x2 at 10
# Gbit/s the model was 37 % above one measurement at 64 MiB, 22 % with these bytes.
def _local_rs(c, nbytes):
    """Reduce-scatter in shared memory: each rank copies the peers' blocks of its input
    into its slots (read and write (L-1)/L S), then sums its own block where it lies
    with the L-1 peers' staged copies of it (read S) into its output (write S/L)."""
    L, s = c.local, Step()
    for r in range(c.n):
        s.touch(r, 2 * (L - 1) / L * nbytes + nbytes + nbytes / L)
    return s


def _local_ag(c, nbytes):
    """Allgather in shared memory: each rank publishes its block (read and write S/L)
    and copies the L-1 others' out of their slots (read and write (L-1)/L S)."""
    L, s = c.local, Step()
    for r in range(c.n):
        s.touch(r, 2 * nbytes / L + 2 * (L - 1) / L * nbytes)
    return s


# csrc/collectives/ring_allreduce.h's kPairExchangeMaxBytes: one message of the pair exchange.
PAIR_MESSAGE_MAX = 1 << 20


def _cross_steps(c, nbytes, pair=True):
    """L rings across hosts at once, each over 1/L of the buffer: they share every link.
    On two hosts each is the pair exchange (hierarchical_allreduce.cc: at every size with
    one rank a host, up to one message with more), except in the pipeline (`pair`
    False), whose chunks cross as the ring's two half-size exchanges
    (hierarchical_pipeline.cc)."""
    L, H = c.local, c.hosts
    pair = pair and (L == 1 or nbytes / L <= PAIR_MESSAGE_MAX)
    steps_of = _two_or_ring if pair else _ring_steps
    cross = [Step() for _ in range(1 if pair and H == 2 else 2 * (H - 1))]
    for i in range(L):
        for j, st in enumerate(steps_of(c, [h * L + i for h in range(H)], nbytes / L)):
            cross[j].flows += st.flows
            for r, b in st.memory.items():
                cross[j].memory[r] = cross[j].memory.get(r, 0) + b
    return cross


# csrc/collectives/hierarchical_pipeline.h: chunks of at least 2 MiB, at most 16, the
# first and the last cut into a 1/PIPELINE_EDGE_DIVISOR piece at the outer end and the rest.
PIPELINE_MIN_CHUNK, PIPELINE_MAX_CHUNKS, PIPELINE_EDGE_DIVISOR = 2 << 20, 16, 4


def pipeline_chunks(nbytes):
    return int(max(1, min(PIPELINE_MAX_CHUNKS, nbytes // PIPELINE_MIN_CHUNK)))


def pipeline_chunk_sizes(nbytes):
    """Bytes of each chunk the pipeline runs, in order (page rounding left out)."""
    k = pipeline_chunks(nbytes)
    base = nbytes / k
    if k < 2:
        return [float(nbytes)]
    edge = base / PIPELINE_EDGE_DIVISOR
    return [edge, base - edge] + [base] * (k - 2) + [base - edge, edge]


def hierarchical_steps(c, nbytes):
    """Unpipelined order: local reduce-scatter, cross-host rings, local allgather."""
    if c.local == 1:
        return _cross_steps(c, nbytes)
    return [_local_rs(c, nbytes)] + _cross_steps(c, nbytes) + [_local_ag(c, nbytes)]


def hierarchical_time(c, nbytes):
    """With K > 1 chunks the stages overlap: chunk i crosses the hosts while chunk i+1 is
    reduce-scattered (and i-1 allgathered) in memory, so the call takes the first
    chunk's local reduce-scatter, then for each chunk the slower of its cross-host
    rings and the local stages beside them, then the last chunk's allgather."""
    if c.local == 1 or pipeline_chunks(nbytes) == 1:
        return steps_time(c, hierarchical_steps(c, nbytes))
    sizes = pipeline_chunk_sizes(nbytes)
    rs = [step_time(c, _local_rs(c, b)) for b in sizes]
    ag = [step_time(c, _local_ag(c, b)) for b in sizes]
    t = rs[0] + ag[-1]
    for i, b in enumerate(sizes):
        lat = link = cpu = 0.0
        for s in _cross_steps(c, b, pair=False):
            sl, sk, sc = step_parts(c, s)
            lat, link, cpu = lat + sl, link + max(sk, sc), cpu + sc
        # The local stages beside it share the host's cores with the transfers' CPU work.
        beside = (rs[i + 1] if i + 1 < len(sizes) else 0.0) + (ag[i - 1] if i else 0.0)
        t += lat + max(link, cpu + beside)
    # Back to back, the link idles only through the first chunk's reduce-scatter and the
    # last one's allgather: what its bucket refills meanwhile leaves at once.
    credit = min(c.burst * payload_share(c.mtu), (rs[0] + ag[-1]) * c.payload_rate)
    return t - credit / c.payload_rate


def tree_steps(c, nbytes):
    """Binomial tree over all ranks: reduce towards rank 0, then broadcast from it."""
    n = c.n
    rounds = max(0, math.ceil(math.log2(n))) if n > 1 else 0
    reduce = []
    for k in range(rounds):
        s = Step()
        for r in range(n):
            if r % (2 << k) == (1 << k):
                s.send(r, r - (1 << k), nbytes)
                s.touch(r - (1 << k), 3 * nbytes)
        reduce.append(s)
    bcast = []
    for k in reversed(range(rounds)):
        s = Step()
        for r in range(n):
            if r % (2 << k) == (1 << k):
                s.send(r - (1 << k), r, nbytes)
        bcast.append(s)
    return reduce + bcast


def ps_steps(c, nbytes):
    """Push (every worker sends its shard to each server, servers sum as they arrive),
    then pull (each server sends the sum of its shard to every worker)."""
    P, n = c.servers, c.n
    shard = nbytes / P
    push, pull = Step(), Step()
    for w in range(n):
        for p in range(P):
            push.send(w, n + p, shard)
            pull.send(n + p, w, shard)
            push.touch(n + p, 2 * shard)  # add into the accumulator
    return [push, pull]


STEPS = {"ring": ring_steps, "hierarchical": hierarchical_steps, "tree": tree_steps, "ps": ps_steps}


def predict(algorithm, cluster, nbytes):
    """Predicted seconds for one allreduce of `nbytes` bytes."""
    if algorithm not in STEPS:
        raise ValueError(f"unknown algorithm {algorithm!r}; one of {', '.join(ALGORITHMS)}")
    if algorithm == "hierarchical":
        return hierarchical_time(cluster, nbytes)
    return steps_time(cluster, STEPS[algorithm](cluster, nbytes))


def traffic(algorithm, cluster, nbytes):
    """{rank: (bytes sent, bytes received)} in one allreduce (across hosts and inside)."""
    out = {}
    for s in STEPS[algorithm](cluster, nbytes):
        for src, dst, b in s.flows:
            so, si = out.get(src, (0, 0))
            out[src] = (so + b, si)
            do, di = out.get(dst, (0, 0))
            out[dst] = (do, di + b)
    return out


def link_bound(cluster, nbytes):
    """The link bound of any allreduce across hosts: each host sends 2(H-1)/H of the
    buffer over its own link (at the full link rate, headers not counted)."""
    H = cluster.hosts
    return 2 * (H - 1) / H * nbytes / cluster.link_rate if H > 1 else 0.0


def parse_rate(text):
    from .run.local_cluster import parse_rate as pr

    return pr(text)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m horovodlite.sim", description=__doc__.splitlines()[0])
    ap.add_argument("--cluster", default="2x2", help="HOSTSxRANKS_PER_HOST")
    ap.add_argument("--link-rate", default="1gbit", help="per host, each way (tc units)")
    ap.add_argument("--latency", type=float, default=50e-6, help="seconds per message")
    ap.add_argument("--mem-bw", type=float, default=8e9, help="host memory bandwidth, bytes/s")
    ap.add_argument("--mtu", type=int, default=1500)
    ap.add_argument("--servers", type=int, default=1, help="parameter servers")
    ap.add_argument("--burst", type=float, default=0.0,
                    help="bytes a link that idled may send at once (tc tbf's bucket; default 0)")
    ap.add_argument("--tcp-rate", type=float, default=math.inf,
                    help="bytes/s one host's TCP carries each way while sending and receiving "
                         "(default: no limit)")
    args = ap.parse_args(argv)
    h, l = (int(x) for x in args.cluster.lower().split("x"))
    c = Cluster(h, l, parse_rate(args.link_rate), args.latency, args.mem_bw, args.mtu, args.servers,
                args.tcp_rate, args.burst)
    print(f"{h} hosts x {l} ranks, link {args.link_rate} (payload {c.payload_rate / 1e6:.1f} MB/s), "
          f"alpha {args.latency * 1e6:.0f} us, memory {args.mem_bw / 1e9:.1f} GB/s, {args.servers} server(s)")
    print(f"{'size':>10} {'bound ms':>9} " + " ".join(f"{a + ' ms':>15}" for a in ALGORITHMS))
    for e in range(12, 27, 2):
        s = 1 << e
        print(f"{s:>10} {link_bound(c, s) * 1e3:>9.2f} "
              + " ".join(f"{predict(a, c, s) * 1e3:>15.2f}" for a in ALGORITHMS))


if __name__ == "__main__":
    main()
