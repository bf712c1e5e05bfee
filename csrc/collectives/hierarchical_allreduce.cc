// Hierarchical allreduce: the host's ranks first reduce-scatter through shared
// memory, so local rank i holds the host's sum of block i; then, for every i at
// once, the ranks with local index i (one per host) ring-allreduce block i across
// hosts; finally the host's ranks allgather the blocks through shared memory.
// Only 1/local_size of the buffer crosses between hosts per rank, and every
// host-to-host link carries a ring of its own.
#include "hierarchical_allreduce.h"


#include "../transport/peer_health.h"
#include "partition.h"
#include "ring_allreduce.h"

namespace hvdl {

void hierarchical_allreduce(ShmCollectives* local, Transport& cross, const Reducer& red,
                            const void* in, void* out, size_t count, DataType dt, ReduceOp op,
                            double prescale, double postscale, HostBuffer& scratch, bool stream,
                            const RingOptions& ring) {
  const size_t es = dtype_size(dt);
  char* o = static_cast<char*>(out);
  try {
    if (!local || local->size() == 1)
      return ring_allreduce_host(cross, red, in, out, count, dt, op, prescale, postscale, scratch,
                                 ring);
    const int nl = local->size(), lr = local->rank();
    local->reduce_scatter(red, in, out, count, dt, op, prescale, 1.0, stream);
    ring_allreduce(cross, red, o + block_offset(count, nl, lr) * es, block_count(count, nl, lr),
                   dt, op, postscale, scratch, ring);
    local->allgather(out, count, dt, stream);
  } catch (const std::exception& e) {
    hierarchical_give_up(local, cross, e);
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
