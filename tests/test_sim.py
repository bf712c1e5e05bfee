"""The cost model (horovodlite/sim.py) against the closed forms it must reduce to, and the
parameter-server and tree baselines (horovodlite/bench/baselines.py) against numpy."""
import pytest

from horovodlite import sim
from mpirun import run

MiB = 1 << 20


def test_ring_on_one_rank_per_host_is_the_link_bound_plus_latency():
    c = sim.Cluster(3, 1, link_rate=125e6, latency=1e-4, mem_bw=1e12, mtu=1500)
    S = 64 * MiB
    steps = 2 * (3 - 1)
    want = steps * 1e-4 + 2 * 2 / 3 * S / (125e6 * sim.payload_share(1500))
    assert sim.predict("ring", c, S) == pytest.approx(want, rel=1e-9)
    assert sim.link_bound(c, S) == pytest.approx(2 * 2 / 3 * S / 125e6)


def test_flat_ring_shares_no_link_but_takes_more_steps():
    """2 x 2: the flat ring's steps each move S/4 over the link, 6 of them: 1.5 S/B;
    the hierarchical path's two concurrent rings move S/2 per host per step, 2 steps: S/B."""
    c = sim.Cluster(2, 2, link_rate=125e6, latency=0.0, mem_bw=1e15, mtu=9000)
    S = 64 * MiB
    B = c.payload_rate
    assert sim.predict("ring", c, S) == pytest.approx(1.5 * S / B, rel=1e-6)
    assert sim.predict("hierarchical", c, S) == pytest.approx(S / B, rel=1e-3)


def test_hierarchical_charges_the_bytes_the_shared_memory_window_moves():
    """2 x 2 with a free link: the host's memory alone. Per rank, for S bytes on L = 2
    ranks of a host, the window's reduce-scatter reads and writes 2.5 S (its peers'
    halves copied in: S; its own half summed with the staged copy: 1.5 S) and its
    allgather 2 S (its half published, the other copied out); across the two hosts the
    pair exchange folds the peer's copy of its half into its own (reads two halves,
    writes one: 1.5 S). Two ranks a host: 2 x 6 S through its memory, one chunk (1 MiB:
    no pipeline)."""
    c = sim.Cluster(2, 2, link_rate=1e15, latency=0.0, mem_bw=1e9, mtu=9000)
    S = 1 * MiB
    assert sim.predict("hierarchical", c, S) == pytest.approx(2 * 6 * S / 1e9, rel=1e-6)
    # 3 MiB, below the pipeline: 1.5 MiB blocks are above one message of the pair exchange,
    # so they cross as the ring does (0.75 S: one step reads two quarters, writes one).
    assert sim.predict("hierarchical", c, 3 * S) == pytest.approx(2 * 5.25 * 3 * S / 1e9, rel=1e-6)
    # Three hosts: the ring across them, whose two reduce-scatter steps each read two
    # sixths of S and write one (2 x 3 x S/6 = S): 2 x 5.5 S.
    c3 = sim.Cluster(3, 2, link_rate=1e15, latency=0.0, mem_bw=1e9, mtu=9000)
    assert sim.predict("hierarchical", c3, S) == pytest.approx(2 * 5.5 * S / 1e9, rel=1e-6)


def test_tcp_cpu_path_bounds_a_link_faster_than_it():
    """2 x 1 (the pair exchange): its one step sends S and receives S per host. A kernel
    that carries R bytes/s through loopback (a send and a receive each) spends S/R on
    that; when that exceeds the link time it is the step's time."""
    S = 64 * MiB
    fast = sim.Cluster(2, 1, link_rate=1.25e9, latency=0.0, mem_bw=float("inf"), mtu=9000,
                       tcp_rate=0.5e9)
    assert sim.predict("ring", fast, S) == pytest.approx(S / 0.5e9, rel=1e-6)
    slow = sim.Cluster(2, 1, link_rate=125e6, latency=0.0, mem_bw=1e15, mtu=9000, tcp_rate=0.5e9)
    assert sim.predict("ring", slow, S) == pytest.approx(S / slow.payload_rate, rel=1e-6)


def test_cpu_term_is_the_larger_of_memory_and_tcp_work():
    """2 x 1 (the pair exchange, one step): a host folds 3 S through memory and sends and
    receives S across; with a free link the step takes the larger of the two, which
    overlap on the cores (the sum overestimated 10 Gbit/s reports by up to 75 %)."""
    S = 64 * MiB
    for mem_bw, tcp_rate in ((3e9, 2e9), (12e9, 0.5e9)):
        c = sim.Cluster(2, 1, link_rate=1e15, latency=0.0, mem_bw=mem_bw, mtu=9000,
                        tcp_rate=tcp_rate)
        want = max(3 * S / mem_bw, S / tcp_rate)
        assert sim.predict("ring", c, S) == pytest.approx(want, rel=1e-6)


def test_tcp_cpu_rate_scales_the_probe_to_every_core():
    """The probe moved 1 GB/s per host with 1.6 of 2 cores busy: 1.25 GB/s with both.
    Without the CPU figure a probe near the link saw the link (infinity), else itself."""
    assert sim.tcp_cpu_rate(1e9, 1.24e9, busy=1.6, cpus=2) == pytest.approx(1.25e9)
    assert sim.tcp_cpu_rate(1.2e9, 1.24e9) == float("inf")
    assert sim.tcp_cpu_rate(0.8e9, 1.24e9) == 0.8e9


def test_pipeline_chunks_tile_the_buffer_with_small_edges():
    for nbytes in (4 * MiB, 16 * MiB + 12, 64 * MiB, 1 << 30):
        sizes = sim.pipeline_chunk_sizes(nbytes)
        assert sum(sizes) == pytest.approx(nbytes)
        base = nbytes / sim.pipeline_chunks(nbytes)
        assert sizes[0] == sizes[-1] == pytest.approx(base / sim.PIPELINE_EDGE_DIVISOR)
        assert len(sizes) == sim.pipeline_chunks(nbytes) + 2
    assert sim.pipeline_chunk_sizes(3 * MiB) == [3 * MiB]


def test_traffic_ring_stays_2k_parameter_server_grows():
    S = 1.0
    for n in (2, 4, 8, 16):
        c = sim.Cluster(n, 1, 125e6, servers=1)
        ring = sim.traffic("ring", c, S)
        assert all(o == pytest.approx(2 * (n - 1) / n) and i == pytest.approx(2 * (n - 1) / n)
                   for o, i in ring.values())
        ps = sim.traffic("ps", c, S)
        assert ps[n] == pytest.approx((n, n))  # the server: n pushes in, n pulls out
        assert sim.predict("ps", c, 64 * MiB) > sim.predict("ring", c, 64 * MiB)


def test_tree_takes_log_rounds():
    c = sim.Cluster(8, 1, link_rate=1e8, latency=0.0, mem_bw=1e15, mtu=9000)
    assert sim.predict("tree", c, 1e6) == pytest.approx(2 * 3 * 1e6 / c.payload_rate, rel=1e-6)


def test_a_bucket_lets_an_idle_direction_send_its_burst_at_once():
    """tbf's bucket, calls back to back. The tree on 2 x 1: the reduce goes one way, the
    broadcast the other, so each direction idles for the other's transfer and sends its
    burst at once: each transfer takes (S - burst)/B. The ring keeps both directions
    busy: with no idle time between calls its bucket never refills, whatever its size."""
    S, burst = 1 * MiB, 256 * 1024
    strict = sim.Cluster(2, 1, link_rate=125e6, latency=0.0, mem_bw=1e15, mtu=9000)
    bucket = sim.Cluster(2, 1, link_rate=125e6, latency=0.0, mem_bw=1e15, mtu=9000, burst=burst)
    B = strict.payload_rate
    cap = burst * sim.payload_share(9000)
    assert sim.predict("tree", strict, S) == pytest.approx(2 * S / B, rel=1e-9)
    assert sim.predict("tree", bucket, S) == pytest.approx(2 * (S - cap) / B, rel=1e-9)
    assert sim.predict("ring", bucket, S) == pytest.approx(sim.predict("ring", strict, S), rel=1e-9)


def test_unknown_algorithm():
    with pytest.raises(ValueError, match="unknown algorithm 'star'"):
        sim.predict("star", sim.Cluster(2, 1, 1e8), 1)


BASELINES = r'''
from mpi4py import MPI
from horovodlite.bench.baselines import ParameterServer, Tree, serve, stop_servers

def main(hvd):
    world = MPI.COMM_WORLD
    r, size = world.Get_rank(), world.Get_size()
    servers = 2
    n = size - servers
    comm = world.Split(0 if r < n else 1, r)
    if r >= n:
        serve(world, list(range(n)))
        return None
    out = {}
    ps, tree = ParameterServer(world, range(n, size)), Tree(comm)
    for count in (1, 5, 1001, 70001):
        for dt in (np.float32, np.float64):
            x = lambda j: ((np.arange(count) % 7) + j).astype(dt)
            want = sum(x(j) for j in range(n))
            got_ps = ps.allreduce(x(r))
            got_tree = tree.allreduce(x(r))
            out[(count, np.dtype(dt).name)] = (bool((got_ps == want).all()), bool((got_tree == want).all()))
    stop_servers(world, range(n, size))
    return out
'''


@pytest.mark.parametrize("np_", [3, 5])
def test_parameter_server_and_tree_match_numpy(np_):
    results = run(np_, BASELINES, init=False, timeout=240)
    for r, res in enumerate(results[:np_ - 2]):
        assert res and all(a and b for a, b in res.values()), (r, res)
