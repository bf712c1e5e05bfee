// The negotiation vote (Controller::round's bitwise AND over every rank) through shared
// memory, for a process set whose ranks all run on this host: each rank writes its
// words into its own region and publishes the vote's number; every rank ANDs all the
// regions once the peers have published. It replaces an MPI_Iallreduce and its
// polling (a cached tensor's round is this vote alone), and a rank that arrives late
// finds the others' votes already there. The AND is the same on every rank, so what
// the round decides is unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../transport/shm_window.h"
#include "../transport/transport.h"

namespace hvdl {

class ShmVote {
 public:
  // Collective over `group` (all on this host): votes of up to `max_words` words.
  // nullptr on every rank when the segment cannot be made (the vote then goes
  // through the transport).
  static std::unique_ptr<ShmVote> create(Transport& group, size_t max_words);

  // In place: words[i] becomes the AND over all ranks. Every rank calls it in the
  // same sequence (one per round). While waiting for a peer it spins, yields, then
  // sleeps, and checks `group`'s health (a dead peer or one that gave up ends it).
  void allreduce_and(uint64_t* words, size_t n);

 private:
  ShmVote(std::unique_ptr<ShmWindow> w, Transport& group, size_t max_words);
  uint64_t* buffer(int rank, uint64_t vote) const;

  std::unique_ptr<ShmWindow> window_;
  Transport& group_;
  size_t max_words_;
  uint64_t votes_ = 0;  // how many this rank has published
};

}  // namespace hvdl
