// Persistent buffers that only grow. Fusion and scratch buffers use them so the hot
// path never allocates: fresh host pages cost a page fault each, which at tens of MiB
// is slower than the transfer itself (and cudaMalloc/cudaFree synchronise the GPU).
#pragma once
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

namespace hvdl {

// `bytes` rounded up to whole 64-byte cache lines (a buffer that shares no line with
// its neighbour, so ranks writing side by side do not bounce lines).
inline size_t cache_lines(size_t bytes) { return (bytes + 63) & ~size_t(63); }

// Large host blocks sit on 2 MiB boundaries and ask for transparent huge pages (as numpy
// does for its arrays from 4 MiB): single-copy transfers pin the peer's pages one by one,
// and a pass over 4 KiB pages misses the TLB on every page, where 2 MiB ones cost 512x
// less page-table work. `huge_from`: the size from which a block is whole 2 MiB pages.
constexpr size_t kHugePage = size_t(2) << 20;
inline size_t host_block_bytes(size_t bytes, size_t huge_from) {
  const size_t page = bytes >= huge_from ? kHugePage : 4096;
  return (bytes + page - 1) & ~(page - 1);
}
// `cap` bytes from host_block_bytes, to free with std::free: 2 MiB aligned and advised
// as huge pages when `cap` is whole 2 MiB pages (advice only: refused, nothing changes),
// else 4096 aligned. Null when out of memory.
inline void* allocate_host_block(size_t cap) {
  const bool huge = cap % kHugePage == 0;
  void* p = std::aligned_alloc(huge ? kHugePage : 4096, cap);
#ifdef MADV_HUGEPAGE
  if (p && huge) madvise(p, cap, MADV_HUGEPAGE);
#endif
  return p;
}

// Where the memory lives is the implementation's business (host here, a GPU's memory
// in engine/cuda_device.cc); algorithms only ask for room.
class Buffer {
 public:
  virtual ~Buffer() = default;
  // Ensures capacity >= bytes; contents are not preserved when it grows.
  virtual char* reserve(size_t bytes) = 0;
};

// Host memory, 4096-byte aligned, on huge pages from 2 MiB (allocate_host_block).
class HostBuffer final : public Buffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() override { std::free(data_); }

  char* reserve(size_t bytes) override {
    if (bytes <= cap_) return data_;
    const size_t want = host_block_bytes(bytes, kHugePage);
    std::free(data_);
    data_ = static_cast<char*>(allocate_host_block(want));
    if (!data_) throw std::bad_alloc();
    std::memset(data_, 0, want);  // touch every page now, not inside a collective
    cap_ = want;
    return data_;
  }
  char* data() const { return data_; }
  size_t capacity() const { return cap_; }

 private:
  char* data_ = nullptr;
  size_t cap_ = 0;
};

}  // namespace hvdl
