#include "response_cache.h"

namespace hvdl {

static bool same_request(const Request& a, const Request& b) {
  return a.name == b.name && a.op == b.op && a.dtype == b.dtype && a.shape == b.shape &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.root == b.root && a.device == b.device && a.splits == b.splits &&
         a.group == b.group && a.group_size == b.group_size && a.error == b.error;
}

bool ResponseCache::cacheable(const Response& r) {
  // Grouped responses must be released together and join changes who takes part,
  // so both always go through the coordinator.
  // A name made up for an unnamed call is never asked for again: caching it would only
  // push out a name that is.
  return r.ok() && r.group.empty() && r.joined.empty() && r.op != OpType::JOIN &&
         r.op != OpType::BARRIER && !is_auto_name(r.name);
}

ResponseCache::Result ResponseCache::lookup(const Request& q, uint32_t* bit) const {
  auto it = by_name_.find(q.name);
  if (it == by_name_.end()) return MISS;
  *bit = it->second;
  return same_request(slots_[it->second].local, q) ? HIT : CONFLICT;
}

ResponseCache::ResponseCache(size_t capacity)
    : slots_(capacity), prev_(capacity + 1), next_(capacity + 1) {
  const auto end = static_cast<uint32_t>(capacity);
  prev_[end] = next_[end] = end;
  for (size_t i = capacity; i-- > 0;) free_.push_back(static_cast<uint32_t>(i));
}

void ResponseCache::unlink(uint32_t bit) {
  next_[prev_[bit]] = next_[bit];
  prev_[next_[bit]] = prev_[bit];
}

void ResponseCache::link_last(uint32_t bit) {
  const auto end = static_cast<uint32_t>(slots_.size());
  prev_[bit] = prev_[end];
  next_[bit] = end;
  next_[prev_[end]] = bit;
  prev_[end] = bit;
}

void ResponseCache::touch(uint32_t bit) {
  unlink(bit);
  link_last(bit);
}

int64_t ResponseCache::put(const Response& r, const Request& local) {
  if (slots_.empty()) return -1;
  auto it = by_name_.find(r.name);
  if (it != by_name_.end()) {
    Slot& s = slots_[it->second];
    s.resp = r;
    s.local = local;
    touch(it->second);
    return -1;
  }
  int64_t victim = -1;
  if (free_.empty()) {
    victim = next_[slots_.size()];  // the least recently used
    erase(static_cast<uint32_t>(victim));
  }
  const uint32_t pos = free_.back();
  free_.pop_back();
  Slot& s = slots_[pos];
  s.used = true;
  s.resp = r;
  s.local = local;
  link_last(pos);
  by_name_.emplace(r.name, pos);
  return victim;
}

void ResponseCache::erase(uint32_t bit) {
  Slot& s = slots_[bit];
  if (!s.used) return;
  by_name_.erase(s.resp.name);
  s = Slot();
  unlink(bit);
  free_.push_back(bit);
}

}  // namespace hvdl
