#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "phase_observer.h"
#include "reducer.h"
#include "ring.h"

namespace hvdl {

// The ring's settings for one process set, equal on every rank.
struct RingOptions {
  // Pipelining granularity; 0 = kDefaultRingSegmentBytes. Must be equal on every rank.
  size_t segment_bytes = 0;
  // Told about RING_REDUCE_SCATTER and RING_ALLGATHER; may be null.
  PhaseObserver* phases = nullptr;
};

// `r` for a ring whose transfers cross hosts over direct TCP (tcp_transport.h):
// segments of at least 4 MiB, so two in flight hold ~64 ms of a 1 Gbit/s link and a
// rank that misses its turn on the cores for a while does not leave the link idle.
inline RingOptions over_tcp(RingOptions r) {
  r.segment_bytes = std::max<size_t>(r.segment_bytes ? r.segment_bytes : kDefaultRingSegmentBytes,
                                     size_t(4) << 20);
  return r;
}

// One allreduce of one buffer, as the algorithms over it take it (like Gloo's
// AllreduceOptions): out = (reduction over ranks of in * prescale) * postscale.
struct AllreduceArgs {
  const void* in = nullptr;  // null: in place, as when it equals out
  void* out = nullptr;
  size_t count = 0;
  DataType dt = DataType::FLOAT32;
  ReduceOp op = ReduceOp::SUM;
  double prescale = 1.0, postscale = 1.0;
};

// Two ranks: one exchange of the whole buffer instead of the ring's reduce-scatter and
// allgather. The same bytes cross the link (S each way), but nothing waits on a
// reduction.
// - Small, it is one round trip instead of two, and between hosts each is a wake-up of
//   a sleeping rank (measured 2x1 hosts, 4 KiB: the two TCP steps took 0.35-1.7 ms of
//   a 1-1.6 ms call on a loaded machine).
// - Large, every byte is posted at once, so both directions of the link stay busy from
//   the first byte to the last. In the ring a rank's allgather could only start once
//   the peer's reduce-scatter had ended (2x1 simulated hosts at 10 Gbit/s, 64 MiB, one
//   rank's timeline: reduce-scatter 27-34 ms, allgather 28-50 ms, where each moves 27
//   ms of the link's bytes). Six alternating launches each there, 64 MiB: median 67.1
//   ms by the ring, 58.5 by the pair exchange. At 1 Gbit/s, back to back, both run at the
//   link's rate; each call after a barrier (the cluster report's way) 2-8 MiB took
//   0.8-3 % longer and 16 MiB 1.3 % less.
// The price: each rank reduces S, not S/2. Messages are at most kPairExchangeMaxBytes:
// a larger buffer goes in segments of that, received into a window of kPairSlots of
// them and each reduced as it arrives (the scratch stays small; the last segment's
// fold, which nothing overlaps, stays short: 4 MiB segments made 4 MiB calls 1.4-2.5 %
// slower at 1 Gbit/s).
constexpr size_t kPairExchangeMaxBytes = size_t(1) << 20;
constexpr size_t kPairSlots = 4;

// Host memory, `t` of two ranks, not ADASUM: out = (in op peer's in) * postscale by one
// exchange (in may equal out; `scratch` takes the peer's segments); returns false
// without touching anything otherwise.
bool pair_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch, const void* in,
                         void* out, size_t count, DataType dt, ReduceOp op, double postscale);

// What a one-exchange allreduce does once every peer's input is here: out = (rank 0's
// input op rank 1's op ... op rank n-1's) * postscale, folded in rank order, so that
// every rank gets the same bits also where the order matters (MIN/MAX with NaNs).
// theirs[p] is rank p's input, only read; theirs[rank] is not read (this rank's input
// is `in`, which may equal out). Ranks other than 0 fold in `acc`, room for `count`
// elements: theirs[0] itself where the caller lets it be overwritten, `out` where it is
// not `in`, else scratch. Used by pair_allreduce_host and by a caller that got the
// inputs another way (engine/controller.h: riders).
void combine_in_rank_order(const Reducer& red, int rank, int n, const void* in,
                           const void* const* theirs, void* acc, void* out, size_t count,
                           DataType dt, ReduceOp op, double postscale);

// `a` over every rank of `t`, `scratch` the caller's persistent receive buffer. In
// place (in == out) or out of place without a prescale: the input is then only read,
// where it lies, and `out` is written, never copied into first. Out of place with a
// prescale it throws std::invalid_argument (scaling needs the input in `out` first:
// ring_allreduce_host does that copy on host memory).
// It touches the memory only through `red` and `t`, so device memory works unchanged
// when both order their work on one stream (engine/cuda_device.cc: a staging
// transport and a kernel reducer on the engine's).
void ring_allreduce(Transport& t, const Reducer& red, Buffer& scratch, const AllreduceArgs& a,
                    const RingOptions& opts = RingOptions());

// `a` in host memory over every rank of `t`; in may equal out. Without a prescale the
// input is read where it lies; with one, it is copied into `out` and scaled there first.
void ring_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch, const AllreduceArgs& a,
                         const RingOptions& opts = RingOptions());

// On two ranks the pair exchange (unscaled inputs of at most `pair_max_bytes`), else
// ring_allreduce_host: what the paths across hosts run on host memory. A caller whose
// ranks share their host's cores with others passes kPairExchangeMaxBytes
// (hierarchical_allreduce.cc says why).
void pair_or_ring_allreduce_host(Transport& t, const Reducer& red, Buffer& scratch,
                                 const AllreduceArgs& a, const RingOptions& opts,
                                 size_t pair_max_bytes = SIZE_MAX);

}  // namespace hvdl
