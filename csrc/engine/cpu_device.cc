// Host memory: what the engine did before devices existed, behind the Device interface.
#include <cstring>

#include "../reduce/identity.h"
#include "../reduce/reduce.h"
#include "device.h"

namespace hvdl {
namespace {

class CpuDevice final : public Device {
 public:
  CpuDevice(Transport& t, AllreducePaths& paths) : t_(t), paths_(paths) {}
  int ordinal() const override { return -1; }
  std::string describe() const override { return "cpu"; }
  Transport& transport() override { return t_; }
  const Reducer& reducer() const override { return cpu_reducer(); }
  Buffer& fusion() override { return fusion_; }
  Buffer& scratch() override { return scratch_; }
  AllreducePaths& allreduce() override { return paths_; }

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
  AllreducePaths& paths_;
  HostBuffer fusion_, scratch_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(Transport& t, AllreducePaths& host) {
  return std::make_unique<CpuDevice>(t, host);
}

}  // namespace hvdl
