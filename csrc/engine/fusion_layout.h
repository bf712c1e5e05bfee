// Where each tensor of a fused group sits in the fusion buffer: 64-byte aligned
// offsets, so copies in and out hit aligned addresses (unaligned source/destination
// pairs make glibc's memcpy up to 40x slower on some CPUs) and every dtype is aligned.
#pragma once
#include <cstddef>
#include <functional>
#include <vector>

#include "message.h"

namespace hvdl {

class FusionLayout {
 public:
  static constexpr size_t kAlign = 64;
  static size_t align(size_t b) { return (b + kAlign - 1) & ~(kAlign - 1); }

  FusionLayout(const std::vector<const Response*>& group,
               const std::function<size_t(const Response&)>& bytes_of) {
    size_t off = 0;
    for (auto* r : group) {
      size_t b = bytes_of(*r);
      offsets_.push_back(off);
      bytes_.push_back(b);
      off += align(b);
    }
    total_ = off;
  }
  size_t offset(size_t i) const { return offsets_[i]; }
  size_t bytes(size_t i) const { return bytes_[i]; }
  size_t total_bytes() const { return total_; }

 private:
  std::vector<size_t> offsets_, bytes_;
  size_t total_ = 0;
};

}  // namespace hvdl
