// Shared memory where the tensors lie (shm_zero_copy.cc), for tensors every rank
// allocated in its shared arena: none moves fewer bytes, so it goes first whenever the
// ranks agree it can. Whether all can is only known inside the call (the ranks exchange
// their spans' offsets): can_run() answers for the size, and the call declines on every
// rank alike when some rank's tensors are elsewhere.
#include "allreduce_path.h"

namespace hvdl {
namespace {

class ZeroCopyPath final : public AllreducePath {
 public:
  explicit ZeroCopyPath(std::shared_ptr<ShmCollectives> shm) : shm_(std::move(shm)) {}
  const char* name() const override { return "zero copy"; }
  // Below the size, asking (one exchange of offsets) would cost more than it saves.
  bool can_run(const AllreducePlan& plan) const override { return plan.bytes() >= kFrom; }
  bool takes_spans() const override { return true; }
  // Only this rank's answer: the call still declines where a peer's are elsewhere.
  bool reduces_where_they_lie(const void* in, const void* out, size_t bytes) const override {
    return bytes >= kFrom && shm_->in_own_arena(in, bytes) && shm_->in_own_arena(out, bytes);
  }
  void run(AllreducePlan& plan) override {
    plan.declined = !shm_->zero_copy_allreduce(*plan.red, plan.spans, plan.dt, plan.op,
                                               plan.prescale, plan.postscale);
  }

 private:
  static constexpr size_t kFrom = 64u << 10;
  std::shared_ptr<ShmCollectives> shm_;
};

}  // namespace

std::unique_ptr<AllreducePath> make_zero_copy_path(std::shared_ptr<ShmCollectives> shm) {
  return std::make_unique<ZeroCopyPath>(std::move(shm));
}

}  // namespace hvdl
