#include "output_pool.h"

#include <cstdlib>
#include <new>

#include "../common/env.h"

namespace hvdl {

namespace {
// Below this, malloc's own free lists already reuse warm memory.
constexpr size_t kPooledFrom = 64 << 10;
}  // namespace

OutputPool& OutputPool::get() {
  static OutputPool* p = new OutputPool();  // never destroyed: arrays may outlive statics
  return *p;
}

OutputPool::OutputPool() : limit_(static_cast<size_t>(env_int("OUTPUT_CACHE_BYTES", 256ll << 20))) {}

std::shared_ptr<void> OutputPool::allocate(size_t bytes) {
  if (bytes < kPooledFrom) {
    size_t cap = (bytes + 63) & ~size_t(63);
    void* p = std::aligned_alloc(64, cap ? cap : 64);
    if (!p) throw std::bad_alloc();
    return std::shared_ptr<void>(p, std::free);
  }
  const size_t cap = (bytes + 4095) & ~size_t(4095);
  void* p = nullptr;
  size_t got = cap;
  {
    std::lock_guard<std::mutex> l(mu_);
    // Smallest cached block that fits without wasting more than a quarter of it.
    auto it = free_.lower_bound(cap);
    if (it != free_.end() && it->first - cap <= it->first / 4) {
      p = it->second;
      got = it->first;
      cached_ -= got;
      free_.erase(it);
    }
  }
  if (!p) {
    p = std::aligned_alloc(4096, cap);
    if (!p) throw std::bad_alloc();
  }
  return std::shared_ptr<void>(p, [this, got](void* q) { give_back(q, got); });
}

void OutputPool::give_back(void* p, size_t capacity) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (cached_ + capacity <= limit_) {
      free_.emplace(capacity, p);
      cached_ += capacity;
      return;
    }
  }
  std::free(p);
}

size_t OutputPool::cached_bytes() {
  std::lock_guard<std::mutex> l(mu_);
  return cached_;
}

void OutputPool::trim() {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& kv : free_) std::free(kv.second);
  free_.clear();
  cached_ = 0;
}

}  // namespace hvdl
