// Every rank on this host: three contenders, all bitwise identical (in this order):
// the shared-memory pipeline writing its slots with ordinary stores, with non-temporal
// stores, and the ring, whose messages MPI moves with a single copy straight from the
// peer's memory (CMA) where the pipeline copies each byte twice. Which is fastest
// depends on where the vCPUs sit (path_tuner.h has the numbers), so allreduces of
// 1 MiB or more are timed and the fastest kept; rank 0 decides and announces each such
// call's way through the window, since all ranks must run the same algorithm. Smaller
// calls run the pipeline with the last store mode announced: the ring's per-step
// latency loses there. SHM_STREAM_IN_THRESHOLD / SHM_RING_THRESHOLD fix the choice by
// size instead.
#include "allreduce_paths.h"
#include "path_tuner.h"

namespace hvdl {
namespace {

class ShmChoice final : public PathChooser {
 public:
  ShmChoice(std::shared_ptr<ShmCollectives> shm, const ShmOptions& o)
      : shm_(std::move(shm)), opts_(o) {}

  int choose(const AllreducePlan& plan) override {
    const size_t bytes = plan.bytes();
    const int kind = kind_of(plan);
    if (!opts_.tuned()) {
      if (opts_.ring_threshold != ShmOptions::kAuto && opts_.ring_threshold != 0 &&
          bytes >= opts_.ring_threshold)
        return kRing;
      return opts_.fixed_stream(bytes) ? kShmStreamed : kShm;
    }
    if (!tuner_.timed(bytes)) return small_;
    ++calls_;
    int way;
    if (shm_->rank() == 0) {
      way = tuner_.choose(bytes, kind);
      shm_->announce(calls_, way);
    } else {
      way = shm_->await_announcement(calls_);
    }
    if (way != kRing) small_ = way;
    return way;
  }

  void record(int way, const AllreducePlan& plan, double seconds) override {
    if (shm_->rank() == 0 && opts_.tuned()) tuner_.record(way, plan.bytes(), seconds, kind_of(plan));
  }

 private:
  enum Way { kShm = 0, kShmStreamed = 1, kRing = 2 };
  // A batch is timed apart from a lone tensor: the ring runs once per tensor.
  static int kind_of(const AllreducePlan& plan) { return plan.spans.size() > 1; }

  std::shared_ptr<ShmCollectives> shm_;  // its window carries the announcements
  ShmOptions opts_;
  PathTuner tuner_{3};  // rank 0's
  uint64_t calls_ = 0;  // timed calls, numbered alike on every rank
  int small_ = kShm;
};

}  // namespace

std::unique_ptr<PathChooser> make_shm_choice(std::shared_ptr<ShmCollectives> shm,
                                             const ShmOptions& o) {
  return std::make_unique<ShmChoice>(std::move(shm), o);
}

}  // namespace hvdl
