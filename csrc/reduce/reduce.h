// CPU reduction kernels. Every collective that combines data calls only these two
// entry points; the ISA-specific implementation is chosen once, at first use, from
// what the running CPU supports (never from the build machine's flags).
#pragma once
#include <cstddef>
#include "../common/dtype.h"

namespace hvdl {

// dst[i] = dst[i] (op) src[i] for i < count. op is SUM, MIN, MAX or PRODUCT
// (AVERAGE reduces as SUM; the caller scales). float16/bfloat16 are computed in
// float32 and rounded to nearest-even once per call. BOOL is not reducible.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// buf[i] = buf[i] * factor. Floats multiply in their own precision (float16/bfloat16
// via float32, float32 by (float)factor, float64 by factor); integers multiply in
// double and truncate toward zero, like numpy's (x * factor).astype(int).
void scale_buffer(void* buf, size_t count, DataType dtype, double factor);

// Name of the kernel set in use ("avx512", "avx2", "generic"), for logs and tests.
const char* reduce_isa();

}  // namespace hvdl
