#pragma once
#include <cstddef>

#include "../transport/transport.h"

namespace hvdl {

struct BroadcastOptions {
  // From this many bytes (and more than 2 ranks) a pipelined chain, below a binomial tree.
  size_t chain_from_bytes = 1u << 20;
  size_t chain_segment_bytes = 256u << 10;  // the chain's pipelining (at least 4096)
};

// `bytes` of `buf` on rank `root` end up in `buf` on every rank of `t`.
void broadcast_bytes(Transport& t, void* buf, size_t bytes, int root,
                     const BroadcastOptions& opts = BroadcastOptions());

// The two algorithms broadcast_bytes chooses between (exposed for tests/benchmarks).
void binomial_tree_broadcast(Transport& t, void* buf, size_t bytes, int root);
void chain_broadcast(Transport& t, void* buf, size_t bytes, int root, size_t segment);

}  // namespace hvdl
