// How a negotiation round's vote message reaches every rank of a set when it is more
// than an AND of words (engine/controller.h: a vote that carries a "rider", the input
// of a lone tensor, and the round's new requests): every rank's message goes to every
// other rank.
//
// Two ways: over the transport (one send and receive per peer: for a few ranks, such
// as a set across hosts) or through shared memory on one host (engine/shm_vote.h: each
// rank writes its message where the peers read it, so a rider is never copied out of
// the window; it is reduced from there).
#pragma once
#include <cstddef>
#include <memory>

#include "../common/dtype.h"
#include "../transport/transport.h"

namespace hvdl {

// Where a vote message carries its rider (controller.h's layout): the rider's tag (0:
// none), and its offset and bytes in the message.
struct RiderSpan {
  uint64_t tag = 0;
  size_t at = 0, bytes = 0;
};

// How a round's riders fold, for an exchange that folds them on their way (HostsVote:
// a host's riders fold into one before they cross to the other hosts, so a link
// carries one rider per host instead of one per rank).
struct RiderFold {
  // Finds the rider in any rank's message of this round (also one whose rider was cut
  // out: the span needs only the message's head). Set in every round.
  RiderSpan (*find)(const char* msg, size_t len) = nullptr;
  uint64_t tag = 0;              // this rank's rider (0: it sends none)
  DataType dt = DataType::FLOAT32;
  ReduceOp op = ReduceOp::SUM;   // as folded (Average: a sum, scaled after the fold)
};

class VoteExchange {
 public:
  virtual ~VoteExchange() = default;
  // The most bytes one message may have.
  virtual size_t capacity() const = 0;
  // Where this rank writes its next message (capacity() bytes of room).
  virtual char* outbox() = 0;
  // Sends the outbox's first `bytes` to every peer and waits for theirs. Every rank
  // calls it in the same sequence. Throws on a dead or failed peer.
  virtual void exchange(size_t bytes) = 0;
  // After exchange(): rank p's message and its length (this rank's own included),
  // valid until this rank's next exchange() (the peers cannot overwrite it before).
  virtual const char* inbox(int p) const = 0;
  virtual size_t length(int p) const = 0;
  // Whether each peer can get a message of its own (outbox_to, exchange_each): not
  // where every peer reads the one outbox (shared memory).
  virtual bool sends_each() const { return false; }
  // Where sends_each(): this rank's message for peer p alone (capacity() bytes of room).
  virtual char* outbox_to(int p) { (void)p; return nullptr; }
  // Where sends_each(): exchange() with each peer p sent bytes[p] of outbox_to(p)
  // instead of the outbox, whose bytes[rank] bytes stay this rank's own message
  // (inbox(rank)).
  virtual void exchange_each(const size_t* bytes) { (void)bytes; }
  // Whether the coordinator's answer (and the requests that did not fit the vote)
  // should go through exchange() too: where one costs no more than a gather or a
  // broadcast (shared memory), not where it sends to every peer.
  virtual bool carries_negotiation() const { return false; }
  // This round's riders (valid until the next exchange(), which alone uses it).
  virtual void fold_riders(const RiderFold*) {}
  // After exchange(): every rank's rider folded, when this exchange folds them and
  // every rank sent the same one (each host's in rank order, then the hosts' by
  // ascending host id, reducer.h's fold_in_order each time: the same bits on every
  // rank; no scale applied), or null.
  virtual const void* folded_riders() const { return nullptr; }
  // After exchange(): false where some peer's rider was folded away on its way, so the
  // bytes at its place in inbox() are not that rider.
  virtual bool riders_intact() const { return true; }
};

// Over `t` (Transport::exchange_all). `t` must outlive it.
std::unique_ptr<VoteExchange> make_transport_vote_exchange(Transport& t, size_t capacity);

}  // namespace hvdl
