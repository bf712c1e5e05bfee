// Per-element arithmetic of every supported dtype, written once so that reduce, scale
// and the scaling copy cannot drift apart. The rounding rules are the contract in
// gpu_kernels.h; every float operation uses an explicit _rn intrinsic so nvcc can
// never contract a multiply and an add into an FMA (which would change the bits).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include "../../csrc/common/dtype.h"

namespace hvdl::gpu::detail {

// 16-bit floats are kept as raw bits: the kernels only ever widen them to float32,
// and raw storage keeps MIN/MAX able to return an input bit-for-bit.
struct f16 { uint16_t bits; };
struct bf16 { uint16_t bits; };

template <typename T>
inline constexpr bool kIsHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;

__device__ __forceinline__ float widen(f16 x) { return __half2float(__ushort_as_half(x.bits)); }
// bfloat16 is the top half of a float32, so widening is exact and needs no table.
__device__ __forceinline__ float widen(bf16 x) {
  return __uint_as_float(static_cast<uint32_t>(x.bits) << 16);
}

template <typename T> __device__ __forceinline__ T narrow(float v);
template <> __device__ __forceinline__ f16 narrow<f16>(float v) {
  return f16{__half_as_ushort(__float2half_rn(v))};
}
template <> __device__ __forceinline__ bf16 narrow<bf16>(float v) {
  return bf16{__bfloat16_as_ushort(__float2bfloat16_rn(v))};
}

// Value used for comparisons: 16-bit floats compare as float32, the rest as themselves.
template <typename T> __device__ __forceinline__ auto cmp_value(T x) {
  if constexpr (kIsHalf<T>) return widen(x); else return x;
}

template <typename T> __device__ __forceinline__ bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>) return x != x; else return false;
}

// ---- reduction ops --------------------------------------------------------------

// The unsigned type integer arithmetic runs in: at least unsigned int, because a
// narrower one is promoted to int, where 16-bit products can overflow.
template <typename I>
using WideU = std::conditional_t<(sizeof(I) < sizeof(unsigned)), unsigned, std::make_unsigned_t<I>>;

struct OpSum {
  static constexpr bool kSelects = false;
  __device__ static float arith(float a, float b) { return __fadd_rn(a, b); }
  __device__ static double arith(double a, double b) { return __dadd_rn(a, b); }
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  __device__ static I arith(I a, I b) {
    // Unsigned arithmetic makes the two's-complement wrap defined behaviour (WideU:
    // 16-bit operands would otherwise be promoted to signed int).
    using U = WideU<I>;
    return static_cast<I>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  }
};

struct OpProd {
  static constexpr bool kSelects = false;
  __device__ static float arith(float a, float b) { return __fmul_rn(a, b); }
  __device__ static double arith(double a, double b) { return __dmul_rn(a, b); }
  template <typename I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  __device__ static I arith(I a, I b) {
    using U = WideU<I>;
    return static_cast<I>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
  }
};

// MIN/MAX return one operand unchanged (no rounding, NaN payloads kept): a NaN in a
// (dst) wins, then a NaN in b, then b only if strictly better, so -0/+0 ties keep dst.
struct OpMin {
  static constexpr bool kSelects = true;
  template <typename C> __device__ static bool take_b(C a, C b) {
    return !is_nan(a) && (is_nan(b) || b < a);
  }
};
struct OpMax {
  static constexpr bool kSelects = true;
  template <typename C> __device__ static bool take_b(C a, C b) {
    return !is_nan(a) && (is_nan(b) || b > a);
  }
};

template <typename Op, typename T> __device__ __forceinline__ T combine(T a, T b) {
  if constexpr (Op::kSelects) return Op::take_b(cmp_value(a), cmp_value(b)) ? b : a;
  else if constexpr (kIsHalf<T>) return narrow<T>(Op::arith(widen(a), widen(b)));
  else return Op::arith(a, b);
}

// ---- scaling ----------------------------------------------------------------------

// Both precisions of the factor travel together; each dtype uses the one its rule names.
struct Factor {
  float f;
  double d;
};

template <typename T> __device__ __forceinline__ T scale_elem(T x, Factor k) {
  if constexpr (kIsHalf<T>) {
    return narrow<T>(__fmul_rn(widen(x), k.f));
  } else if constexpr (std::is_same_v<T, float>) {
    return __fmul_rn(x, k.f);
  } else if constexpr (std::is_same_v<T, double>) {
    return __dmul_rn(x, k.d);
  } else {
    const double v = __dmul_rn(static_cast<double>(x), k.d);
    // Truncate through int64 so narrow types wrap like the CPU's int conversion does
    // instead of saturating as a direct cvt to 8/32 bits would.
    return static_cast<T>(static_cast<long long>(v));
  }
}

// ---- dtype dispatch ---------------------------------------------------------------

// Calls fn(T{}) with the storage type of `dtype`; BOOL and unknown values throw.
template <typename Fn> void dispatch_dtype(DataType dtype, const char* who, Fn&& fn) {
  switch (dtype) {
    case DataType::UINT8: fn(uint8_t{}); return;
    case DataType::INT8: fn(int8_t{}); return;
    case DataType::INT16: fn(int16_t{}); return;
    case DataType::UINT16: fn(uint16_t{}); return;
    case DataType::INT32: fn(int32_t{}); return;
    case DataType::INT64: fn(int64_t{}); return;
    case DataType::FLOAT16: fn(f16{}); return;
    case DataType::BFLOAT16: fn(bf16{}); return;
    case DataType::FLOAT32: fn(float{}); return;
    case DataType::FLOAT64: fn(double{}); return;
    default: break;
  }
  throw std::invalid_argument(std::string("hvdl::gpu::") + who + ": unsupported dtype " +
                              dtype_name(dtype));
}

}  // namespace hvdl::gpu::detail
