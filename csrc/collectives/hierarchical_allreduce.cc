// Hierarchical allreduce: the host's ranks first reduce-scatter through shared
// memory, so local rank i holds the host's sum of block i; then, for every i at
// once, the ranks with local index i (one per host) ring-allreduce block i across
// hosts; finally the host's ranks allgather the blocks through shared memory.
// Only 1/local_size of the buffer crosses between hosts per rank, and every
// host-to-host link carries a ring of its own. With two hosts the block goes across in
// one exchange instead (pair_allreduce_host, ring_allreduce.h): at every size where each
// host has one rank, up to one message where it has more.
#include "hierarchical_allreduce.h"


#include "../transport/peer_health.h"
#include "partition.h"
#include "ring_allreduce.h"

namespace hvdl {

void hierarchical_allreduce(const HierarchicalOptions& h, const Reducer& red,
                            const AllreduceArgs& a) {
  const size_t es = dtype_size(a.dt);
  char* o = static_cast<char*>(a.out);
  ShmCollectives* local = h.local;
  try {
    auto across = [&](size_t count) -> Transport& {
      return h.cross_small && count * es < h.small_bytes ? *h.cross_small : *h.cross;
    };
    if (!local || local->size() == 1) {
      return pair_or_ring_allreduce_host(across(a.count), red, *h.scratch, a, h.ring);
    }
    const int nl = local->size(), lr = local->rank();
    local->reduce_scatter(red, a.in, a.out, a.count, a.dt, a.op, a.prescale, 1.0, h.stream);
    char* block = o + block_offset(a.count, nl, lr) * es;
    const size_t n = block_count(a.count, nl, lr);
    // Here the host's ranks share its cores, and a block above one message keeps the
    // ring's half-size folds: on 2x2 at 1 Gbit/s, 3 MiB (1.5 MiB blocks) took 26.2-27.8
    // ms by the ring and 26.4-29.5 by the pair exchange (four alternating launches each).
    pair_or_ring_allreduce_host(across(n), red, *h.scratch,
                                {block, block, n, a.dt, a.op, 1.0, a.postscale}, h.ring,
                                kPairExchangeMaxBytes);
    local->allgather(a.out, a.count, a.dt, h.stream);
  } catch (const std::exception& e) {
    hierarchical_give_up(local, *h.cross, e);
    throw;
  }
}

void hierarchical_give_up(ShmCollectives* local, Transport& cross, const std::exception& e) {
  // The ranks on this host wait on us in shared memory: tell them at once (a peer's
  // failure stays a PeerFailure there too).
  if (local) local->abandon(e);
  // The ranks on other hosts wait on us in the cross ring. A failed rank they find
  // themselves (their heartbeat, their own connections); a local error they cannot.
  if (!dynamic_cast<const PeerFailure*>(&e)) cross.abandon(e.what());
}

}  // namespace hvdl
