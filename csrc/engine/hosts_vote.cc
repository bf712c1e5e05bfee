#include "hosts_vote.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "../collectives/reducer.h"
#include "../common/buffer.h"

namespace hvdl {

std::vector<std::vector<int>> ranks_by_host(const std::vector<int>& hosts) {
  std::map<int, std::vector<int>> by_host;
  for (size_t i = 0; i < hosts.size(); ++i) by_host[hosts[i]].push_back(static_cast<int>(i));
  std::vector<std::vector<int>> out;
  for (auto& kv : by_host) out.push_back(std::move(kv.second));
  return out;
}

std::unique_ptr<HostsVote> HostsVote::create(Transport& set, const std::vector<int>& hosts,
                                             size_t capacity) {
  const int n = set.size(), me = set.rank();
  if (n < 3 || hosts.size() != static_cast<size_t>(n)) return nullptr;
  auto groups = ranks_by_host(hosts);
  // One host: the ShmVote alone serves. One rank per host: nothing to share.
  if (groups.size() < 2 || groups.size() == static_cast<size_t>(n)) return nullptr;

  std::unique_ptr<HostsVote> v(new HostsVote());
  v->capacity_ = cache_lines(capacity);  // every slot on its own cache lines, words aligned
  v->head_ = cache_lines((n + 2) * sizeof(uint64_t));
  v->n_ = n;
  // The assembled message, with room for the riders' fold after the N slots.
  const size_t assembled = v->head_ + (n + 1) * v->capacity_;
  for (auto& g : groups)
    if (hosts[g.front()] == hosts[me]) v->host_ranks_ = g;
  v->leader_ = v->host_ranks_.front() == me;
  v->set_ = &set;
  try {
    v->local_t_ = set.split(hosts[me], me);
  } catch (const std::logic_error&) {  // before any communication: the same on all ranks
    return nullptr;
  }
  bool ok = true;
  if (v->host_ranks_.size() > 1) {
    // Its waits yield at once: half of them are behind the leaders' network round
    // trip, and a spinning rank takes the core that a leader (or the kernel's TCP
    // work) needs where ranks share cores. 2x2 simulated hosts on 2 cores, 4 KiB:
    // the vote took 114-162 us with spinning waits, 31-43 us yielding.
    ShmVoteOptions o;
    o.spin = false;
    o.rings = &set;
    v->local_ = ShmVote::create(*v->local_t_, assembled, o);
    ok = v->local_ != nullptr;
  }
  uint64_t all = ok ? 1 : 0;
  set.allreduce_and(&all, 1);  // one host may have failed where the others succeeded
  if (!all) return nullptr;

  size_t widest = 0;
  for (auto& g : groups) {
    widest = std::max(widest, g.size());
    if (v->leader_ && g.front() != me) v->leaders_.push_back(g.front());
  }
  // exchange_with() takes the other hosts' leaders in ascending rank order; the
  // groups are in host id order.
  std::sort(v->leaders_.begin(), v->leaders_.end());
  v->hosts_ = std::move(groups);
  const size_t pack = (2 + widest) * sizeof(uint64_t) + (widest + 1) * v->capacity_;
  if (v->leader_) {
    v->packs_.resize(pack);
    v->theirs_.resize(n * pack);  // exchange_with() puts rank p's at p * pack
    v->pack_lens_.assign(n, 0);
  }
  v->msgs_.resize(v->host_ranks_.size());
  v->msg_lens_.resize(v->host_ranks_.size());
  v->spans_.resize(v->host_ranks_.size());
  if (!v->local_) v->own_.resize(v->capacity_ + assembled);
  return v;
}

uint64_t HostsVote::word(int i) const {
  uint64_t w;
  std::memcpy(&w, all_ + i * sizeof w, sizeof w);
  return w;
}

const void* HostsVote::folded_riders() const {
  return word(n_) ? all_ + head_ + n_ * capacity_ : nullptr;
}

size_t HostsVote::length(int p) const { return static_cast<size_t>(word(p)); }

// The fold of `in`'s riders of `bytes` each, in order (reducer.h's fold_in_order).
static void fold_riders_in_order(void* out, const std::vector<const void*>& in, size_t bytes,
                                 const RiderFold& f) {
  fold_in_order(cpu_reducer(), out, in.data(), in.size(), bytes / dtype_size(f.dt), f.dt, f.op);
}

// A host's pack: [rider tag][rider bytes][its ranks' lengths][their riders folded]
// [their messages, one after the other]. Where every rank here sent this rank's rider,
// the riders are folded into one and cut out of the messages; otherwise tag and bytes
// are 0 and the messages go whole.
size_t HostsVote::pack(char* into) {
  const size_t ranks = msgs_.size();
  bool fold = fold_ && fold_->tag;
  for (size_t i = 0; fold && i < ranks; ++i) {
    spans_[i] = fold_->find(msgs_[i], msg_lens_[i]);
    const RiderSpan& s = spans_[i];
    fold = s.tag == fold_->tag && s.bytes > 0 && s.bytes == spans_[0].bytes &&
           s.bytes % dtype_size(fold_->dt) == 0 && s.at + s.bytes <= msg_lens_[i];
  }
  const size_t rider = fold ? spans_[0].bytes : 0;
  const uint64_t w[2] = {fold ? fold_->tag : 0, rider};
  std::memcpy(into, w, sizeof w);
  size_t off = (2 + ranks) * sizeof(uint64_t);
  if (fold) {
    riders_.clear();
    for (size_t i = 0; i < ranks; ++i) riders_.push_back(msgs_[i] + spans_[i].at);
    fold_riders_in_order(into + off, riders_, rider, *fold_);
    off += rider;
  }
  for (size_t i = 0; i < ranks; ++i) {
    const uint64_t len = msg_lens_[i] - rider;
    std::memcpy(into + (2 + i) * sizeof len, &len, sizeof len);
    const size_t before = fold ? spans_[i].at : len;
    std::memcpy(into + off, msgs_[i], before);
    std::memcpy(into + off + before, msgs_[i] + before + rider, len - before);
    off += len;
  }
  return off;
}

void HostsVote::exchange(size_t bytes) {
  if (bytes > capacity_) throw std::logic_error("horovodlite: vote larger than its exchange");
  // 1. This host's ranks see each other's messages.
  if (local_) {
    local_->exchange(bytes);
    for (size_t i = 0; i < msgs_.size(); ++i) {
      msgs_[i] = local_->inbox(static_cast<int>(i));
      msg_lens_[i] = local_->length(static_cast<int>(i));
    }
    // Every rank of this host came. A rank of another host that waits to be woken is
    // woken by the leader's ring, which stays held until the leaders' exchange
    // completes (it cannot complete without that rank): the others' rings are not
    // needed. At 16 KiB on 2x2 hosts the vote takes the link's ~130 us, so every
    // rank's ring went out, two messages across the link per rank and call.
    if (!leader_) set_->tend_vote(true);
  } else {
    msgs_[0] = own_.data();
    msg_lens_[0] = bytes;
  }
  char* all = nullptr;
  size_t all_bytes = 0;
  if (leader_) {
    // 2. The leaders swap their hosts' packs. The local messages stay readable until
    // this rank's next ShmVote exchange (the peers cannot reuse them before).
    const size_t packed = pack(packs_.data());
    const size_t stride = packs_.size();
    set_->exchange_with(leaders_, packs_.data(), packed, theirs_.data(), stride, pack_lens_.data());
    // 3. ... and assemble all N for their hosts. A message whose rider was folded away
    // gets its length back, with a gap where the rider was.
    all = local_ ? local_->outbox() : own_.data() + capacity_;
    uint64_t rider;  // this host's folded rider's bytes (0: none)
    std::memcpy(&rider, packs_.data() + sizeof rider, sizeof rider);
    bool intact = true, folded = rider > 0;
    riders_.clear();
    for (const auto& ranks : hosts_) {
      const int leader = ranks.front();
      const bool mine = leader == host_ranks_.front();
      const char* pack = mine ? packs_.data() : theirs_.data() + leader * stride;
      const size_t got = mine ? packed : pack_lens_[leader];
      auto truncated = [&] {
        return std::runtime_error("horovodlite: truncated vote from the host of rank " +
                                  std::to_string(leader));
      };
      uint64_t w[2];
      size_t off = (2 + ranks.size()) * sizeof(uint64_t);
      if (got < off) throw truncated();
      std::memcpy(w, pack, sizeof w);
      if (w[1] > capacity_ || off + w[1] > got || (w[1] && !fold_)) throw truncated();
      intact = intact && w[1] == 0;
      folded = folded && w[0] == fold_->tag && w[1] == rider;  // fold_ set: rider > 0
      riders_.push_back(pack + off);
      off += w[1];
      for (size_t i = 0; i < ranks.size(); ++i) {
        uint64_t len;
        std::memcpy(&len, pack + (2 + i) * sizeof len, sizeof len);
        if (off + len > got || len + w[1] > capacity_) throw truncated();
        char* slot = all + head_ + ranks[i] * capacity_;
        const size_t before = w[1] ? fold_->find(pack + off, len).at : len;
        if (before > len) throw truncated();
        std::memcpy(slot, pack + off, before);
        std::memcpy(slot + before + w[1], pack + off + before, len - before);
        const uint64_t full = len + w[1];
        std::memcpy(all + ranks[i] * sizeof full, &full, sizeof full);
        off += len;
      }
    }
    if (folded) fold_riders_in_order(all + head_ + set_->size() * capacity_, riders_, rider, *fold_);
    const uint64_t tail[2] = {folded ? rider : 0, intact ? 1u : 0u};
    std::memcpy(all + set_->size() * sizeof(uint64_t), tail, sizeof tail);
    all_bytes = head_ + set_->size() * capacity_ + (folded ? rider : 0);
  }
  if (local_) {
    local_->exchange(all_bytes);  // the others publish nothing
    all_ = local_->inbox(0);      // the leader is the host's local rank 0
  } else {
    all_ = all;
  }
  set_->tend_vote(true);  // every rank came: a ring still held is not needed
  fold_ = nullptr;        // one round's
}

}  // namespace hvdl
