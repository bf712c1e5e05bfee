// The one rule every wait of the transports follows: it has a way out. A wait that
// cannot make progress calls WaitWatch::check() at least every 100 ms; check() beats
// for this thread (peer_health.h: the monitor keeps vouching for this process) and
// throws PeerFailure, the error every transport wait ends with, when
//   - a member of the group waited on has been declared failed (by the heartbeat, a
//     pidfd, an MPI error return, a closed connection, ...), or
//   - the caller's deadline passed: nothing moved for `limit_s`. The peer the wait
//     was for (if known) is then declared failed here, so every other wait on it, in
//     every process set, ends too, with the same message.
// Used by the MPI transport's waits (mpi_transport.cc) and the TCP transport's poll
// loop (tcp_transport.cc); shared-memory waits check PeerHealth the same way through
// their window (shm_window.cc), since they know their peers by pid. wait_until() below
// is the one polling wait (spin, yield, nap) for whatever can only be tested: MPI
// requests, a GPU event (cuda_device.cc). The TCP transport blocks in poll() instead.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "peer_health.h"

namespace hvdl {

class WaitWatch {
 public:
  using Clock = std::chrono::steady_clock;
  // The longest a waiting thread may block between two checks.
  static constexpr int kPollMs = 100;

  // `members`: world ranks whose failure ends the wait (nullptr: any rank's failure);
  // must outlive the watch. `limit_s` <= 0: no deadline, liveness only. `what` names
  // the wait and the setting that bounds it, for the message. `health` false: the
  // members' health is not watched (at init, PeerHealth still holds the last world).
  WaitWatch(const std::vector<int>* members, double limit_s, const char* what, bool health = true)
      : members_(members), limit_s_(limit_s), what_(what), health_(health), since_(Clock::now()) {}

  // Something moved: the deadline starts again.
  void progress() { since_ = Clock::now(); }
  double idle_s() const { return std::chrono::duration<double>(Clock::now() - since_).count(); }

  // How long the caller may block (poll(), a condition variable) before its next check.
  int poll_ms() const {
    if (limit_s_ <= 0) return kPollMs;
    const double left_ms = (limit_s_ - idle_s()) * 1000;
    return left_ms <= 0 ? 0 : left_ms < kPollMs ? static_cast<int>(left_ms) + 1 : kPollMs;
  }

  // Throws PeerFailure when a member failed or the deadline passed; `suspect` is the
  // world rank the wait is for (-1: unknown), declared failed at the deadline.
  void check(int suspect = -1) const {
    PeerHealth& h = PeerHealth::get();
    PeerHealth::beat();
    if (health_) h.check(members_);
    if (limit_s_ > 0 && idle_s() > limit_s_) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "nothing moved for %.0f s in %s", idle_s(), what_);
      h.declare(suspect, buf);
      h.check(members_);
      // `suspect` outside `members_` (or a failure declared by someone else first):
      // this wait still ends, with the first failure's message.
      const std::string first = h.first_failure();
      throw PeerFailure(first.empty() ? std::string("horovodlite: ") + buf : first);
    }
  }

 private:
  const std::vector<int>* members_;
  double limit_s_;
  const char* what_;
  bool health_;
  Clock::time_point since_;
};

// How wait_until() paces its tests of done(). The defaults are the MPI waits': MPI's
// own blocking calls spin at full speed, which on a machine with fewer cores than
// threads starves the very peer being waited for.
struct WaitPace {
  std::chrono::microseconds spin{20};    // test back to back this long,
  std::chrono::microseconds yield{200};  // then yield the core between tests until this,
  std::chrono::microseconds max_nap{100};  // then sleep, 2 us doubling up to this
};

// Waits until done() is true: testing back to back briefly, then yielding, then napping
// ever longer (WaitPace). Once a millisecond of waiting (so well within
// WaitWatch::kPollMs) it calls w.check() and then also() (the caller's own ways out,
// such as a peer's notice); either ends the wait by throwing, and so may done() (an
// error return). Short waits never pay for the checks.
template <class Done, class Also>
void wait_until(Done&& done, WaitWatch& w, Also&& also, const WaitPace& pace = WaitPace{}) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  auto checked = start;
  auto nap = microseconds(2);
  while (!done()) {
    const auto now = steady_clock::now();
    const auto waited = now - start;
    if (waited < pace.spin) continue;
    if (now - checked >= milliseconds(1)) {
      checked = now;
      w.check();
      also();
    }
    if (waited < pace.yield) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, pace.max_nap);
  }
}

}  // namespace hvdl
