#include "shm_vote.h"

#include <stdexcept>

#include "../transport/peer_health.h"

namespace hvdl {

// Each rank's region holds two buffers, used by odd and even votes: a rank can only
// start vote v+2 (overwriting v's buffer) after every peer published v+1, i.e. after
// every peer finished reading v. Counter 0 is the number of the last vote published.
std::unique_ptr<ShmVote> ShmVote::create(Transport& group, size_t max_words) {
  auto w = ShmWindow::create(group, 2 * max_words * sizeof(uint64_t));
  if (!w) return nullptr;
  return std::unique_ptr<ShmVote>(new ShmVote(std::move(w), group, max_words));
}

ShmVote::ShmVote(std::unique_ptr<ShmWindow> w, Transport& group, size_t max_words)
    : window_(std::move(w)), group_(group), max_words_(max_words) {}

uint64_t* ShmVote::buffer(int rank, uint64_t vote) const {
  return reinterpret_cast<uint64_t*>(window_->data(rank)) + (vote % 2) * max_words_;
}

void ShmVote::allreduce_and(uint64_t* words, size_t n) {
  if (n > max_words_) throw std::logic_error("horovodlite: vote larger than its window");
  const uint64_t v = ++votes_;
  uint64_t* mine = buffer(window_->rank(), v);
  for (size_t i = 0; i < n; ++i) mine[i] = words[i];
  window_->publish(0, v);  // release: the words are visible to whoever sees v
  ShmWindow::Waiter wait(*window_);
  auto checked = std::chrono::steady_clock::now();
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
      auto now = std::chrono::steady_clock::now();
      if (now - checked >= std::chrono::milliseconds(1)) {
        checked = now;
        PeerHealth::beat();
        group_.check_alive();
      }
    }
    const uint64_t* theirs = buffer(p, v);
    for (size_t i = 0; i < n; ++i) words[i] &= theirs[i];
  }
}

}  // namespace hvdl
