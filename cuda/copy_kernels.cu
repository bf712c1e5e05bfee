// batched_copy: packs/unpacks the fusion buffer with one launch, however many tensors.
//
// Work is cut into fixed-size units (a region of b bytes owns ceil(b / kUnitBytes)
// units, numbered consecutively across regions). Each block takes a contiguous slice
// of the unit numbers, finds its first region with one binary search over the
// regions' first-unit prefix sums, then walks forward. So a 1 GiB tensor is spread over
// every SM while thousands of tiny tensors cost one unit each, and the per-block
// lookup cost is O(log n) once, not per unit.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>
#include "gpu_kernels.h"
#include "internal/element_types.cuh"
#include "internal/elementwise.cuh"

namespace hvdl::gpu {
namespace {

using detail::Factor;
using detail::kThreads;
using detail::kUnroll;
using detail::kVecBytes;

// One unrolled pass of a block with 16-byte accesses, so an aligned unit is a single
// round of loads in flight per thread.
constexpr size_t kUnitBytes = kThreads * kUnroll * kVecBytes;  // 16 KiB

// Device image of a CopyDesc plus the prefix sum the blocks search.
struct DevRegion {
  unsigned char* dst;
  const unsigned char* src;
  unsigned long long bytes;
  unsigned long long first_unit;
};
static_assert(sizeof(DevRegion) == kBatchedCopyBytesPerDesc,
              "gpu_kernels.h advertises the scratch size per descriptor");

// Block-wide copy of len bytes using the widest word W both pointers can be aligned
// to at once; bytes before the first aligned word and after the last are copied singly.
template <typename W>
__device__ void copy_words(unsigned char* d, const unsigned char* s, size_t len) {
  constexpr size_t w = sizeof(W);
  size_t head = (w - reinterpret_cast<uintptr_t>(d) % w) % w;
  if (head > len) head = len;
  const size_t nw = (len - head) / w;
  const size_t tail = head + nw * w;
  for (size_t b = threadIdx.x; b < head; b += blockDim.x) d[b] = s[b];
  for (size_t b = tail + threadIdx.x; b < len; b += blockDim.x) d[b] = s[b];

  W* dw = reinterpret_cast<W*>(d + head);
  const W* sw = reinterpret_cast<const W*>(s + head);
  for (size_t base = 0; base < nw; base += kUnroll * blockDim.x) {
    W v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t i = base + threadIdx.x + k * blockDim.x;
      if (i < nw) v[k] = sw[i];
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t i = base + threadIdx.x + k * blockDim.x;
      if (i < nw) dw[i] = v[k];
    }
  }
}

__device__ void copy_bytes(unsigned char* d, const unsigned char* s, size_t len) {
  // Tensors at unrelated offsets can only share a narrower alignment; using it still
  // beats falling back to bytes. The choice is uniform across the block.
  const uintptr_t mis = reinterpret_cast<uintptr_t>(d) ^ reinterpret_cast<uintptr_t>(s);
  if (mis % 16 == 0) copy_words<uint4>(d, s, len);
  else if (mis % 8 == 0) copy_words<uint2>(d, s, len);
  else if (mis % 4 == 0) copy_words<uint32_t>(d, s, len);
  else if (mis % 2 == 0) copy_words<uint16_t>(d, s, len);
  else copy_words<uint8_t>(d, s, len);
}

template <typename T> struct CopyScaleFn {
  Factor k;
  __device__ T operator()(T, T from_src) const { return detail::scale_elem(from_src, k); }
};

template <typename T, bool kScale>
__global__ void __launch_bounds__(kThreads)
    batched_copy_kernel(const DevRegion* regs, int n, unsigned long long units, Factor k) {
  const unsigned long long begin = units * blockIdx.x / gridDim.x;
  const unsigned long long end = units * (blockIdx.x + 1) / gridDim.x;
  if (begin >= end) return;

  // Last region starting at or before `begin`. Empty regions share their successor's
  // first_unit, so "last" skips them and lands on the region that owns the unit.
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = lo + (hi - lo + 1) / 2;
    if (regs[mid].first_unit <= begin) lo = mid;
    else hi = mid - 1;
  }
  int r = lo;
  DevRegion reg = regs[r];

  for (unsigned long long u = begin; u < end; ++u) {
    while (r + 1 < n && regs[r + 1].first_unit <= u) reg = regs[++r];
    const size_t off = static_cast<size_t>(u - reg.first_unit) * kUnitBytes;
    const size_t rest = reg.bytes - off;
    const size_t len = rest < kUnitBytes ? rest : kUnitBytes;
    unsigned char* d = reg.dst + off;
    const unsigned char* s = reg.src + off;
    if constexpr (kScale) {
      // off is a multiple of kUnitBytes, hence of sizeof(T): units never split elements.
      const size_t ne = len / sizeof(T);
      detail::process_range<T, false, true>(d, s, ne, detail::plan_split(d, s, ne, sizeof(T)),
                                            CopyScaleFn<T>{k}, threadIdx.x, blockDim.x);
    } else {
      copy_bytes(d, s, len);
    }
    // No barrier needed between units: regions never overlap, so threads of one block
    // never touch each other's bytes.
  }
}

[[noreturn]] void bad_arg(const std::string& why) {
  throw std::invalid_argument("hvdl::gpu::batched_copy: " + why);
}

}  // namespace

void batched_copy(const CopyDesc* host_descs, int n, DataType dtype, double factor,
                  void* stream, void* device_desc_scratch, size_t scratch_bytes) {
  if (n < 0) bad_arg("negative descriptor count");
  if (n == 0) return;
  if (host_descs == nullptr) bad_arg("null descriptor array");
  const size_t need = batched_copy_scratch_bytes(n);
  if (device_desc_scratch == nullptr || scratch_bytes < need)
    bad_arg("scratch too small: need " + std::to_string(need) + " bytes for " +
            std::to_string(n) + " descriptors, got " + std::to_string(scratch_bytes));
  if (reinterpret_cast<uintptr_t>(device_desc_scratch) % alignof(DevRegion) != 0)
    bad_arg("scratch must be 8-byte aligned");

  const bool scaled = factor != 1.0;
  const size_t esize = scaled ? dtype_size(dtype) : 1;
  if (scaled && (esize == 0 || dtype == DataType::BOOL))
    bad_arg(std::string("cannot scale dtype ") + dtype_name(dtype));

  // Reused per thread so a steady-state training loop does not allocate here.
  thread_local std::vector<DevRegion> regs;
  regs.resize(static_cast<size_t>(n));
  unsigned long long units = 0;
  for (int i = 0; i < n; ++i) {
    const CopyDesc& c = host_descs[i];
    if (c.bytes != 0 && (c.dst == nullptr || c.src == nullptr))
      bad_arg("null pointer in descriptor " + std::to_string(i));
    if (c.bytes % esize != 0)
      bad_arg("descriptor " + std::to_string(i) + " is not a whole number of " +
              dtype_name(dtype) + " elements");
    regs[i] = DevRegion{static_cast<unsigned char*>(c.dst),
                        static_cast<const unsigned char*>(c.src), c.bytes, units};
    units += (c.bytes + kUnitBytes - 1) / kUnitBytes;
  }
  if (units == 0) return;

  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Pageable source: CUDA stages it before returning, so `regs` may be reused at once.
  HVDL_CUDA_CHECK(cudaMemcpyAsync(device_desc_scratch, regs.data(), need,
                                  cudaMemcpyHostToDevice, s));
  const auto* dev = static_cast<const DevRegion*>(device_desc_scratch);
  const Factor k{static_cast<float>(factor), factor};
  auto launch = [&](auto kernel, detail::ResidencyCache& residency) {
    const unsigned cap =
        detail::resident_blocks(reinterpret_cast<const void*>(kernel), residency);
    const unsigned grid = units < cap ? static_cast<unsigned>(units) : cap;
    kernel<<<grid, kThreads, 0, s>>>(dev, n, units, k);
  };
  if (!scaled) {
    static detail::ResidencyCache residency;
    launch(&batched_copy_kernel<uint8_t, false>, residency);
  } else {
    detail::dispatch_dtype(dtype, "batched_copy", [&](auto tag) {
      using T = decltype(tag);
      static detail::ResidencyCache residency;  // one per instantiation of this lambda
      launch(&batched_copy_kernel<T, true>, residency);
    });
  }
  HVDL_CUDA_CHECK_LAUNCH("batched_copy");
}

}  // namespace hvdl::gpu
