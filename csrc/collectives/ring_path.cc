// The flat ring: reduce-scatter + allgather over the set's transport (ring_allreduce.h).
// Where no other path applies, and one of the ways the shared-memory choice times
// (shm_choice.cc): MPI moves its messages with a single copy from the peer's memory.
// A plan of many spans runs one ring per span (each reduced alone, as a lone tensor
// would be); the flat ring alone never gets one, since it does not take spans.
#include "allreduce_path.h"

namespace hvdl {
namespace {

class RingPath final : public AllreducePath {
 public:
  explicit RingPath(Transport& t) : t_(t) {}
  const char* name() const override { return "ring"; }
  bool can_run(const AllreducePlan&) const override { return true; }
  void run(AllreducePlan& plan) override {
    for (const Span& s : plan.spans)
      ring_allreduce_host(t_, *plan.red, scratch_,
                          {s.in, s.out, s.count, plan.dt, plan.op, plan.prescale, plan.postscale},
                          plan.ring);
  }

 private:
  Transport& t_;  // the process set's: it outlives the paths
  HostBuffer scratch_;
};

}  // namespace

std::unique_ptr<AllreducePath> make_ring_path(Transport& t) { return std::make_unique<RingPath>(t); }

}  // namespace hvdl
