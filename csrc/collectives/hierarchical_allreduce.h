#pragma once
#include <cstddef>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "reducer.h"
#include "ring_allreduce.h"
#include "shm_allreduce.h"

namespace hvdl {

// Allreduce over several hosts with the same number of ranks each. `local` holds
// this host's ranks (null when this rank is alone on its host); `cross` the ranks of
// every host with this rank's local index. out = allreduce(in * prescale) * postscale.
// `stream`: the local passes write their slots with non-temporal stores.
void hierarchical_allreduce(ShmCollectives* local, Transport& cross, const Reducer& red,
                            const void* in, void* out, size_t count, DataType dt, ReduceOp op,
                            double prescale, double postscale, HostBuffer& scratch, bool stream,
                            const RingOptions& ring);

// What a rank does when it cannot finish a hierarchical allreduce because of `e`:
// every peer waiting on it, on this host (shared memory) and across hosts (the cross
// transport), is told, so none waits for its part. `local` may be null.
void hierarchical_give_up(ShmCollectives* local, Transport& cross, const std::exception& e);

}  // namespace hvdl
