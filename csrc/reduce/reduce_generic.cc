// Portable reduction kernels: the reference every ISA-specific path must match bit
// for bit, and the fallback for any (dtype, op) pair those paths do not cover.
//
// Pointers are assumed naturally aligned for their element type (any address a
// framework tensor or numpy array has); nothing beyond that is assumed.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "reduce.h"

namespace hvdl {
namespace detail {

static uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// IEEE binary16 -> binary32, exact. NaNs come out quiet with their payload kept,
// which is what F16C's vcvtph2ps does, so vector and scalar paths agree.
float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) {
    if (man == 0) return bits_float(sign | 0x7f800000u);
    return bits_float(sign | 0x7fc00000u | (man << 13));
  }
  if (exp == 0) {
    // Zero or subnormal: man * 2^-24 is exact and lands in float's normal range,
    // so this is unaffected by flush-to-zero modes.
    float mag = static_cast<float>(man) * 0x1p-24f;
    return bits_float(sign | float_bits(mag));
  }
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// binary32 -> binary16 with round-to-nearest-even; overflow goes to inf, NaN stays
// NaN (quieted, top payload bits kept), matching vcvtps2ph with imm=0.
uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);
  if (a >= 0x38800000u) {  // result is a normal half, or overflows to inf
    // Adding 0xfff (+1 when the kept lsb is odd) rounds half to even; a carry out
    // of the mantissa bumps the exponent, which is exactly the right result.
    const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    const uint32_t h = (r - (112u << 23)) >> 13;
    return sign | static_cast<uint16_t>(h >= 0x7c00u ? 0x7c00u : h);
  }
  // Subnormal half (or zero): value * 2^24 rounded to an integer.
  const uint32_t e = a >> 23;
  if (e < 102) return sign;  // below 2^-25: rounds to zero (includes float subnormals)
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - e;  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;  // may carry into 0x400: fine
  return sign | static_cast<uint16_t>(q);
}

float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// Round-to-nearest-even on the dropped 16 bits. A NaN whose payload lives only in
// those bits would otherwise truncate to inf, so NaNs get the quiet bit instead.
uint16_t float_to_bf16(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

namespace {

// Integer arithmetic goes through the unsigned type so overflow wraps (like numpy)
// instead of being undefined.
// Types narrower than unsigned int would be promoted to (signed) int, where a 16-bit
// product can overflow, so they compute in unsigned int and keep the low bits.
template <typename T>
struct IntOps {
  using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
  static T sum(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b))); }
  static T prod(T a, T b) { return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b))); }
  static T min(T a, T b) { return b < a ? b : a; }
  static T max(T a, T b) { return b > a ? b : a; }
};

// np.minimum/np.maximum: a NaN in either operand wins. The exact form (a is dst)
// is mirrored by the vector paths, including which operand a tie returns.
template <typename F>
struct FloatOps {
  static F sum(F a, F b) { return a + b; }
  static F prod(F a, F b) { return a * b; }
  static F min(F a, F b) { return (a < b || a != a) ? a : b; }
  static F max(F a, F b) { return (a > b || a != a) ? a : b; }
};

// Element i depends only on d[i] and s[i], so there is no loop-carried dependency
// even when dst == src; telling the compiler so (and using fixed-size blocks, so no
// remainder loop is needed) lets even -O2's cheap vectoriser emit SIMD on any target.
#if defined(__clang__)
#define HVDL_NO_LOOP_DEPS _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define HVDL_NO_LOOP_DEPS _Pragma("GCC ivdep")
#else
#define HVDL_NO_LOOP_DEPS
#endif

template <typename T, T (*Fn)(T, T)>
void apply(T* d, const T* s, size_t n) {
  constexpr size_t kBlock = 64 / sizeof(T);
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    T* db = d + i;
    const T* sb = s + i;
    HVDL_NO_LOOP_DEPS
    for (size_t j = 0; j < kBlock; ++j) db[j] = Fn(db[j], sb[j]);
  }
  for (; i < n; ++i) d[i] = Fn(d[i], s[i]);
}

template <typename T, typename Ops>
void reduce_typed(void* dst, const void* src, size_t n, ReduceOp op) {
  T* d = static_cast<T*>(dst);
  const T* s = static_cast<const T*>(src);
  switch (op) {
    case ReduceOp::SUM: case ReduceOp::AVERAGE: apply<T, Ops::sum>(d, s, n); return;
    case ReduceOp::PRODUCT: apply<T, Ops::prod>(d, s, n); return;
    case ReduceOp::MIN: apply<T, Ops::min>(d, s, n); return;
    case ReduceOp::MAX: apply<T, Ops::max>(d, s, n); return;
    default: break;
  }
  throw std::invalid_argument(std::string("reduce_into: unsupported op ") + reduce_op_name(op));
}

// 16-bit floats: widen, combine in float32, round once.
template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float), float (*Fn)(float, float)>
void apply16(uint16_t* d, const uint16_t* s, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = Narrow(Fn(Widen(d[i]), Widen(s[i])));
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void reduce16(void* dst, const void* src, size_t n, ReduceOp op) {
  using F = FloatOps<float>;
  uint16_t* d = static_cast<uint16_t*>(dst);
  const uint16_t* s = static_cast<const uint16_t*>(src);
  switch (op) {
    case ReduceOp::SUM: case ReduceOp::AVERAGE: apply16<Widen, Narrow, F::sum>(d, s, n); return;
    case ReduceOp::PRODUCT: apply16<Widen, Narrow, F::prod>(d, s, n); return;
    case ReduceOp::MIN: apply16<Widen, Narrow, F::min>(d, s, n); return;
    case ReduceOp::MAX: apply16<Widen, Narrow, F::max>(d, s, n); return;
    default: break;
  }
  throw std::invalid_argument(std::string("reduce_into: unsupported op ") + reduce_op_name(op));
}

// Truncate toward zero like a C cast, but saturate out-of-range values and map NaN
// to 0 instead of invoking undefined behaviour (numpy's result there is
// platform-specific anyway).
template <typename T>
T double_to_int(double v) {
  if (v != v) return 0;
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
  // 2^(bits) as a double is exact; anything >= it does not fit.
  constexpr double hi_excl = static_cast<double>(std::numeric_limits<T>::max() / 2 + 1) * 2.0;
  if (v <= lo) return std::numeric_limits<T>::min();
  if (v >= hi_excl) return std::numeric_limits<T>::max();
  return static_cast<T>(v);  // in range after truncation (v > lo - 1 and v < max + 1)
}

template <typename T>
void scale_int(void* buf, size_t n, double factor) {
  T* p = static_cast<T*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = double_to_int<T>(static_cast<double>(p[i]) * factor);
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void scale16(void* buf, size_t n, float factor) {
  uint16_t* p = static_cast<uint16_t*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] = Narrow(Widen(p[i]) * factor);
}

template <typename F>
void scale_float(void* buf, size_t n, F factor) {
  F* p = static_cast<F*>(buf);
  for (size_t i = 0; i < n; ++i) p[i] *= factor;
}

}  // namespace

void reduce_generic(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::UINT8: return reduce_typed<uint8_t, IntOps<uint8_t>>(dst, src, count, op);
    case DataType::INT8: return reduce_typed<int8_t, IntOps<int8_t>>(dst, src, count, op);
    case DataType::INT16: return reduce_typed<int16_t, IntOps<int16_t>>(dst, src, count, op);
    case DataType::UINT16: return reduce_typed<uint16_t, IntOps<uint16_t>>(dst, src, count, op);
    case DataType::INT32: return reduce_typed<int32_t, IntOps<int32_t>>(dst, src, count, op);
    case DataType::INT64: return reduce_typed<int64_t, IntOps<int64_t>>(dst, src, count, op);
    case DataType::FLOAT16: return reduce16<half_to_float, float_to_half>(dst, src, count, op);
    case DataType::BFLOAT16: return reduce16<bf16_to_float, float_to_bf16>(dst, src, count, op);
    case DataType::FLOAT32: return reduce_typed<float, FloatOps<float>>(dst, src, count, op);
    case DataType::FLOAT64: return reduce_typed<double, FloatOps<double>>(dst, src, count, op);
    default: break;
  }
  throw std::invalid_argument(std::string("reduce_into: unsupported dtype ") + dtype_name(dtype));
}

void scale_generic(void* buf, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::UINT8: return scale_int<uint8_t>(buf, count, factor);
    case DataType::INT8: return scale_int<int8_t>(buf, count, factor);
    case DataType::INT16: return scale_int<int16_t>(buf, count, factor);
    case DataType::UINT16: return scale_int<uint16_t>(buf, count, factor);
    case DataType::INT32: return scale_int<int32_t>(buf, count, factor);
    case DataType::INT64: return scale_int<int64_t>(buf, count, factor);
    case DataType::FLOAT16:
      return scale16<half_to_float, float_to_half>(buf, count, static_cast<float>(factor));
    case DataType::BFLOAT16:
      return scale16<bf16_to_float, float_to_bf16>(buf, count, static_cast<float>(factor));
    case DataType::FLOAT32: return scale_float<float>(buf, count, static_cast<float>(factor));
    case DataType::FLOAT64: return scale_float<double>(buf, count, factor);
    default: break;
  }
  throw std::invalid_argument(std::string("scale_buffer: unsupported dtype ") + dtype_name(dtype));
}

}  // namespace detail
}  // namespace hvdl
