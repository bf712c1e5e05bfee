// A shared-memory window between the ranks of one host: every rank owns a data
// region that all the others map, plus a few progress counters that it alone
// advances and the others read. Algorithms (collectives/shm_allreduce.cc) build on
// these two things only; how the segment is made, found, waited on and torn down
// stays here.
//
// No name is left behind, even after a crash: rank 0 makes the segment with
// memfd_create (it has no name in /dev/shm) and the others open it through
// /proc/<pid>/fd/<fd>; the kernel frees it when the last mapping goes. Where /proc
// cannot be used, the fallback is a named shm_open segment that is unlinked as
// soon as every rank has mapped it (a window of milliseconds at start-up); segments
// our dead processes left in that window are swept the next time one is made.
//
// Waiting never hangs on a dead peer: while it waits a rank watches every peer
// through a pidfd (exited processes, even unreaped ones), and the peers' states
// (closed at teardown, aborted after an error) so that one rank's failure stops all.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace hvdl {

class ShmWindow {
 public:
  static constexpr int kNumCounters = 6;

  // Collective over `group`, whose ranks must all run on this host. Every rank
  // gets `bytes_per_rank` (rank 0's value) of data that all ranks map. Returns
  // nullptr on every rank when any rank could not map the segment.
  // `named`: use a named shm_open segment even where memfd works (rank 0's choice holds).
  static std::unique_ptr<ShmWindow> create(Transport& group, size_t bytes_per_rank,
                                           bool named = false);
  ~ShmWindow();  // marks this rank closed: a peer still waiting on it stops with an error

  ShmWindow(const ShmWindow&) = delete;
  ShmWindow& operator=(const ShmWindow&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  size_t bytes_per_rank() const { return bytes_per_rank_; }
  char* data(int r) const { return base_ + region_bytes_ * r + kHeaderBytes; }
  const char* mechanism() const { return named_ ? "shm_open" : "memfd"; }

  // Rank r's counter i (acquire: what r wrote before publishing it is visible).
  uint64_t counter(int r, int i) const {
    return __atomic_load_n(counter_ptr(r, i), __ATOMIC_ACQUIRE);
  }
  // Advances this rank's counter i (release: everything written before is visible).
  void publish(int i, uint64_t v) { __atomic_store_n(counter_ptr(rank_, i), v, __ATOMIC_RELEASE); }

  // Tells the peers this rank gave up (they stop waiting with an error naming `why`),
  // and makes every later wait on this window fail at once. `peer_failure`: it gave up
  // because a rank failed (`why` is that PeerFailure's message): the peers then end
  // with a PeerFailure too, at once, instead of finding the failure out themselves.
  void abort(const std::string& why, bool peer_failure = false);
  // Throws if an earlier error left the window unusable.
  void check_usable() const;

  // What an algorithm does while it cannot make progress: call pause() each time,
  // reset() after progress. It spins briefly, then yields, then sleeps, so a rank
  // sharing a core with the peer it waits for lets that peer run. At least every
  // millisecond of waiting it checks the peers and throws std::runtime_error naming
  // a dead, closed or aborted one. `spin` false: it yields from the start, for a wait
  // that is known to outlast a spin (one behind a network round trip).
  class Waiter {
   public:
    explicit Waiter(ShmWindow& w, bool spin = true) : w_(w), spin_(spin) {}
    void pause();
    void reset() { idle_ = 0; }

   private:
    ShmWindow& w_;
    bool spin_;
    uint32_t idle_ = 0;
    std::chrono::steady_clock::time_point since_, checked_;
  };

 private:
  static constexpr size_t kHeaderBytes = 4096;
  struct Header;

  ShmWindow() = default;
  Header* header(int r) const { return reinterpret_cast<Header*>(base_ + region_bytes_ * r); }
  uint64_t* counter_ptr(int r, int i) const;
  void check_peers();
  bool map(int fd, size_t total);

  int rank_ = 0, size_ = 1;
  size_t bytes_per_rank_ = 0, region_bytes_ = 0, total_bytes_ = 0;
  char* base_ = nullptr;
  bool named_ = false;
  bool failed_ = false;
  std::string failure_;
  std::vector<int> pidfds_;  // per rank, -1 for self or where pidfd_open is unavailable
  std::vector<int> pids_;
  // World ranks whose failure ends this window's waits: the group's watched ranks
  // (transport.h), so a window carved out of a process set that spans hosts stops when
  // a rank of another host fails, as the set's transports do. Empty: the pids only.
  std::vector<int> watched_;
};

}  // namespace hvdl
