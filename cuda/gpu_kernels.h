// GPU side of the engine: reduction/scaling/packing kernels and the few CUDA runtime
// calls the engine needs for stream ordering and memory. Plain C++ on purpose: the
// engine's host-only translation units include this without nvcc or CUDA headers, so
// every CUDA handle crosses this boundary as void*.
//
// Conventions for every function below:
//  * `stream` is a cudaStream_t (nullptr = the legacy default stream). Kernels run on
//    the *current* device (set_device), which must own `stream` and the pointers.
//  * All work is asynchronous with respect to the host unless the name says otherwise.
//  * CUDA failures throw std::runtime_error naming the CUDA call, the source location
//    and cudaGetErrorString; invalid arguments throw std::invalid_argument.
//  * Thread-safe: no shared mutable state except a per-device launch-config cache.
#pragma once
#include <cstddef>
#include <string>
#include "../csrc/common/dtype.h"

namespace hvdl::gpu {

// True only if a usable CUDA driver and at least one device are present. Never
// throws or aborts (the extension must import on CPU-only hosts). Note: it
// initialises the driver, so call it after any fork(), not before.
bool runtime_available();

// ---------------------------------------------------------------------------------
// Element-wise kernels. dtype: UINT8, INT8, INT16, UINT16, INT32, INT64, FLOAT16,
// BFLOAT16, FLOAT32, FLOAT64 (BOOL is rejected). Pointers may have any alignment (even byte-misaligned;
// that path is slow) and dst/src may be identical but must not partially overlap.
// Results are bitwise reproducible and equal to a CPU implementation that follows
// the rules below:
//  * SUM and AVERAGE add (AVERAGE is scaled by the caller, e.g. reduce_scale_into),
//    PRODUCT multiplies, MIN/MAX select. ADASUM is rejected.
//  * float32/float64: one IEEE operation, round-to-nearest-even, no FMA contraction,
//    denormals preserved.
//  * float16/bfloat16: widen both to float32, do the float32 operation, round back to
//    nearest-even (NaN becomes a quiet NaN).
//  * Integers wrap modulo 2^bits (two's complement) on SUM/PRODUCT overflow.
//  * MIN/MAX return one of the two inputs bit-for-bit (compared as float32 for 16-bit
//    floats): a NaN in dst is kept, else a NaN in src is taken, else src replaces dst
//    only if strictly smaller (MIN) / greater (MAX) -- so ties such as -0/+0 keep dst.
// ---------------------------------------------------------------------------------

// dst[i] = dst[i] op src[i], i < count.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op,
                 void* stream);

// Fused last step: exactly equal to reduce_into followed by scale(dst, factor), i.e.
// the reduced value is rounded to dtype before it is scaled. One pass over memory.
void reduce_scale_into(void* dst, const void* src, size_t count, DataType dtype,
                       ReduceOp op, double factor, void* stream);

// buf[i] = buf[i] * factor. float16/bfloat16: float32 product with (float)factor, then
// round-to-nearest-even; float32: times (float)factor; float64: times factor. Integers:
// (double)x * factor truncated toward zero; an out-of-range result is only defined
// for 8/16/32-bit types whose product fits in int64 (it then wraps modulo 2^bits).
// factor == 1.0 is a no-op and launches nothing.
void scale(void* buf, size_t count, DataType dtype, double factor, void* stream);

// ---------------------------------------------------------------------------------
// Batched copy: pack many tensors into a fusion buffer, or unpack them, in ONE kernel.
// ---------------------------------------------------------------------------------
struct CopyDesc {
  void* dst;
  const void* src;
  size_t bytes;
};

// Device scratch the descriptors are staged into: 32 bytes per descriptor, 8-byte
// aligned (any cudaMalloc/malloc_device pointer is).
constexpr size_t kBatchedCopyBytesPerDesc = 32;
inline size_t batched_copy_scratch_bytes(int n) {
  return n > 0 ? static_cast<size_t>(n) * kBatchedCopyBytesPerDesc : 0;
}

// Copies host_descs[i].bytes from src to dst for all i with one cudaMemcpyAsync (the
// descriptors, into device_desc_scratch) and one kernel launch on `stream`. If
// factor != 1.0 every element is scaled on the way with scale()'s semantics; then
// each `bytes` must be a multiple of dtype_size(dtype). With factor == 1.0 the dtype
// is ignored and any byte counts/alignments are fine. Regions must not overlap.
// host_descs may be reused/freed as soon as this returns (it is pageable memory, so
// CUDA stages it before returning). The scratch must not be in use by another stream
// concurrently; reusing it for successive calls on the same stream is safe because
// the staging copy is stream-ordered after the previous kernel.
void batched_copy(const CopyDesc* host_descs, int n, DataType dtype, double factor,
                  void* stream, void* device_desc_scratch, size_t scratch_bytes);

// ---------------------------------------------------------------------------------
// Runtime helpers (thin wrappers; handles are cudaEvent_t / cudaStream_t).
// ---------------------------------------------------------------------------------
void* event_create();                        // cudaEventDisableTiming, current device
void event_destroy(void* ev);                // nullptr ok; silent during process teardown
void event_record(void* ev, void* stream);
void stream_wait_event(void* stream, void* ev);  // device-side wait, host not blocked
void event_synchronize(void* ev);
bool event_query(void* ev);                  // true when complete; never blocks

// Non-blocking (no implicit sync with the legacy default stream), highest priority so
// communication kernels are not starved by compute. The current device is restored.
void* stream_create(int device);
void stream_destroy(void* stream);           // nullptr ok; silent during teardown
void stream_synchronize(void* stream);

int current_device();
void set_device(int device);

// Device ordinal owning `p`, or -1 for host memory (pageable or pinned) and pointers
// CUDA does not know. Never throws for those.
int pointer_device(const void* p);
// "0000:3b:00.0": with the host name, tells whether two ranks drive the same GPU even
// when their CUDA_VISIBLE_DEVICES number it differently.
std::string pci_bus_id(int device);

void* malloc_device(size_t bytes);           // 0 bytes -> nullptr
void free_device(void* p);                   // nullptr ok; note cudaFree syncs the device
void* malloc_host_pinned(size_t bytes);      // portable pinned memory; 0 -> nullptr
void free_host_pinned(void* p);
void memcpy_async(void* dst, const void* src, size_t bytes, void* stream);  // Default kind

}  // namespace hvdl::gpu
