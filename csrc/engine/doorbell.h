// How a process set's background thread sleeps until it has a reason to run a round,
// when every member of the set is on this host: one futex word per rank in shared
// memory, bumped by this rank's callers (fresh work) and by peers that start a round.
// The thread then sleeps in the kernel until exactly one of those happens, instead of
// waking every few tens of microseconds to ask MPI whether a peer rang: with as many
// ranks as cores, each such wake-up is taken from a rank's compute.
//
// Sets with members on other hosts keep the transport's ring()/poll_ring() (no shared
// memory reaches them).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>

#include "../transport/shm_window.h"
#include "../transport/transport.h"

namespace hvdl {

class Doorbell {
 public:
  // Collective over `group`, whose ranks must all run on this host. nullptr on every
  // rank when the shared segment cannot be made (the caller then polls as before).
  static std::unique_ptr<Doorbell> create(Transport& group);

  // Tells every other rank that negotiation round `round` has started (and wakes it).
  void ring(uint64_t round);
  // The highest round a peer has rung so far (0: none). Never decreases.
  uint64_t rung() const;
  // When a peer last rang (same clock on every rank of a host): what a woken rank
  // measures its wake-up latency from.
  std::chrono::steady_clock::time_point rung_at() const;
  // Wakes this rank's own sleeping thread (a caller queued work or is waiting).
  void wake_self() { wake(rank_, false); }

  // Sleeping without missing a wake-up: take a ticket, check the conditions, then
  // sleep(ticket): it returns at once if anything rang after the ticket was taken.
  uint32_t ticket() const;
  // `rings_wake` false: a peer's ring does not end this sleep (its round is noted in
  // rung() all the same); only this rank's own callers or the timeout do. For an idle
  // rank, whose joining a round can wait for its own next submission.
  void sleep(uint32_t ticket, std::chrono::nanoseconds timeout, bool rings_wake = true);

 private:
  struct Slot;
  explicit Doorbell(std::unique_ptr<ShmWindow> w);
  Slot& slot(int r) const;
  void wake(int r, bool ring);

  std::unique_ptr<ShmWindow> window_;
  int rank_, size_;
};

}  // namespace hvdl
