// The flat ring when the set spans hosts but the hierarchical path does not apply (hosts
// with different numbers of ranks, or HIERARCHICAL_ALLREDUCE=0): the same ring as
// ring_path.cc, with its large blocks over direct TCP connections (tcp_transport.h).
// Over MPI's TCP path the link runs dry whenever the rank that should feed it naps
// between tests (measured on the simulated cluster, 2x1 at 1 Gbit/s: 0.555 of the link
// bound at 16-64 MiB over MPI); over TCP the kernel keeps it busy. Small buffers, whose
// blocks are under `small_bytes` (TCP_MIN_BYTES), stay on MPI, whose latency was lower
// there, as the hierarchical path's small blocks do. Same ring, same order of adds:
// the bits do not depend on which transport carried them.
#include "allreduce_path.h"

namespace hvdl {
namespace {

class CrossHostRingPath final : public AllreducePath {
 public:
  CrossHostRingPath(std::unique_ptr<Transport> tcp, Transport& small, size_t small_bytes)
      : tcp_(std::move(tcp)), small_(small), small_bytes_(small_bytes) {}
  const char* name() const override { return "ring"; }
  bool can_run(const AllreducePlan&) const override { return true; }
  void report(std::map<std::string, std::string>& out) const override {
    out["tcp_min_bytes"] = std::to_string(small_bytes_);
  }
  void run(AllreducePlan& plan) override {
    const size_t es = dtype_size(plan.dt), n = static_cast<size_t>(tcp_->size());
    for (const Span& s : plan.spans) {
      const bool small = s.count * es / n < small_bytes_;
      // Two ranks: the pair exchange, as the hierarchical path runs two hosts of one.
      pair_or_ring_allreduce_host(small ? small_ : *tcp_, *plan.red, scratch_,
                                  {s.in, s.out, s.count, plan.dt, plan.op, plan.prescale, plan.postscale},
                                  small ? plan.ring : over_tcp(plan.ring));
    }
  }

 private:
  std::unique_ptr<Transport> tcp_;  // wraps its own copy of the set's transport
  Transport& small_;                // the process set's: it outlives the paths
  size_t small_bytes_;
  HostBuffer scratch_;
};

}  // namespace

std::unique_ptr<AllreducePath> make_cross_host_ring_path(std::unique_ptr<Transport> tcp,
                                                         Transport& small, size_t small_bytes) {
  return std::make_unique<CrossHostRingPath>(std::move(tcp), small, small_bytes);
}

}  // namespace hvdl
