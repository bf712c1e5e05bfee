"""The classic allreduce layouts horovodlite's ring is compared with, over mpi4py, written
as the cost model (horovodlite/sim.py) describes them:

- ParameterServer: P server processes (extra MPI ranks, normally on hosts of their own)
  each own 1/P of the buffer. Every worker pushes shard p to server p; the server adds
  the pushes up as they arrive (in rank order, so the sum is deterministic) and sends the
  sum back to every worker (pull). serve() is the servers' loop.
- Tree: binomial tree over the workers, whole messages: reduce towards worker 0, then
  broadcast from it.

Both work on float32/float64 numpy buffers and reduce with SUM; the benchmark checks
their results like everybody's."""
import time

import numpy as np

from .impls import Impl, Unsupported

PUSH, PULL, STOP = 11, 12, 13


def _shards(count, parts):
    """(offset, count) of each server's shard: the first count % parts get one more."""
    base, extra = divmod(count, parts)
    out, off = [], 0
    for p in range(parts):
        c = base + (p < extra)
        out.append((off, c))
        off += c
    return out


def serve(world, workers, poll=1e-3, spin=0.05):
    """A server's loop, until a worker sends STOP. Waits politely while idle (the other
    implementations' turns run meanwhile), and spins for `spin` seconds after each
    allreduce so that back-to-back calls are served without the polling delay."""
    from mpi4py import MPI

    st = MPI.Status()
    last = time.monotonic()
    while True:
        if not world.Iprobe(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG, status=st):
            if time.monotonic() - last > spin:
                time.sleep(poll)
            continue
        if st.Get_tag() == STOP:
            world.recv(source=st.Get_source(), tag=STOP)
            return
        nbytes = st.Get_count(MPI.BYTE)
        # The dtype travels as the first push's element size: float32 unless told
        # otherwise by a float64 tag offset (PUSH + 100).
        dt = np.dtype(np.float64) if st.Get_tag() == PUSH + 100 else np.dtype(np.float32)
        count = nbytes // dt.itemsize
        bufs = [np.empty(count, dt) for _ in workers]
        reqs = [world.Irecv(bufs[i], source=w, tag=st.Get_tag()) for i, w in enumerate(workers)]
        acc = bufs[0]
        reqs[0].Wait()
        for i in range(1, len(workers)):  # rank order: the same sum whatever arrives first
            reqs[i].Wait()
            acc += bufs[i]
        sends = [world.Isend(acc, dest=w, tag=PULL) for w in workers]
        MPI.Request.Waitall(sends)
        last = time.monotonic()


def stop_servers(world, servers):
    if world.Get_rank() == 0:
        for s in servers:
            world.send(None, dest=s, tag=STOP)


class ParameterServer(Impl):
    collectives = ("allreduce",)

    def __init__(self, world, servers):
        from mpi4py import MPI

        self.MPI, self.world, self.servers = MPI, world, list(servers)
        self.name = f"parameter server ({len(self.servers)} server{'s' * (len(self.servers) > 1)})"

    def allreduce(self, buf):
        MPI, world = self.MPI, self.world
        tag = PUSH + (100 if buf.dtype == np.float64 else 0)
        parts = _shards(buf.size, len(self.servers))
        out = np.empty_like(buf)
        recvs = [world.Irecv(out[o:o + c], source=s, tag=PULL) for s, (o, c) in zip(self.servers, parts)]
        sends = [world.Isend(buf[o:o + c], dest=s, tag=tag) for s, (o, c) in zip(self.servers, parts)]
        MPI.Request.Waitall(sends + recvs)
        buf[:] = out
        return buf

    def prepare(self, coll, inp):
        if coll != "allreduce":
            raise Unsupported(coll)
        buf = inp.copy()
        return buf, lambda: self.allreduce(buf)


class Tree(Impl):
    collectives = ("allreduce",)
    name = "binomial tree"

    def __init__(self, comm):
        self.comm = comm
        self._tmp = None

    def allreduce(self, buf):
        comm = self.comm
        n, r = comm.Get_size(), comm.Get_rank()
        if self._tmp is None or self._tmp.size != buf.size or self._tmp.dtype != buf.dtype:
            self._tmp = np.empty_like(buf)
        k = 1
        while k < n:  # reduce: at distance k, odd multiples send to even ones
            if r % (2 * k) == k:
                comm.Send(buf, dest=r - k, tag=21)
                break
            if r % (2 * k) == 0 and r + k < n:
                comm.Recv(self._tmp, source=r + k, tag=21)
                buf += self._tmp
            k *= 2
        k = 1
        while k < n:
            k *= 2
        k //= 2
        while k >= 1:  # broadcast, the same edges backwards
            if r % (2 * k) == k:
                comm.Recv(buf, source=r - k, tag=22)
            elif r % (2 * k) == 0 and r + k < n:
                comm.Send(buf, dest=r + k, tag=22)
            k //= 2
        return buf

    def prepare(self, coll, inp):
        if coll != "allreduce":
            raise Unsupported(coll)
        buf = inp.copy()
        return buf, lambda: self.allreduce(buf)
