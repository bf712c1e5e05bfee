#include "autotune.h"

#include <algorithm>

#include "../common/logging.h"

namespace hvdl {

namespace {
constexpr double kMiB = 1024.0 * 1024.0;
enum KnobIndex : size_t { kFusion = 0, kCycle = 1, kSegment = 2 };

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
}  // namespace

Autotuner::Autotuner(const Tunables& start, const AutotuneOptions& o) : current_(start), best_(start) {
  warmup_samples_ = o.warmup_samples;
  steps_per_sample_ = std::max(1, o.steps_per_sample);
  samples_per_setting_ = std::max(1, o.samples_per_setting);
  confirm_rounds_ = std::max(0, o.confirm_rounds);
  min_sample_s_ = o.min_sample_ms / 1000.0;
  max_sample_s_ = std::max(2.0, 50 * min_sample_s_);
  // Candidate values: the range where each knob changes anything on CPU transports.
  knobs_ = {
      {"fusion_threshold", {0, 1 * kMiB, 4 * kMiB, 16 * kMiB, 32 * kMiB, 64 * kMiB, 128 * kMiB},
       o.fusion_fixed},
      {"cycle_time_ms", {0.5, 1, 2, 5}, o.cycle_fixed},
      {"ring_segment_bytes", {256 * 1024, 1 * kMiB, 4 * kMiB}, o.segment_fixed},
  };
  const std::string& path = o.log_path;
  if (!path.empty()) {
    log_ = std::fopen(path.c_str(), "w");
    if (!log_)
      HVDL_LOG(WARNING) << "autotune: cannot write HOROVODLITE_AUTOTUNE_LOG='" << path << "'";
    else
      std::fputs("elapsed_s,event,fusion_threshold,cycle_time_ms,ring_segment_bytes,bytes,seconds,"
                 "bytes_per_second\n", log_);
  }
  t0_ = Clock::now();
  knob_ = 0;
  while (knob_ < knobs_.size() && knobs_[knob_].fixed) ++knob_;
  if (knob_ == knobs_.size()) {
    HVDL_LOG(INFO) << "autotune: every knob was set by the user; nothing to tune";
    settle();
    return;
  }
  cand_ = static_cast<size_t>(-1);
  next_candidate();
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

double Autotuner::get(const Tunables& t, size_t knob) {
  switch (knob) {
    case kFusion: return static_cast<double>(t.fusion_threshold);
    case kCycle: return t.cycle_time_ms;
    default: return static_cast<double>(t.segment_bytes);
  }
}

void Autotuner::set(Tunables& t, size_t knob, double v) {
  switch (knob) {
    case kFusion: t.fusion_threshold = static_cast<uint64_t>(v); break;
    case kCycle: t.cycle_time_ms = v; break;
    default: t.segment_bytes = static_cast<uint64_t>(v); break;
  }
}

double Autotuner::median_score(const Key& k) const {
  auto it = scores_.find(k);
  return it == scores_.end() ? 0 : median(it->second);
}

void Autotuner::propose(const Tunables& t) {
  proposal_ = t;
  has_proposal_ = true;
  measuring_ = false;
}

void Autotuner::applied(const Tunables& t, Clock::time_point now) {
  current_ = t;
  if (!has_proposal_ || !t.same_values(proposal_)) return;
  has_proposal_ = false;
  if (t.final) return;
  measuring_ = true;
  window_open_ = false;
  anchor_.clear();
  warmup_left_ = warmup_samples_;
  samples_left_ = samples_per_setting_;
}

void Autotuner::record(const std::vector<Response>& executed, uint64_t bytes, Clock::time_point now) {
  if (!measuring_) return;
  bool anchor_seen = false, new_anchor = false, work = false;
  for (auto& r : executed) {
    if (r.name.empty()) continue;
    work = true;
    // Only a name seen before can be the anchor: it is known to come round again
    // (unnamed collectives get a fresh name every call).
    if (anchor_.empty() && recent_.count(r.name)) {
      anchor_ = r.name;
      new_anchor = true;
    } else if (!anchor_.empty() && r.name == anchor_) {
      anchor_seen = true;
    }
    if (recent_.size() > 100000) recent_.clear();
    recent_.insert(r.name);
  }
  if (!window_open_ || new_anchor) {  // a window starts after the first round with work
    if (!work) return;
    window_open_ = true;
    window_start_ = now;
    window_bytes_ = 0;
    window_steps_ = 0;
    return;
  }
  window_bytes_ += bytes;
  if (anchor_seen) window_steps_++;
  const double elapsed = seconds(now - window_start_);
  // Windows end where the anchor comes round, so they hold whole steps.
  const bool full = anchor_seen && window_steps_ >= steps_per_sample_ && elapsed >= min_sample_s_;
  // Names that never repeat (unnamed collectives) end windows by time instead.
  const bool timed_out = elapsed >= max_sample_s_ && window_bytes_ > 0;
  if (!full && !timed_out) return;
  const double score = window_bytes_ / elapsed;
  if (warmup_left_ > 0) {
    warmup_left_--;
    log("warmup", current_, window_bytes_, elapsed, score);
  } else {
    Key k = key_of(current_);
    (confirm_.empty() ? scores_ : confirm_scores_)[k].push_back(score);
    log(confirm_.empty() ? "sample" : "confirm", current_, window_bytes_, elapsed, score);
    samples_left_--;
  }
  window_start_ = now;
  window_bytes_ = 0;
  window_steps_ = 0;
  if (!full) anchor_.clear();
  if (samples_left_ > 0) return;
  measuring_ = false;
  if (!confirm_.empty()) {
    if (++confirm_pos_ < confirm_.size()) propose(confirm_[confirm_pos_]);
    else settle();
  } else {
    next_candidate();
  }
}

// The next value of the knob being swept; settings measured before are not repeated.
void Autotuner::next_candidate() {
  const Knob& k = knobs_[knob_];
  while (++cand_ < k.values.size()) {
    Tunables t = best_;
    set(t, knob_, k.values[cand_]);
    auto it = scores_.find(key_of(t));
    if (it != scores_.end() && static_cast<int>(it->second.size()) >= samples_per_setting_) continue;
    propose(t);
    return;
  }
  finish_knob();
}

void Autotuner::finish_knob() {
  const Knob& k = knobs_[knob_];
  double best_score = -1;
  Tunables winner = best_;
  for (double v : k.values) {
    Tunables t = best_;
    set(t, knob_, v);
    double s = median_score(key_of(t));
    if (s > best_score) {
      best_score = s;
      winner = t;
    }
  }
  best_ = winner;
  log("chosen", best_, 0, 0, best_score);
  HVDL_LOG(INFO) << "autotune: " << k.name << " = " << get(best_, knob_) << " ("
                 << best_score / 1e9 << " GB/s)";
  do ++knob_;
  while (knob_ < knobs_.size() && knobs_[knob_].fixed);
  if (knob_ < knobs_.size()) {
    cand_ = static_cast<size_t>(-1);
    next_candidate();
  } else {
    start_confirm();
  }
}

// Single samples can be lucky on a busy machine: measure the two best settings
// again, alternating, and let only these interleaved samples decide.
void Autotuner::start_confirm() {
  std::vector<std::pair<double, Key>> ranked;
  for (auto& kv : scores_) ranked.push_back({median(kv.second), kv.first});
  std::sort(ranked.begin(), ranked.end(), [](auto& a, auto& b) { return a.first > b.first; });
  if (ranked.size() < 2 || confirm_rounds_ == 0) {
    settle();
    return;
  }
  auto to_tunables = [](const Key& k) {
    Tunables t;
    t.fusion_threshold = std::get<0>(k);
    t.cycle_time_ms = std::get<1>(k);
    t.segment_bytes = std::get<2>(k);
    return t;
  };
  Tunables a = to_tunables(ranked[0].second), b = to_tunables(ranked[1].second);
  for (int i = 0; i < confirm_rounds_; ++i) {
    confirm_.push_back(i % 2 ? b : a);
    confirm_.push_back(i % 2 ? a : b);
  }
  confirm_pos_ = 0;
  propose(confirm_[0]);
}

void Autotuner::settle() {
  if (!confirm_.empty()) {
    double best_score = -1;
    for (auto& kv : confirm_scores_) {
      double s = median(kv.second);
      if (s > best_score) {
        best_score = s;
        best_.fusion_threshold = std::get<0>(kv.first);
        best_.cycle_time_ms = std::get<1>(kv.first);
        best_.segment_bytes = std::get<2>(kv.first);
      }
    }
  }
  best_.final = 1;
  auto it = confirm_scores_.find(key_of(best_));
  double score = it != confirm_scores_.end() ? median(it->second) : median_score(key_of(best_));
  log("final", best_, 0, 0, score);
  HVDL_LOG(INFO) << "autotune: settled on fusion_threshold=" << best_.fusion_threshold
                 << " cycle_time_ms=" << best_.cycle_time_ms
                 << " ring_segment_bytes=" << best_.segment_bytes;
  propose(best_);
}

void Autotuner::log(const char* event, const Tunables& t, double bytes, double secs, double score) {
  if (!log_) return;
  std::fprintf(log_, "%.6f,%s,%llu,%g,%llu,%.0f,%.6f,%.1f\n", seconds(Clock::now() - t0_), event,
               static_cast<unsigned long long>(t.fusion_threshold), t.cycle_time_ms,
               static_cast<unsigned long long>(t.segment_bytes), bytes, secs, score);
  std::fflush(log_);
}

}  // namespace hvdl
