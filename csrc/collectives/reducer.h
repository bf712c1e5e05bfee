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

}  // namespace hvdl
