// One negotiation round, run by every rank of a process set at the same time:
//   1. fresh requests found in the response cache only set their bit;
//   2. one bitwise-AND allreduce of [flags | cache bits | still-valid bits] tells
//      every rank which cached tensors are ready everywhere and whether anyone has
//      something the cache cannot answer (or wants to shut down);
//   3. only then: gather the uncached requests to the coordinator, broadcast its answer.
// In steady state (same tensors every step) a round is step 2 alone.
//
// The vote may also go as a message from every rank to every other (set_vote(): through
// shared memory on one host, or over the transport among a few ranks) and then carry
// the input of this rank's one pending cached tensor (a "rider"). When every rank sent
// the same cached tensor and it is all the round runs, the round ends with the peers'
// inputs in hand (RoundResult::peer_inputs), and the allreduce needs no exchange of its
// own: one exchange instead of two. Otherwise the rider is dropped and the tensor runs
// as usual; the vote is the same AND either way.
//
// Every rank's uncached requests go with its vote message too, so rank 0 has them
// without a gather. And when rank 0's coordinator holds nothing (it says so in the
// vote) and every rank sent the same one request, each rank answers it itself as rank 0
// would (Coordinator::answer_same): the round is the vote alone.
// If that request is a small allreduce its input rides as well (an uncached rider),
// so a tensor the cache does not know - an unnamed call, a new name each time - costs
// one exchange, as a cached one does.
//
// A rank whose caller is still in the middle of a burst of submissions says so in the
// vote. If some cached tensors are then ready on some ranks but not on all, the round
// runs nothing and the next one follows when that rank asks for results (or after
// `defer_limit`): running the part ready everywhere now would cut the step's batch
// in two, and the rest would wait for the whole first part to finish.
#pragma once
#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "../transport/transport.h"
#include "coordinator.h"
#include "parameters.h"
#include "response_cache.h"
#include "vote_exchange.h"

namespace hvdl {

class Timeline;

struct RoundResult {
  std::vector<Response> responses;  // execute in this order on every rank
  bool shutdown = false;            // some rank asked to shut down
  bool cache_only = true;           // no gather/broadcast was needed
  bool full_in_vote = false;        // they were, both through the vote's exchange
  std::optional<Tunables> tunables;  // rank 0 changed them: apply before executing
  // Riders on: responses is exactly one cached tensor, and peer_inputs[p] is rank p's
  // input for it, which rode with the vote (read-only, valid until the next round;
  // this rank's entry is null). Null otherwise.
  const void* const* peer_inputs = nullptr;
  // With peer_inputs: every rank's input already folded on the way (the hosts' vote
  // does, vote_exchange.h), before any scale; use it instead of peer_inputs. Else null.
  const void* folded_inputs = nullptr;
  // With peer_inputs: the rider was split (Controller::set_vote's split_max): each
  // peer_inputs[p] is only block `rank` (partition.h, in elements) of rank p's input,
  // and the round still sends this rank's reduced block to every peer.
  bool split_inputs = false;
};

// The input a cached response's tensor would send with the vote, or {} when it may
// not ride (the engine decides: op, device, size).
struct Rider {
  const void* data = nullptr;
  size_t bytes = 0;
  DataType dt = DataType::FLOAT32;  // how riders fold on the way (VoteExchange::fold_riders)
  ReduceOp op = ReduceOp::SUM;      // as folded: Average is a sum, scaled after
};

class Controller {
 public:
  Controller(Transport& t, size_t cache_capacity, double stall_warn_s, double stall_fail_s);

  // Rank 0 only: `timeline` non-null while it records (the vote tells every rank, and
  // all then report when they became ready, also for tensors the cache answers);
  // `publish` non-null to hand new tunables to every rank.
  // `arriving`: this rank's callers are mid-burst (TensorQueue::take_fresh).
  RoundResult round(std::vector<Request> fresh, bool want_shutdown, Timeline* timeline = nullptr,
                    const Tunables* publish = nullptr, bool arriving = false,
                    Clock::duration defer_limit = Clock::duration::zero(),
                    Clock::time_point now = Clock::now());
  size_t cache_capacity() const { return cache_.capacity(); }
  // The words the vote of every round carries.
  size_t vote_words() const { return 1 + 3 * words_; }
  // The bytes a vote message with riders of up to `rider_max` bytes takes (what a
  // VoteExchange for set_vote must hold): beside a full rider, room for the lone
  // request it belongs to (a name and a shape: hundreds of bytes), so that one too is
  // answered in the vote. More requests go when they fit. With split riders of up to
  // `split_max` bytes on this set's ranks (set_vote), room for their largest block too
  // (whatever its element size).
  size_t message_bytes(size_t rider_max, size_t split_max = 0) const {
    const size_t split_block = split_max ? split_max / t_.size() + sizeof(uint64_t) : 0;
    return rider_head() + std::max(rider_max, split_block) + kRequestRoom;
  }
  // The vote goes through `x` instead of the transport's AND-allreduce, and carries
  // riders of at most `rider_max` bytes where `rider_for` is set. Set before the first
  // round, on every rank alike. The AND-allreduce takes log N steps where an exchange
  // is N-1 messages per rank, so over a transport only for a few ranks.
  using RiderFor = std::function<Rider(const Response& cached)>;
  // A rider larger than rider_max, up to split_max bytes, is split where `x` sends each
  // peer a message of its own (VoteExchange::outbox_to): peer p gets only block p of
  // it, so the vote is the reduce-scatter of a direct allreduce (every rank sends
  // (N-1)/N of it, as the ring's reduce-scatter does, in one exchange instead of
  // N-1 steps) and its allgather follows (Worker::execute).
  void set_vote(std::unique_ptr<VoteExchange> x, size_t rider_max = 0, RiderFor rider_for = {},
                size_t split_max = 0);
  // The largest rider a vote carries; 0 when votes carry none (riders off).
  size_t rider_bytes() const { return rider_for_ ? rider_max_ : 0; }
  // The largest split rider (0: none).
  size_t split_rider_bytes() const { return split_max_; }
  // After a response ran: cache it (identically on every rank).
  void executed(const Response& r, const Request* local);
  // When this rank needs a round for its own timers (stall checks, cached requests
  // that wait too long and must be reported to the coordinator after all).
  Clock::time_point next_deadline() const;
  bool has_pending() const { return !pending_cached_.empty() || !unsent_.empty(); }

 private:
  struct Cached {
    Request req;
    Clock::time_point since;
  };
  void requeue(uint32_t bit);
  // The vote through exchange_, this rank's rider and `requests` (encoded unsent_) with
  // it, when they fit; `lone`: this rank's only request answered as if every rank sent
  // it (its input may ride), else null. Returns the rider tag every rank sent (a cached
  // bit + 1 or kUncachedRider, for equal tensors), or 0; sets voted_requests_.
  uint64_t exchange_vote(std::vector<uint64_t>& vote, const std::string& requests,
                         const Response* lone);
  // Whether every rank's requests in the vote are the same bytes (but for sender and
  // age). The same on every rank: it reads only what every rank read.
  bool all_sent_alike() const;
  // Where a vote message (any rank's, exchange_vote's layout) carries its rider.
  static RiderSpan find_rider(const char* msg, size_t len);
  // The round runs the lone tensor whose inputs rode with the vote.
  void hand_riders(RoundResult& res) const {
    res.peer_inputs = peer_inputs_.data();
    res.split_inputs = split_;
    res.folded_inputs = folded_;
  }
  // The most bytes of a vote message before its rider: the packed words (pack_vote),
  // then the rider's tag and bytes and the requests' bytes + 1 (0: not carried).
  size_t rider_head() const { return (vote_words() + 1) * sizeof(uint64_t) + 3 * sizeof(uint64_t); }
  // A vote's words as a message carries them: [flags][k][the first k words of each of
  // the three sections], k the fewest that leave only each section's default behind
  // (ready 0, valid and not-ready all ones). With a lone cached tensor that is 4 words
  // instead of 1 + 3 * capacity / 64 (49 at the default 1024): across a 1 Gbit/s link
  // those 360 bytes were ~3 us of every call. Returns the words written.
  size_t pack_vote(const std::vector<uint64_t>& vote, char* out) const;
  // ANDs a peer's packed words (`avail` of them readable) into `vote`; returns the
  // words they took, or 0 if they do not fit.
  size_t and_packed_vote(const char* msg, size_t avail, std::vector<uint64_t>& vote) const;
  static constexpr uint64_t kUncachedRider = ~uint64_t(0);
  // Set in a vote header's rider bytes where the rider is split (its block's bytes).
  static constexpr uint64_t kSplitRider = uint64_t(1) << 63;
  // The rider bytes a message carries, from its header's word.
  static size_t carried(uint64_t rider_word) { return static_cast<size_t>(rider_word & ~kSplitRider); }
  static constexpr size_t kRequestRoom = 4 << 10;
  // Step 3's gather of every rank's requests to rank 0 and the broadcast of its answer:
  // through exchange_ where it carries them and this round's vote left no rider to
  // reduce (a further exchange lets the peers reuse the buffer that holds it), and the
  // message fits; else through the transport. Every rank takes the same way.
  // Each returns whether it went through exchange_.
  bool gather_requests(const std::string& mine, bool rider_in_use, std::vector<std::string>* all);
  bool broadcast_answer(std::string& answer, bool rider_in_use);
  bool exchange_carries(bool rider_in_use) const {
    return exchange_ && !rider_in_use && exchange_->carries_negotiation();
  }
  // Through exchange_: posts `bytes` (null: nothing to send) and exchanges; then
  // message_of reads peer p's message into *out (if not null), false where p sent none.
  void post_message(const std::string* bytes);
  bool message_of(int p, std::string* out) const;
  void report_cached_readiness(const std::vector<Request>& released,
                               const std::vector<Response>& responses, Timeline* timeline);

  Transport& t_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coord_;  // rank 0 only
  std::map<uint32_t, Cached> pending_cached_;
  std::vector<Request> unsent_;
  std::vector<uint32_t> invalidate_;
  bool others_joined_ = false;
  // The last round held back its cached tensors (the same on every rank, decided by
  // the vote); the next one never does, so a burst delays a batch once at most.
  bool deferred_ = false;
  Clock::time_point defer_until_ = Clock::time_point::max();
  double cached_report_s_;
  size_t words_;
  std::unique_ptr<VoteExchange> exchange_;  // null: the transport's AND-allreduce
  RiderFor rider_for_;  // empty: no riders
  size_t rider_max_ = 0;
  size_t split_max_ = 0;  // 0: riders are never split
  bool split_ = false;    // the last exchange's riders were split (and every rank's alike)
  std::vector<size_t> split_bytes_;  // exchange_each()'s message bytes, by rank (set_vote)
  // Where each peer's rider lies after the last exchange (this rank's entry null).
  std::vector<const void*> peer_inputs_;
  const void* folded_ = nullptr;  // and all of them folded on the way (or null)
  // Every rank's encoded requests from the last vote, when every rank's rode with it
  // (empty otherwise).
  std::vector<std::string_view> voted_requests_;
};

}  // namespace hvdl
