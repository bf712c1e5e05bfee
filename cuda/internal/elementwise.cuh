// The one memory-access pattern behind reduce, scale and the scaling copy: walk an
// element range with 16-byte vector loads where the pointers allow it and element-wise
// accesses elsewhere, applying a per-element functor. Keeping a single implementation
// means the alignment corner cases are handled (and tested) in one place.
#pragma once
#include <cuda_runtime.h>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include "check.h"
#include "launch.h"

namespace hvdl::gpu::detail {

constexpr size_t kVecBytes = 16;
// Independent vector loads each thread keeps in flight; one per thread is not enough
// to cover HBM latency at full occupancy.
constexpr int kUnroll = 4;

template <typename T> union Vec {
  uint4 raw;
  T e[kVecBytes / sizeof(T)];
};

// How [0, n) is cut: elements [0, head) and [head + nvec * V, n) are done one by one,
// the nvec 16-byte vectors in between as vectors. Vectorising needs dst and src to sit
// at the same offset modulo 16 (then one scalar head aligns both); otherwise every
// element goes through the scalar path.
struct Split {
  size_t head;
  size_t nvec;
  bool elem_aligned;  // false: pointers not even aligned to the element size
};

__host__ __device__ inline Split plan_split(const void* dst, const void* src, size_t n,
                                            size_t esize) {
  const uintptr_t d = reinterpret_cast<uintptr_t>(dst);
  const uintptr_t s = reinterpret_cast<uintptr_t>(src);
  Split sp{n, 0, ((d | s) % esize) == 0};
  if (!sp.elem_aligned || ((d ^ s) % kVecBytes) != 0) return sp;
  size_t head = ((kVecBytes - d % kVecBytes) % kVecBytes) / esize;
  if (head > n) head = n;
  sp.head = head;
  sp.nvec = (n - head) / (kVecBytes / esize);
  return sp;
}

template <typename T> __device__ __forceinline__ T load_elem(const unsigned char* p,
                                                             bool aligned) {
  if (aligned) return *reinterpret_cast<const T*>(p);
  T v;
  memcpy(&v, p, sizeof(T));  // alignment 1 known to the compiler: byte loads
  return v;
}

// A misaligned element is stored byte by byte from a 32/64-bit integer that the empty
// asm pins in a full register. Stored straight from the 16-bit register a float16
// conversion wrote, sm_90 code (nvcc 13.0) wrote 0 or junk as the low byte: the PTX was
// right, the machine code not (tests/gpu/kernel_check.cu on an H200, every float16
// case at an odd byte offset).
template <typename T> __device__ __forceinline__ void store_elem(unsigned char* p, T v,
                                                                 bool aligned) {
  if (aligned) {
    *reinterpret_cast<T*>(p) = v;
    return;
  }
  using U = std::conditional_t<sizeof(T) <= 4, unsigned, unsigned long long>;
  U u = 0;
  memcpy(&u, &v, sizeof(T));  // little-endian: the element's bytes at the bottom
  if constexpr (sizeof(U) == 4) asm("" : "+r"(u));
  else asm("" : "+l"(u));
#pragma unroll
  for (size_t k = 0; k < sizeof(T); ++k) p[k] = static_cast<unsigned char>(u >> (8 * k));
}

// dst[i] = f(dst[i], src[i]) for i < n, by the threads tid, tid + stride, ... Callers
// pick (tid, stride) as the whole grid or one block. kReadDst/kReadSrc skip the loads
// an operation does not need (f then sees T{} for that operand).
template <typename T, bool kReadDst, bool kReadSrc, typename F>
__device__ __forceinline__ void process_range(unsigned char* dst, const unsigned char* src,
                                              size_t n, Split sp, F f, size_t tid,
                                              size_t stride) {
  constexpr size_t V = kVecBytes / sizeof(T);

  uint4* d4 = reinterpret_cast<uint4*>(dst + sp.head * sizeof(T));
  const uint4* s4 = nullptr;
  if constexpr (kReadSrc) s4 = reinterpret_cast<const uint4*>(src + sp.head * sizeof(T));

  size_t i = tid;
  for (; i + (kUnroll - 1) * stride < sp.nvec; i += kUnroll * stride) {
    Vec<T> a[kUnroll], b[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      a[k].raw = kReadDst ? d4[i + k * stride] : make_uint4(0, 0, 0, 0);
      if constexpr (kReadSrc) b[k].raw = s4[i + k * stride];
      else b[k].raw = make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      Vec<T> r;
#pragma unroll
      for (size_t e = 0; e < V; ++e) r.e[e] = f(a[k].e[e], b[k].e[e]);
      d4[i + k * stride] = r.raw;
    }
  }
  for (; i < sp.nvec; i += stride) {
    Vec<T> a, b, r;
    a.raw = kReadDst ? d4[i] : make_uint4(0, 0, 0, 0);
    if constexpr (kReadSrc) b.raw = s4[i];
    else b.raw = make_uint4(0, 0, 0, 0);
#pragma unroll
    for (size_t e = 0; e < V; ++e) r.e[e] = f(a.e[e], b.e[e]);
    d4[i] = r.raw;
  }

  // Scalar part: the head and tail around the vectors, or everything when the
  // pointers could not be vectorised (then it is the bulk, hence the unrolling).
  const size_t body = sp.nvec * V;
  const size_t ns = n - body;
  const bool al = sp.elem_aligned;
  for (size_t j0 = tid; j0 < ns; j0 += kUnroll * stride) {
    T a[kUnroll], b[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t j = j0 + k * stride;
      a[k] = T{};
      b[k] = T{};
      if (j < ns) {
        const size_t off = (j < sp.head ? j : j + body) * sizeof(T);
        if constexpr (kReadDst) a[k] = load_elem<T>(dst + off, al);
        if constexpr (kReadSrc) b[k] = load_elem<T>(src + off, al);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) {
      const size_t j = j0 + k * stride;
      if (j < ns) {
        const size_t off = (j < sp.head ? j : j + body) * sizeof(T);
        store_elem<T>(dst + off, f(a[k], b[k]), al);
      }
    }
  }
}

template <typename T, bool kReadDst, bool kReadSrc, typename F>
__global__ void __launch_bounds__(kThreads)
    elementwise_kernel(unsigned char* dst, const unsigned char* src, size_t n, Split sp,
                       F f) {
  process_range<T, kReadDst, kReadSrc>(
      dst, src, n, sp, f, static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x,
      static_cast<size_t>(gridDim.x) * blockDim.x);
}

// Host side: plan, size the grid and launch on the current device.
template <typename T, bool kReadDst, bool kReadSrc, typename F>
void launch_elementwise(void* dst, const void* src, size_t n, F f, void* stream,
                        const char* who) {
  if (n == 0) return;
  const Split sp = plan_split(dst, kReadSrc ? src : dst, n, sizeof(T));
  const size_t scalar = n - sp.nvec * (kVecBytes / sizeof(T));
  const size_t vec_threads = (sp.nvec + kUnroll - 1) / kUnroll;
  const size_t scalar_threads = (scalar + kUnroll - 1) / kUnroll;
  auto* kernel = &elementwise_kernel<T, kReadDst, kReadSrc, F>;
  static ResidencyCache residency;
  const unsigned grid =
      grid_for(vec_threads > scalar_threads ? vec_threads : scalar_threads,
               resident_blocks(reinterpret_cast<const void*>(kernel), residency));
  kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<unsigned char*>(dst), static_cast<const unsigned char*>(src), n, sp, f);
  HVDL_CUDA_CHECK_LAUNCH(who);
}

}  // namespace hvdl::gpu::detail
