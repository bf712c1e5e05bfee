// Data-plane adapters that let a transport over host memory (MPI) move GPU buffers, so
// the algorithms in collectives/ run unchanged on device memory. Both order their
// transfers with one CUDA stream (the engine's):
//  * a send reads what the work queued on the stream before isend() left in memory;
//  * received data is in device memory for work queued on the stream after wait()
//    (for that receive) or wait_all() returned, and all staging is over after wait_all().
// The control plane and wake-ups are forwarded untouched. Only built with CUDA.
#pragma once
#include <memory>

#include "transport.h"

namespace hvdl {

// For an MPI that cannot read device memory: every transfer goes through pinned host
// memory, cut into segments so copies to/from the GPU overlap the transfer itself.
// `host` must outlive the adapter. `segment_bytes`: bytes per staged piece (at least 4096).
constexpr size_t kDefaultStagingSegmentBytes = 4u << 20;
std::unique_ptr<Transport> make_staging_transport(Transport& host, void* stream,
                                                  size_t segment_bytes = kDefaultStagingSegmentBytes);

// For a CUDA-aware MPI: device pointers go to MPI directly, after the stream has
// finished writing them (MPI does not follow CUDA streams).
std::unique_ptr<Transport> make_stream_synced_transport(Transport& cuda_aware, void* stream);

}  // namespace hvdl
