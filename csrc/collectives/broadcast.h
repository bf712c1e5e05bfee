#pragma once
#include <cstddef>

#include "../transport/transport.h"

namespace hvdl {

// `bytes` of `buf` on rank `root` end up in `buf` on every rank of `t`.
void broadcast_bytes(Transport& t, void* buf, size_t bytes, int root);

// The two algorithms broadcast_bytes chooses between (exposed for tests/benchmarks).
void binomial_tree_broadcast(Transport& t, void* buf, size_t bytes, int root);
void chain_broadcast(Transport& t, void* buf, size_t bytes, int root, size_t segment);

}  // namespace hvdl
