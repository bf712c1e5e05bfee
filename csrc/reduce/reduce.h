// CPU reduction kernels. Every collective that combines data calls only these two
// entry points; the ISA-specific implementation is the best the running CPU supports
// (never from the build machine's flags), or the one init() was told to use.
#pragma once
#include <cstddef>
#include <string>
#include "../common/dtype.h"

namespace hvdl {

// dst[i] = dst[i] (op) src[i] for i < count. op is SUM, MIN, MAX or PRODUCT
// (AVERAGE reduces as SUM; the caller scales). float16/bfloat16 are computed in
// float32 and rounded to nearest-even once per call. BOOL is not reducible.
void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// dst[i] = a[i] (op) src[i]: reduce_into with `a` copied to dst first, the same bits,
// in one pass (a fold's first step into a fresh output). dst may be a, not src.
void reduce_pair(void* dst, const void* a, const void* src, size_t count, DataType dtype,
                 ReduceOp op);

// buf[i] = buf[i] * factor. Floats multiply in their own precision (float16/bfloat16
// via float32, float32 by (float)factor, float64 by factor); integers multiply in
// double and truncate toward zero, like numpy's (x * factor).astype(int).
void scale_buffer(void* buf, size_t count, DataType dtype, double factor);

// Name of the kernel set in use ("avx512", "avx2", "generic"), for logs and tests.
const char* reduce_isa();
// Uses the set `name` names ("generic", "avx2", "avx512"; "" or "auto": the best the
// CPU has) from now on; a set the CPU lacks degrades to the next best. Called by init().
void select_reduce_isa(const std::string& name);

}  // namespace hvdl
