// The ring on GPU memory: where NCCL is not used (HOROVODLITE_GPU_OPERATIONS=MPI, no
// NCCL, a dtype it cannot reduce). The transport stages each segment through pinned
// host memory, or hands device pointers to a CUDA-aware MPI, in order with the device's
// stream, as the reducer's kernels are (engine/cuda_device.cc); so the ring itself is
// the host one, run in place (the op copies the input into the output first).
#include "allreduce_path.h"

namespace hvdl {
namespace {

class DeviceRingPath final : public AllreducePath {
 public:
  DeviceRingPath(Transport& t, Buffer& scratch) : t_(t), scratch_(scratch) {}
  const char* name() const override { return "device ring"; }
  bool can_run(const AllreducePlan& plan) const override { return plan.in_place(); }
  bool in_place_only() const override { return true; }
  void run(AllreducePlan& plan) override {
    for (const Span& s : plan.spans)  // in place: the prescale is applied in the output
      ring_allreduce(t_, *plan.red, scratch_,
                     {s.out, s.out, s.count, plan.dt, plan.op, plan.prescale, plan.postscale},
                     plan.ring);
  }

 private:
  Transport& t_;     // the device's: it outlives the paths
  Buffer& scratch_;  // device memory
};

}  // namespace

std::unique_ptr<AllreducePath> make_device_ring_path(Transport& t, Buffer& scratch) {
  return std::make_unique<DeviceRingPath>(t, scratch);
}

}  // namespace hvdl
