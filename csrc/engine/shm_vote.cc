#include "shm_vote.h"

#include <stdexcept>

#include "../common/buffer.h"
#include "../transport/peer_health.h"

namespace hvdl {

// Each rank's region holds two buffers, used by odd and even votes: a rank can only
// start vote v+2 (overwriting v's buffer) after every peer published v+1, i.e. after
// every peer finished reading v. Counter 0 is the number of the last vote published;
// counters 1 and 2 the lengths of the odd and even votes' messages (published first).
std::unique_ptr<ShmVote> ShmVote::create(Transport& group, size_t capacity, ShmVoteOptions o) {
  capacity = cache_lines(capacity);  // each buffer on its own cache lines
  auto w = ShmWindow::create(group, 2 * capacity);
  if (!w) return nullptr;
  return std::unique_ptr<ShmVote>(new ShmVote(std::move(w), group, capacity, o));
}

ShmVote::ShmVote(std::unique_ptr<ShmWindow> w, Transport& group, size_t capacity,
                 ShmVoteOptions o)
    : window_(std::move(w)), group_(group), capacity_(capacity), options_(o) {}

char* ShmVote::buffer(int rank, uint64_t vote) const {
  return window_->data(rank) + (vote % 2) * capacity_;
}

size_t ShmVote::length(int p) const {
  return static_cast<size_t>(window_->counter(p, 1 + static_cast<int>(votes_ % 2)));
}

void ShmVote::exchange(size_t bytes) {
  if (bytes > capacity_) throw std::logic_error("horovodlite: vote larger than its window");
  const uint64_t v = ++votes_;
  window_->publish(1 + static_cast<int>(v % 2), bytes);
  window_->publish(0, v);  // release: the message is visible to whoever sees v
  ShmWindow::Waiter wait(*window_, options_.spin);
  auto checked = std::chrono::steady_clock::now();
  // While the Waiter spins (its first 256 looks) the clock is read every 16th look: a
  // read (~50 ns here) was most of a spinning look's time, and so of how late a peer's
  // vote was seen. After that every look reads it, so the checks below keep pace with
  // the window's own (a peer that left because it saw a death first must not be
  // reported before the death).
  uint32_t looks = 0;
  for (int p = 0; p < window_->size(); ++p) {
    if (p == window_->rank()) continue;
    while (window_->counter(p, 0) < v) {
      // The Waiter watches the peers' processes; the transport's own news (a peer
      // that gave up a collective, a failure declared elsewhere) comes through
      // check_alive(), as in the transport's waits.
      try {
        wait.pause();
      } catch (const std::exception&) {
        // A peer that published this vote may have finished the round and closed
        // its window (the last round of a shutdown) before this rank looked.
        if (window_->counter(p, 0) >= v) break;
        throw;
      }
      if (options_.rings) options_.rings->tend_vote(false);
      if (++looks < 256 && looks % 16 != 0) continue;
      auto now = std::chrono::steady_clock::now();
      if (now - checked >= std::chrono::milliseconds(1)) {
        checked = now;
        PeerHealth::beat();
        group_.check_alive();
      }
    }
  }
}

}  // namespace hvdl
