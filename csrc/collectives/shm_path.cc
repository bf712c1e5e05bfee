// The shared-memory pipeline (shm_allreduce.cc) as a path: one object writes the
// staging slots with ordinary stores, another with non-temporal ones (streaming), over
// the same window. Which is faster depends on where the ranks' cores sit (shm_choice.cc
// times them). Many spans reduce as one buffer, where they lie.
#include "allreduce_path.h"

namespace hvdl {
namespace {

class ShmPath final : public AllreducePath {
 public:
  ShmPath(std::shared_ptr<ShmCollectives> shm, bool stream) : shm_(std::move(shm)), stream_(stream) {}
  const char* name() const override { return stream_ ? "shm streaming" : "shm"; }
  bool can_run(const AllreducePlan&) const override { return true; }
  bool takes_spans() const override { return true; }
  void run(AllreducePlan& plan) override {
    shm_->allreduce(*plan.red, plan.spans, plan.dt, plan.op, plan.prescale, plan.postscale, stream_);
  }

 private:
  std::shared_ptr<ShmCollectives> shm_;
  bool stream_;
};

}  // namespace

std::unique_ptr<AllreducePath> make_shm_path(std::shared_ptr<ShmCollectives> shm, bool stream) {
  return std::make_unique<ShmPath>(std::move(shm), stream);
}

}  // namespace hvdl
