// A list of tensors that a collective treats as one buffer: each one's elements
// follow the previous one's. Algorithms work on element ranges of that buffer and
// map them back to the tensors here, so a batch is reduced as if packed into a
// fusion buffer, without the copies into and out of one.
#pragma once
#include <algorithm>
#include <cstddef>
#include <vector>

namespace hvdl {

struct Span {
  const void* in;
  void* out;  // may equal in
  size_t count;
};

class SpanMap {
 public:
  explicit SpanMap(const std::vector<Span>& spans) {
    for (const Span& s : spans) starts_.push_back(count_), count_ += s.count;
  }
  size_t count() const { return count_; }

  // Calls fn(index of the span, offset in it, elements, offset in the range) for each
  // piece of the elements [off, off + len) in turn.
  template <class Fn>
  void each_part(const std::vector<Span>& spans, size_t off, size_t len, Fn&& fn) const {
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), off) - starts_.begin() - 1;
    for (size_t done = 0; done < len; ++i) {
      const size_t at = off + done - starts_[i];
      const size_t k = std::min(spans[i].count - at, len - done);
      if (k) fn(i, at, k, done);
      done += k;
    }
  }

 private:
  std::vector<size_t> starts_;
  size_t count_ = 0;
};

}  // namespace hvdl
