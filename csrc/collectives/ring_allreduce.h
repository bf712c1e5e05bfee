#pragma once
#include <cstddef>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "reducer.h"
#include "ring.h"

namespace hvdl {

// In-place allreduce of `count` elements of `buf` over every rank of `t`.
// `postscale` multiplies the result (average = sum with postscale 1/N).
// `scratch` is the caller's persistent receive buffer.
// Device memory works unchanged when `t` and `red` order their work on one stream
// (engine/cuda_device.cc: a staging transport and a kernel reducer on the engine's).
void ring_allreduce(Transport& t, const Reducer& red, void* buf, size_t count, DataType dt,
                    ReduceOp op, double postscale, Buffer& scratch);

}  // namespace hvdl
