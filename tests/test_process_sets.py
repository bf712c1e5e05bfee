"""Process sets: collectives on even/odd ranks, overlapping sets used in turn, a set
that makes progress while ranks outside it are busy elsewhere, a collective on a set
this rank is not in, and sets added and removed at run time (also from an mpi4py
communicator)."""
from collective_refs import REFS
from mpirun import run

SET_OPS = REFS + r'''
import zlib

def run_all(hvd, ps, tag, bad):
    """Every collective on `ps`; results checked against the members' data."""
    r = hvd.rank()
    members = ps.ranks
    m, me = len(members), members.index(r)
    if ps.size() != m or ps.rank() != me or not ps.included():
        bad.append(f"rank {r}: {ps} size/rank/included = {ps.size()}/{ps.rank()}/{ps.included()}")
    s = zlib.crc32(tag.encode()) % 10000  # hash() differs between processes
    x = lambda j, shape=(5, 2), dt=np.float32: data(dt, shape, s, j)
    def expect(what, got, want):
        if not same(got, want):
            bad.append(f"rank {r}: {tag} {what}: got {np.asarray(got).ravel()[:6]}, want {want.ravel()[:6]}")
    expect("allreduce", hvd.allreduce(x(r), op=hvd.Sum, name=f"{tag}.ar", process_set=ps),
           reduce_ref([x(j) for j in members], hvd.Sum, m))
    expect("allgather", hvd.allgather(x(r, (r % 3, 2)), name=f"{tag}.ag", process_set=ps),
           np.concatenate([x(j, (j % 3, 2)) for j in members]))
    root = members[-1]  # root_rank is a global rank, as in Horovod
    expect("broadcast", hvd.broadcast(x(r), root, name=f"{tag}.bc", process_set=ps), x(root))
    out, rs = hvd.alltoall(x(r, (2 * m, 3), np.int32), name=f"{tag}.a2a", process_set=ps)
    expect("alltoall", out, np.concatenate([x(j, (2 * m, 3), np.int32)[2 * me:2 * me + 2] for j in members]))
    full = reduce_ref([x(j, (m + 1, 2)) for j in members], hvd.Average, m)
    base, extra = divmod(m + 1, m)
    off, cnt = me * base + min(me, extra), base + (me < extra)
    expect("reducescatter", hvd.reducescatter(x(r, (m + 1, 2)), name=f"{tag}.rs", process_set=ps),
           full[off:off + cnt])
    hvd.barrier(process_set=ps)
    got = hvd.allgather_object(r, process_set=ps)
    if got != members:
        bad.append(f"rank {r}: {tag} allgather_object {got} != {members}")
    got = hvd.broadcast_object(f"from {r}" if r == root else None, root_rank=root, process_set=ps)
    if got != f"from {root}":
        bad.append(f"rank {r}: {tag} broadcast_object {got}")


def expect_not_member(hvd, ps, bad):
    r = hvd.rank()
    for what, call in [("allreduce", lambda: hvd.allreduce(np.ones(2), process_set=ps)),
                       ("allgather", lambda: hvd.allgather(np.ones(2), process_set=ps)),
                       ("broadcast", lambda: hvd.broadcast(np.ones(2), ps.ranks[0], process_set=ps))]:
        try:
            call()
            bad.append(f"rank {r}: {what} on {ps} (not a member) did not fail")
        except (RuntimeError, ValueError) as e:
            if "not a member" not in str(e) or str(ps.ranks[0]) not in str(e):
                bad.append(f"rank {r}: unclear error for {what} on a set it is not in: {e}")
'''

STATIC = SET_OPS + r'''
def main(hvd):
    # init(process_sets=[...]) registers the sets with the engine at start-up.
    even, odd, pair, high = (hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3]),
                             hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 2, 3]))
    hvd.init(process_sets=[even, odd, pair, high])
    r, n = hvd.rank(), hvd.size()
    bad = []
    mine, other = (even, odd) if r % 2 == 0 else (odd, even)
    for i in range(2):  # twice: the second time the response cache answers
        run_all(hvd, mine, f"parity{i}", bad)
    expect_not_member(hvd, other, bad)
    # Overlapping sets, used in turn, with the global set in between.
    for i in range(2):
        for ps in (pair, hvd.global_process_set, high):
            if r in ps.ranks:
                run_all(hvd, ps, f"overlap{i}.{ps.ranks}", bad)
    # A set's negotiation does not wait for ranks outside it: ranks 2 and 3 wait in a
    # global allreduce that 0 and 1 only submit after many collectives on their set
    # (if the set waited for them, this would deadlock and time out).
    if r in pair.ranks:
        for i in range(10):
            got = hvd.allreduce(np.full(4, r + i, np.int64), op=hvd.Sum, name=f"pair.{i}", process_set=pair)
            if not same(got, np.full(4, 1 + 2 * i, np.int64)):
                bad.append(f"rank {r}: pair allreduce {i}: {got}")
    gate = hvd.allreduce(np.ones(1), op=hvd.Sum, name="gate")
    if gate[0] != n:
        bad.append(f"rank {r}: gate {gate}")
    hvd.shutdown()
    return bad
'''


def test_static_sets_parity_overlap_independence():
    results = run(4, STATIC, timeout=300, init=False)
    problems = [p for bad in results for p in bad]
    assert not problems, "\n".join(problems[:30])


DYNAMIC = SET_OPS + r'''
def main(hvd):
    hvd.init(process_sets="dynamic")
    r, n = hvd.rank(), hvd.size()
    bad = []
    for round_ in range(2):
        a = hvd.add_process_set([0, 2])
        b = hvd.add_process_set(hvd.ProcessSet([1, 2]))
        for ps in (a, b):
            if r in ps.ranks:
                run_all(hvd, ps, f"dyn{round_}.{ps.ranks}", bad)
            else:
                expect_not_member(hvd, ps, bad)
        hvd.remove_process_set(a)
        try:
            hvd.allreduce(np.ones(1), process_set=a)
            bad.append(f"rank {r}: collective on a removed set did not fail")
        except (RuntimeError, ValueError) as e:
            if "process set" not in str(e):
                bad.append(f"rank {r}: unclear error for a removed set: {e}")
        hvd.remove_process_set(b)
    # A set given as an mpi4py communicator: ranks 0 and 2 pass their split
    # communicator, rank 1 the same set as a list. Sets are registered in the same
    # order everywhere.
    from mpi4py import MPI
    comm = MPI.COMM_WORLD.Split(color=r % 2, key=r)
    c = hvd.add_process_set(hvd.ProcessSet(comm) if r % 2 == 0 else [0, 2])
    d = hvd.add_process_set(hvd.ProcessSet(comm) if r % 2 == 1 else [1])
    if c.ranks != [0, 2] or d.ranks != [1]:
        bad.append(f"rank {r}: sets from a communicator have ranks {c.ranks}, {d.ranks}")
    comm.Free()
    run_all(hvd, c if r % 2 == 0 else d, "comm", bad)
    hvd.remove_process_set(c)
    hvd.remove_process_set(d)
    hvd.barrier()
    hvd.shutdown()
    return bad
'''


def test_dynamic_sets_and_communicator():
    results = run(3, DYNAMIC, timeout=300, init=False)
    problems = [p for bad in results for p in bad]
    assert not problems, "\n".join(problems[:30])


DUPLICATES = r'''
def main(hvd):
    from horovodlite import ProcessSet
    import horovodlite.torch as ht
    errors = []
    cases = [[ProcessSet([0, 2]), ProcessSet([2, 0])],          # same ranks, other order
             [[0, 1], ProcessSet([1]), [1, 0]],                 # rank lists count too
             [ProcessSet([0, 1, 2]), ProcessSet([1]), ProcessSet([2, 1, 0])]]
    for init in (hvd.init, ht.init):
        for sets in cases:
            try:
                init(process_sets=sets)
                errors.append(f"no error for {sets}")
            except ValueError as e:
                errors.append("ok" if "duplicate" in str(e) else f"message: {e}")
            if hvd.is_initialized():
                errors.append("initialized anyway")
    # nothing was started: a valid call works afterwards
    ok = ProcessSet([0, 2])
    hvd.init(process_sets=[ok, ProcessSet([1])])
    total = hvd.allreduce(np.ones(2) * hvd.rank(), op=hvd.Sum, process_set=ok) if ok.included() else None
    hvd.shutdown()
    return errors, None if total is None else total.tolist()
'''


def test_duplicate_static_sets_raise_value_error_on_every_rank():
    results = run(3, DUPLICATES, timeout=120, init=False)
    for rank, (errors, total) in enumerate(results):
        assert errors == ["ok"] * 6, (rank, errors)
        assert total == ([2.0, 2.0] if rank in (0, 2) else None), (rank, total)
