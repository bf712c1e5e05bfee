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

// Where the memory lives is the implementation's business (host here, a GPU's memory
// in engine/cuda_device.cc); algorithms only ask for room.
class Buffer {
 public:
  virtual ~Buffer() = default;
  // Ensures capacity >= bytes; contents are not preserved when it grows.
  virtual char* reserve(size_t bytes) = 0;
};

// Host memory, 4096-byte aligned.
class HostBuffer final : public Buffer {
 public:
  static constexpr size_t kHugePage = size_t(2) << 20;
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() override { std::free(data_); }

  char* reserve(size_t bytes) override {
    if (bytes <= cap_) return data_;
    // Large buffers sit on 2 MiB boundaries and ask for transparent huge pages (as
    // numpy does for its arrays): the single-copy transfers pin the peer's pages one
    // by one, and 4 KiB pages cost 512x the page-table work and TLB misses of 2 MiB ones.
    const size_t align = bytes >= kHugePage ? kHugePage : 4096;
    size_t want = (bytes + align - 1) & ~(align - 1);
    std::free(data_);
    data_ = static_cast<char*>(std::aligned_alloc(align, want));
    if (!data_) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    if (align == kHugePage) madvise(data_, want, MADV_HUGEPAGE);
#endif
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
