// Picks, while the job runs, the fastest of a few equivalent ways to run a collective,
// by timing them on the calls themselves.
//
// Why not decide once: on the 2-vCPU VM measured, the hypervisor moves the vCPUs
// during a run, and the winner moves with them (ResNet-50 gradient set, np=2):
//   - both vCPUs behind one L3: shared memory with ordinary stores 15 ms, with
//     non-temporal stores 22 ms, the ring over MPI 22 ms;
//   - vCPUs on different core complexes: ordinary stores 57 ms (each store must
//     first take the line back from the other complex), non-temporal 17 ms, the ring
//     (single-copy transfers) 11 ms.
// So each class of call (a power of two of bytes, since per-call costs make small
// calls dearer per byte and a model's gradients come in a few sizes that recur every
// step; and a `kind` the owner names, for calls whose ways cost differently, such
// as one tensor against a batch of them, where the ring runs once per tensor) times
// every option twice, keeps the fastest, and tries the others again later: after 16
// calls, then after twice as many each time the winner stays (up to 1024), since an
// exploration of a slow way costs as much as the call. And when the way in use gets
// 30% dearer than when the others were last timed, the others are timed again at
// once: the vCPUs moved, and the losers' costs from before may be wrong both ways
// (on that VM, a move took ordinary stores from 50 ms to 9 while the non-temporal
// stores in use went from 11 to 16, and without this the tuner stayed on them for
// up to 1024 calls). The owner decides whether all ranks must agree on a choice.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>

namespace hvdl {

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class PathTuner {
 public:
  static constexpr int kMaxOptions = 4;
  // Calls below `min_bytes` are too short to time: timed() is false for them.
  explicit PathTuner(int options, size_t min_bytes = 1u << 20)
      : options_(options), min_bytes_(min_bytes) {}

  bool timed(size_t bytes) const { return bytes >= min_bytes_; }

  int choose(size_t bytes, int kind = 0) {
    Class& k = classes_[class_of(bytes, kind)];
    const uint64_t i = k.calls++;
    if (i < 2 * static_cast<uint64_t>(options_)) return static_cast<int>(i % options_);
    const int best = k.best(options_);
    if (i == 2 * static_cast<uint64_t>(options_)) {
      k.explore_at = i + kFirstInterval;
      k.reference = k.cost[best];
    }
    if (i < k.explore_at) return best;
    const uint64_t e = i - k.explore_at;  // look again at the losers, one call each
    if (e + 2 == static_cast<uint64_t>(options_)) {  // the last of them: plan the next look
      k.interval = std::min<uint64_t>(2 * k.interval, kMaxInterval);
      k.explore_at = i + 1 + k.interval;
    }
    return (best + 1 + static_cast<int>(e)) % options_;
  }

  void record(int option, size_t bytes, double seconds, int kind = 0) {
    if (!timed(bytes)) return;
    Class& k = classes_[class_of(bytes, kind)];
    const int before = k.best(options_);
    double& cost = k.cost[option];
    const double c = seconds / static_cast<double>(bytes);
    // Blend: slow to trust one sample (a descheduled step can take 10x), but following
    // a drift within a few calls of the option in use, which is timed on every call. A
    // loser is timed only when explored, so a cost it had before the vCPUs moved would
    // take many explorations, thousands of calls apart, to blend away: a sample under
    // half its old cost replaces it, and a loser that became the cheapest takes over
    // at once. Nearer samples blend as usual, so noise between close options does not
    // flip the choice (each flip makes the losers' explorations frequent again).
    const bool moved = option != before && c < 0.5 * cost;
    cost = (cost == 0 || moved) ? c : cost + 0.3 * (c - cost);
    if (option != before) k.reference = k.cost[before];  // the others' costs are this fresh
    if (k.best(options_) != before) {  // things move: look often
      k.interval = kFirstInterval;
      k.explore_at = std::min(k.explore_at, k.calls + kFirstInterval);
    } else if (option == before && k.reference > 0 && cost > kDrift * k.reference) {
      k.interval = kFirstInterval;  // the one in use drifted: look at the others now
      k.explore_at = std::min(k.explore_at, k.calls);
      k.reference = cost;
    }
  }

 private:
  static constexpr uint64_t kFirstInterval = 16, kMaxInterval = 1024;
  static constexpr double kDrift = 1.3;
  static constexpr int kSizes = 8, kKinds = 2;
  struct Class {
    uint64_t calls = 0, explore_at = UINT64_MAX, interval = kFirstInterval;
    double cost[kMaxOptions] = {0, 0, 0, 0};  // seconds per byte; 0 = not measured
    double reference = 0;  // the best cost when the others were last timed
    int best(int options) const {
      int b = 0;
      for (int o = 1; o < options; ++o)
        if (cost[o] < cost[b]) b = o;
      return b;
    }
  };
  int class_of(size_t bytes, int kind) const {
    int k = 0;
    for (size_t b = bytes / min_bytes_; b > 1 && k < kSizes - 1; b >>= 1) ++k;
    return (kind % kKinds) * kSizes + k;
  }
  int options_;
  size_t min_bytes_;
  Class classes_[kSizes * kKinds];
};

}  // namespace hvdl
