#include "hosts_vote.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <stdexcept>

#include "../common/buffer.h"

namespace hvdl {

std::unique_ptr<HostsVote> HostsVote::create(Transport& set, const std::vector<int>& hosts,
                                             size_t capacity) {
  const int n = set.size(), me = set.rank();
  if (n < 3 || hosts.size() != static_cast<size_t>(n)) return nullptr;
  std::map<int, std::vector<int>> by_host;  // host id -> its set ranks, ascending
  for (int i = 0; i < n; ++i) by_host[hosts[i]].push_back(i);
  // One host: the ShmVote alone serves. One rank per host: nothing to share.
  if (by_host.size() < 2 || by_host.size() == static_cast<size_t>(n)) return nullptr;

  std::unique_ptr<HostsVote> v(new HostsVote());
  v->capacity_ = cache_lines(capacity);  // every slot on its own cache lines, words aligned
  v->head_ = cache_lines(n * sizeof(uint64_t));
  v->host_ranks_ = by_host[hosts[me]];
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
    v->local_ = ShmVote::create(*v->local_t_, v->head_ + n * v->capacity_, o);
    ok = v->local_ != nullptr;
  }
  uint64_t all = ok ? 1 : 0;
  set.allreduce_and(&all, 1);  // one host may have failed where the others succeeded
  if (!all) return nullptr;

  size_t widest = 0;
  for (auto& kv : by_host) {
    v->hosts_.push_back(kv.second);
    widest = std::max(widest, kv.second.size());
  }
  const size_t pack = widest * (sizeof(uint64_t) + v->capacity_);
  if (v->leader_) {
    for (int i = 0; i < n; ++i)  // the other hosts' leaders, ascending (exchange_with)
      if (i != me && by_host[hosts[i]].front() == i) v->leaders_.push_back(i);
    v->packs_.resize(pack);
    v->theirs_.resize(n * pack);  // exchange_with() puts rank p's at p * pack
    v->pack_lens_.assign(n, 0);
  }
  v->msgs_.resize(v->host_ranks_.size());
  v->msg_lens_.resize(v->host_ranks_.size());
  if (!v->local_) v->own_.resize(v->capacity_ + v->head_ + n * v->capacity_);
  return v;
}

size_t HostsVote::length(int p) const {
  uint64_t len;
  std::memcpy(&len, all_ + p * sizeof len, sizeof len);
  return static_cast<size_t>(len);
}

// A host's pack: [its ranks' lengths][their messages, one after the other].
static size_t pack_host(char* into, const std::vector<const char*>& msgs,
                        const std::vector<size_t>& lens) {
  size_t off = msgs.size() * sizeof(uint64_t);
  for (size_t i = 0; i < msgs.size(); ++i) {
    const uint64_t len = lens[i];
    std::memcpy(into + i * sizeof len, &len, sizeof len);
    std::memcpy(into + off, msgs[i], lens[i]);
    off += lens[i];
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
  } else {
    msgs_[0] = own_.data();
    msg_lens_[0] = bytes;
  }
  char* all = nullptr;
  size_t all_bytes = 0;
  if (leader_) {
    // 2. The leaders swap their hosts' messages. The local ones stay readable until
    // this rank's next ShmVote exchange (the peers cannot reuse them before).
    const size_t packed = pack_host(packs_.data(), msgs_, msg_lens_);
    const size_t stride = packs_.size();
    set_->exchange_with(leaders_, packs_.data(), packed, theirs_.data(), stride, pack_lens_.data());
    // 3. ... and assemble all N for their hosts: [N lengths][N slots].
    all = local_ ? local_->outbox() : own_.data() + capacity_;
    for (const auto& ranks : hosts_) {
      const int leader = ranks.front();
      const bool mine = leader == host_ranks_.front();
      const char* pack = mine ? packs_.data() : theirs_.data() + leader * stride;
      const size_t got = mine ? packed : pack_lens_[leader];
      size_t off = ranks.size() * sizeof(uint64_t);
      for (size_t i = 0; i < ranks.size(); ++i) {
        uint64_t len;
        std::memcpy(&len, pack + i * sizeof len, sizeof len);
        if (off + len > got || len > capacity_)
          throw std::runtime_error("horovodlite: truncated vote from the host of rank " +
                                   std::to_string(ranks.front()));
        std::memcpy(all + ranks[i] * sizeof len, &len, sizeof len);
        std::memcpy(all + head_ + ranks[i] * capacity_, pack + off, len);
        off += len;
      }
    }
    all_bytes = head_ + set_->size() * capacity_;
  }
  if (local_) {
    local_->exchange(all_bytes);  // the others publish nothing
    all_ = local_->inbox(0);      // the leader is the host's local rank 0
  } else {
    all_ = all;
  }
  set_->tend_vote(true);  // every rank came: a ring still held is not needed
}

}  // namespace hvdl
