// Thin wrappers over the CUDA runtime so the engine's host-only code can order work
// on streams and manage memory without including CUDA headers.
#include <cuda_runtime.h>
#include "gpu_kernels.h"
#include "internal/check.h"

namespace hvdl::gpu {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// Release paths run from destructors, possibly during interpreter/process teardown
// after the runtime has already unloaded; throwing there would abort the process.
void check_release(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  if (err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed) {
    (void)cudaGetLastError();
    return;
  }
  detail::throw_cuda_error(err, call, file, line);
}
#define HVDL_CUDA_RELEASE(call) check_release((call), #call, __FILE__, __LINE__)

// Restores the caller's device even if the guarded code throws.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    HVDL_CUDA_CHECK(cudaGetDevice(&saved_));
    if (device != saved_) HVDL_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { (void)cudaSetDevice(saved_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = 0;
};

}  // namespace

bool runtime_available() {
  // Cached: without a driver the answer cannot change, and with one, re-probing on
  // every call would only cost time.
  static const bool available = [] {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();  // don't leave the failure for the next caller to find
      return false;
    }
    return n > 0;
  }();
  return available;
}

void* event_create() {
  cudaEvent_t ev = nullptr;
  // No timing: cheaper to record and query, and ordering is all the engine uses.
  HVDL_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  return ev;
}

void event_destroy(void* ev) {
  if (ev != nullptr) HVDL_CUDA_RELEASE(cudaEventDestroy(as_event(ev)));
}

void event_record(void* ev, void* stream) {
  HVDL_CUDA_CHECK(cudaEventRecord(as_event(ev), as_stream(stream)));
}

void stream_wait_event(void* stream, void* ev) {
  HVDL_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), as_event(ev), 0));
}

void event_synchronize(void* ev) { HVDL_CUDA_CHECK(cudaEventSynchronize(as_event(ev))); }

bool event_query(void* ev) {
  const cudaError_t err = cudaEventQuery(as_event(ev));
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) {
    // "Not ready" is also recorded as the thread's last error; clear it so the next
    // launch check does not mistake it for a launch failure.
    (void)cudaGetLastError();
    return false;
  }
  detail::throw_cuda_error(err, "cudaEventQuery(ev)", __FILE__, __LINE__);
}

void* stream_create(int device) {
  DeviceGuard guard(device);
  int least = 0, greatest = 0;
  HVDL_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t s = nullptr;
  HVDL_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest));
  return s;
}

void stream_destroy(void* stream) {
  if (stream != nullptr) HVDL_CUDA_RELEASE(cudaStreamDestroy(as_stream(stream)));
}

void stream_synchronize(void* stream) {
  HVDL_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
}

int current_device() {
  int d = 0;
  HVDL_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) { HVDL_CUDA_CHECK(cudaSetDevice(device)); }

int pointer_device(const void* p) {
  if (p == nullptr) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    (void)cudaGetLastError();  // a pointer CUDA never saw: host memory as far as we care
    return -1;
  }
  // Managed memory counts as device memory: kernels and NCCL may use it directly.
  return (attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged) ? attr.device
                                                                                    : -1;
}

std::string pci_bus_id(int device) {
  char buf[32] = {0};
  HVDL_CUDA_CHECK(cudaDeviceGetPCIBusId(buf, static_cast<int>(sizeof(buf)), device));
  return buf;
}

void* malloc_device(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  HVDL_CUDA_CHECK(cudaMalloc(&p, bytes));
  return p;
}

void free_device(void* p) {
  if (p != nullptr) HVDL_CUDA_RELEASE(cudaFree(p));
}

void* malloc_host_pinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  // Portable: usable as pinned memory from every device, not just the current one.
  HVDL_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void free_host_pinned(void* p) {
  if (p != nullptr) HVDL_CUDA_RELEASE(cudaFreeHost(p));
}

void memcpy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  HVDL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, as_stream(stream)));
}

}  // namespace hvdl::gpu
