// Persistent buffers that only grow. Fusion and scratch buffers use them so the hot
// path never allocates: fresh host pages cost a page fault each, which at tens of MiB
// is slower than the transfer itself (and cudaMalloc/cudaFree synchronise the GPU).
#pragma once
#include <cstdlib>
#include <cstring>
#include <new>

namespace hvdl {

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
  HostBuffer() = default;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() override { std::free(data_); }

  char* reserve(size_t bytes) override {
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
