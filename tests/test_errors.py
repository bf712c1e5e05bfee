"""Every user error of the allreduce engine: a clear Python exception on every rank
that took part (naming the tensor, the ranks and the values), never a hang, and the
job goes on afterwards."""
import textwrap

from mpirun import launch, run

# kind -> (what ranks 0 and 2 pass, what rank 1 passes), as the message must name them
MISMATCHES = {
    "shape": ("(3,)", "(4,)"),
    "dtype": ("float32", "float64"),
    "op": ("Sum", "Max"),
    "prescale": ("1", "2.5"),
    "postscale": ("1", "0.25"),
}


def test_mismatches_raise_on_every_rank_and_job_goes_on():
    results = run(3, """
    def call(hvd, kind, odd, name, async_=False):
        shape = (4,) if odd and kind == "shape" else (3,)
        dtype = np.float64 if odd and kind == "dtype" else np.float32
        kw = dict(op=hvd.Max if odd and kind == "op" else hvd.Sum,
                  prescale_factor=2.5 if odd and kind == "prescale" else 1.0,
                  postscale_factor=0.25 if odd and kind == "postscale" else 1.0)
        return hvd.allreduce_async(np.ones(shape, dtype), name=name, **kw)

    def main(hvd):
        odd = hvd.rank() == 1
        out = {}
        kinds = ["shape", "dtype", "op", "prescale", "postscale"]
        # all five in flight at once, then each one again after the same name was
        # cached by a successful call (only rank 1's request conflicts with the cache)
        handles = {k: call(hvd, k, odd, "bad_" + k) for k in kinds}
        for k in kinds:
            try:
                hvd.synchronize(handles[k])
                out[k] = None
            except Exception as e:
                out[k] = (type(e).__name__, isinstance(e, RuntimeError), str(e))
        for k in kinds:
            hvd.synchronize(call(hvd, k, False, "cached_" + k))  # agreed: now cached
            try:
                hvd.synchronize(call(hvd, k, odd, "cached_" + k))
                out["cached_" + k] = None
            except Exception as e:
                out["cached_" + k] = (type(e).__name__, isinstance(e, RuntimeError), str(e))
        # a group with one bad member fails as a whole, on every rank
        try:
            hvd.grouped_allreduce([np.ones(2), np.ones(5 if odd else 6)], op=hvd.Sum, name="grp")
            out["group"] = None
        except Exception as e:
            out["group"] = (type(e).__name__, isinstance(e, RuntimeError), str(e))
        # the job goes on: fresh and previously failed names both work
        out["after"] = hvd.allreduce(np.full(3, hvd.rank(), np.float32), op=hvd.Sum, name="after")
        out["retry"] = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name="bad_shape")
        return out
    """)
    for rank, out in enumerate(results):
        for kind, (common, odd) in MISMATCHES.items():
            for name in ("bad_" + kind, "cached_" + kind):
                err = out[name.replace("bad_", "")] if name.startswith("bad_") else out[name]
                assert err is not None, f"rank {rank}: {name} did not fail"
                typ, is_runtime, msg = err
                assert typ == "HorovodInternalError" and is_runtime, (rank, name, err)
                assert f"'{name}'" in msg, (rank, msg)
                assert "ranks 0,2" in msg and "rank 1" in msg, (rank, msg)
                assert common in msg and odd in msg, (rank, msg)
        typ, _, msg = out["group"]
        assert typ == "HorovodInternalError" and "grp" in msg and "rank 1" in msg, (rank, msg)
        assert out["after"].tolist() == [3.0, 3.0, 3.0]
        assert out["retry"].tolist() == [3.0, 3.0, 3.0]


def test_local_errors_at_enqueue():
    results = run(2, """
    import ml_dtypes

    def expect(out, key, exc, fn):
        try:
            fn()
            out[key] = "no error"
        except exc as e:
            out[key] = str(e)
        except Exception as e:
            out[key] = f"wrong exception {type(e).__name__}: {e}"

    def main(hvd):
        out = {}
        # duplicate name while the first is in flight: ValueError at enqueue
        h = hvd.allreduce_async(np.ones(4), name="dup", op=hvd.Sum)
        expect(out, "dup", ValueError, lambda: hvd.allreduce_async(np.ones(4), name="dup", op=hvd.Sum))
        out["dup_first"] = hvd.synchronize(h)
        # the name is free again once the first completed
        out["dup_again"] = hvd.allreduce(np.ones(4), name="dup", op=hvd.Sum)
        for dt in ("complex64", "uint32", "object", "longdouble", "bool", "U3"):
            a = np.zeros(3, dtype=dt)
            expect(out, "dtype_" + dt, TypeError, lambda: hvd.allreduce(a, op=hvd.Sum))
            expect(out, "dtype_inplace_" + dt, TypeError, lambda: hvd.allreduce_(a, op=hvd.Sum))
        # non-contiguous: in place refuses, out of place copies
        base = np.arange(12, dtype=np.float32).reshape(3, 4)
        view = base[:, ::2]
        expect(out, "noncontig", ValueError, lambda: hvd.allreduce_(view, op=hvd.Sum))
        expect(out, "noncontig_async", ValueError, lambda: hvd.allreduce_async_(view, op=hvd.Sum))
        ro = np.ones(3, np.float32)
        ro.flags.writeable = False
        expect(out, "readonly", ValueError, lambda: hvd.allreduce_(ro, op=hvd.Sum))
        out["noncontig_oop"] = hvd.allreduce(view, op=hvd.Sum, name="nc")
        out["fortran_oop"] = hvd.allreduce(np.asfortranarray(base), op=hvd.Sum, name="fo")
        expect(out, "adasum", NotImplementedError, lambda: hvd.allreduce(np.ones(2), op=hvd.Adasum))
        expect(out, "both", ValueError, lambda: hvd.allreduce(np.ones(2), op=hvd.Sum, average=True))
        h = hvd.allreduce_async(np.ones(2), name="twice", op=hvd.Sum)
        hvd.synchronize(h)
        expect(out, "sync_twice", ValueError, lambda: hvd.synchronize(h))
        out["after"] = hvd.allreduce(np.ones(2), name="after", op=hvd.Sum)
        return out
    """)
    for rank, out in enumerate(results):
        assert "dup" in out["dup"] and "in flight" in out["dup"], out["dup"]
        assert out["dup_first"].tolist() == [2.0] * 4 and out["dup_again"].tolist() == [2.0] * 4
        for dt in ("complex64", "uint32", "object", "longdouble", "bool", "U3"):
            for key in ("dtype_" + dt, "dtype_inplace_" + dt):
                assert "unsupported dtype" in out[key] and "float32" in out[key], (key, out[key])
        for key in ("noncontig", "noncontig_async", "readonly"):
            assert "contiguous" in out[key], (key, out[key])
        base = [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        assert out["noncontig_oop"].tolist() == [[2 * v for v in row[::2]] for row in base]
        assert out["fortran_oop"].tolist() == [[2 * v for v in row] for row in base]
        assert "Adasum" in out["adasum"] and "average" in out["both"], out
        assert "handle" in out["sync_twice"], out["sync_twice"]
        assert out["after"].tolist() == [2.0, 2.0]


def test_init_lifecycle():
    results = run(2, """
    def expect(out, key, fn):
        try:
            fn()
            out[key] = "no error"
        except Exception as e:
            out[key] = f"{type(e).__name__}: {e}"

    def main(hvd):
        out = {}
        out["before_initialized"] = hvd.is_initialized()
        expect(out, "before_allreduce", lambda: hvd.allreduce(np.ones(2)))
        expect(out, "before_async", lambda: hvd.allreduce_async_(np.ones(2)))
        expect(out, "before_rank", lambda: hvd.rank())
        hvd.init()
        out["first"] = hvd.allreduce(np.ones(2), op=hvd.Sum, name="a")
        hvd.shutdown()
        out["after_shutdown_initialized"] = hvd.is_initialized()
        expect(out, "after_shutdown", lambda: hvd.allreduce(np.ones(2), op=hvd.Sum, name="b"))
        expect(out, "after_shutdown_size", lambda: hvd.size())
        hvd.shutdown()  # harmless twice
        hvd.init()
        hvd.init()  # harmless twice
        out["second"] = hvd.allreduce(np.full(2, hvd.rank() + 1.0), op=hvd.Sum, name="a")
        out["size"] = hvd.size()
        hvd.shutdown()
        return out
    """, init=False)
    for out in results:
        assert out["before_initialized"] is False and out["after_shutdown_initialized"] is False
        for key in ("before_allreduce", "before_async", "before_rank", "after_shutdown",
                    "after_shutdown_size"):
            assert "init()" in out[key], (key, out[key])
        assert out["first"].tolist() == [2.0, 2.0] and out["second"].tolist() == [3.0, 3.0]
        assert out["size"] == 2


def test_stall_warning_then_stall_shutdown():
    """Rank 1 submits two tensors (one new, one answered from the response cache)
    2.5 s late: rank 0 logs which tensor waits for which rank, and they complete.
    Then rank 1 never submits two others: after STALL_SHUTDOWN_TIME they fail on the
    ranks that submitted them, and a later collective still works everywhere."""
    results, output = run(3, """
    import time

    def main(hvd):
        out = {}
        for name in ("late_cached", "never_cached"):
            hvd.allreduce(np.ones(2), op=hvd.Sum, name=name)  # now in the response cache
        hvd.allreduce(np.ones(1), name="sync")
        if hvd.rank() == 1:
            time.sleep(2.5)
        hs = [hvd.allreduce_async(np.ones(2), op=hvd.Sum, name=n) for n in ("late_new", "late_cached")]
        out["late"] = [hvd.synchronize(h).tolist() for h in hs]
        hvd.allreduce(np.ones(1), name="sync2")
        if hvd.rank() != 1:
            hs = {n: hvd.allreduce_async(np.ones(2), op=hvd.Sum, name=n)
                  for n in ("never_new", "never_cached")}
            t0 = time.time()
            for n, h in hs.items():
                try:
                    hvd.synchronize(h)
                    out[n] = None
                except Exception as e:
                    out[n] = (type(e).__name__, str(e))
            out["waited"] = time.time() - t0
        # rank 1 must not submit "after" while the others wait for the stall timeout,
        # or "after" itself would stall: meet outside horovodlite first
        from mpi4py import MPI
        MPI.COMM_WORLD.Barrier()
        out["after"] = hvd.allreduce(np.ones(2), op=hvd.Sum, name="after").tolist()
        return out
    """, env={"HOROVODLITE_STALL_CHECK_TIME_SECONDS": "1",
              "HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS": "4"}, timeout=240, return_output=True)
    for rank, out in enumerate(results):
        assert out["late"] == [[3.0, 3.0]] * 2, (rank, out)
        assert out["after"] == [3.0, 3.0]
        if rank == 1:
            continue
        for name in ("never_new", "never_cached"):
            assert out[name] is not None, f"rank {rank}: {name} did not fail"
            typ, msg = out[name]
            assert typ == "HorovodInternalError", (rank, out[name])
            assert f"'{name}'" in msg and "stalled" in msg and "missing on ranks [1]" in msg, msg
    warnings = [line for line in output.splitlines() if "stall" in line and "WARNING" in line]
    for name in ("late_new", "late_cached", "never_new", "never_cached"):
        hits = [w for w in warnings if f"'{name}'" in w]
        assert hits, f"no stall warning for {name}:\n{output[-3000:]}"
        assert all("rank 0]" in w and "missing on ranks [1]" in w for w in hits), hits


def test_dead_rank_ends_the_job(tmp_path):
    script = tmp_path / "die.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import numpy as np
        import horovodlite as hvd
        hvd.init()
        hvd.allreduce(np.ones(2), name="warm")
        if hvd.rank() == 1:
            time.sleep(0.5)
            os._exit(1)
        hvd.allreduce(np.ones(3), name="never")  # waits for rank 1
        print("rank", hvd.rank(), "finished an allreduce without rank 1", flush=True)
    """))
    proc = launch(3, script, timeout=90)  # raises if the job hangs
    assert proc.returncode != 0
    assert "without rank 1" not in proc.stdout


def test_peer_shutdown_fails_pending_ops():
    results = run(3, """
    import time

    def main(hvd):
        out = {}
        hvd.allreduce(np.ones(2), name="warm")
        if hvd.rank() == 1:
            time.sleep(1.0)
            hvd.shutdown()  # returns once the other ranks shut down too
            return out
        try:
            h = hvd.allreduce_async(np.ones(3), name="pending", op=hvd.Sum)
            hvd.synchronize(h)
            out["pending"] = None
        except Exception as e:
            out["pending"] = (type(e).__name__, str(e))
        t0 = time.time()
        try:
            hvd.allreduce(np.ones(3), name="later", op=hvd.Sum)
            out["later"] = None
        except Exception as e:
            out["later"] = (type(e).__name__, str(e))
        out["later_s"] = time.time() - t0
        return out
    """, timeout=120)
    for rank in (0, 2):
        out = results[rank]
        for key in ("pending", "later"):
            assert out[key] is not None, f"rank {rank}: {key} completed without rank 1"
            assert isinstance(out[key][1], str) and "shut down" in out[key][1], out[key]
        assert out["later_s"] < 30
