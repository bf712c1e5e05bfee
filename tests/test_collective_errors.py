"""Every error of the collectives: raised on every participating rank with a message
naming the tensor, the ranks and the values; nothing hangs; the job goes on (each
case is followed by a correct call under the same name)."""
import pytest

from mpirun import run

ERRORS = r'''
import ml_dtypes

def main(hvd):
    r, n = hvd.rank(), hvd.size()
    out = {}

    def case(key, fail, ok=None):
        """fail(): must raise on this rank; ok(): the corrected call, must work."""
        try:
            fail()
            out[key] = None
        except Exception as e:  # noqa: BLE001 - the test checks type and text
            out[key] = ([c.__name__ for c in type(e).__mro__], str(e))  # every class it is
        if ok is not None:
            ok()

    f32 = lambda *shape: np.ones(shape, np.float32)
    case("allgather_dims", lambda: hvd.allgather(f32(2, r + 1), name="e.ag"),
         lambda: hvd.allgather(f32(2, 3), name="e.ag"))
    case("allgather_ndim", lambda: hvd.allgather(f32(*([2] * (1 + r % 2))), name="e.ag2"))
    case("allgather_dtype", lambda: hvd.allgather(np.ones(2, np.int32 if r else np.float32), name="e.ag3"),
         lambda: hvd.allgather(np.ones(2, np.int32), name="e.ag3"))
    case("broadcast_root_mismatch", lambda: hvd.broadcast(f32(3), r, name="e.bc"),
         lambda: hvd.broadcast(f32(3), 0, name="e.bc"))
    case("broadcast_root_range", lambda: hvd.broadcast(f32(3), n, name="e.bc2"))
    case("broadcast_root_negative", lambda: hvd.broadcast_(f32(3), -1, name="e.bc3"))
    case("broadcast_shape", lambda: hvd.broadcast(f32(3 + r), 0, name="e.bc4"))
    case("broadcast_dtype", lambda: hvd.broadcast(np.ones(3, np.float64 if r else np.bool_), 0, name="e.bc5"))
    case("alltoall_splits_length", lambda: hvd.alltoall(f32(n), splits=[1] * (n + 1) if r == 0 else [1] * n, name="e.a2a"),
         lambda: hvd.alltoall(f32(n), splits=[1] * n, name="e.a2a"))
    case("alltoall_splits_sum", lambda: hvd.alltoall(f32(n), splits=[2] + [1] * (n - 1) if r == n - 1 else [1] * n, name="e.a2a2"))
    case("alltoall_splits_dtype", lambda: hvd.alltoall(f32(n), splits=np.ones(n, np.float32) if r == 0 else np.ones(n, np.int32), name="e.a2a3"),
         lambda: hvd.alltoall(f32(n), splits=np.ones(n, np.int32), name="e.a2a3"))
    case("alltoall_splits_negative", lambda: hvd.alltoall(f32(n), splits=[2, -1] + [1] * (n - 2) if r == 0 else [1] * n, name="e.a2a4"))
    case("alltoall_not_divisible", lambda: hvd.alltoall(f32(n + 1), name="e.a2a5"))
    case("alltoall_dtype", lambda: hvd.alltoall(np.ones(n, np.int8 if r else np.uint8), name="e.a2a6"))
    case("alltoall_dims", lambda: hvd.alltoall(f32(n, 1 + r), name="e.a2a7"))
    case("reducescatter_scalar", lambda: hvd.reducescatter(np.float32(1), name="e.rs"),
         lambda: hvd.reducescatter(f32(n), name="e.rs"))
    case("reducescatter_shape", lambda: hvd.reducescatter(f32(4 + r), name="e.rs2"))
    case("reducescatter_dtype", lambda: hvd.reducescatter(np.ones(4, np.float16 if r else ml_dtypes.bfloat16), name="e.rs3"))
    case("reducescatter_op", lambda: hvd.reducescatter(f32(4), op=hvd.Max if r else hvd.Min, name="e.rs4"))
    case("reducescatter_scale", lambda: hvd.reducescatter(f32(4), prescale_factor=1.0 + r, name="e.rs5"))
    case("op_mismatch", lambda: hvd.allgather(f32(2), name="e.op") if r else hvd.broadcast(f32(2), 0, name="e.op"))
    # Local errors (raised at the call on every rank; nothing is enqueued).
    case("reducescatter_bool", lambda: hvd.reducescatter(np.ones(4, np.bool_)))
    case("allgather_complex", lambda: hvd.allgather(np.ones(2, np.complex64)))
    case("broadcast_inplace_noncontig", lambda: hvd.broadcast_(np.ones((4, 4), np.float32)[:, 1], 0))
    def dup(submit):
        h = submit()
        try:
            submit()
        finally:
            hvd.synchronize(h)
    case("dup_allgather", lambda: dup(lambda: hvd.allgather_async(f32(2), name="e.dup1")))
    case("dup_broadcast", lambda: dup(lambda: hvd.broadcast_async(f32(2), 0, name="e.dup2")))
    case("dup_alltoall", lambda: dup(lambda: hvd.alltoall_async(f32(n), name="e.dup3")))
    case("dup_reducescatter", lambda: dup(lambda: hvd.reducescatter_async(f32(n), name="e.dup4")))
    # Process sets: a root outside the set; a set this rank is not in.
    ps = hvd.add_process_set([0, 1])
    if r in (0, 1):
        case("broadcast_root_outside_set", lambda: hvd.broadcast(f32(2), n - 1 if n > 2 else 5, name="e.ps", process_set=ps),
             lambda: hvd.broadcast(f32(2), 1, name="e.ps", process_set=ps))
    else:
        case("not_a_member", lambda: hvd.allgather(f32(2), process_set=ps))
    hvd.barrier()
    # The job goes on: one more of each.
    assert hvd.allgather(f32(1)).shape == (n,)
    assert hvd.alltoall(f32(n))[0].shape == (n,)
    assert hvd.reducescatter(f32(n)).shape == (1,)
    return out
'''

# key -> (exception type, substrings every rank's message must contain)
EXPECT = {
    "allgather_dims": ("HorovodInternalError", ["allgather 'e.ag'", "beyond the first dimension", "rank 0 has (2, 1)", "rank 1 has (2, 2)"]),
    "allgather_ndim": ("HorovodInternalError", ["e.ag2", "0", "(2,)", "rank 1 has (2, 2)"]),
    "allgather_dtype": ("HorovodInternalError", ["e.ag3", "dtype", "rank 0 has float32", "int32"]),
    "broadcast_root_mismatch": ("HorovodInternalError", ["broadcast 'e.bc'", "root rank", "rank 0 has 0", "rank 1 has 1"]),
    "broadcast_root_range": ("ValueError", ["e.bc2", "root_rank {n} is out of range", "{n} ranks"]),
    "broadcast_root_negative": ("ValueError", ["e.bc3", "root_rank -1 is out of range"]),
    "broadcast_shape": ("HorovodInternalError", ["e.bc4", "shape", "rank 0 has (3,)", "rank 1 has (4,)"]),
    "broadcast_dtype": ("HorovodInternalError", ["e.bc5", "rank 0 has bool", "float64"]),
    "alltoall_splits_length": ("ValueError", ["alltoall 'e.a2a'", "rank 0: splits", "{n1} entries", "one per rank ({n})"]),
    "alltoall_splits_sum": ("ValueError", ["e.a2a2", "rank {last}: splits", "sum to {n1}", "first dimension is {n}"]),
    "alltoall_splits_dtype": ("ValueError", ["e.a2a3", "rank 0: splits must be integers", "float32"]),
    "alltoall_splits_negative": ("ValueError", ["e.a2a4", "rank 0", "negative"]),
    "alltoall_not_divisible": ("ValueError", ["e.a2a5", "first dimension {n1} is not divisible", "size {n}"]),
    "alltoall_dtype": ("HorovodInternalError", ["e.a2a6", "rank 0 has uint8", "int8"]),
    "alltoall_dims": ("HorovodInternalError", ["e.a2a7", "rank 0 has ({n}, 1)", "rank 1 has ({n}, 2)"]),
    "reducescatter_scalar": ("ValueError", ["reducescatter 'e.rs'", "scalar", "ranks 0,1"]),
    "reducescatter_shape": ("HorovodInternalError", ["e.rs2", "shape", "rank 0 has (4,)", "rank 1 has (5,)"]),
    "reducescatter_dtype": ("HorovodInternalError", ["e.rs3", "rank 0 has bfloat16", "float16"]),
    "reducescatter_op": ("HorovodInternalError", ["e.rs4", "reduce op", "rank 0 has Min", "1", "Max"]),
    "reducescatter_scale": ("HorovodInternalError", ["e.rs5", "prescale_factor", "rank 0 has 1", "rank 1 has 2"]),
    "op_mismatch": ("HorovodInternalError", ["e.op", "operation", "rank 0 has broadcast", "1", "allgather"]),
    "reducescatter_bool": ("TypeError", ["bool", "reducescatter"]),
    "allgather_complex": ("TypeError", ["complex64", "allgather"]),
    "broadcast_inplace_noncontig": ("ValueError", ["broadcast_", "contiguous"]),
    "dup_allgather": ("ValueError", ["e.dup1", "already in flight"]),
    "dup_broadcast": ("ValueError", ["e.dup2", "already in flight"]),
    "dup_alltoall": ("ValueError", ["e.dup3", "already in flight"]),
    "dup_reducescatter": ("ValueError", ["e.dup4", "already in flight"]),
}


@pytest.mark.parametrize("n", [2, 3])
def test_errors_on_every_rank(n):
    results = run(n, ERRORS, timeout=300, init_kwargs={"process_sets": "dynamic"})
    fmt = {"n": n, "n1": n + 1, "last": n - 1}
    problems = []
    for r, out in enumerate(results):
        for key, (etype, parts) in EXPECT.items():
            got = out.get(key)
            if got is None:
                problems.append(f"rank {r}: {key}: no error raised")
                continue
            # ValueError / TypeError are ours too (a subclass of both, like Horovod's classes)
            if etype not in got[0] or "HorovodInternalError" not in got[0] or \
                    not all(p.format(**fmt) in got[1] for p in parts):
                problems.append(f"rank {r}: {key}: got {got[0]}: {got[1]!r}; want {etype} with {parts}")
        if r in (0, 1):
            got = out.get("broadcast_root_outside_set")
            # At n = 2 the set [0, 1] is the global set, so root 5 is simply out of range.
            want = f"root_rank {n - 1} is not a member" if n > 2 else "root_rank 5 is out of range"
            if not got or "e.ps" not in got[1] or want not in got[1]:
                problems.append(f"rank {r}: root outside the set: {got}")
        else:
            got = out.get("not_a_member")
            if not got or "not a member of process set" not in got[1] or "[0, 1]" not in got[1]:
                problems.append(f"rank {r}: not a member: {got}")
    assert not problems, "\n".join(problems)
