// Where a group's tensors live. Ops copy, fill and combine data only through a Device
// (and the ExecContext filled from it), so one op's code serves host memory and GPUs:
//   CpuDevice  (cpu_device.cc)  memcpy, the CPU reducer, host fusion/scratch buffers and
//                               the process set's transport;
//   CudaDevice (cuda_device.cc) one engine stream per GPU, our kernels, device buffers,
//                               and NCCL or MPI through a staging/stream-synced transport.
// No CUDA types cross this header: events and streams are void*.
#pragma once
#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../collectives/allreduce_paths.h"
#include "../collectives/reducer.h"
#include "../common/buffer.h"
#include "../transport/device_collectives.h"
#include "../transport/transport.h"
#include "tensor_queue.h"

namespace hvdl {

struct CopyRegion {
  void* dst;
  const void* src;
  size_t bytes;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual int ordinal() const = 0;  // -1: host memory
  virtual std::string describe() const = 0;

  // Data plane for this device's memory, and the reducer ordered with it.
  virtual Transport& transport() = 0;
  virtual const Reducer& reducer() const = 0;
  virtual Buffer& fusion() = 0;   // persistent, one per process set and device
  virtual Buffer& scratch() = 0;  // the algorithms' receive buffer
  // A library that runs whole collectives on this memory (NCCL), or null: then ops run
  // the algorithms of collectives/ over transport().
  virtual DeviceCollectives* collectives() { return nullptr; }
  // The process set's allreduce paths on this memory, and the choice among them.
  virtual AllreducePaths& allreduce() = 0;

  // All asynchronous on a GPU, in order with the reducer and the transport.
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // Many copies at once (packing into / unpacking from the fusion buffer), each element
  // multiplied by `factor` on the way (1.0: plain bytes, dt ignored). No overlaps.
  virtual void copy_many(const std::vector<CopyRegion>& regions, DataType dt, double factor) = 0;
  virtual void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) = 0;

  // Around the execution of one group: `begin` makes the device's work wait for the
  // producers of the inputs; `end` returns once every result is in place, so the
  // handles may complete and the callers may reuse or free the tensors.
  virtual void begin(const std::vector<TensorEntry*>& entries) {}
  virtual void end() {}
};

// `host`: the process set's host paths (allreduce_setup.h); they outlive the device.
std::unique_ptr<Device> make_cpu_device(Transport& t, AllreducePaths& host);

// How GPU collectives run (the GPU_OPERATIONS and GPU_STAGING_SEGMENT_BYTES settings).
struct GpuOptions {
  std::string operations;                    // "NCCL", "MPI"; "" = NCCL where it works
  size_t staging_segment_bytes = 4u << 20;   // MPI without CUDA support: pinned pieces
};

// Collective over `t`'s ranks (each passes its own GPU): they agree on NCCL or MPI and
// set up NCCL. A rank that cannot use its GPU makes it throw on every rank.
// Throws std::runtime_error in a build without CUDA.
std::unique_ptr<Device> make_cuda_device(int ordinal, Transport& t, const GpuOptions& opts);

// The devices one process set has used, created on first use.
class DeviceSet {
 public:
  // `host`: the set's allreduce paths on host memory; they outlive the set.
  DeviceSet(Transport& t, GpuOptions gpu, AllreducePaths& host)
      : t_(t), gpu_(std::move(gpu)), host_(host) {}
  // -1: host. A GPU is set up on its first use, collectively (see make_cuda_device).
  Device& get(int ordinal);
  void clear() { gpus_.clear(); cpu_.reset(); }

 private:
  Transport& t_;
  GpuOptions gpu_;
  AllreducePaths& host_;
  std::unique_ptr<Device> cpu_;
  std::map<int, std::unique_ptr<Device>> gpus_;
};

// ---- GPU facts and stream ordering for the enqueue side (caller's threads) ----
bool cuda_built();
bool gpu_runtime_available();  // a driver and a device; false without CUDA
// An event recorded now on `stream` (a cudaStream_t of `device`): the engine's stream
// waits for it before reading the tensor. Destroyed with the last owner.
std::shared_ptr<void> record_ready_event(int device, void* stream);
// Fixes the rank's GPU in `slot` (EngineState::process_gpu, -1 while none) or throws
// std::invalid_argument when it differs.
void claim_process_gpu(std::atomic<int>& slot, int ordinal, const std::string& tensor_name);

}  // namespace hvdl
