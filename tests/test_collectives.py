"""allgather, broadcast, alltoall, reducescatter, grouped forms, barrier and the
object collectives at N = 1..4, every dtype, shapes with 0 rows on some ranks and
sizes not divisible by N, against numpy. One mpirun launch per N runs the whole
matrix; each rank returns the list of cases that went wrong."""
import pytest

from collective_refs import REFS
from mpirun import run

MATRIX = REFS + r'''
from horovodlite._loader import _core


def main(hvd):
    r, n = hvd.rank(), hvd.size()
    bad = []
    seed = iter(range(1, 1_000_000))

    def expect(case, got, want):
        if not same(got, want):
            bad.append(f"rank {r}: {case}: got {np.asarray(got).dtype}{np.asarray(got).shape} "
                       f"{np.asarray(got).ravel()[:8]}, want {want.dtype}{want.shape} {want.ravel()[:8]}")

    # ---- allgather: dim 0 differs per rank (including 0 rows), other dims match ----
    dim0s = {"same": [3] * n, "varied": [j + 1 for j in range(n)],
             "zero_on_0": [0] + [2] * (n - 1), "all_zero": [0] * n}
    for dt in ALL_DTYPES:
        for kind, d0 in dim0s.items():
            for rest in [(), (3,), (2, 3)]:
                s = next(seed)
                ins = [data(dt, (d0[j],) + rest, s, j) for j in range(n)]
                got = hvd.allgather(ins[r], name=f"ag.{s}")
                expect(f"allgather {np.dtype(dt)} {kind} {rest}", got, np.concatenate(ins))
        s = next(seed)  # a scalar gathers as one row
        expect(f"allgather scalar {np.dtype(dt)}", hvd.allgather(data(dt, (), s, r)),
               np.stack([data(dt, (), s, j) for j in range(n)]))

    # ---- broadcast: every root, every dtype, out of place and in place ----
    shapes = [(), (0,), (1,), (17,), (17, 17), (5, 3, 2)]
    for dt in ALL_DTYPES:
        for i, shape in enumerate(shapes):
            root = (i + len(shapes) * ALL_DTYPES.index(dt)) % n
            s = next(seed)
            mine = data(dt, shape, s, r)
            want = data(dt, shape, s, root)
            got = hvd.broadcast(mine, root)
            expect(f"broadcast {np.dtype(dt)} {shape} root {root}", got, want)
            expect(f"broadcast input untouched {np.dtype(dt)} {shape}", mine, data(dt, shape, s, r))
            inplace = mine.copy()
            ret = hvd.broadcast_(inplace, root)
            expect(f"broadcast_ {np.dtype(dt)} {shape} root {root}", inplace, want)
            if ret is not inplace:
                bad.append(f"rank {r}: broadcast_ must return its argument")
    # Large enough for the pipelined chain (> 1 MiB) at N >= 3; every root.
    for root in range(n):
        s = next(seed)
        big = data(np.float32, (3 << 18) + 5, s, r)
        expect(f"broadcast 3 MiB root {root}", hvd.broadcast(big, root), data(np.float32, (3 << 18) + 5, s, root))

    # ---- alltoall: default equal splits, uneven splits with zeros, trailing dims ----
    for dt in ALL_DTYPES:
        for rest in [(), (3,), (2, 2)]:
            s = next(seed)
            ins = [data(dt, (2 * n,) + rest, s, j) for j in range(n)]
            out, rs = hvd.alltoall(ins[r], name=f"a2a.{s}")
            want = np.concatenate([ins[j][2 * r:2 * r + 2] for j in range(n)])
            expect(f"alltoall equal {np.dtype(dt)} {rest}", out, want)
            expect(f"alltoall equal received_splits", rs, np.full(n, 2, np.int32))
            splits = [[(j + k) % 3 for k in range(n)] for j in range(n)]
            ins = [data(dt, (sum(splits[j]),) + rest, s + 7, j) for j in range(n)]
            out, rs = hvd.alltoall(ins[r], splits=np.array(splits[r], np.int64))
            want = np.concatenate([ins[j][sum(splits[j][:r]):sum(splits[j][:r + 1])] for j in range(n)])
            expect(f"alltoall uneven {np.dtype(dt)} {rest}", out, want)
            expect(f"alltoall uneven received_splits", rs, np.array([splits[j][r] for j in range(n)], np.int32))

    # ---- reducescatter: every op, dims not divisible by N, fewer rows than ranks ----
    for dt in REDUCIBLE:
        for op in (hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product):
            for shape in [(1,), (7,), (2 * n + 1, 3), (0,), (0, 4), (n, 2, 2)]:
                s = next(seed)
                ins = [data(dt, shape, s, j) for j in range(n)]
                full = reduce_ref(ins, op, n)
                off, cnt = rows(shape[0], n, r)
                got = hvd.reducescatter(ins[r], op=op, name=f"rs.{s}")
                expect(f"reducescatter {np.dtype(dt)} op {op} {shape}", got, full[off:off + cnt])
    for dt in (np.float32, np.int32, np.float16):
        s = next(seed)
        ins = [data(dt, (5, 3), s, j) for j in range(n)]
        full = reduce_ref(ins, hvd.Sum, n, prescale=2.0, postscale=0.5)
        off, cnt = rows(5, n, r)
        got = hvd.reducescatter(ins[r], op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
        expect(f"reducescatter scale factors {np.dtype(dt)}", got, full[off:off + cnt])
    # Large enough to use several pipelined segments per ring step.
    s = next(seed)
    ins = [data(np.float32, (1 << 19) + 3, s, j) for j in range(n)]
    off, cnt = rows((1 << 19) + 3, n, r)
    expect("reducescatter 2 MiB", hvd.reducescatter(ins[r], op=hvd.Sum),
           reduce_ref(ins, hvd.Sum, n)[off:off + cnt])

    # ---- async, submitted in a different order on odd ranks ----
    cases = []
    for i in range(12):
        s = next(seed)
        cases.append((i, s))
    order = cases[::-1] if r % 2 else cases
    handles = {}
    for i, s in order:
        kind = i % 4
        if kind == 0:
            handles[i] = hvd.allgather_async(data(np.int32, (r + 1, 2), s, r), name=f"async.{i}")
        elif kind == 1:
            handles[i] = hvd.broadcast_async(data(np.float64, (4,), s, r), i % n, name=f"async.{i}")
        elif kind == 2:
            handles[i] = hvd.alltoall_async(data(np.int8, (n,), s, r), name=f"async.{i}")
        else:
            handles[i] = hvd.reducescatter_async(data(np.float32, (2 * n + 1,), s, r), op=hvd.Sum, name=f"async.{i}")
    for i, s in cases:
        got = hvd.synchronize(handles[i])
        kind = i % 4
        if kind == 0:
            want = np.concatenate([data(np.int32, (j + 1, 2), s, j) for j in range(n)])
        elif kind == 1:
            want = data(np.float64, (4,), s, i % n)
        elif kind == 2:
            got = got[0]
            want = np.concatenate([data(np.int8, (n,), s, j)[r:r + 1] for j in range(n)])
        else:
            off, cnt = rows(2 * n + 1, n, r)
            want = reduce_ref([data(np.float32, (2 * n + 1,), s, j) for j in range(n)], hvd.Sum, n)[off:off + cnt]
        expect(f"async case {i}", got, want)
    h = hvd.allgather_async(np.zeros(1), name="poll.probe2")
    while not hvd.poll(h):
        pass
    expect("poll then synchronize", hvd.synchronize(h), np.zeros(n))

    # ---- grouped: one negotiation, one fused ring (observable in the stats) ----
    for rounds in range(2):  # the second time through, the response cache answers
        s = next(seed)
        dts = [np.float32, np.int64, np.bool_, ml_dtypes.bfloat16, np.uint8, np.float16] + [np.int32] * 4
        shapes_of = lambda j: [(j + 1, 3), (0,), (2,), (1, 1, 2), (j,), (5,)] + [(1,)] * 4
        ins = lambda j: [data(dt, sh, s + k, j) for k, (dt, sh) in enumerate(zip(dts, shapes_of(j)))]
        shapes = shapes_of(r)
        before = _core.stats(0)
        got = hvd.grouped_allgather(ins(r))
        after = _core.stats(0)
        for k, g in enumerate(got):
            expect(f"grouped_allgather member {k}", g, np.concatenate([ins(j)[k] for j in range(n)]))
        if after["tensors"] - before["tensors"] != len(shapes) or after["groups"] - before["groups"] != 1:
            bad.append(f"rank {r}: grouped_allgather of {len(shapes)} small tensors ran as "
                       f"{after['groups'] - before['groups']} groups, expected one fused group")
        ins = [[data(np.float32, sh, s + 50 + k, j) for k, sh in enumerate([(3,), (n + 1, 2), (0,), (1,), (2 * n,)])]
               for j in range(n)]
        before = _core.stats(0)
        got = hvd.grouped_reducescatter(ins[r], op=hvd.Average)
        after = _core.stats(0)
        for k, g in enumerate(got):
            full = reduce_ref([ins[j][k] for j in range(n)], hvd.Average, n)
            off, cnt = rows(full.shape[0], n, r)
            expect(f"grouped_reducescatter member {k}", g, full[off:off + cnt])
        if after["groups"] - before["groups"] != 1:
            bad.append(f"rank {r}: grouped_reducescatter ran as {after['groups'] - before['groups']} groups")

    # ---- grouped broadcast (in place): one fused transfer from the root ----
    s = next(seed)
    root = n - 1
    shapes = [(3,), (0,), (2, 2), (), (17,)] * 2
    dts = [np.float32, np.int8, np.bool_, np.float64, ml_dtypes.bfloat16] * 2
    mine = [data(dt, sh, s + k, r) for k, (dt, sh) in enumerate(zip(dts, shapes))]
    before = _core.stats(0)
    got = hvd.grouped_broadcast_(mine, root)
    after = _core.stats(0)
    for k, (dt, sh) in enumerate(zip(dts, shapes)):
        expect(f"grouped_broadcast_ member {k}", got[k], data(dt, sh, s + k, root))
        if got[k] is not mine[k]:
            bad.append(f"rank {r}: grouped_broadcast_ must broadcast in place")
    if after["groups"] - before["groups"] != 1:
        bad.append(f"rank {r}: grouped_broadcast_ ran as {after['groups'] - before['groups']} groups")

    # ---- allreduce shares the ring phases: element counts below and around N ----
    for count in sorted({0, 1, 2, max(n - 1, 0), n + 1, 3 * n + 2}):
        s = next(seed)
        ins = [data(np.float32, (count,), s, j) for j in range(n)]
        expect(f"allreduce of {count} elements", hvd.allreduce(ins[r], op=hvd.Sum),
               reduce_ref(ins, hvd.Sum, n))

    # ---- barrier and objects ----
    for _ in range(3):
        hvd.barrier()
    obj = {"rank": r, "payload": list(range(r * 3)), "fn": (lambda x: x + r)}
    got = hvd.broadcast_object(obj if r == n - 1 else None, root_rank=n - 1)
    if got["rank"] != n - 1 or got["payload"] != list(range((n - 1) * 3)) or got["fn"](1) != n:
        bad.append(f"rank {r}: broadcast_object got {got}")
    got = hvd.allgather_object({"r": r, "extra": "x" * r})
    if got != [{"r": j, "extra": "x" * j} for j in range(n)]:
        bad.append(f"rank {r}: allgather_object got {got}")
    # The output cache is bounded and reused: outputs freed above are kept for reuse.
    return bad, _core.output_cache_bytes() <= (256 << 20)
'''


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_collectives_matrix(n):
    results = run(n, MATRIX, timeout=300)
    problems = [p for bad, _ in results for p in bad]
    assert not problems, "\n".join(problems[:40])
    assert all(ok for _, ok in results)
