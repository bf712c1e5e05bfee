// The only interface that moves bytes between ranks. Everything above it (ring and
// other algorithms, the negotiation engine) is written against this, so a new
// transport (shared memory, NCCL, an in-process one for tests) is one new file.
// Ranks are relative to the transport's group (a process set), 0..size()-1.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvdl {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // ---- data plane: non-blocking point-to-point, completed by wait_all ----
  // An Op identifies one posted transfer; the transport owns its bookkeeping.
  using Op = int;
  virtual Op isend(int peer, const void* buf, size_t bytes) = 0;
  virtual Op irecv(int peer, void* buf, size_t bytes) = 0;
  virtual void wait(Op op) = 0;
  virtual void wait_all() = 0;

  // ---- control plane: small messages for negotiation ----
  // In-place bitwise AND over all ranks (the response cache's readiness vote).
  virtual void allreduce_and(uint64_t* words, size_t n) = 0;
  // Every rank contributes bytes; root gets them all (indexed by rank), others get {}.
  virtual std::vector<std::string> gather(const std::string& mine, int root) = 0;
  // root's bytes end up in `bytes` on every rank.
  virtual void broadcast(std::string& bytes, int root) = 0;
  virtual void barrier() = 0;
  // Every rank sends `bytes` of `mine` to every other rank and receives each peer's
  // message, of at most `stride` bytes, at theirs + peer * stride; lens[peer] is its
  // length (theirs has size() * stride bytes, lens size() entries; this rank's slot and
  // length are left alone). The messages of one call may differ in length. One round
  // trip where the transport can (MPI: a send and a receive per peer); here, for any
  // transport, a gather and a broadcast. The vote that carries riders uses it
  // (engine/controller.h), so it is for small messages among few ranks.
  virtual void exchange_all(const void* mine, size_t bytes, void* theirs, size_t stride,
                            size_t* lens);
  // The same among `peers` only (ranks of this group, ascending, without this one;
  // every one of them calls it with its own list): the leaders of hosts
  // (engine/hosts_vote.h). Here for any transport, two sends and receives per peer
  // (the length, then the message); over MPI one message each way (which
  // mpi_transport.cc cuts under MPI's eager limit). It waits as the vote's waits do (a
  // held ring goes out when due, and is dropped when every peer came).
  virtual void exchange_with(const std::vector<int>& peers, const void* mine, size_t bytes,
                             void* theirs, size_t stride, size_t* lens);
  // exchange_with() where peers[i] gets a message of its own, mine[i] of bytes[i]
  // bytes (a message that carries a different block of one buffer to each peer).
  virtual void exchange_each(const std::vector<int>& peers, const void* const* mine,
                             const size_t* bytes, void* theirs, size_t stride, size_t* lens);
  // A vote that waits outside this transport (hosts_vote.h's shared-memory steps)
  // calls it while waiting, with `done` false: a held ring (held_ring.h) goes out
  // once due, as in the transport's own waits; and once with `done` true when the
  // vote completed (every member came), which drops a ring still held.
  virtual void tend_vote(bool done) { (void)done; }

  // Collective over this group: the ranks passing the same color form a new group,
  // ordered by key. Used to carve the per-host and cross-host groups out of a set.
  virtual std::unique_ptr<Transport> split(int color, int key) {
    (void)color, (void)key;
    throw std::logic_error("this transport cannot be split into groups");
  }

  // Throws (a PeerFailure, peer_health.h) when a member of this group is known to
  // have failed, or (std::runtime_error) when a peer gave up a collective half way
  // (abandon() below); waits outside the transport (rounds, other transports wrapping
  // this one) call it at least every 100 ms. It may look for the peers' notices.
  virtual void check_alive() {}
  // World ranks of the members, by rank in this group (nullptr: unknown), so that a
  // wait on this group watches exactly them (watched_wait.h).
  virtual const std::vector<int>* world_ranks() const { return nullptr; }
  // World ranks whose failure ends this group's waits: its members, and for a group
  // split() from another, that one's too. A failure anywhere in a process set ends
  // all its collectives, and a rank whose host-mate died leaves the cross-host ring
  // without a word to the others in it: they must not wait for it.
  virtual const std::vector<int>* watched_ranks() const { return world_ranks(); }
  // This rank gave up a collective half way: the data between the ranks is out of
  // step. Tell the peers (their waits on this group then fail) and refuse to wait
  // on this group from now on. Transports that cannot do this do nothing.
  virtual void abandon(const std::string& why) { (void)why; }

  // ---- wake-up: lets an idle rank sleep until a peer needs it in a round ----
  // Tell every other rank that negotiation round `round` has started.
  virtual void ring(uint64_t round) = 0;
  // Non-blocking: the highest round number rung by any peer since the last call,
  // or 0 when nothing arrived.
  virtual uint64_t poll_ring() = 0;
  // Where a ring is a network message (a set across hosts): ring() may hold it back
  // for `delay` into the round's vote and drop it when the vote shows that every peer
  // came anyway (held_ring.h). Default: every ring goes at once.
  virtual void hold_rings(std::chrono::nanoseconds delay) { (void)delay; }
  // Rings sent, and rings held back and dropped (0, 0 where nothing is counted).
  struct RingCounts {
    uint64_t sent = 0, saved = 0;
  };
  virtual RingCounts ring_counts() const { return {}; }
};

}  // namespace hvdl
