// The negotiation vote of a set that spans hosts with several ranks on some of them,
// in three steps: the ranks of each host exchange their messages through shared
// memory (a ShmVote), the host's lowest rank (its leader) sends them all in one
// message to every other host's leader, and the leader publishes all N messages to
// its host through the ShmVote again.
//
// Why: over the transport (vote_exchange.h) every rank sends its message to every
// other rank, so on 2 hosts x 2 ranks a round is 12 messages of which 8 cross the
// network, each a TCP send and a wake-up on cores the ranks share. Here a round is
// one message each way between the leaders; the rest is memory. The leaders exchange
// over the set's own transport (Transport::exchange_with), and every wait tends the
// set's held ring, as the vote over the transport does (held_ring.h). Every rank still
// reads every rank's message, so what the round decides is the same as over the
// transport.
//
// Riders (controller.h) fold on their way: where all of a host's ranks send the same
// rider, the leader folds them (in rank order) and sends that one partial instead of
// its host's riders; every leader folds the hosts' partials by ascending host id, the
// same bits on every rank, and publishes the result with the messages. A link then
// carries one rider per host and round, not one per rank: on 2x2 simulated hosts at
// 1 Gbit/s a tight loop of 4 KiB calls had moved 8.7 KB per call across each host's
// link, at the link's rate, where MPI_Allreduce (Open MPI's hierarchical han) moved
// 4.2 KB.
#pragma once
#include <memory>
#include <vector>

#include "../transport/transport.h"
#include "shm_vote.h"
#include "vote_exchange.h"

namespace hvdl {

// A set's ranks grouped by host (hosts[i]: rank i's host id): hosts by ascending id,
// each host's ranks ascending. The order riders fold in (here and the engine's own fold
// by hosts, worker.cc), so both must take it from here.
std::vector<std::vector<int>> ranks_by_host(const std::vector<int>& hosts);

class HostsVote final : public VoteExchange {
 public:
  // Collective over `set`, whose rank i runs on host hosts[i]: messages of up to
  // `capacity` bytes. nullptr on every rank alike where the topology gains nothing
  // (one host, or one rank per host) or some host's shared memory cannot be made.
  static std::unique_ptr<HostsVote> create(Transport& set, const std::vector<int>& hosts,
                                           size_t capacity);

  size_t capacity() const override { return capacity_; }
  char* outbox() override { return local_ ? local_->outbox() : own_.data(); }
  void exchange(size_t bytes) override;
  const char* inbox(int p) const override { return all_ + head_ + p * capacity_; }
  size_t length(int p) const override;
  void fold_riders(const RiderFold* f) override { fold_ = f; }
  const void* folded_riders() const override;
  bool riders_intact() const override { return word(n_ + 1) != 0; }

 private:
  HostsVote() = default;
  // A host's pack for the other leaders (hosts_vote.cc), and this leader's fold of its
  // host's riders into it where they agree.
  size_t pack(char* into);
  // Word i of the assembled message's head.
  uint64_t word(int i) const;

  // The assembled message of all N: [N lengths][the riders' fold's bytes (0: none)]
  // [1: every rider intact, 0: some folded away][N slots of capacity_ bytes][the fold].
  size_t capacity_ = 0, head_ = 0;
  int n_ = 0;
  const RiderFold* fold_ = nullptr;       // this round's (fold_riders), or null
  bool leader_ = false;
  std::vector<int> host_ranks_;           // this host's set ranks, in local rank order
  std::vector<std::vector<int>> hosts_;   // every host's set ranks, by ascending host id
  Transport* set_ = nullptr;              // the leaders' exchange, and the held ring
  std::vector<int> leaders_;              // a leader's: the other hosts' leaders
  std::unique_ptr<Transport> local_t_;    // this host's ranks (the ShmVote's health)
  std::unique_ptr<ShmVote> local_;        // null where this host has one rank
  std::vector<char> own_;                 // a lone rank's outbox and assembled message
  std::vector<char> packs_, theirs_;      // the leaders' exchange: mine, and the others'
  std::vector<size_t> pack_lens_;
  std::vector<const char*> msgs_;         // this host's messages in a round
  std::vector<size_t> msg_lens_;
  std::vector<RiderSpan> spans_;          // their riders
  std::vector<const void*> riders_;       // what one fold takes, in order
  const char* all_ = nullptr;             // after exchange(): the assembled message
};

}  // namespace hvdl
