// What an algorithm needs to combine data, independent of where the data lives.
// The CPU reducer calls our vectorised kernels; a device reducer can launch kernels.
#pragma once
#include <cstddef>

#include "../common/dtype.h"

namespace hvdl {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) const = 0;
  virtual void scale(void* buf, size_t count, DataType dt, double factor) const = 0;
};

// The CPU implementation (reduce/ kernels).
const Reducer& cpu_reducer();

}  // namespace hvdl
