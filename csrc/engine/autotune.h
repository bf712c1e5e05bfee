// Online tuning of the engine's knobs (HOROVODLITE_AUTOTUNE=1), run by rank 0 of the
// global process set. It measures the bytes the engine reduces per second of wall
// time in windows of whole training steps (a step ends when the first tensor of the
// window comes round again: names repeat every iteration), sweeps one
// knob at a time over a short list of values (coordinate descent: fusion threshold,
// then cycle time, then ring segment size), re-measures the two best settings
// against each other to guard against a lucky sample, and settles on the winner.
// Knobs the user set in the environment are never touched. New values travel to
// every rank through the negotiation broadcast (see parameters.h), so all ranks
// switch at the same round. HOROVODLITE_AUTOTUNE_LOG gets one CSV row per sample.
// Other process sets keep the values they were created with.
#pragma once
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "message.h"
#include "parameters.h"
#include "tensor_queue.h"

namespace hvdl {

// The AUTOTUNE_* settings, and which knobs the user fixed (those are never changed).
struct AutotuneOptions {
  int warmup_samples = 1, steps_per_sample = 5, samples_per_setting = 3, confirm_rounds = 2;
  double min_sample_ms = 20;
  std::string log_path;  // CSV; empty: none
  bool fusion_fixed = false, cycle_fixed = false, segment_fixed = false;
};

class Autotuner {
 public:
  // `start`: the values in effect now.
  Autotuner(const Tunables& start, const AutotuneOptions& opts);
  ~Autotuner();

  // Values to publish in the next round, or null.
  const Tunables* proposal() const { return has_proposal_ ? &proposal_ : nullptr; }
  // Published values took effect (on every rank) at `now`.
  void applied(const Tunables& t, Clock::time_point now);
  // After each round: what it executed and how many bytes that moved.
  void record(const std::vector<Response>& executed, uint64_t bytes, Clock::time_point now);

 private:
  struct Knob {
    const char* name;
    std::vector<double> values;
    bool fixed;
  };
  using Key = std::tuple<uint64_t, double, uint64_t>;
  static Key key_of(const Tunables& t) { return {t.fusion_threshold, t.cycle_time_ms, t.segment_bytes}; }
  static double get(const Tunables& t, size_t knob);
  static void set(Tunables& t, size_t knob, double v);
  double median_score(const Key& k) const;
  void propose(const Tunables& t);
  void next_candidate();
  void finish_knob();
  void start_confirm();
  void settle();
  void log(const char* event, const Tunables& t, double bytes, double seconds, double score);

  std::vector<Knob> knobs_;
  Tunables current_, proposal_, best_;
  bool has_proposal_ = false, measuring_ = false;
  size_t knob_ = 0, cand_ = 0;
  std::vector<Tunables> confirm_;  // settings re-measured in turn at the end
  size_t confirm_pos_ = 0;
  std::map<Key, std::vector<double>> scores_, confirm_scores_;
  // The window being measured.
  bool window_open_ = false;
  std::string anchor_;  // a tensor that comes round once per step; empty: none yet
  std::unordered_set<std::string> recent_;  // names executed lately
  Clock::time_point window_start_, t0_;
  uint64_t window_bytes_ = 0;
  int window_steps_ = 0, warmup_left_ = 0, samples_left_ = 0;
  // Settings (HOROVODLITE_AUTOTUNE_*).
  int warmup_samples_, steps_per_sample_, samples_per_setting_, confirm_rounds_;
  double min_sample_s_, max_sample_s_;
  std::FILE* log_ = nullptr;
};

}  // namespace hvdl
