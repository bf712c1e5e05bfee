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

namespace hvdl {

// The policy and its counts only; the transport waits for its vote with its usual
// wait (watched_wait.h's wait_until), asking due() at each test and calling joined()
// when the vote completes.
class HeldRing {
 public:
  using Clock = std::chrono::steady_clock;

  // What a message's bytes add to the hold: 2 ns a byte, the slower end (0.5 GB/s) of
  // what the kernel's TCP path moved each way between simulated hosts at 10 Gbit/s with
  // a job beside it (on a slower link the ring goes out, as before, while the bytes
  // still cross).
  static constexpr double kNsPerByte = 2.0;

  // 0: every ring is sent at once.
  void set_delay(std::chrono::nanoseconds d) { delay_ = d; }

  // A round started: true if its ring is held (the caller sends nothing now).
  bool hold(uint64_t round) {
    if (delay_.count() <= 0) return false;
    round_ = round;  // a newer round's ring also says everything an older one would
    due_ = Clock::now() + delay_;
    return true;
  }

  // This rank's vote message of the held round has `bytes`: its peers', about as large,
  // take longer to arrive than a bare vote's, so the hold does too, at kNsPerByte. On two
  // simulated hosts at 10 Gbit/s a 64 KiB rider's vote took 86-93 us with every peer
  // there (a 4 KiB one's 33-41), past the 50 us hold: the rings then sent (0.7-1 per
  // call) cost it half its speed (157-184 us a call, against 100-113 with rings held 1 ms).
  void lengthen(size_t bytes) {
    if (round_) due_ += std::chrono::nanoseconds(static_cast<int64_t>(bytes * kNsPerByte));
  }

  // The held round if its time has come (the caller sends it now), else 0. Reads
  // the clock only while a ring is held: it is asked at every look at the transport.
  uint64_t due() {
    if (!round_ || Clock::now() < due_) return 0;
    const uint64_t r = round_;
    round_ = 0;
    return r;
  }

  // The round's vote completed, so every peer came: a ring still held is dropped.
  void joined() {
    if (!round_) return;
    round_ = 0;
    saved_.fetch_add(1, std::memory_order_relaxed);
  }

  void count_sent() { sent_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t sent() const { return sent_.load(std::memory_order_relaxed); }
  uint64_t saved() const { return saved_.load(std::memory_order_relaxed); }

 private:
  std::chrono::nanoseconds delay_{0};
  uint64_t round_ = 0;  // the held ring's round (0: none held)
  Clock::time_point due_{};
  std::atomic<uint64_t> sent_{0}, saved_{0};  // read by stats() on the caller's thread
};

}  // namespace hvdl
