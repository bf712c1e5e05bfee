// A persistent, 64-byte aligned host buffer that only grows. Fusion and scratch
// buffers use it so the hot path never allocates: fresh pages cost a page fault
// each, which at tens of MiB is slower than the transfer itself.
#pragma once
#include <cstdlib>
#include <cstring>
#include <new>

namespace hvdl {

class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { std::free(data_); }

  // Ensures capacity >= bytes; contents are not preserved when it grows.
  char* reserve(size_t bytes) {
    if (bytes <= cap_) return data_;
    size_t want = (bytes + 4095) & ~size_t(4095);
    std::free(data_);
    data_ = static_cast<char*>(std::aligned_alloc(4096, want));
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
