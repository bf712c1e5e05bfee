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

#include "../transport/transport.h"

namespace hvdl {

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
  // Whether the coordinator's answer (and the requests that did not fit the vote)
  // should go through exchange() too: where one costs no more than a gather or a
  // broadcast (shared memory), not where it sends to every peer.
  virtual bool carries_negotiation() const { return false; }
};

// Over `t` (Transport::exchange_all). `t` must outlive it.
std::unique_ptr<VoteExchange> make_transport_vote_exchange(Transport& t, size_t capacity);

}  // namespace hvdl
