"""The implementations compared, each behind the same small interface:

    enter() / exit()        around its turn in a round (engines start and stop there,
                            so an idle engine never slows the others' turns)
    prepare(coll, inp)      -> (buf, run): `buf` is refilled from `inp` before every
                            call, untimed; run() does one collective, returns the result
    resnet(tensors)         one training step's gradient allreduce, in place
    collectives             what it can run

Every implementation works the way its users would call it at its best: in place where
the API allows, MPI into preallocated buffers, MPI's ResNet-50 one Allreduce per
tensor (faster than packing), gloo and the numpy ring on one packed buffer."""
import os
import tempfile
import warnings

import numpy as np

ALL = ("allreduce", "allgather", "broadcast", "reducescatter", "alltoall")


class Unsupported(Exception):
    pass


class Impl:
    name = "?"
    collectives = ()
    note = ""

    def enter(self):
        pass

    def exit(self):
        pass

    def close(self):
        pass

    def prepare(self, coll, inp):
        raise NotImplementedError

    def label(self, coll):
        """Row name for `coll` (horovodlite's paths differ in allreduce only)."""
        return self.name

    def resnet(self, tensors):
        raise NotImplementedError

    _packed = None

    def _packed_allreduce(self, tensors, reduce_in_place):
        """Packs the float32 tensors into one persistent buffer, reduces it in place,
        and unpacks: the best way for peers without fusion of their own."""
        total = sum(t.size for t in tensors)
        if self._packed is None or self._packed.size != total:
            self._packed = np.empty(total, np.float32)
        np.concatenate([t.ravel() for t in tensors], out=self._packed)
        reduce_in_place(self._packed)
        off = 0
        for t in tensors:
            t.ravel()[:] = self._packed[off:off + t.size]
            off += t.size


class Horovodlite(Impl):
    """One allreduce path of horovodlite, chosen through the environment at init()."""
    _PATH_VARS = ("HOROVODLITE_SHM", "HOROVODLITE_HIERARCHICAL_ALLREDUCE",
                  "HOROVODLITE_HOSTNAME_OVERRIDE")

    def __init__(self, env, collectives):
        import horovodlite as hvd
        from horovodlite._loader import _core

        self.hvd, self._core = hvd, _core
        self.env = env
        self.collectives = tuple(c for c in collectives if hasattr(hvd, c))
        self.algorithm = None
        self.name = "horovodlite"
        self._saved = {}

    def enter(self):
        self._saved = {k: os.environ.get(k) for k in self._PATH_VARS}
        for k in self._PATH_VARS:
            os.environ.pop(k, None)
        os.environ.update(self.env)
        self.hvd.init()
        self.algorithm = self._core.allreduce_algorithm(0)

    def exit(self):
        self.hvd.shutdown()
        for k, v in self._saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def label(self, coll):
        return self.name if coll in ("allreduce", "resnet50") else "horovodlite"

    def prepare(self, coll, inp):
        hvd, buf = self.hvd, inp.copy()
        if coll == "allreduce":
            return buf, lambda: (hvd.allreduce_(buf, op=hvd.Sum, name="bench.ar"), buf)[1]
        if coll == "broadcast":
            return buf, lambda: (hvd.broadcast_(buf, 0, name="bench.bc"), buf)[1]
        if coll == "allgather":
            return buf, lambda: hvd.allgather(buf, name="bench.ag")
        if coll == "reducescatter":
            return buf, lambda: hvd.reducescatter(buf, op=hvd.Sum, name="bench.rs")
        if coll == "alltoall":
            return buf, lambda: hvd.alltoall(buf, name="bench.a2a")[0]
        raise Unsupported(coll)

    def resnet(self, tensors):
        hvd = self.hvd
        handles = [hvd.allreduce_async_(t, op=hvd.Sum, name=f"bench.rn.{i}")
                   for i, t in enumerate(tensors)]
        for h in handles:
            hvd.synchronize(h)


class Mpi(Impl):
    collectives = ALL

    def __init__(self, comm):
        from mpi4py import MPI

        self.MPI, self.comm = MPI, comm
        self.name = "MPI (mpi4py)"
        try:
            v = MPI.Get_library_version().split(",")[0].strip()
            self.note = v.replace("Open MPI", "OpenMPI")
        except Exception:
            pass

    def prepare(self, coll, inp):
        MPI, comm, buf = self.MPI, self.comm, inp.copy()
        n = comm.Get_size()
        if coll == "allreduce":
            return buf, lambda: (comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM), buf)[1]
        if coll == "broadcast":
            return buf, lambda: (comm.Bcast(buf, root=0), buf)[1]
        if coll == "allgather":
            out = np.empty(buf.size * n, buf.dtype)
            return buf, lambda: (comm.Allgather(buf, out), out)[1]
        if coll == "reducescatter":
            out = np.empty(buf.size // n, buf.dtype)
            return buf, lambda: (comm.Reduce_scatter_block(buf, out, op=MPI.SUM), out)[1]
        if coll == "alltoall":
            out = np.empty_like(buf)
            return buf, lambda: (comm.Alltoall(buf, out), out)[1]
        raise Unsupported(coll)

    def resnet(self, tensors):
        for t in tensors:
            self.comm.Allreduce(self.MPI.IN_PLACE, t, op=self.MPI.SUM)


class NumpyRing(Impl):
    """The textbook ring (reduce-scatter, then allgather) in numpy over Sendrecv."""
    collectives = ("allreduce",)

    def __init__(self, comm):
        self.comm = comm
        self.name = "numpy ring (Sendrecv)"
        self._scratch = np.empty(0, np.float32)

    def _ring(self, buf):
        comm = self.comm
        n, r = comm.Get_size(), comm.Get_rank()
        if n == 1:
            return buf
        bounds = np.linspace(0, buf.size, n + 1).astype(np.int64)
        blk = lambda i: buf[bounds[i % n]:bounds[i % n + 1]]
        if self._scratch.size < bounds[1] + 1:
            self._scratch = np.empty(int(bounds[1]) + 1, buf.dtype)
        right, left = (r + 1) % n, (r - 1) % n
        for s in range(n - 1):
            send, recv = blk(r - s), blk(r - s - 1)
            tmp = self._scratch[:recv.size]
            comm.Sendrecv(send, dest=right, recvbuf=tmp, source=left)
            recv += tmp
        for s in range(n - 1):
            comm.Sendrecv(blk(r + 1 - s), dest=right, recvbuf=blk(r - s), source=left)
        return buf

    def prepare(self, coll, inp):
        if coll != "allreduce":
            raise Unsupported(coll)
        buf = inp.copy()
        return buf, lambda: self._ring(buf)

    def resnet(self, tensors):
        self._packed_allreduce(tensors, self._ring)


class Gloo(Impl):
    """torch.distributed with the gloo backend, rendezvous through a file."""
    collectives = ALL

    def __init__(self, comm):
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.comm = torch, dist, comm
        # all_gather_into_tensor / reduce_scatter_tensor warn about newer names that
        # older torch versions lack; the old ones work everywhere.
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.distributed")
        self.name = "torch gloo"
        self.note = f"torch {torch.__version__}"
        path = None
        if comm.Get_rank() == 0:
            fd, path = tempfile.mkstemp(prefix="hvdl-bench-gloo-")
            os.close(fd)
            os.unlink(path)  # the store creates it
        path = comm.bcast(path, root=0)
        dist.init_process_group("gloo", init_method=f"file://{path}", rank=comm.Get_rank(),
                                world_size=comm.Get_size())
        self._path = path

    def close(self):
        self.dist.destroy_process_group()
        if self.comm.Get_rank() == 0:
            try:  # the store removes it itself once every rank has let go
                os.unlink(self._path)
            except FileNotFoundError:
                pass

    def prepare(self, coll, inp):
        torch, dist = self.torch, self.dist
        n = self.comm.Get_size()
        buf = inp.copy()
        t = torch.from_numpy(buf)  # shares memory with buf
        if coll == "allreduce":
            return buf, lambda: (dist.all_reduce(t), buf)[1]
        if coll == "broadcast":
            return buf, lambda: (dist.broadcast(t, 0), buf)[1]
        if coll == "allgather":
            out = torch.empty(buf.size * n, dtype=t.dtype)
            return buf, lambda: (dist.all_gather_into_tensor(out, t), out.numpy())[1]
        if coll == "reducescatter":
            out = torch.empty(buf.size // n, dtype=t.dtype)
            return buf, lambda: (dist.reduce_scatter_tensor(out, t), out.numpy())[1]
        if coll == "alltoall":
            out = torch.empty_like(t)
            return buf, lambda: (dist.all_to_all_single(out, t), out.numpy())[1]
        raise Unsupported(coll)

    def resnet(self, tensors):
        self._packed_allreduce(tensors, lambda buf: self.dist.all_reduce(self.torch.from_numpy(buf)))


class Horovod(Impl):
    """Horovod itself (horovod.torch on tensors sharing the numpy buffers)."""
    collectives = ALL

    def __init__(self):
        import horovod
        import horovod.torch as hvt
        import torch

        self.hvt, self.torch = hvt, torch
        self.name = "Horovod"
        self.note = f"horovod {horovod.__version__}"

    def enter(self):
        self.hvt.init()

    def exit(self):
        self.hvt.shutdown()

    def prepare(self, coll, inp):
        hvt, buf = self.hvt, inp.copy()
        t = self.torch.from_numpy(buf)
        if coll == "allreduce":
            return buf, lambda: (hvt.allreduce_(t, op=hvt.Sum, name="bench.ar"), buf)[1]
        if coll == "broadcast":
            return buf, lambda: (hvt.broadcast_(t, 0, name="bench.bc"), buf)[1]
        if coll == "allgather":
            return buf, lambda: hvt.allgather(t, name="bench.ag").numpy()
        if coll == "reducescatter":
            if not hasattr(hvt, "reducescatter"):
                raise Unsupported(coll)
            return buf, lambda: hvt.reducescatter(t, op=hvt.Sum, name="bench.rs").numpy()
        if coll == "alltoall":
            def a2a():
                out = hvt.alltoall(t, name="bench.a2a")
                return (out[0] if isinstance(out, tuple) else out).numpy()
            return buf, a2a
        raise Unsupported(coll)

    def resnet(self, tensors):
        hvt = self.hvt
        handles = [hvt.allreduce_async_(self.torch.from_numpy(t), op=hvt.Sum, name=f"bench.rn.{i}")
                   for i, t in enumerate(tensors)]
        for h in handles:
            hvt.synchronize(h)


class Memcpy(Impl):
    """Not a collective: every rank copies the message at the same time. The ceiling a
    shared-memory allreduce is held against (it reads and writes each byte once too)."""
    collectives = ("allreduce",)
    name = "memcpy (all ranks at once)"
    copies_input = True

    def prepare(self, coll, inp):
        buf, dst = inp.copy(), np.empty_like(inp)
        dst.fill(0)
        return buf, lambda: (np.copyto(dst, buf), dst)[1]
