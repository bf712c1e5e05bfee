#include "output_pool.h"

#include <cstdlib>
#include <new>
#include <vector>

#include "../common/buffer.h"


namespace hvdl {

namespace {
// Below this, malloc's own free lists already reuse warm memory.
constexpr size_t kPooledFrom = 64 << 10;

// From this size a block is whole 2 MiB pages (buffer.h), as numpy's own arrays are
// from 4 MiB: a pass over a 64 MiB output on 4 KiB pages missed the TLB on every page,
// and the input beside it, numpy's, did not.
constexpr size_t kHugeFrom = 4u << 20;
}  // namespace

// Process-wide: the arrays it hands to Python outlive the engine (shutdown, re-init)
// and give their blocks back here when freed; hvd.empty() uses it without an engine.
OutputPool& OutputPool::get() {
  static OutputPool* p = new OutputPool();  // never destroyed: arrays may outlive statics
  return *p;
}

OutputPool::OutputPool() : limit_(256ull << 20) {}

void OutputPool::set_limit(size_t bytes) {
  {
    std::lock_guard<std::mutex> l(mu_);
    limit_ = bytes;
  }
  if (cached_bytes() > bytes) trim();
}

std::shared_ptr<void> OutputPool::allocate(size_t bytes) {
  if (bytes < kPooledFrom) {
    size_t cap = cache_lines(bytes);
    void* p = std::aligned_alloc(64, cap ? cap : 64);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, std::free);
  }
  const size_t cap = host_block_bytes(bytes, kHugeFrom);
  void* p = nullptr;
  size_t got = cap;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Smallest cached block that fits without wasting more than a quarter of it.
    auto it = free_.lower_bound(cap);
    if (it != free_.end() && it->first - cap <= it->first / 4) {
      p = it->second.block;
      got = it->first;
      cached_ -= got;
      free_.erase(it);
    }
  }
  if (!p) {
    p = allocate_host_block(cap);
    if (!p) throw std::bad_alloc();
  }
  return std::shared_ptr<void>(p, [this, got](void* q) { give_back(q, got); });
}

void OutputPool::give_back(void* p, size_t capacity) {
  std::vector<void*> evicted;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (capacity <= limit_) {
      while (cached_ + capacity > limit_) {
        auto oldest = free_.begin();
        for (auto it = free_.begin(); it != free_.end(); ++it)
          if (it->second.freed < oldest->second.freed) oldest = it;
        evicted.push_back(oldest->second.block);
        cached_ -= oldest->first;
        free_.erase(oldest);
      }
      free_.emplace(capacity, Cached{p, ++clock_});
      cached_ += capacity;
      p = nullptr;
    }
  }
  for (void* q : evicted) std::free(q);  // outside the lock: unmapping takes a while
  std::free(p);
}

size_t OutputPool::cached_bytes() {
  std::lock_guard<std::mutex> l(mu_);
  return cached_;
}

void OutputPool::trim() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& kv : free_) std::free(kv.second.block);
  free_.clear();
  cached_ = 0;
}

}  // namespace hvdl
