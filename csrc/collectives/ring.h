// The two phases of a ring, shared by allreduce (reduce-scatter then allgather),
// reducescatter (the first phase alone) and allgather (the second phase alone).
// Both walk the N blocks of a buffer around the ring r -> r+1; block sizes may
// differ (allgatherv, the row partition of reducescatter, fused tensors).
#pragma once
#include <cstddef>
#include <vector>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "reducer.h"

namespace hvdl {

// Block i of a buffer: `count[i]` units starting at unit `offset[i]` (elements for
// reductions, bytes for plain copies). One block per rank of the transport.
struct RingBlocks {
  std::vector<size_t> offset, count;
  // `total` units cut by the partition.h rule (the first total % parts get one more).
  static RingBlocks even(size_t total, int parts);
  // Contiguous blocks of the given sizes, in order.
  static RingBlocks of_sizes(const std::vector<size_t>& sizes);
};

// Reduce-scatter: afterwards block (rank + shift) mod N of `dst` holds that block
// reduced over all ranks; other blocks of `dst` hold partial sums.
// src == dst works in place, receiving through `scratch`; otherwise `src` is only
// read and partial results are built in `dst` (no copy of the input first), and
// `own`, if given, receives the finished block instead of its place in `dst` (so a
// caller that wants only that block needs no copy afterwards).
void ring_reduce_scatter(Transport& t, const Reducer& red, const void* src, void* dst,
                         const RingBlocks& blocks, DataType dt, ReduceOp op, int shift,
                         Buffer& scratch, size_t segment_bytes = 0, void* own = nullptr);

// Allgather in place: rank r holds block (r + shift) mod N of `buf` (units = bytes);
// afterwards every rank holds every block. With `own_src`, this rank's block is
// taken from there instead: it is sent from `own_src` and copied into `buf` while
// the first transfer is in flight (the peer does not wait for the copy).
void ring_allgather(Transport& t, void* buf, const RingBlocks& bytes, int shift,
                    const void* own_src = nullptr);

// Bytes per pipelined segment when the caller gives none (segment_bytes 0); the engine
// passes the RING_SEGMENT_BYTES setting (same default).
constexpr size_t kDefaultRingSegmentBytes = 1u << 20;

}  // namespace hvdl
