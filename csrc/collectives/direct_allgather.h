// Allgather in one exchange: every rank sends its block straight to every peer and
// takes theirs, N-1 messages each way at once, instead of the ring's N-1 steps. For
// small buffers among a few ranks, where the steps' latency is the cost (the second
// half of a split rider's allreduce: engine/controller.h).
#pragma once
#include <cstddef>

#include "../transport/transport.h"

namespace hvdl {

// `buf` holds `count` elements of `elem_bytes` cut into t.size() blocks (partition.h);
// this rank's block is in place. Afterwards every block is.
void direct_allgather(Transport& t, void* buf, size_t count, size_t elem_bytes);

}  // namespace hvdl
