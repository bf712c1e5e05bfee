// Outputs whose size is only known after negotiation (allgather, alltoall) or that
// the caller wants fresh (broadcast, reducescatter) are allocated here and handed to
// the caller, who views them without a copy. A large fresh allocation is served by
// new pages, each costing a page fault on first touch — at tens of MiB that is
// slower than the transfer itself. So freed outputs are kept, by size, for the next
// collective that needs one (training loops ask for the same sizes every step),
// like a caching allocator. The cache is bounded (HOROVODLITE_OUTPUT_CACHE_BYTES,
// default 256 MiB): a freed block evicts the least recently freed ones to fit, so
// the sizes in use now stay cached; a block larger than the bound is not kept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace hvdl {

class OutputPool {
 public:
  static OutputPool& get();  // process-wide: see output_pool.cc
  // 64-byte aligned (4096 for large blocks), never null, even for 0 bytes.
  std::shared_ptr<void> allocate(size_t bytes);
  size_t cached_bytes();
  void trim();  // free every cached block
  // Most bytes kept cached (the OUTPUT_CACHE_BYTES setting, applied at init()).
  void set_limit(size_t bytes);
  size_t limit() {
    std::lock_guard<std::mutex> l(mu_);
    return limit_;
  }

 private:
  OutputPool();
  void give_back(void* p, size_t capacity);
  std::mutex mu_;
  struct Cached {
    void* block;
    uint64_t freed;  // order of give_back, for eviction
  };
  std::multimap<size_t, Cached> free_;  // capacity -> block
  size_t cached_ = 0, limit_;
  uint64_t clock_ = 0;
};

}  // namespace hvdl
