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
  return r.ok() && r.group.empty() && r.joined.empty() && r.op != OpType::JOIN &&
         r.op != OpType::BARRIER;
}

ResponseCache::Result ResponseCache::lookup(const Request& q, uint32_t* bit) const {
  auto it = by_name_.find(q.name);
  if (it == by_name_.end()) return MISS;
  *bit = it->second;
  return same_request(slots_[it->second].local, q) ? HIT : CONFLICT;
}

int64_t ResponseCache::put(const Response& r, const Request& local) {
  if (slots_.empty()) return -1;
  auto it = by_name_.find(r.name);
  if (it != by_name_.end()) {
    Slot& s = slots_[it->second];
    s.resp = r;
    s.local = local;
    s.last_use = ++clock_;
    return -1;
  }
  int64_t victim = -1;
  uint32_t pos = 0;
  uint64_t oldest = UINT64_MAX;
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (!slots_[i].used) { pos = i; oldest = 0; victim = -1; break; }
    if (slots_[i].last_use < oldest) { oldest = slots_[i].last_use; pos = i; victim = i; }
  }
  if (victim >= 0) erase(pos);
  Slot& s = slots_[pos];
  s.used = true;
  s.resp = r;
  s.local = local;
  s.last_use = ++clock_;
  by_name_[r.name] = pos;
  return victim;
}

void ResponseCache::erase(uint32_t bit) {
  Slot& s = slots_[bit];
  if (!s.used) return;
  by_name_.erase(s.resp.name);
  s = Slot();
}

}  // namespace hvdl
