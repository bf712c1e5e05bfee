// Several hosts with the same number of ranks each: shared memory inside each host and
// a ring across hosts (hierarchical_allreduce.cc), overlapped chunk by chunk for large
// buffers (hierarchical_pipeline.h). Many tensors are packed into one buffer by the op.
#include <algorithm>
#include <chrono>

#include "allreduce_path.h"
#include "hierarchical_allreduce.h"
#include "hierarchical_pipeline.h"
#include "path_tuner.h"
#include "phase_observer.h"

namespace hvdl {
namespace {

class HierarchicalPath final : public AllreducePath {
 public:
  HierarchicalPath(std::unique_ptr<ShmCollectives> local, std::unique_ptr<Transport> cross,
                   const ShmOptions& o, bool cross_is_tcp, Transport* cross_small, size_t small_bytes)
      : local_(std::move(local)),
        cross_(std::move(cross)),
        opts_(o),
        cross_is_tcp_(cross_is_tcp),
        cross_small_(cross_small),
        small_bytes_(small_bytes) {}
  const char* name() const override { return "hierarchical"; }
  bool can_run(const AllreducePlan&) const override { return true; }
  // The small blocks' threshold only where they have another way across (over TCP).
  void report(std::map<std::string, std::string>& out) const override {
    if (cross_small_) out["tcp_min_bytes"] = std::to_string(small_bytes_);
  }

  void run(AllreducePlan& plan) override {
    for (const Span& s : plan.spans)
      run_one({s.in, s.out, s.count, plan.dt, plan.op, plan.prescale, plan.postscale}, *plan.red,
              plan.ring);
  }

 private:
  void run_one(const AllreduceArgs& a, const Reducer& red, const RingOptions& ring) {
    // Each rank picks its own store mode (no result depends on it), by timing, and
    // like the shared-memory choice keeps the last timed choice for calls too short to
    // time.
    const size_t bytes = a.count * dtype_size(a.dt);
    const bool tuned = opts_.stream_in_threshold == ShmOptions::kAuto;
    const bool timed = tuned && stream_.timed(bytes);
    bool stream = tuned ? small_stream_ : opts_.fixed_stream(bytes);
    if (timed) small_stream_ = stream = stream_.choose(bytes) == 1;
    const auto t0 = std::chrono::steady_clock::now();
    const RingOptions cross_ring = cross_is_tcp_ ? over_tcp(ring) : ring;
    if (local_ && HierarchicalPipeline::chunks_for(bytes) > 1) {
      if (!pipeline_) pipeline_ = std::make_unique<HierarchicalPipeline>(*local_, *cross_);
      PhaseScope p(ring.phases, "HIERARCHICAL_PIPELINE");
      pipeline_->run(red, a, stream, cross_ring);
    } else {
      HierarchicalOptions h;
      h.local = local_.get();
      h.cross = cross_.get();
      h.cross_small = cross_small_;
      h.small_bytes = small_bytes_;
      h.scratch = &scratch_;
      h.stream = stream;
      h.ring = cross_ring;
      hierarchical_allreduce(h, red, a);
    }
    if (timed) stream_.record(stream, bytes, seconds_since(t0));
  }

  std::unique_ptr<ShmCollectives> local_;  // null when this rank is alone on its host
  std::unique_ptr<Transport> cross_;
  std::unique_ptr<HierarchicalPipeline> pipeline_;  // after local_, cross_: stopped before them
  HostBuffer scratch_;
  ShmOptions opts_;
  PathTuner stream_{2};  // [ordinary, non-temporal] stores in the local passes
  bool small_stream_ = false;
  bool cross_is_tcp_ = false;
  Transport* cross_small_;  // the transport cross_ wraps, or null
  size_t small_bytes_;
};

}  // namespace

std::unique_ptr<AllreducePath> make_hierarchical_path(std::unique_ptr<ShmCollectives> local,
                                                      std::unique_ptr<Transport> cross,
                                                      const ShmOptions& o, bool cross_is_tcp,
                                                      Transport* cross_small, size_t small_bytes) {
  return std::make_unique<HierarchicalPath>(std::move(local), std::move(cross), o, cross_is_tcp,
                                            cross_small, small_bytes);
}

}  // namespace hvdl
