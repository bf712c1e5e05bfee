// How `count` elements are cut into `parts` contiguous blocks: the first count % parts
// blocks get one extra element. The ring, reducescatter and tests all share this.
#pragma once
#include <cstddef>

namespace hvdl {

inline size_t block_count(size_t count, int parts, int i) {
  return count / parts + (static_cast<size_t>(i) < count % parts ? 1 : 0);
}
inline size_t block_offset(size_t count, int parts, int i) {
  size_t base = count / parts, extra = count % parts, ui = static_cast<size_t>(i);
  return ui * base + (ui < extra ? ui : extra);
}

// Block i of `count` elements of `elem_bytes` each, in bytes.
struct ByteSpan {
  size_t at = 0, bytes = 0;
};
inline ByteSpan block_span(size_t count, int parts, int i, size_t elem_bytes) {
  return {block_offset(count, parts, i) * elem_bytes, block_count(count, parts, i) * elem_bytes};
}

}  // namespace hvdl
