#include "controller.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "../collectives/partition.h"
#include "../common/logging.h"
#include "timeline.h"

namespace hvdl {

namespace {
// Stored inverted, so the AND of all ranks is a NOR.
constexpr uint64_t kNothingToSend = 1, kNoShutdown = 2, kNoTimeline = 4, kNotArriving = 8;
// Not inverted: rank 0 sets it when its coordinator holds nothing (and it publishes and
// records nothing this round), every other rank always; the AND is rank 0's word.
constexpr uint64_t kCoordinatorIdle = 16;
}

Controller::Controller(Transport& t, size_t cache_capacity, double stall_warn_s,
                       double stall_fail_s)
    : t_(t), cache_(cache_capacity) {
  if (t.rank() == 0) coord_ = std::make_unique<Coordinator>(t.size(), stall_warn_s, stall_fail_s);
  words_ = (cache_capacity + 63) / 64;
  // A cached request waiting this long is sent to the coordinator instead, which is
  // the only place that can tell which ranks are missing.
  double limit = stall_warn_s > 0 ? stall_warn_s : stall_fail_s;
  if (stall_fail_s > 0) limit = std::min(limit, stall_fail_s);
  cached_report_s_ = limit > 0 ? limit / 2 : 0;
}

void Controller::requeue(uint32_t bit) {
  auto it = pending_cached_.find(bit);
  if (it == pending_cached_.end()) return;
  unsent_.push_back(std::move(it->second.req));
  pending_cached_.erase(it);
}

RoundResult Controller::round(std::vector<Request> fresh, bool want_shutdown, Timeline* timeline,
                              const Tunables* publish, bool arriving,
                              Clock::duration defer_limit, Clock::time_point now) {
  RoundResult res;
  defer_until_ = Clock::time_point::max();
  for (auto& q : fresh) {
    q.rank = t_.rank();
    uint32_t bit = 0;
    auto found = others_joined_ ? ResponseCache::MISS : cache_.lookup(q, &bit);
    if (found == ResponseCache::HIT) {
      pending_cached_[bit] = Cached{std::move(q), now};
      continue;
    }
    if (found == ResponseCache::CONFLICT) invalidate_.push_back(bit);
    unsent_.push_back(std::move(q));
  }
  if (cached_report_s_ > 0)
    for (auto& kv : pending_cached_)
      if (std::chrono::duration<double>(now - kv.second.since).count() >= cached_report_s_)
        invalidate_.push_back(kv.first);
  bool coord_errors = false;
  std::vector<Response> stall_errors;
  if (coord_) {
    stall_errors = coord_->check_stalls(now);
    coord_errors = !stall_errors.empty();
  }

  // [flags][ready bits][valid bits][not-ready bits, whose AND says which are ready
  // somewhere]
  std::vector<uint64_t> vote(vote_words(), 0);
  const bool coordinator_idle = !coord_ || (coord_->idle() && !coord_errors && !publish && !timeline);
  vote[0] = (unsent_.empty() && !coord_errors && !publish ? kNothingToSend : 0) |
            (want_shutdown ? 0 : kNoShutdown) | (timeline ? 0 : kNoTimeline) |
            (arriving ? 0 : kNotArriving) | (coordinator_idle ? kCoordinatorIdle : 0);
  for (auto& kv : pending_cached_) vote[1 + kv.first / 64] |= uint64_t(1) << (kv.first % 64);
  for (size_t w = 0; w < words_; ++w) {
    vote[1 + words_ + w] = ~uint64_t(0);
    vote[1 + 2 * words_ + w] = ~vote[1 + w];
  }
  for (uint32_t b : invalidate_) vote[1 + words_ + b / 64] &= ~(uint64_t(1) << (b % 64));
  invalidate_.clear();
  uint64_t rider_tag = 0;
  std::optional<Response> lone;  // this rank's lone request, answered as if all sent it
  if (exchange_) {
    std::string requests;
    if (!unsent_.empty()) requests = encode_requests(unsent_);
    const Request* q = unsent_.size() == 1 ? &unsent_[0] : nullptr;
    if (q && q->op != OpType::JOIN && q->group.empty())
      lone = Coordinator::answer_same(t_.size(), *q);
    rider_tag = exchange_vote(vote, requests, lone ? &*lone : nullptr);
  } else {
    t_.allreduce_and(vote.data(), vote.size());
  }
  const int64_t rider_bit =
      rider_tag && rider_tag != kUncachedRider ? static_cast<int64_t>(rider_tag - 1) : -1;
  res.shutdown = !(vote[0] & kNoShutdown);
  bool do_gather = !(vote[0] & kNothingToSend);
  const bool timeline_now = !(vote[0] & kNoTimeline);

  // Invalidated bits are dropped everywhere; requests waiting on them go to the
  // coordinator in this very round (not in the vote: a gather).
  bool invalidated = false;
  for (size_t w = 0; w < words_; ++w) {
    uint64_t invalid = ~vote[1 + words_ + w];
    while (invalid) {
      uint32_t b = static_cast<uint32_t>(w * 64 + __builtin_ctzll(invalid));
      invalid &= invalid - 1;
      if (b >= cache_.capacity()) continue;
      requeue(b);
      cache_.erase(b);
      do_gather = invalidated = true;
      vote[1 + w] &= ~(uint64_t(1) << (b % 64));
    }
  }
  bool partial = false, ready_everywhere = false;
  for (size_t w = 0; w < words_; ++w) {
    partial |= (~vote[1 + 2 * words_ + w] & ~vote[1 + w]) != 0;
    ready_everywhere |= vote[1 + w] != 0;
  }
  const bool defer = !deferred_ && partial && ready_everywhere && !do_gather &&
                     !res.shutdown && !(vote[0] & kNotArriving);
  deferred_ = defer;
  if (defer) {
    defer_until_ = now + defer_limit;
    return res;
  }
  std::vector<Request> released;  // this rank's requests behind the cache hits (timeline)
  bool rider_ready = false;
  for (size_t w = 0; w < words_; ++w) {
    uint64_t ready = vote[1 + w];
    while (ready) {
      uint32_t b = static_cast<uint32_t>(w * 64 + __builtin_ctzll(ready));
      ready &= ready - 1;
      if (res.responses.empty() && b == rider_bit) rider_ready = true;
      res.responses.push_back(cache_.response(b));
      res.responses.back().from_cache = true;
      cache_.touch(b);
      auto it = pending_cached_.find(b);
      if (it == pending_cached_.end()) continue;
      if (timeline_now) released.push_back(std::move(it->second.req));
      pending_cached_.erase(it);
    }
  }
  // The coordinator never saw these: while the timeline records, every rank sends
  // when it became ready for them (same bits, same order everywhere).
  if (timeline_now && !released.empty()) report_cached_readiness(released, res.responses, timeline);

  if (do_gather) {
    res.cache_only = false;
    const bool voted = !voted_requests_.empty() && !invalidated;
    if (voted) t_.check_alive();  // as a full round's gather would have (gather_requests)
    if (voted && lone && (vote[0] & kCoordinatorIdle) && !res.shutdown && !timeline_now &&
        !others_joined_ && all_sent_alike()) {
      unsent_.clear();
      res.full_in_vote = true;
      res.responses.push_back(std::move(*lone));
      // Every rank offered only this request's input (no cached tensor pending): the
      // round runs it alone, and the vote's exchange is its last.
      if (rider_tag == kUncachedRider && res.responses.size() == 1) hand_riders(res);
      return res;
    }
    std::vector<std::string> all;
    if (voted) {
      if (coord_)
        for (auto& m : voted_requests_) all.emplace_back(m);
      res.full_in_vote = true;
    } else {
      res.full_in_vote = gather_requests(encode_requests(unsent_), rider_bit >= 0, &all);
    }
    unsent_.clear();
    std::string answer;
    if (coord_) {
      for (auto& part : all)
        for (auto& q : decode_requests(part)) coord_->add(std::move(q), now);
      auto ready = coord_->take_ready(timeline);
      ready.insert(ready.end(), stall_errors.begin(), stall_errors.end());
      // Tell everyone whether some rank has joined: while one has, cached requests
      // cannot complete (joined ranks never vote), so all go to the coordinator.
      Response state;
      state.name = "";
      state.joined.assign(coord_->joined().begin(), coord_->joined().end());
      ready.insert(ready.begin(), state);
      // [0 | 1 + Tunables][responses]
      answer.push_back(publish ? 1 : 0);
      if (publish) publish->append_to(answer);
      answer += encode_responses(ready);
    }
    res.full_in_vote &= broadcast_answer(answer, rider_bit >= 0);
    size_t skip = 1;
    if (answer.at(0)) {
      if (answer.size() < 1 + sizeof(Tunables))
        throw std::runtime_error("horovodlite: truncated control message");
      res.tunables = Tunables::read_from(answer.data() + 1);
      skip += sizeof(Tunables);
    }
    auto decoded = decode_responses(answer.substr(skip));
    bool joined_now = !decoded.front().joined.empty();
    if (joined_now && !others_joined_) {
      for (auto& kv : pending_cached_) unsent_.push_back(std::move(kv.second.req));
      pending_cached_.clear();
    }
    others_joined_ = joined_now;
    res.responses.insert(res.responses.end(), std::make_move_iterator(decoded.begin() + 1),
                         std::make_move_iterator(decoded.end()));
  }
  // Every rank decides this from the same exchanged headers and the same vote.
  if (rider_ready && res.responses.size() == 1) hand_riders(res);
  return res;
}

void Controller::set_vote(std::unique_ptr<VoteExchange> x, size_t rider_max, RiderFor rider_for,
                          size_t split_max) {
  exchange_ = std::move(x);
  rider_for_ = exchange_ && rider_max > 0 ? std::move(rider_for) : RiderFor{};
  rider_max_ = rider_for_ ? rider_max : 0;
  split_max_ = rider_for_ && split_max > rider_max_ && exchange_->sends_each() ? split_max : 0;
  split_bytes_.assign(t_.size(), 0);
  if (exchange_ && exchange_->capacity() < message_bytes(rider_max_, split_max_))
    throw std::logic_error("horovodlite: the vote's exchange is smaller than its messages");
  peer_inputs_.assign(t_.size(), nullptr);
}

size_t Controller::pack_vote(const std::vector<uint64_t>& vote, char* out) const {
  size_t k = words_;
  while (k > 0 && vote[k] == 0 && vote[words_ + k] == ~uint64_t(0) &&
         vote[2 * words_ + k] == ~uint64_t(0))
    --k;
  const uint64_t w[2] = {vote[0], k};
  std::memcpy(out, w, sizeof w);
  for (size_t s = 0; s < 3; ++s)
    std::memcpy(out + (2 + s * k) * sizeof(uint64_t), vote.data() + 1 + s * words_,
                k * sizeof(uint64_t));
  return 2 + 3 * k;
}

// The words pack_vote wrote at `msg` ([flags][k][3 sections of k]), of `avail`
// readable: their count, with the head in `w` (w[1] = k); 0 where they do not fit (or
// k exceeds `max_k`).
static size_t packed_words(const char* msg, size_t avail, uint64_t max_k, uint64_t w[2]) {
  if (avail < 2) return 0;
  std::memcpy(w, msg, 2 * sizeof(uint64_t));
  const uint64_t k = w[1];
  if (k > max_k || k > avail / 3 || avail < 2 + 3 * k) return 0;
  return 2 + 3 * k;
}

size_t Controller::and_packed_vote(const char* msg, size_t avail,
                                   std::vector<uint64_t>& vote) const {
  uint64_t w[2];
  if (!packed_words(msg, avail, words_, w)) return 0;
  const uint64_t k = w[1];
  vote[0] &= w[0];
  for (size_t s = 0; s < 3; ++s)
    for (size_t i = 0; i < k; ++i) {
      uint64_t x;
      std::memcpy(&x, msg + (2 + s * k + i) * sizeof x, sizeof x);
      vote[1 + s * words_ + i] &= x;
    }
  // Past k the peer's words are the defaults: not ready (0); valid and not ready (all
  // ones, which leave the AND as it is).
  for (size_t i = k; i < words_; ++i) vote[1 + i] = 0;
  return 2 + 3 * k;
}

// Each message: [packed vote words (pack_vote)][rider tag: cache bit + 1,
// kUncachedRider, or 0: no rider][rider bytes][requests' bytes + 1, or 0: not carried]
// [rider][requests]. The packed words' length differs by rank and round.
uint64_t Controller::exchange_vote(std::vector<uint64_t>& vote, const std::string& requests,
                                   const Response* lone) {
  const int n = t_.size(), me = t_.rank();
  uint64_t mine[3] = {0, 0, 0};
  Rider r;
  // Only a lone tensor rides: with more, the round runs more than one response.
  if (rider_for_ && pending_cached_.size() == 1 && unsent_.empty()) {
    const uint32_t bit = pending_cached_.begin()->first;
    r = rider_for_(cache_.response(bit));
    if (r.data && r.bytes <= std::max(rider_max_, split_max_)) mine[0] = uint64_t(bit) + 1, mine[1] = r.bytes;
  } else if (rider_for_ && lone && pending_cached_.empty()) {
    r = rider_for_(*lone);
    if (r.data && r.bytes <= std::max(rider_max_, split_max_)) mine[0] = kUncachedRider, mine[1] = r.bytes;
  }
  // Split: peer p gets block p of it (partition.h) in a message of its own; this rank's
  // own message carries its block's length but not the bytes (nobody reads them).
  const bool split = mine[0] && r.bytes > rider_max_;
  const size_t es = dtype_size(r.dt), count = split ? r.bytes / es : 0;
  auto block = [&](int p) { return block_span(count, n, p, es); };
  if (split) mine[1] = block(me).bytes | kSplitRider;
  const size_t own_rider = carried(mine[1]);
  const size_t rider_room = split ? block(0).bytes : r.bytes;  // block 0: the largest
  char* out = exchange_->outbox();
  const size_t vote_bytes = pack_vote(vote, out) * sizeof(uint64_t);
  const size_t head = vote_bytes + sizeof mine;
  if (head + rider_room + requests.size() <= exchange_->capacity()) mine[2] = requests.size() + 1;
  const size_t tail = mine[2] ? mine[2] - 1 : 0;
  std::memcpy(out + vote_bytes, mine, sizeof mine);
  if (mine[0] && !split) std::memcpy(out + head, r.data, r.bytes);
  if (tail) std::memcpy(out + head + own_rider, requests.data(), tail);
  if (split) {
    split_bytes_[me] = head + own_rider + tail;
    for (int p = 0; p < n; ++p) {
      if (p == me) continue;
      const ByteSpan b = block(p);
      const uint64_t theirs[3] = {mine[0], b.bytes | kSplitRider, mine[2]};
      char* to = exchange_->outbox_to(p);
      std::memcpy(to, out, vote_bytes);
      std::memcpy(to + vote_bytes, theirs, sizeof theirs);
      std::memcpy(to + head, static_cast<const char*>(r.data) + b.at, b.bytes);
      if (tail) std::memcpy(to + head + b.bytes, requests.data(), tail);
      split_bytes_[p] = head + b.bytes + tail;
    }
  }
  RiderFold fold;
  fold.find = &Controller::find_rider;
  fold.tag = mine[0];
  fold.dt = r.dt;
  fold.op = r.op;
  exchange_->fold_riders(&fold);
  if (split) exchange_->exchange_each(split_bytes_.data());
  else exchange_->exchange(head + own_rider + tail);
  bool same = mine[0] != 0, all_requests = mine[2] != 0;
  // Views into the messages (this rank's own through its inbox): read before this
  // rank's next exchange.
  voted_requests_.assign(n, std::string_view());
  if (mine[2]) voted_requests_[me] = std::string_view(exchange_->inbox(me) + head + own_rider, mine[2] - 1);
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const char* msg = exchange_->inbox(p);
    const size_t len = exchange_->length(p);
    const size_t words = and_packed_vote(msg, len / sizeof(uint64_t), vote);
    const size_t their_head = words * sizeof(uint64_t) + sizeof mine;
    if (!words || len < their_head)
      throw std::runtime_error("horovodlite: the negotiation message from rank " + std::to_string(p) +
                               " has " + std::to_string(len) + " bytes, fewer than its vote's " +
                               std::to_string(their_head) + " (at most " +
                               std::to_string(rider_head()) + ")");
    uint64_t theirs[3];
    std::memcpy(theirs, msg + words * sizeof(uint64_t), sizeof theirs);
    const size_t their_rider = carried(theirs[1]);
    if (len != their_head + their_rider + (theirs[2] ? theirs[2] - 1 : 0))
      throw std::runtime_error("horovodlite: the negotiation message from rank " + std::to_string(p) +
                               " has " + std::to_string(len) + " bytes, not the " +
                               std::to_string(their_head) + " + " + std::to_string(their_rider) + " + " +
                               std::to_string(theirs[2] ? theirs[2] - 1 : 0) + " its header names");
    // A split rider: the block for this rank of the same tensor (its bytes, as this
    // rank's own header says).
    same = same && mine[0] == theirs[0] && mine[1] == theirs[1];
    all_requests = all_requests && theirs[2] != 0;
    if (theirs[2]) voted_requests_[p] = std::string_view(msg + their_head + their_rider, theirs[2] - 1);
    peer_inputs_[p] = msg + their_head;
  }
  if (!all_requests) voted_requests_.clear();
  split_ = same && split;
  folded_ = same && !split ? exchange_->folded_riders() : nullptr;
  // A rider folded away on its way, and no fold of them all: none can run.
  if (same && !folded_ && !exchange_->riders_intact()) same = false;
  return same ? mine[0] : 0;
}

RiderSpan Controller::find_rider(const char* msg, size_t len) {
  uint64_t w[2];
  const size_t words = packed_words(msg, len / sizeof(uint64_t), ~uint64_t(0), w);
  if (!words) return {};
  const size_t head = words * sizeof(uint64_t);
  uint64_t h[3];
  if (head + sizeof h > len) return {};
  std::memcpy(h, msg + head, sizeof h);
  return {h[0], head + sizeof h, carried(h[1])};
}

// Every rank's requests are the same bytes, apart from sender and age. With this rank's
// one request (the caller checks), so are every rank's: the coordinator would release
// it at once.
bool Controller::all_sent_alike() const {
  const std::string_view first = request_identity(voted_requests_[0]);
  if (first.empty()) return false;
  for (size_t p = 1; p < voted_requests_.size(); ++p)
    if (request_identity(voted_requests_[p]) != first) return false;
  return true;
}

void Controller::executed(const Response& r, const Request* local) {
  if (!local || r.from_cache || !ResponseCache::cacheable(r)) return;
  int64_t evicted = cache_.put(r, *local);
  if (evicted >= 0) requeue(static_cast<uint32_t>(evicted));
}

Clock::time_point Controller::next_deadline() const {
  auto best = Clock::time_point::max();
  if (!unsent_.empty()) return Clock::now();
  if (coord_) best = coord_->next_deadline();
  best = std::min(best, defer_until_);
  if (cached_report_s_ > 0)
    for (auto& kv : pending_cached_)
      best = std::min(best, kv.second.since + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(cached_report_s_)));
  return best;
}


// Each message is [1][bytes] when it fits the exchange, else [0] (nothing to send, or
// too much); a rank that saw a 0 where it needed bytes goes to the transport, and so
// does every other rank, which saw the same 0.
void Controller::post_message(const std::string* bytes) {
  const bool fits = bytes && bytes->size() + 1 <= exchange_->capacity();
  char* out = exchange_->outbox();
  out[0] = fits ? 1 : 0;
  if (fits) std::memcpy(out + 1, bytes->data(), bytes->size());
  exchange_->exchange(fits ? bytes->size() + 1 : 1);
}

bool Controller::message_of(int p, std::string* out) const {
  if (exchange_->inbox(p)[0] != 1) return false;
  if (out) out->assign(exchange_->inbox(p) + 1, exchange_->length(p) - 1);
  return true;
}

bool Controller::gather_requests(const std::string& mine, bool rider_in_use,
                                 std::vector<std::string>* all) {
  if (!exchange_carries(rider_in_use)) return *all = t_.gather(mine, 0), false;
  // The transport's news (a peer that failed or gave up, a frozen one's heartbeat) once
  // per full round, as its own gather would have checked it; the vote alone, every
  // cached round, stays free of it.
  t_.check_alive();
  post_message(&mine);
  const int n = t_.size();
  bool all_fit = true;
  for (int p = 0; p < n; ++p) all_fit = all_fit && message_of(p, nullptr);
  if (!all_fit) return *all = t_.gather(mine, 0), false;
  all->assign(t_.rank() == 0 ? n : 0, std::string());
  for (size_t p = 0; p < all->size(); ++p) message_of(static_cast<int>(p), &(*all)[p]);
  return true;
}

bool Controller::broadcast_answer(std::string& answer, bool rider_in_use) {
  if (!exchange_carries(rider_in_use)) return t_.broadcast(answer, 0), false;
  const bool root = t_.rank() == 0;
  post_message(root ? &answer : nullptr);
  if (!message_of(0, root ? nullptr : &answer)) return t_.broadcast(answer, 0), false;
  return true;
}

void Controller::report_cached_readiness(const std::vector<Request>& released,
                                         const std::vector<Response>& responses, Timeline* timeline) {
  auto all = t_.gather(encode_requests(released), 0);
  if (!timeline) return;  // only rank 0 records
  const auto agreed = Clock::now();
  std::vector<std::vector<Request>> by_rank;
  for (auto& part : all) by_rank.push_back(decode_requests(part));
  for (size_t i = 0; i < responses.size() && i < released.size(); ++i) {
    std::vector<Clock::time_point> ready(by_rank.size());
    for (size_t r = 0; r < by_rank.size(); ++r)
      if (i < by_rank[r].size()) ready[r] = by_rank[r][i].ready_at;
    timeline->negotiated(responses[i].name, ready, agreed);
  }
}

}  // namespace hvdl
