#include "peer_health.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "../common/logging.h"

namespace hvdl {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
thread_local std::atomic<int64_t>* tl_beat = nullptr;
}  // namespace

// Process-wide, not the engine's: (1) it follows MPI, which is one world per process
// whatever the engine does (a lost member stays lost for MPI_Finalize and for any
// later hvd.init(): ever_failed() outlives reset() and the engine); (2) those who
// declare a failure hold no engine: MPI's error returns and ULFM revokes
// (mpi_failures.cc), the heartbeat monitor and pidfd watchers, a shared-memory or TCP
// wait deep inside a collective, and the failure hooks it runs (revoke_all) are plain
// functions; (3) every transport of the process (each process set's, split ones,
// direct TCP) must see a failure the moment any of them declares it.
PeerHealth& PeerHealth::get() {
  static PeerHealth* h = new PeerHealth();  // never destroyed: threads may outlive statics
  return *h;
}

void PeerHealth::reset(int my_rank, std::vector<std::string> hosts, std::vector<int> pids,
                       double timeout_s) {
  std::lock_guard<std::mutex> l(mu_);
  my_rank_ = my_rank;
  hosts_ = std::move(hosts);
  pids_ = std::move(pids);
  pids_.resize(hosts_.size(), 0);
  why_.assign(hosts_.size(), "");
  order_.assign(hosts_.size(), 0);
  departed_.assign(hosts_.size(), 0);
  reason_.assign(hosts_.size(), "");
  declared_ = 0;
  unknown_why_.clear();
  first_.clear();
  hooks_.clear();
  timeout_s_ = timeout_s;
  any_.store(false, std::memory_order_release);
}

std::string PeerHealth::describe(int rank) const {
  if (rank < 0 || rank >= static_cast<int>(hosts_.size())) return "a rank";
  return "rank " + std::to_string(rank) + " (host " + hosts_[rank] + ", pid " +
         std::to_string(pids_[rank]) + ")";
}

void PeerHealth::declare(int rank, const std::string& why) {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> l(mu_);
    // A rank that said farewell first ended its script: however its end was seen
    // (a pidfd, silence), it left; the others' waits fail on it all the same.
    const bool left = rank >= 0 && rank < static_cast<int>(departed_.size()) && departed_[rank];
    const std::string what =
        left ? "left (its script ended and it said farewell; then " + why + ")" : "failed: " + why;
    std::string msg = "horovodlite: " + describe(rank) + " " + what;
    // Visible to check() before the lock is released: a thread whose own declaration
    // of the same rank returns here at once must find the failure when it checks.
    if (rank >= 0 && rank < static_cast<int>(why_.size())) {
      if (!why_[rank].empty()) return;
      why_[rank] = msg;
      order_[rank] = ++declared_;
      reason_[rank] = why;
    } else {
      if (!unknown_why_.empty()) return;
      unknown_why_ = msg;
    }
    any_.store(true, std::memory_order_release);
    ever_.store(true, std::memory_order_release);
    if (!report_dir_.empty()) {
      // "detected <unix time> <failed rank> <host> <why>": what the launcher reads.
      std::string path = report_dir_ + "/detected.rank" + std::to_string(my_rank_);
      if (FILE* f = std::fopen(path.c_str(), "a")) {
        timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        std::fprintf(f, "detected %.6f %d %s %s\n", ts.tv_sec + ts.tv_nsec * 1e-9, rank,
                     rank >= 0 && rank < static_cast<int>(hosts_.size()) ? hosts_[rank].c_str() : "?",
                     (left ? what : why).c_str());
        std::fclose(f);
      }
    }
    if (!first_.empty()) {
      HVDL_LOG(WARNING) << msg;
      return;
    }
    first_ = msg;
    hooks.swap(hooks_);
  }
  HVDL_LOG(ERROR) << first_failure();
  for (auto& h : hooks) {
    try {
      h();
    } catch (const std::exception& e) {
      HVDL_LOG(WARNING) << "after a peer failure: " << e.what();
    }
  }
}

void PeerHealth::declare_pid(int pid, const std::string& why) {
  int rank = -1;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (size_t r = 0; r < pids_.size(); ++r)
      if (pids_[r] == pid && hosts_[r] == hosts_[my_rank_]) rank = static_cast<int>(r);
  }
  if (rank >= 0) declare(rank, why);
}

bool PeerHealth::failed(int rank) const {
  std::lock_guard<std::mutex> l(mu_);
  return rank >= 0 && rank < static_cast<int>(why_.size()) && !why_[rank].empty();
}

void PeerHealth::note_departed(int rank) {
  std::lock_guard<std::mutex> l(mu_);
  if (rank >= 0 && rank < static_cast<int>(departed_.size())) departed_[rank] = 1;
}

std::string PeerHealth::reason(int rank) const {
  std::lock_guard<std::mutex> l(mu_);
  return rank >= 0 && rank < static_cast<int>(reason_.size()) ? reason_[rank] : "";
}

std::string PeerHealth::first_failure() const {
  std::lock_guard<std::mutex> l(mu_);
  return first_;
}

void PeerHealth::on_failure(std::function<void()> hook) {
  bool now;
  {
    std::lock_guard<std::mutex> l(mu_);
    now = !first_.empty();
    if (!now) hooks_.push_back(hook);
  }
  if (now) hook();
}

void PeerHealth::check_slow(const std::vector<int>* ranks) const {
  std::lock_guard<std::mutex> l(mu_);
  // A failure we could not pin on a rank (a communicator revoked by a peer) stops
  // everyone: the world it happened in is broken.
  if (!unknown_why_.empty()) throw PeerFailure(unknown_why_);
  if (!ranks) {
    if (!first_.empty()) throw PeerFailure(first_);
    return;
  }
  int cause = -1;
  for (int r : *ranks)
    if (r >= 0 && r < static_cast<int>(why_.size()) && order_[r] &&
        (cause < 0 || order_[r] < order_[cause]))
      cause = r;
  if (cause >= 0) throw PeerFailure(why_[cause]);
}

void PeerHealth::check_pids_slow(const std::vector<int>& pids) const {
  std::lock_guard<std::mutex> l(mu_);
  if (!unknown_why_.empty()) throw PeerFailure(unknown_why_);
  int cause = -1;
  for (size_t r = 0; r < pids_.size(); ++r)
    if (order_[r] && std::find(pids.begin(), pids.end(), pids_[r]) != pids.end() &&
        (cause < 0 || order_[r] < order_[cause]))
      cause = static_cast<int>(r);
  if (cause >= 0) throw PeerFailure(why_[cause]);
}

PeerHealth::Registration::Registration(const std::string& who) : slot_(-1) {
  PeerHealth& h = get();
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (h.slots_[i].used.compare_exchange_strong(expected, true)) {
      {
        std::lock_guard<std::mutex> l(h.mu_);
        h.slots_[i].who = who;
      }
      h.slots_[i].last_ns.store(now_ns(), std::memory_order_relaxed);
      slot_ = i;
      tl_beat = &h.slots_[i].last_ns;
      return;
    }
  }
}

PeerHealth::Registration::~Registration() {
  if (slot_ < 0) return;
  tl_beat = nullptr;
  get().slots_[slot_].used.store(false, std::memory_order_release);
}

void PeerHealth::beat() {
  if (tl_beat) tl_beat->store(now_ns(), std::memory_order_relaxed);
}

std::string PeerHealth::stuck_thread(std::chrono::steady_clock::duration limit) const {
  const int64_t now = now_ns();
  const int64_t lim = std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count();
  for (int i = 0; i < kSlots; ++i) {
    if (!slots_[i].used.load(std::memory_order_acquire)) continue;
    if (now - slots_[i].last_ns.load(std::memory_order_relaxed) > lim) {
      std::lock_guard<std::mutex> l(mu_);
      return slots_[i].who;
    }
  }
  return "";
}

}  // namespace hvdl
