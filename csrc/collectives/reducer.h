// What an algorithm needs to combine data, independent of where the data lives.
// The CPU reducer calls our vectorised kernels; a device reducer can launch kernels.
#pragma once
#include <cstddef>
#include <cstring>

#include "../common/dtype.h"

namespace hvdl {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) const = 0;
  // dst = a (op) src: reduce() with `a` copied to dst first, the same bits. dst may be
  // a, not src. The default copies with memcpy, so it is for host memory: its callers
  // (the shared-memory folds) copy that way too. The CPU's runs in one pass.
  virtual void reduce_pair(void* dst, const void* a, const void* src, size_t count, DataType dt,
                           ReduceOp op) const {
    if (dst != a) std::memcpy(dst, a, count * dtype_size(dt));
    reduce(dst, src, count, dt, op);
  }
  virtual void scale(void* buf, size_t count, DataType dt, double factor) const = 0;
};

// The CPU implementation (reduce/ kernels).
const Reducer& cpu_reducer();

// out = in[0] (op) in[1] (op) ... (op) in[k-1], left to right (one input: a copy). The
// one order of a fold that several places must repeat bit for bit (the riders' fold by
// hosts: engine/hosts_vote.h and the engine's own). `out` may not be an input but in[0].
inline void fold_in_order(const Reducer& red, void* out, const void* const* in, size_t k,
                          size_t count, DataType dt, ReduceOp op) {
  if (k == 1) {
    if (out != in[0]) std::memcpy(out, in[0], count * dtype_size(dt));
    return;
  }
  red.reduce_pair(out, in[0], in[1], count, dt, op);
  for (size_t i = 2; i < k; ++i) red.reduce(out, in[i], count, dt, op);
}

}  // namespace hvdl
