#pragma once
#include <cstddef>
#include "../common/dtype.h"

namespace hvdl {
// Fills buf with the neutral element of op (0 for sum, 1 for product, the largest
// value for min, the smallest for max): what a joined rank contributes.
void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op);
}  // namespace hvdl
