#include "tensor_queue.h"

#include <algorithm>

#include <stdexcept>

namespace hvdl {

void TensorQueue::push(std::unique_ptr<TensorEntry> e, bool wake_worker, Clock::time_point now) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    const std::string& name = e->req.name;
    if (closed_) throw QueueClosed(closed_why_);
    if (table_.count(name))
      throw std::invalid_argument("horovodlite: a collective named '" + name +
                                  "' is already in flight on this rank; names must be unique "
                                  "until the previous one completes");
    // The first tensor whose window counts (a held one has none).
    const bool first = !e->held && fresh_.size() == held_fresh_;
    last_push_ = now;
    if (first) oldest_fresh_ = last_push_;
    if (e->held && held_fresh_++ == 0) oldest_held_ = now;
    fresh_.push_back(name);
    fresh_bytes_ += tensor_bytes(e->req.shape, e->req.dtype);
    table_[name] = std::move(e);
    // Only the first tensor of a batch (the worker then knows when its window closes)
    // and the one that makes the batch ready need the worker. Waking it for every
    // tensor in between costs a context switch each where the caller shares its
    // core: 161 of them per ResNet-50 step.
    // (Evaluated as at the batch's start: ready now by bytes or a flush, not by time.)
    wake = first || ready_locked(oldest_fresh_, window_hint_, bytes_hint_);
  }
  if (wake && wake_worker) this->wake();
}

void TensorQueue::wake() {
  cv_.notify_all();
  if (waker_) waker_();
}

bool TensorQueue::ready_locked(Clock::time_point now, std::chrono::nanoseconds window,
                               size_t bytes) {
  if (shutdown_) return true;
  if (fresh_.empty()) return false;
  return flush_ || fresh_bytes_ >= bytes ||
         (fresh_.size() > held_fresh_ && now - oldest_fresh_ >= window) || held_expired(now);
}

bool TensorQueue::held_expired(Clock::time_point now) const {
  return held_fresh_ > 0 && now - oldest_held_ >= kHeldWindow;
}

Clock::time_point TensorQueue::next_window_locked(std::chrono::nanoseconds window) const {
  auto at = Clock::time_point::max();
  if (fresh_.size() > held_fresh_) at = oldest_fresh_ + window;
  if (held_fresh_ > 0) at = std::min(at, oldest_held_ + kHeldWindow);
  return at;
}

bool TensorQueue::wait_for_work(std::chrono::nanoseconds timeout,
                                std::chrono::nanoseconds window, size_t bytes) {
  std::unique_lock<std::mutex> l(mu_);
  window_hint_ = window, bytes_hint_ = bytes;
  const auto until = Clock::now() + timeout;
  for (;;) {
    const auto now = Clock::now();
    if (ready_locked(now, window, bytes)) return true;
    if (now >= until) return false;
    // Fresh work held back for batching wakes us when its window closes: looked at
    // after every wake-up, since the push that starts a batch comes while we sleep
    // (an idle worker sleeps long).
    const auto wake_at = std::min(until, next_window_locked(window));
    cv_.wait_until(l, wake_at);
  }
}

Clock::time_point TensorQueue::ready_time(std::chrono::nanoseconds window, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  window_hint_ = window, bytes_hint_ = bytes;
  if (ready_locked(oldest_fresh_, window, bytes)) return Clock::time_point::min();
  return next_window_locked(window);
}

bool TensorQueue::fresh_within(size_t bytes, size_t lone_bytes) {
  std::lock_guard<std::mutex> l(mu_);
  return !shutdown_ && !fresh_.empty() &&
         fresh_bytes_ <= (fresh_.size() == 1 ? std::max(bytes, lone_bytes) : bytes);
}

bool TensorQueue::has_fresh_ready(std::chrono::nanoseconds window, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  return ready_locked(Clock::now(), window, bytes);
}

std::vector<Request> TensorQueue::take_fresh(bool* arriving, Clock::time_point now) {
  std::lock_guard<std::mutex> l(mu_);
  if (arriving) *arriving = !flush_ && !fresh_.empty() && now - last_push_ < kBurstGap;
  // Held entries go with a round only when they are what made it ready (a flush, their
  // bytes, their window, a shutdown). A round for something else - a peer's, one of the
  // controller's deadlines, an entry not held - leaves them: put forward, they would be
  // reduced during backward as soon as every peer put them forward too.
  const bool release_held =
      held_fresh_ == 0 || flush_ || shutdown_ || fresh_bytes_ >= bytes_hint_ || held_expired(now);
  std::vector<Request> out;
  out.reserve(fresh_.size());
  // Those left behind move to the front of fresh_, in place (fresh_ keeps its capacity:
  // no allocation per round).
  size_t kept = 0, kept_bytes = 0;
  for (auto& n : fresh_) {
    TensorEntry& e = *table_.at(n);
    if (e.held && !release_held) {
      kept_bytes += tensor_bytes(e.req.shape, e.req.dtype);
      if (&fresh_[kept] != &n) fresh_[kept] = std::move(n);
      ++kept;
      continue;
    }
    e.put_forward = true;
    out.push_back(e.req);
  }
  fresh_.resize(kept);
  fresh_bytes_ = kept_bytes;
  held_fresh_ = kept;
  flush_ = false;
  return out;
}

std::unique_ptr<TensorEntry> TensorQueue::take(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = table_.find(name);
  if (it == table_.end() || !it->second->put_forward) return nullptr;
  auto e = std::move(it->second);
  table_.erase(it);
  return e;
}

const TensorEntry* TensorQueue::find(const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = table_.find(name);
  return it == table_.end() ? nullptr : it->second.get();
}

bool TensorQueue::has_in_flight() {
  std::lock_guard<std::mutex> l(mu_);
  return table_.size() > held_fresh_;
}

bool TensorQueue::wants_round(std::chrono::nanoseconds window, size_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  // Every entry is fresh or put forward.
  return table_.size() > fresh_.size() || ready_locked(Clock::now(), window, bytes);
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::take_all() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::unique_ptr<TensorEntry>> out;
  for (auto& kv : table_) out.push_back(std::move(kv.second));
  table_.clear();
  fresh_.clear();
  fresh_bytes_ = 0;
  held_fresh_ = 0;
  return out;
}

std::vector<std::unique_ptr<TensorEntry>> TensorQueue::close(const std::string& why) {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
    closed_why_ = why;
  }
  return take_all();
}

void TensorQueue::request_flush(bool wake_worker) {
  {
    std::lock_guard<std::mutex> l(mu_);
    // For the batch there is now: a flush left standing would make the first tensor
    // of the next batch ready on its own and send it alone.
    if (!fresh_.empty()) flush_ = true;
  }
  if (wake_worker) wake();
}

void TensorQueue::request_shutdown() {
  {
    std::lock_guard<std::mutex> l(mu_);
    shutdown_ = true;
  }
  wake();
}

bool TensorQueue::shutdown_requested() {
  std::lock_guard<std::mutex> l(mu_);
  return shutdown_;
}

std::vector<std::string> TensorQueue::in_flight_names() {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<std::string> names;
  for (auto& kv : table_) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace hvdl
