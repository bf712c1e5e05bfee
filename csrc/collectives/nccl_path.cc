// NCCL on GPU memory: the whole allreduce in one library call queued on the device's
// stream, between the reducer's scaling kernels on the same stream. In place (the op
// copies the input into the output first); NCCL has no 16-bit integers, so those
// plans go to the device ring.
#include "allreduce_path.h"

namespace hvdl {
namespace {

class NcclPath final : public AllreducePath {
 public:
  explicit NcclPath(DeviceCollectives& lib) : lib_(lib) {}
  const char* name() const override { return "nccl"; }
  bool can_run(const AllreducePlan& plan) const override {
    return lib_.reduces(plan.dt) && plan.in_place();
  }
  bool in_place_only() const override { return true; }
  void run(AllreducePlan& plan) override {
    for (const Span& s : plan.spans) {
      plan.red->scale(s.out, s.count, plan.dt, plan.prescale);
      lib_.allreduce(s.out, s.out, s.count, plan.dt, plan.op);
      plan.red->scale(s.out, s.count, plan.dt, plan.postscale);
    }
  }

 private:
  DeviceCollectives& lib_;  // the device's: it outlives the paths
};

}  // namespace

std::unique_ptr<AllreducePath> make_nccl_path(DeviceCollectives& lib) {
  return std::make_unique<NcclPath>(lib);
}

}  // namespace hvdl
