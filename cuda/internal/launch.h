// Launch geometry shared by all kernels. Internal.
#pragma once
#include <atomic>
#include <cstddef>

namespace hvdl::gpu::detail {

// Every kernel is written for this block size (__launch_bounds__ uses it too).
constexpr int kThreads = 256;

constexpr int kCachedDevices = 64;  // larger device ordinals are simply re-queried

// One per kernel instantiation (a function-local static at the launch site): how many
// kThreads-blocks of that kernel each device keeps resident. Register use differs per
// kernel, so a device-wide figure would over- or under-fill the GPU.
struct ResidencyCache {
  std::atomic<unsigned> per_device[kCachedDevices] = {};
};

// SM count x resident blocks per SM for `kernel` (a __global__ function's address) on
// the current device; queried once per device, then read from `cache`.
unsigned resident_blocks(const void* kernel, ResidencyCache& cache);

// Grid for a grid-stride kernel that wants `threads_needed` threads: never more than
// one resident wave (extra blocks would only queue behind the first and add a tail),
// never zero.
unsigned grid_for(size_t threads_needed, unsigned resident);

}  // namespace hvdl::gpu::detail
