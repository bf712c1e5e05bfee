#include "identity.h"

#include <cstdint>
#include <cstring>
#include <limits>

namespace hvdl {

template <class T>
static void fill(void* buf, size_t n, T v) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = v;
}

template <class T>
static void fill_for(void* buf, size_t n, ReduceOp op) {
  using L = std::numeric_limits<T>;
  T lo = L::has_infinity ? -L::infinity() : L::lowest();
  T hi = L::has_infinity ? L::infinity() : L::max();
  switch (op) {
    case ReduceOp::MIN: fill<T>(buf, n, hi); break;
    case ReduceOp::MAX: fill<T>(buf, n, lo); break;
    case ReduceOp::PRODUCT: fill<T>(buf, n, T(1)); break;
    default: std::memset(buf, 0, n * sizeof(T));
  }
}

// Half-precision identities as bit patterns: +inf, -inf, 1.0.
static void fill_half(void* buf, size_t n, ReduceOp op, uint16_t inf, uint16_t one) {
  switch (op) {
    case ReduceOp::MIN: fill<uint16_t>(buf, n, inf); break;
    case ReduceOp::MAX: fill<uint16_t>(buf, n, static_cast<uint16_t>(inf | 0x8000)); break;
    case ReduceOp::PRODUCT: fill<uint16_t>(buf, n, one); break;
    default: std::memset(buf, 0, n * 2);
  }
}

void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) {
  switch (dt) {
    case DataType::UINT8: case DataType::BOOL: fill_for<uint8_t>(buf, count, op); break;
    case DataType::INT8: fill_for<int8_t>(buf, count, op); break;
    case DataType::INT16: fill_for<int16_t>(buf, count, op); break;
    case DataType::UINT16: fill_for<uint16_t>(buf, count, op); break;
    case DataType::INT32: fill_for<int32_t>(buf, count, op); break;
    case DataType::INT64: fill_for<int64_t>(buf, count, op); break;
    case DataType::FLOAT32: fill_for<float>(buf, count, op); break;
    case DataType::FLOAT64: fill_for<double>(buf, count, op); break;
    case DataType::FLOAT16: fill_half(buf, count, op, 0x7C00, 0x3C00); break;
    case DataType::BFLOAT16: fill_half(buf, count, op, 0x7F80, 0x3F80); break;
  }
}

}  // namespace hvdl
