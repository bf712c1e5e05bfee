"""join(): ranks out of data join; the others' allreduces go on with joined ranks
contributing the identity (Average still divides by the full size); join returns the
last rank to join on every rank; allgather/broadcast with a joined rank fail with a
clear error and the job goes on. Every rank takes a turn at joining first."""
import pytest

from collective_refs import REFS
from mpirun import run

JOIN = REFS + r'''
OPS = {"Sum": None, "Average": None, "Min": None, "Max": None, "Product": None}


def main(hvd):
    r, n = hvd.rank(), hvd.size()
    ops = {name: getattr(hvd, name) for name in OPS}
    bad, lasts = [], []
    for first in range(n):
        last = (first + 1) % n
        # steps[j]: how many allreduce steps rank j runs before joining. The first
        # joiner runs none, the last one three, the others one; the last rank's
        # later steps can only complete after the others joined, so it joins last.
        steps = [0 if j == first else 3 if j == last else 1 for j in range(n)]
        if n == 1:
            steps = [0]
        for k in range(steps[r]):
            handles = {}
            for dt in (np.float32, np.int32, np.float16):
                for name, op in ops.items():
                    x = data(dt, (7, 3), 100 * first + k, r, lo=1, hi=4)
                    handles[(dt, name)] = hvd.allreduce_async(x, op=op, name=f"j.{k}.{np.dtype(dt)}.{name}")
            for (dt, name), h in handles.items():
                got = hvd.synchronize(h)
                contributors = [j for j in range(n) if steps[j] > k]
                ins = [data(dt, (7, 3), 100 * first + k, j, lo=1, hi=4) for j in contributors]
                want = reduce_ref(ins, ops[name], n)  # Average: divided by n, not len(ins)
                if not same(got, want):
                    bad.append(f"rank {r} first={first} step {k} {np.dtype(dt)} {name}: got "
                               f"{got.ravel()[:4]}, want {want.ravel()[:4]} (contributors {contributors})")
        if r == last and n > 1:
            # Everyone else has joined by now (step 2 needed them to).
            for what, call in [("allgather", lambda: hvd.allgather(np.ones(2), name=f"jag.{first}")),
                               ("broadcast", lambda: hvd.broadcast(np.ones(2), 0, name=f"jbc.{first}"))]:
                try:
                    call()
                    bad.append(f"rank {r}: {what} with joined ranks did not fail")
                except hvd.HorovodInternalError as e:
                    if "joined" not in str(e) or what not in str(e):
                        bad.append(f"rank {r}: unclear {what} error: {e}")
        lasts.append(hvd.join())
        # After everyone joined, collectives work normally again (and may be cached).
        got = hvd.allreduce(np.full(3, r, np.float64), op=hvd.Sum, name="after_join")
        if not same(got, np.full(3, sum(range(n)), np.float64)):
            bad.append(f"rank {r}: allreduce after join {first}: {got}")
    want_lasts = [(f + 1) % n if n > 1 else 0 for f in range(n)]
    if lasts != want_lasts:
        bad.append(f"rank {r}: join returned {lasts}, want {want_lasts}")
    return bad
'''


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_join_each_rank_first(n):
    results = run(n, JOIN, timeout=300)
    problems = [p for bad in results for p in bad]
    assert not problems, "\n".join(problems[:30])
