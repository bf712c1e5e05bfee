// Host memory: what the engine did before devices existed, behind the Device interface.
#include <atomic>
#include <cstring>
#include <stdexcept>

#include "../reduce/identity.h"
#include "../reduce/reduce.h"
#include "device.h"

namespace hvdl {
namespace {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(Transport& t) : t_(t) {}
  int ordinal() const override { return -1; }
  std::string describe() const override { return "cpu"; }
  Transport& transport() override { return t_; }
  const Reducer& reducer() const override { return cpu_reducer(); }
  Buffer& fusion() override { return fusion_; }
  Buffer& scratch() override { return scratch_; }

  void copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void copy_many(const std::vector<CopyRegion>& regions, DataType dt, double factor) override {
    for (const auto& r : regions) {
      copy(r.dst, r.src, r.bytes);
      if (factor != 1.0) scale_buffer(r.dst, r.bytes / dtype_size(dt), dt, factor);
    }
  }
  void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) override {
    hvdl::fill_identity(buf, count, dt, op);
  }

 private:
  Transport& t_;
  HostBuffer fusion_, scratch_;
};

std::atomic<int> g_process_gpu{-1};

}  // namespace

std::unique_ptr<Device> make_cpu_device(Transport& t) { return std::make_unique<CpuDevice>(t); }

Device& DeviceSet::get(int ordinal) {
  if (ordinal < 0) {
    if (!cpu_) cpu_ = make_cpu_device(t_);
    return *cpu_;
  }
  auto it = gpus_.find(ordinal);
  if (it == gpus_.end()) it = gpus_.emplace(ordinal, make_cuda_device(ordinal, t_)).first;
  return *it->second;
}

int process_gpu() { return g_process_gpu.load(); }

void claim_process_gpu(int ordinal, const std::string& tensor_name) {
  int expected = -1;
  if (g_process_gpu.compare_exchange_strong(expected, ordinal) || expected == ordinal) return;
  throw std::invalid_argument("horovodlite: '" + tensor_name + "' is on GPU " +
                              std::to_string(ordinal) + " but this process already uses GPU " +
                              std::to_string(expected) +
                              "; use one GPU per process (e.g. torch.cuda.set_device(local_rank()))");
}

}  // namespace hvdl
