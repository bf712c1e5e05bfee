// Ring allreduce = ring reduce-scatter + ring allgather (ring.cc), on N nearly equal
// blocks. Each rank sends 2(N-1)/N of the buffer in total, whatever N is, which is
// why the ring is bandwidth-optimal. Every block is reduced on exactly one rank and
// then copied, so all ranks end with bitwise identical results.
#include "ring_allreduce.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "ring.h"

namespace hvdl {

void ring_allreduce(Transport& t, const Reducer& red, Buffer& scratch, const AllreduceArgs& a,
                    const RingOptions& opts) {
  const int n = t.size(), r = t.rank();
  const size_t es = dtype_size(a.dt);
  void* buf = a.out;
  const void* in = a.in ? a.in : a.out;
  if (a.prescale != 1.0) {
    if (in != buf)
      throw std::invalid_argument("ring_allreduce: a prescale out of place needs the input copied "
                                  "into the output first (ring_allreduce_host)");
    red.scale(buf, a.count, a.dt, a.prescale);
  }
  if (n == 1 || a.count == 0) {
    if (in != buf && a.count) std::memcpy(buf, in, a.count * es);
    red.scale(buf, a.count, a.dt, a.postscale);
    return;
  }
  // shift 1: rank r finishes block r+1, the classic ring order.
  RingBlocks blocks = RingBlocks::even(a.count, n);
  {
    PhaseScope p(opts.phases, "RING_REDUCE_SCATTER");
    ring_reduce_scatter(t, red, in, buf, blocks, a.dt, a.op, 1, scratch, opts.segment_bytes);
    const int own = (r + 1) % n;
    red.scale(static_cast<char*>(buf) + blocks.offset[own] * es, blocks.count[own], a.dt,
              a.postscale);
  }
  PhaseScope p(opts.phases, "RING_ALLGATHER");
  for (int i = 0; i < n; ++i) blocks.offset[i] *= es, blocks.count[i] *= es;
  ring_allgather(t, buf, blocks, 1);
}

bool pair_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch, const void* in,
                         void* out, size_t count, DataType dt, ReduceOp op, double postscale) {
  const size_t es = dtype_size(dt);
  if (t.size() != 2 || count == 0 || op == ReduceOp::ADASUM) return false;
  const int peer = 1 - t.rank();
  const size_t seg = std::clamp<size_t>(kPairExchangeMaxBytes / es, 1, count);
  const size_t nseg = (count + seg - 1) / seg, slots = std::min(nseg, kPairSlots);
  char* window = scratch.reserve(slots * seg * es);
  auto len = [&](size_t k) { return std::min(seg, count - k * seg); };
  auto slot = [&](size_t k) { return window + (k % slots) * seg * es; };
  std::vector<Transport::Op> recvs(nseg), sends(nseg);
  for (size_t k = 0; k < slots; ++k) recvs[k] = t.irecv(peer, slot(k), len(k) * es);
  // Every send at once: the socket never runs dry while this rank reduces.
  for (size_t k = 0; k < nseg; ++k)
    sends[k] = t.isend(peer, static_cast<const char*>(in) + k * seg * es, len(k) * es);
  for (size_t k = 0; k < nseg; ++k) {
    t.wait(recvs[k]);
    if (in == out) t.wait(sends[k]);  // the fold below overwrites what it sent
    const size_t off = k * seg * es;
    char* theirs = slot(k);
    const void* const inputs[2] = {theirs, theirs};  // the peer's; ours is `in`
    // Rank 1 folds into the peer's slot (overwritable) or straight into `out`.
    char* o = static_cast<char*>(out) + off;
    combine_in_rank_order(red, t.rank(), 2, static_cast<const char*>(in) + off, inputs,
                          in == out ? theirs : o, o, len(k), dt, op, postscale);
    if (k + slots < nseg) recvs[k + slots] = t.irecv(peer, slot(k + slots), len(k + slots) * es);
  }
  t.wait_all();
  return true;
}

void combine_in_rank_order(const Reducer& red, int rank, int n, const void* in,
                           const void* const* theirs, void* acc, void* out, size_t count,
                           DataType dt, ReduceOp op, double postscale) {
  const size_t bytes = count * dtype_size(dt);
  // The first fold reads rank 0's input where it lies (reduce_pair: no copy first).
  if (rank == 0) {
    if (n > 1) red.reduce_pair(out, in, theirs[1], count, dt, op);
    else if (in != out) std::memcpy(out, in, bytes);
    for (int p = 2; p < n; ++p) red.reduce(out, theirs[p], count, dt, op);
  } else {
    // Rank 0's input first; `in` may be `out`, so then the result goes there last.
    if (acc == in) throw std::logic_error("combine_in_rank_order: acc is the input");
    auto input = [&](int p) { return p == rank ? in : theirs[p]; };
    red.reduce_pair(acc, theirs[0], input(1), count, dt, op);
    for (int p = 2; p < n; ++p) red.reduce(acc, input(p), count, dt, op);
    if (acc != out) std::memcpy(out, acc, bytes);
  }
  red.scale(out, count, dt, postscale);
}

void ring_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch, const AllreduceArgs& a,
                         const RingOptions& opts) {
  if (a.prescale == 1.0 || a.in == a.out) return ring_allreduce(t, red, scratch, a, opts);
  if (a.count) std::memcpy(a.out, a.in, a.count * dtype_size(a.dt));
  AllreduceArgs in_place = a;
  in_place.in = a.out;
  ring_allreduce(t, red, scratch, in_place, opts);
}

void pair_or_ring_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch,
                                 const AllreduceArgs& a, const RingOptions& opts,
                                 size_t pair_max_bytes) {
  if (a.prescale == 1.0 && a.count * dtype_size(a.dt) <= pair_max_bytes &&
      pair_allreduce_host(t, red, scratch, a.in, a.out, a.count, a.dt, a.op, a.postscale))
    return;
  ring_allreduce_host(t, red, scratch, a, opts);
}

}  // namespace hvdl
