// The negotiation vote through shared memory, for a process set whose ranks all run on
// this host: each rank writes its message (the vote's words, and a rider when it has
// one: engine/controller.h) into its own region and publishes the vote's number; the
// peers read it there once published. It replaces an MPI exchange and its polling (a
// cached tensor's round is this vote alone, and with a rider also its data), and a
// rank that arrives late finds the others' messages already there. Every rank reads
// the same messages, so what the round decides is unchanged.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include "../transport/shm_window.h"
#include "../transport/transport.h"
#include "vote_exchange.h"

namespace hvdl {

struct ShmVoteOptions {
  // false: waits yield the core from the start (ShmWindow::Waiter), for a vote whose
  // peers are often a network round trip away (hosts_vote.h).
  bool spin = true;
  // A transport whose held ring (held_ring.h) the waits tend (Transport::tend_vote),
  // where the vote is part of that transport's round; nullptr: none.
  Transport* rings = nullptr;
};

class ShmVote final : public VoteExchange {
 public:
  // Collective over `group` (all on this host): messages of up to `capacity` bytes.
  // nullptr on every rank when the segment cannot be made (the vote then goes
  // through the transport).
  static std::unique_ptr<ShmVote> create(Transport& group, size_t capacity,
                                         ShmVoteOptions o = {});

  size_t capacity() const override { return capacity_; }
  char* outbox() override { return buffer(window_->rank(), votes_ + 1); }
  // While waiting for a peer it spins, yields, then sleeps, and checks `group`'s
  // health (a dead peer or one that gave up ends it).
  void exchange(size_t bytes) override;
  const char* inbox(int p) const override { return buffer(p, votes_); }
  size_t length(int p) const override;
  // Two exchanges (requests in, answer out) replace a gather and a broadcast over MPI,
  // each two collectives of its own.
  bool carries_negotiation() const override { return true; }

 private:
  ShmVote(std::unique_ptr<ShmWindow> w, Transport& group, size_t capacity, ShmVoteOptions o);
  char* buffer(int rank, uint64_t vote) const;

  std::unique_ptr<ShmWindow> window_;
  Transport& group_;
  size_t capacity_;
  ShmVoteOptions options_;
  uint64_t votes_ = 0;  // how many this rank has published
};

}  // namespace hvdl
