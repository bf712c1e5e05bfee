// AVX2 + F16C kernels for the hot (dtype, op) pairs. The ISA is enabled per function
// with a target attribute, because the build uses one set of flags for every file
// and must still run on CPUs without AVX2; the dispatcher only calls in here after
// checking the CPU.
//
// Every result must be bitwise identical to reduce_generic.cc, so the operations
// mirror it exactly: same operand order for min/max, same RNE rounding for the
// 16-bit floats. Tails go through a zero-padded stack block and the same vector
// code, so there is no separate scalar path to keep in sync.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "reduce.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define HVDL_AVX2 __attribute__((target("avx2,f16c")))

namespace hvdl {
namespace detail {
namespace {

// ---- element-wise ops on registers; `a` is dst, `b` is src ---------------------

// min_ps(a, b) is (a < b ? a : b): the generic formula except when a is NaN, where
// generic returns a; patch those lanes.
struct Add {
  HVDL_AVX2 __m256 f(__m256 a, __m256 b) const { return _mm256_add_ps(a, b); }
  HVDL_AVX2 __m256d d(__m256d a, __m256d b) const { return _mm256_add_pd(a, b); }
  HVDL_AVX2 __m256i i(__m256i a, __m256i b) const { return _mm256_add_epi32(a, b); }
  HVDL_AVX2 __m256i w(__m256i a, __m256i b) const { return _mm256_add_epi16(a, b); }
  HVDL_AVX2 __m256i uw(__m256i a, __m256i b) const { return _mm256_add_epi16(a, b); }
};
struct Mul {
  HVDL_AVX2 __m256 f(__m256 a, __m256 b) const { return _mm256_mul_ps(a, b); }
  HVDL_AVX2 __m256d d(__m256d a, __m256d b) const { return _mm256_mul_pd(a, b); }
  HVDL_AVX2 __m256i i(__m256i a, __m256i b) const { return _mm256_mullo_epi32(a, b); }
  // The low 16 bits of a product are the same for signed and unsigned operands.
  HVDL_AVX2 __m256i w(__m256i a, __m256i b) const { return _mm256_mullo_epi16(a, b); }
  HVDL_AVX2 __m256i uw(__m256i a, __m256i b) const { return _mm256_mullo_epi16(a, b); }
};
struct Min {
  HVDL_AVX2 __m256 f(__m256 a, __m256 b) const {
    return _mm256_blendv_ps(_mm256_min_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  HVDL_AVX2 __m256d d(__m256d a, __m256d b) const {
    return _mm256_blendv_pd(_mm256_min_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  HVDL_AVX2 __m256i i(__m256i a, __m256i b) const { return _mm256_min_epi32(a, b); }
  HVDL_AVX2 __m256i w(__m256i a, __m256i b) const { return _mm256_min_epi16(a, b); }
  HVDL_AVX2 __m256i uw(__m256i a, __m256i b) const { return _mm256_min_epu16(a, b); }
};
struct Max {
  HVDL_AVX2 __m256 f(__m256 a, __m256 b) const {
    return _mm256_blendv_ps(_mm256_max_ps(a, b), a, _mm256_cmp_ps(a, a, _CMP_UNORD_Q));
  }
  HVDL_AVX2 __m256d d(__m256d a, __m256d b) const {
    return _mm256_blendv_pd(_mm256_max_pd(a, b), a, _mm256_cmp_pd(a, a, _CMP_UNORD_Q));
  }
  HVDL_AVX2 __m256i i(__m256i a, __m256i b) const { return _mm256_max_epi32(a, b); }
  HVDL_AVX2 __m256i w(__m256i a, __m256i b) const { return _mm256_max_epi16(a, b); }
  HVDL_AVX2 __m256i uw(__m256i a, __m256i b) const { return _mm256_max_epu16(a, b); }
};
// Scaling reuses the reduce plumbing with src == dst and ignores the second operand.
struct Scale {
  float fs;
  double fd;
  HVDL_AVX2 __m256 f(__m256 a, __m256) const { return _mm256_mul_ps(a, _mm256_set1_ps(fs)); }
  HVDL_AVX2 __m256d d(__m256d a, __m256d) const { return _mm256_mul_pd(a, _mm256_set1_pd(fd)); }
};

// ---- storage formats: how a block of N elements is loaded, combined, stored ------

template <class Op>
struct F32 {
  using T = float;
  static constexpr size_t N = 8;
  Op op;
  HVDL_AVX2 void step(float* d, const float* a, const float* s) const {
    _mm256_storeu_ps(d, op.f(_mm256_loadu_ps(a), _mm256_loadu_ps(s)));
  }
};

template <class Op>
struct F64 {
  using T = double;
  static constexpr size_t N = 4;
  Op op;
  HVDL_AVX2 void step(double* d, const double* a, const double* s) const {
    _mm256_storeu_pd(d, op.d(_mm256_loadu_pd(a), _mm256_loadu_pd(s)));
  }
};

template <class Op>
struct I32 {
  using T = int32_t;
  static constexpr size_t N = 8;
  Op op;
  HVDL_AVX2 void step(int32_t* d, const int32_t* a, const int32_t* s) const {
    auto* vd = reinterpret_cast<__m256i*>(d);
    auto* va = reinterpret_cast<const __m256i*>(a);
    auto* vs = reinterpret_cast<const __m256i*>(s);
    _mm256_storeu_si256(vd, op.i(_mm256_loadu_si256(va), _mm256_loadu_si256(vs)));
  }
};

// 16-bit integers; Signed picks the comparison (min/max) the op uses.
template <class Op, bool Signed>
struct Int16Fmt {
  using T = std::conditional_t<Signed, int16_t, uint16_t>;
  static constexpr size_t N = 16;
  Op op;
  HVDL_AVX2 void step(T* d, const T* x, const T* s) const {
    auto* vd = reinterpret_cast<__m256i*>(d);
    auto* vx = reinterpret_cast<const __m256i*>(x);
    auto* vs = reinterpret_cast<const __m256i*>(s);
    const __m256i a = _mm256_loadu_si256(vx), b = _mm256_loadu_si256(vs);
    _mm256_storeu_si256(vd, Signed ? op.w(a, b) : op.uw(a, b));
  }
};
template <class Op> using I16 = Int16Fmt<Op, true>;
template <class Op> using U16 = Int16Fmt<Op, false>;

// Scaling 16-bit integers as generic's double_to_int does: widen to double, multiply,
// clamp to the type's range (the same as its saturation, since the range ends are
// integers), truncate. A non-finite factor (NaN results) is left to generic.
template <bool Signed>
struct ScaleInt16 {
  using T = std::conditional_t<Signed, int16_t, uint16_t>;
  static constexpr size_t N = 16;
  double fd;
  HVDL_AVX2 __m128i scale4(__m128i x32) const {
    const __m256d lo = _mm256_set1_pd(Signed ? -32768.0 : 0.0);
    const __m256d hi = _mm256_set1_pd(Signed ? 32767.0 : 65535.0);
    __m256d v = _mm256_mul_pd(_mm256_cvtepi32_pd(x32), _mm256_set1_pd(fd));
    v = _mm256_min_pd(_mm256_max_pd(v, lo), hi);
    return _mm256_cvttpd_epi32(v);
  }
  HVDL_AVX2 __m256i scale8(__m128i x16) const {  // 8 elements -> 8 int32 results
    const __m256i x32 = Signed ? _mm256_cvtepi16_epi32(x16) : _mm256_cvtepu16_epi32(x16);
    return _mm256_set_m128i(scale4(_mm256_extracti128_si256(x32, 1)),
                            scale4(_mm256_castsi256_si128(x32)));
  }
  HVDL_AVX2 void step(T* d, const T* x, const T*) const {
    auto* vd = reinterpret_cast<__m256i*>(d);
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
    const __m256i r0 = scale8(_mm256_castsi256_si128(a));
    const __m256i r1 = scale8(_mm256_extracti128_si256(a, 1));
    // Values are already in range, so the saturating pack only narrows; it works per
    // 128-bit lane, and the permute puts the four 64-bit quarters back in order.
    const __m256i packed = Signed ? _mm256_packs_epi32(r0, r1) : _mm256_packus_epi32(r0, r1);
    _mm256_storeu_si256(vd, _mm256_permute4x64_epi64(packed, 0xD8));
  }
};

template <class Op>
struct F16 {
  using T = uint16_t;
  static constexpr size_t N = 8;
  Op op;
  HVDL_AVX2 void step(uint16_t* d, const uint16_t* a, const uint16_t* s) const {
    auto* vd = reinterpret_cast<__m128i*>(d);
    auto* va = reinterpret_cast<const __m128i*>(a);
    auto* vs = reinterpret_cast<const __m128i*>(s);
    __m256 r = op.f(_mm256_cvtph_ps(_mm_loadu_si128(va)), _mm256_cvtph_ps(_mm_loadu_si128(vs)));
    _mm_storeu_si128(vd, _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
};

// Rounds float32 lanes to bf16 (left in the upper 16 bits), same result as
// float_to_bf16. x + 0x7fff + lsb is rewritten as x + 0x8000 - [low 17 bits ==
// 0x8000] (exact tie, even lsb): same sum, but compare/add instead of shifts, which
// matters because shifts and shuffles share two pipes and this kernel is ALU-bound.
// Wrong for NaN lanes; bf16_fix_nan patches those off the common path.
HVDL_AVX2 inline __m256i bf16_round(__m256 v) {
  const __m256i x = _mm256_castps_si256(v);
  const __m256i tie_even = _mm256_cmpeq_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x1ffff)),
                                              _mm256_set1_epi32(0x8000));
  return _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x8000)), tie_even);
}

// NaN lanes keep their top bits and get the quiet bit.
HVDL_AVX2 inline __m256i bf16_fix_nan(__m256 v, __m256i rounded) {
  const __m256i quiet = _mm256_or_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x400000));
  return _mm256_blendv_epi8(rounded, quiet, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
}

// A bf16 is the top half of a float32, so the even elements widen with one shift and
// the odd ones with a mask; results go back the same way, without any shuffle.
template <class Op>
struct BF16 {
  using T = uint16_t;
  static constexpr size_t N = 16;
  Op op;
  HVDL_AVX2 void step(uint16_t* d, const uint16_t* x, const uint16_t* s) const {
    auto* vd = reinterpret_cast<__m256i*>(d);
    auto* vx = reinterpret_cast<const __m256i*>(x);
    auto* vs = reinterpret_cast<const __m256i*>(s);
    const __m256i a = _mm256_loadu_si256(vx), b = _mm256_loadu_si256(vs);
    const __m256i top = _mm256_set1_epi32(static_cast<int>(0xffff0000u));
    const __m256 even = op.f(_mm256_castsi256_ps(_mm256_slli_epi32(a, 16)),
                             _mm256_castsi256_ps(_mm256_slli_epi32(b, 16)));
    const __m256 odd = op.f(_mm256_castsi256_ps(_mm256_and_si256(a, top)),
                            _mm256_castsi256_ps(_mm256_and_si256(b, top)));
    __m256i re = bf16_round(even), ro = bf16_round(odd);
    const __m256 any_nan = _mm256_cmp_ps(even, odd, _CMP_UNORD_Q);  // one compare for both
    if (!_mm256_testz_ps(any_nan, any_nan)) {
      re = bf16_fix_nan(even, re);
      ro = bf16_fix_nan(odd, ro);
    }
    _mm256_storeu_si256(vd, _mm256_blend_epi16(_mm256_srli_epi32(re, 16), ro, 0xAA));
  }
};

// Two blocks per iteration is enough to keep loads in flight; the remainder is
// padded into a stack block so it runs through the identical vector code.
// dst = a (op) src, element by element; a may be dst (the in-place reduction).
template <class K>
HVDL_AVX2 void run(const K& k, void* dst, const void* a, const void* src, size_t n) {
  using T = typename K::T;
  constexpr size_t N = K::N;
  T* d = static_cast<T*>(dst);
  const T* x = static_cast<const T*>(a);
  const T* s = static_cast<const T*>(src);
  size_t i = 0;
  for (; i + 2 * N <= n; i += 2 * N) {
    k.step(d + i, x + i, s + i);
    k.step(d + i + N, x + i + N, s + i + N);
  }
  for (; i + N <= n; i += N) k.step(d + i, x + i, s + i);
  if (i < n) {
    T bd[N] = {}, bs[N] = {};
    std::memcpy(bd, x + i, (n - i) * sizeof(T));
    std::memcpy(bs, s + i, (n - i) * sizeof(T));
    k.step(bd, bd, bs);
    std::memcpy(d + i, bd, (n - i) * sizeof(T));
  }
}

template <template <class> class Fmt>
HVDL_AVX2 bool run_op(void* dst, const void* a, const void* src, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: case ReduceOp::AVERAGE: run(Fmt<Add>{}, dst, a, src, n); return true;
    case ReduceOp::PRODUCT: run(Fmt<Mul>{}, dst, a, src, n); return true;
    case ReduceOp::MIN: run(Fmt<Min>{}, dst, a, src, n); return true;
    case ReduceOp::MAX: run(Fmt<Max>{}, dst, a, src, n); return true;
    default: return false;
  }
}

}  // namespace

// Returns false when the pair is not covered here; the caller then uses generic.
HVDL_AVX2 bool reduce_pair_avx2(void* dst, const void* a, const void* src, size_t n,
                                DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::FLOAT32: return run_op<F32>(dst, a, src, n, op);
    case DataType::FLOAT64: return run_op<F64>(dst, a, src, n, op);
    case DataType::FLOAT16: return run_op<F16>(dst, a, src, n, op);
    case DataType::BFLOAT16: return run_op<BF16>(dst, a, src, n, op);
    case DataType::INT32: return run_op<I32>(dst, a, src, n, op);
    case DataType::INT16: return run_op<I16>(dst, a, src, n, op);
    case DataType::UINT16: return run_op<U16>(dst, a, src, n, op);
    default: return false;
  }
}

HVDL_AVX2 bool scale_avx2(void* buf, size_t n, DataType dtype, double factor) {
  const Scale sc{static_cast<float>(factor), factor};
  switch (dtype) {
    case DataType::FLOAT32: run(F32<Scale>{sc}, buf, buf, buf, n); return true;
    case DataType::FLOAT64: run(F64<Scale>{sc}, buf, buf, buf, n); return true;
    case DataType::FLOAT16: run(F16<Scale>{sc}, buf, buf, buf, n); return true;
    case DataType::BFLOAT16: run(BF16<Scale>{sc}, buf, buf, buf, n); return true;
    case DataType::INT16:
      if (!std::isfinite(factor)) return false;
      run(ScaleInt16<true>{factor}, buf, buf, buf, n);
      return true;
    case DataType::UINT16:
      if (!std::isfinite(factor)) return false;
      run(ScaleInt16<false>{factor}, buf, buf, buf, n);
      return true;
    default: return false;
  }
}

}  // namespace detail
}  // namespace hvdl

#else  // not x86: nothing is covered, everything goes to generic

namespace hvdl {
namespace detail {
bool reduce_pair_avx2(void*, const void*, const void*, size_t, DataType, ReduceOp) { return false; }
bool scale_avx2(void*, size_t, DataType, double) { return false; }
}  // namespace detail
}  // namespace hvdl

#endif
