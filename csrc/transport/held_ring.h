// When a transport's wake-up ("ring", transport.h) is sent: at once, or held back into
// the round's vote and dropped if the vote shows every peer came without it.
//
// Why hold it: a ring tells peers that a round started, but a peer needs it only when
// it would not come on its own - it has tensors in flight and nothing new, so it waits
// for this rank. A peer that submitted as well starts the same round itself, and the
// round's vote, which every member must enter, proves that it did. Across hosts each
// ring is a network message to every peer (OpenMPI's TCP btl: a send syscall whose
// delivery the kernel runs on the sender's core, a read on the peer's core): on two
// simulated hosts a lone 4 KiB allreduce took 38-42 us with a ring per round and
// 28-30 us without, against 24-30 us for MPI_Allreduce in the same launches. On one
// host a ring costs a shared-memory store, so nothing is held (delay 0).
//
// What holding costs: where a peer did need the ring, it gets it `delay` later.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace hvdl {

class HeldRing {
 public:
  using Clock = std::chrono::steady_clock;

  // 0: every ring is sent at once.
  void set_delay(std::chrono::nanoseconds d) { delay_ = d; }
  std::chrono::nanoseconds delay() const { return delay_; }

  // A round started: true if its ring is held (the caller sends nothing now).
  bool hold(uint64_t round) {
    if (delay_.count() <= 0) return false;
    round_ = round;  // a newer round's ring also says everything an older one would
    due_ = Clock::now() + delay_;
    return true;
  }
  bool holding() const { return round_ != 0; }

  // The held round if its time has come (the caller sends it now), else 0.
  uint64_t due(Clock::time_point now = Clock::now()) {
    if (!round_ || now < due_) return 0;
    return take();
  }
  uint64_t take() {
    uint64_t r = round_;
    round_ = 0;
    return r;
  }

  // The round's vote is in flight: tests done() until it is true (every peer came:
  // the ring is dropped; returns true) or the ring is due (returns false; the caller
  // sends take() and waits as usual). Spins, then yields: `delay` is microseconds.
  template <class Done>
  bool vote_or_due(Done&& done) {
    for (int i = 0;; ++i) {
      if (done()) {
        round_ = 0;
        saved_.fetch_add(1, std::memory_order_relaxed);
        return true;
      }
      if (Clock::now() >= due_) return false;
      if (i >= kSpinTests) std::this_thread::yield();
    }
  }

  void count_sent() { sent_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t saved() const { return saved_.load(std::memory_order_relaxed); }

 private:
  static constexpr int kSpinTests = 16;
  std::chrono::nanoseconds delay_{0};
  uint64_t round_ = 0;
  Clock::time_point due_{};
  std::atomic<uint64_t> sent_{0}, saved_{0};  // read by stats() on the caller's thread
};

}  // namespace hvdl
