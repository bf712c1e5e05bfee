// Which allreduce paths a process set has on host memory, set up once when its worker
// starts, from where its ranks live and the settings (rank 0's hold for every rank):
//   - every rank on this host: "shm": zero copy first, then the timed choice between
//     the shared-memory pipeline (ordinary or streaming stores) and the ring,
//   - several hosts with the same number of ranks each: shared memory inside each
//     host and a ring across hosts ("hierarchical"),
//   - otherwise (or SHM=0 / HIERARCHICAL_ALLREDUCE=0 in the settings): the flat ring.
// HOROVODLITE_HIERARCHICAL_ALLREDUCE=1 forces the hierarchical form even on one host.
// The paths themselves are in collectives/ (allreduce_path.h); the GPU's are set up
// with the GPU (cuda_device.cc).
#pragma once
#include <memory>
#include <vector>

#include "../collectives/allreduce_paths.h"
#include "../collectives/shm_allreduce.h"
#include "../common/settings.h"
#include "../transport/transport.h"

namespace hvdl {

// Collective over `set`. host_of_member[i] is the host index of the set's rank i
// (empty: unknown, use the ring). The flat ring also when a shared-memory segment
// could not be set up (on every rank alike). `set` must outlive the result.
std::unique_ptr<AllreducePaths> make_host_allreduce_paths(Transport& set,
                                                          const std::vector<int>& host_of_member,
                                                          const Settings& settings);
// The SHM_* settings as the shared-memory collectives' options.
ShmOptions shm_options(const Settings& s);

}  // namespace hvdl
