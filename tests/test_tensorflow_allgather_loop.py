"""Regression for the intermittent TensorFlow allgather hangs (2 ranks): a loop
of allgathers with a different first dimension per rank, every dtype, 1-3 dims, alone
and grouped (fused), then the cases where the ranks disagree: a dtype mismatch (both
must raise) and a dtype only one rank refuses (raised there at once, and the other
must raise for that name too instead of waiting forever); the loop goes on after
each, so counters of unnamed collectives must still agree; and many allgathers run
together in one TF1 Session.run (which ran them in a different order per rank)."""
import pytest

from mpirun import run

pytest.importorskip("tensorflow")


def test_variable_size_allgather_loop_and_mismatches_in_eager():
    results = run(2, """
    import itertools
    import tensorflow as tf
    import horovodlite.tensorflow as hvd_tf

    def main(hvd):
        hvd_tf.init()
        rank, size = hvd_tf.rank(), hvd_tf.size()
        dtypes = [tf.uint8, tf.int8, tf.uint16, tf.int16, tf.int32, tf.int64, tf.float16,
                  tf.float32, tf.float64, tf.bool]
        rows = [17, 32][:size]
        bad = []
        mismatch, refused = [], []
        for it in range(2):
            for dtype, dim in itertools.product(dtypes, [1, 2, 3]):
                t = tf.ones([rows[rank]] + [17] * (dim - 1)) * rank
                if dtype == tf.bool:
                    t = t % 2
                t = tf.cast(t, dtype)
                g = hvd_tf.allgather(t)
                if g.shape[0] != sum(rows) or g.dtype != dtype:
                    bad.append((it, dtype.name, dim, g.shape))
                g1, g2 = hvd_tf.grouped_allgather([t, tf.concat([t, t], 0)])  # fused
                if g1.shape[0] != sum(rows) or g2.shape[0] != 2 * sum(rows):
                    bad.append((it, dtype.name, dim, "grouped"))
            # int32 on rank 0, float32 on rank 1: a cross-rank mismatch, on both
            try:
                hvd_tf.allgather(tf.ones([3, 17], tf.int32 if rank == 0 else tf.float32))
                mismatch.append(None)
            except hvd_tf.HorovodInternalError as e:
                mismatch.append(str(e))
            # a dtype only rank 1 refuses: it raises at once, rank 0 for the same name
            try:
                hvd_tf.allgather(tf.fill([2, 3], "x") if rank == 1 else tf.ones([2, 3]))
                refused.append(None)
            except Exception as e:
                refused.append((type(e).__name__, isinstance(e, hvd_tf.HorovodInternalError),
                                str(e)))
        # Graph mode (a TF1 Session): many collectives in one run. TF runs stateful ops
        # in any order on a pool of (cores) threads, each blocked until its peers take
        # part: ranks that started different ones first waited on each other forever.
        graph_rows = []
        for rep in range(3):
            g = tf.Graph()
            with g.as_default():
                outs = [hvd_tf.allgather(tf.ones([rows[rank] + i, 5]) * i) for i in range(12)]
                with tf.compat.v1.Session(graph=g) as s:
                    graph_rows.append([int(o.shape[0]) for o in s.run(outs)])
        if graph_rows != [[sum(rows) + size * i for i in range(12)]] * 3:
            bad.append(("graph", graph_rows))
        # both ranks are still in step (and none shuts down while the other's last
        # request is on its way)
        last = hvd_tf.allgather(tf.ones([1])).numpy().tolist()
        return bad, mismatch, refused, last
    """, init=False, timeout=240)
    for rank, (bad, mismatch, refused, last) in enumerate(results):
        assert last == [1.0, 1.0], (rank, last)
        assert not bad, (rank, bad)
        assert all(m and "dtype" in m and "int32" in m and "float32" in m for m in mismatch), \
            (rank, mismatch)
        for r in refused:
            assert r is not None, (rank, refused)
            typ, internal, msg = r
            assert internal and "string" in msg, (rank, r)
            if rank == 0:
                assert "rank 1" in msg, msg
