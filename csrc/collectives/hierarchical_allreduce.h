#pragma once
#include <cstddef>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "reducer.h"
#include "ring_allreduce.h"
#include "shm_allreduce.h"

namespace hvdl {

// Who takes part in a hierarchical allreduce, and how it runs.
struct HierarchicalOptions {
  // This host's ranks (null when this rank is alone on its host).
  ShmCollectives* local = nullptr;
  // The ranks of every host with this rank's local index.
  Transport* cross = nullptr;
  // Blocks of fewer than `small_bytes` cross over this transport instead (null: cross):
  // the MPI transport a TCP data plane wraps. Measured on the simulated 2x2 cluster
  // (1 Gbit/s, load ~15 on 2 cores, medians): 4 KiB took 4.3 ms with the small blocks
  // over TCP against 0.39 ms over MPI, 64 KiB 5.1 against 0.56 ms; 1 MiB 11.3 against
  // 19.6 ms, so large blocks stay on TCP.
  Transport* cross_small = nullptr;
  size_t small_bytes = 0;
  HostBuffer* scratch = nullptr;  // the cross ring's receive buffer
  bool stream = false;            // the local passes write their slots with non-temporal stores
  RingOptions ring;               // the cross-host ring's
};

// Allreduce over several hosts with the same number of ranks each, of `a` in host
// memory: out = allreduce(in * prescale) * postscale.
void hierarchical_allreduce(const HierarchicalOptions& h, const Reducer& red,
                            const AllreduceArgs& a);

// What a rank does when it cannot finish a hierarchical allreduce because of `e`:
// every peer waiting on it, on this host (shared memory) and across hosts (the cross
// transport), is told, so none waits for its part. `local` may be null.
void hierarchical_give_up(ShmCollectives* local, Transport& cross, const std::exception& e);

}  // namespace hvdl
