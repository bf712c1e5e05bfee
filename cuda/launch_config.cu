// Per-device, per-kernel cache of the launch geometry (see internal/launch.h).
#include "internal/check.h"
#include "internal/launch.h"

namespace hvdl::gpu::detail {
namespace {

unsigned query_resident(const void* kernel, int device) {
  int sms = 0, per_sm = 0;
  HVDL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  HVDL_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, 0));
  const long long blocks = static_cast<long long>(sms) * (per_sm > 0 ? per_sm : 1);
  return blocks > 0 ? static_cast<unsigned>(blocks) : 1u;
}

}  // namespace

unsigned resident_blocks(const void* kernel, ResidencyCache& cache) {
  int device = 0;
  HVDL_CUDA_CHECK(cudaGetDevice(&device));
  if (device < 0 || device >= kCachedDevices) return query_resident(kernel, device);
  unsigned v = cache.per_device[device].load(std::memory_order_relaxed);
  if (v == 0) {
    // Racing threads compute the same value, so a plain store is enough.
    v = query_resident(kernel, device);
    cache.per_device[device].store(v, std::memory_order_relaxed);
  }
  return v;
}

unsigned grid_for(size_t threads_needed, unsigned resident) {
  const size_t want = (threads_needed + kThreads - 1) / kThreads;
  if (want == 0) return 1;
  return static_cast<unsigned>(want < resident ? want : resident);
}

}  // namespace hvdl::gpu::detail
