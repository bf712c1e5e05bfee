// Standalone tests for the CPU reduction kernels (no framework):
//   g++ -O2 -std=c++17 -I csrc tests/cpp/test_reduce.cc csrc/reduce/*.cc -o /tmp/test_reduce
//
// Every kernel set the CPU can run is compared bit for bit against the generic one,
// and every set against references written here independently (fp16/bf16 rounding
// by search over the representable values, not by bit tricks).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/wait.h>
#include <unistd.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "harness.h"
#include "reduce/reduce.h"

namespace hvdl {
namespace detail {
// Internal entry points (reduce_dispatch.cc, reduce_generic.cc).
bool reduce_into_isa(const char* isa, void* dst, const void* src, size_t count, DataType dtype,
                     ReduceOp op);
bool reduce_pair_isa(const char* isa, void* dst, const void* a, const void* src, size_t count,
                     DataType dtype, ReduceOp op);
bool scale_buffer_isa(const char* isa, void* buf, size_t count, DataType dtype, double factor);
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
}  // namespace detail
}  // namespace hvdl

using namespace hvdl;

namespace {

// One CHECK for every C++ test (harness.h); `what` says which case.
void check(bool ok, const std::string& what) { CHECK(ok, "%s", what.c_str()); }

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bitsf(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
uint64_t dbits(double f) { uint64_t u; std::memcpy(&u, &f, 8); return u; }
double bitsd(uint64_t u) { double f; std::memcpy(&f, &u, 8); return f; }

// ---- reference 16-bit float formats ------------------------------------------------

struct Fmt16 {
  int man_bits;      // 10 for fp16, 7 for bf16
  int bias;          // 15 / 127
  uint16_t max_fin;  // largest finite magnitude encoding
  uint16_t exp_mask;
  uint16_t quiet;
};
const Fmt16 kHalf{10, 15, 0x7bff, 0x7c00, 0x200};
const Fmt16 kBf16{7, 127, 0x7f7f, 0x7f80, 0x40};

bool nan16(const Fmt16& f, uint16_t h) {
  return (h & f.exp_mask) == f.exp_mask && (h & ((1u << f.man_bits) - 1));
}

// Exact value of a non-NaN encoding, from the format definition.
double value16(const Fmt16& f, uint16_t h) {
  const int e = (h & 0x7fff) >> f.man_bits;
  const int m = h & ((1 << f.man_bits) - 1);
  double v;
  if ((h & f.exp_mask) == f.exp_mask) v = INFINITY;
  else if (e == 0) v = std::ldexp(m, 1 - f.bias - f.man_bits);
  else v = std::ldexp((1 << f.man_bits) + m, e - f.bias - f.man_bits);
  return (h & 0x8000) ? -v : v;
}

// Round-to-nearest-even by binary search over the ordered finite magnitudes.
// NaN maps to a quiet NaN (callers only check NaN-ness).
uint16_t round16(const Fmt16& f, double x) {
  if (x != x) return f.exp_mask | f.quiet;
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double v = std::fabs(x);
  const double ulp_max = value16(f, f.max_fin) - value16(f, f.max_fin - 1);
  if (v >= value16(f, f.max_fin) + ulp_max / 2) return sign | f.exp_mask;  // overflow
  uint16_t lo = 0, hi = f.max_fin;
  while (lo < hi) {
    uint16_t mid = static_cast<uint16_t>((lo + hi + 1) / 2);
    if (value16(f, mid) <= v) lo = mid; else hi = mid - 1;
  }
  if (lo == f.max_fin) return sign | lo;
  const double d0 = v - value16(f, lo), d1 = value16(f, lo + 1) - v;
  uint16_t h = d0 < d1 ? lo : d1 < d0 ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return sign | h;
}

// ---- dtype-generic element access -----------------------------------------------------

const DataType kTypes[] = {DataType::UINT8,   DataType::INT8,     DataType::INT16,
                           DataType::UINT16,  DataType::INT32,    DataType::INT64,
                           DataType::FLOAT16, DataType::BFLOAT16, DataType::FLOAT32,
                           DataType::FLOAT64};
const ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::AVERAGE, ReduceOp::MIN, ReduceOp::MAX,
                         ReduceOp::PRODUCT};
const size_t kLens[] = {0, 1, 7, 8, 15, 16, 17, 31, 33, 1000, 4099};
// "avx512" is only an alias of avx2 (see reduce_dispatch.cc), so it is not listed.
const char* const kIsas[] = {"generic", "avx2"};

uint64_t get(DataType t, const uint8_t* p, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, p + i * dtype_size(t), dtype_size(t));
  return v;
}

void put(DataType t, uint8_t* p, size_t i, uint64_t v) {
  std::memcpy(p + i * dtype_size(t), &v, dtype_size(t));
}

bool is_nan(DataType t, uint64_t v) {
  switch (t) {
    case DataType::FLOAT16: return nan16(kHalf, static_cast<uint16_t>(v));
    case DataType::BFLOAT16: return nan16(kBf16, static_cast<uint16_t>(v));
    case DataType::FLOAT32: return std::isnan(bitsf(static_cast<uint32_t>(v)));
    case DataType::FLOAT64: return std::isnan(bitsd(v));
    default: return false;
  }
}

bool is_zero(DataType t, uint64_t v) {
  if (!dtype_is_float(t)) return v == 0;
  const uint64_t sign = 1ull << (8 * dtype_size(t) - 1);
  return (v & ~sign) == 0;
}

// Float value of a floating element (exact for all four float types).
double fval(DataType t, uint64_t v) {
  switch (t) {
    case DataType::FLOAT16: return value16(kHalf, static_cast<uint16_t>(v));
    case DataType::BFLOAT16: return value16(kBf16, static_cast<uint16_t>(v));
    case DataType::FLOAT32: return bitsf(static_cast<uint32_t>(v));
    default: return bitsd(v);
  }
}

template <typename F>
F ref_float_op(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::MIN: return std::isnan(a) ? a : std::isnan(b) ? b : (b < a ? b : a);
    case ReduceOp::MAX: return std::isnan(a) ? a : std::isnan(b) ? b : (b > a ? b : a);
    case ReduceOp::PRODUCT: return a * b;
    default: return a + b;
  }
}

// Reference: integers via 64-bit wrapping arithmetic then truncation to the width;
// float16/bfloat16 via float32 arithmetic then the search-based rounding.
uint64_t ref_reduce(DataType t, ReduceOp op, uint64_t a, uint64_t b) {
  if (!dtype_is_float(t)) {
    const int bits = 8 * static_cast<int>(dtype_size(t));
    const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
    auto sx = [&](uint64_t v) -> int64_t {  // sign-extend signed types
      if (t == DataType::UINT8 || t == DataType::UINT16 || bits == 64)
        return static_cast<int64_t>(v);
      const uint64_t sbit = 1ull << (bits - 1);
      return static_cast<int64_t>((v ^ sbit) - sbit);
    };
    const int64_t x = sx(a), y = sx(b);
    switch (op) {
      case ReduceOp::MIN: return static_cast<uint64_t>(y < x ? y : x) & mask;
      case ReduceOp::MAX: return static_cast<uint64_t>(y > x ? y : x) & mask;
      case ReduceOp::PRODUCT: return (a * b) & mask;
      default: return (a + b) & mask;
    }
  }
  if (t == DataType::FLOAT64) return dbits(ref_float_op(op, bitsd(a), bitsd(b)));
  const float x = static_cast<float>(fval(t, a)), y = static_cast<float>(fval(t, b));
  const float r = ref_float_op(op, is_nan(t, a) ? NAN : x, is_nan(t, b) ? NAN : y);
  if (t == DataType::FLOAT16) return round16(kHalf, r);
  if (t == DataType::BFLOAT16) return round16(kBf16, r);
  return fbits(r);
}

// ---- test data --------------------------------------------------------------------------

std::mt19937_64 g_rng(12345);

uint64_t special_float(DataType t, unsigned k) {
  static const uint32_t f32[] = {0x7fc00000, 0xffc00001, 0x7f800001, 0x7fffffff, 0x7f800000,
                                 0xff800000, 0x00000000, 0x80000000, 0x00000001, 0x807fffff,
                                 0x7f7fffff, 0x3f800000};
  static const uint64_t f64[] = {0x7ff8000000000000, 0xfff8000000000001, 0x7ff0000000000001,
                                 0x7ff0000000000000, 0xfff0000000000000, 0, 0x8000000000000000,
                                 1, 0x800fffffffffffff, 0x7fefffffffffffff, 0x3ff0000000000000};
  static const uint16_t f16[] = {0x7e00, 0xfc01, 0x7c01, 0x7fff, 0x7c00, 0xfc00, 0,
                                 0x8000, 0x0001, 0x83ff, 0x7bff, 0x3c00};
  static const uint16_t b16[] = {0x7fc0, 0xff81, 0x7f81, 0x7fff, 0x7f80, 0xff80, 0,
                                 0x8000, 0x0001, 0x807f, 0x7f7f, 0x3f80};
  switch (t) {
    case DataType::FLOAT32: return f32[k % 12];
    case DataType::FLOAT64: return f64[k % 11];
    case DataType::FLOAT16: return f16[k % 12];
    default: return b16[k % 12];
  }
}

// Mostly ordinary values (so sums and products round non-trivially), some raw bit
// patterns and some specials (NaN with payloads, sNaN, inf, zeros, subnormals).
uint64_t random_elem(DataType t) {
  const uint64_t r = g_rng();
  const uint64_t mask = dtype_size(t) == 8 ? ~0ull : (1ull << (8 * dtype_size(t))) - 1;
  if (!dtype_is_float(t)) return r & mask;
  const unsigned kind = static_cast<unsigned>(r % 16);
  if (kind == 0) return special_float(t, static_cast<unsigned>(r >> 8));
  if (kind == 1) return (r >> 7) & mask;  // raw bits
  // float16 gets a lower exponent range so subnormals, normals and overflow all occur.
  const int shift = t == DataType::FLOAT16 ? -42 : -30;
  const double v = std::ldexp(static_cast<double>(static_cast<int64_t>(r >> 11) % 2000001 - 1000000),
                              static_cast<int>((r >> 4) % 40) + shift);
  switch (t) {
    case DataType::FLOAT16: return detail::float_to_half(static_cast<float>(v));
    case DataType::BFLOAT16: return detail::float_to_bf16(static_cast<float>(v));
    case DataType::FLOAT32: return fbits(static_cast<float>(v));
    default: return dbits(v);
  }
}

// Element buffer with one element of misalignment in front and a guard zone after.
struct Buf {
  static constexpr size_t kGuard = 40;
  DataType t;
  size_t n;
  std::vector<uint64_t> storage;  // 8-byte aligned backing
  Buf(DataType t_, size_t n_) : t(t_), n(n_), storage(n_ + kGuard + 2) {
    for (size_t i = 0; i < n + 1 + kGuard; ++i) put(t, base(), i, 0xa5a5a5a5a5a5a5a5ull);
  }
  uint8_t* base() { return reinterpret_cast<uint8_t*>(storage.data()); }
  uint8_t* data() { return base() + dtype_size(t); }
  uint64_t at(size_t i) { return get(t, data(), i); }
  bool guards_ok() {
    const uint64_t want = 0xa5a5a5a5a5a5a5a5ull & (dtype_size(t) == 8 ? ~0ull : (1ull << (8 * dtype_size(t))) - 1);
    if (get(t, base(), 0) != want) return false;
    for (size_t i = 0; i < kGuard; ++i)
      if (get(t, data(), n + i) != want) return false;
    return true;
  }
};

std::string label(const char* isa, DataType t, const char* op, size_t n) {
  return std::string(isa) + " " + dtype_name(t) + " " + op + " n=" + std::to_string(n);
}

bool isa_runs(const char* isa) {
  uint8_t x = 0;
  return detail::reduce_into_isa(isa, &x, &x, 1, DataType::UINT8, ReduceOp::SUM);
}

// ---- conversions -------------------------------------------------------------------------

void test_conversions() {
  // Every half: exact widening, and narrowing back returns the same bits (NaNs quieted).
  int bad_widen = 0, bad_round_trip = 0, bad_bf_widen = 0, bad_bf_trip = 0;
  std::string first;
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = detail::half_to_float(h);
    if (nan16(kHalf, h)) {
      const uint32_t want = ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13);
      if (fbits(f) != want) ++bad_widen;
      if (detail::float_to_half(f) != (h | 0x200)) ++bad_round_trip;
    } else {
      if (static_cast<double>(f) != value16(kHalf, h) || std::signbit(f) != bool(h & 0x8000)) {
        if (!bad_widen++) first = hex(h);
      }
      if (detail::float_to_half(f) != h) ++bad_round_trip;
    }
    const float g = detail::bf16_to_float(h);
    if (fbits(g) != (static_cast<uint32_t>(h) << 16)) ++bad_bf_widen;
    if (!nan16(kBf16, h) && static_cast<double>(g) != value16(kBf16, h)) ++bad_bf_widen;
    if (detail::float_to_bf16(g) != (nan16(kBf16, h) ? (h | 0x40) : h)) ++bad_bf_trip;
  }
  check(bad_widen == 0, "half_to_float on all 65536 patterns, first bad " + first);
  check(bad_round_trip == 0, "float_to_half(half_to_float(h)) == h for all 65536");
  check(bad_bf_widen == 0, "bf16_to_float on all 65536 patterns");
  check(bad_bf_trip == 0, "float_to_bf16(bf16_to_float(b)) == b for all 65536");

  // Rounding: every midpoint between neighbours (ties), one float ulp either side, and
  // a stride over all float bit patterns, against the search-based reference.
  auto check_round = [](const Fmt16& fmt, uint16_t (*conv)(float), const char* name) {
    int bad = 0;
    std::string first;
    auto one = [&](float x) {
      const uint16_t got = conv(x), want = round16(fmt, x);
      const bool ok = std::isnan(x)
                          ? nan16(fmt, got) && (got & 0x8000u) == ((fbits(x) >> 16) & 0x8000u)
                          : got == want;
      if (!ok && !bad++) first = hex(fbits(x)) + " -> " + hex(got) + " want " + hex(want);
    };
    for (uint16_t h = 0; h < fmt.max_fin; ++h) {
      const double mid = (value16(fmt, h) + value16(fmt, h + 1)) / 2;  // exact in float
      const float m = static_cast<float>(mid);
      for (float x : {m, std::nextafter(m, 0.f), std::nextafter(m, INFINITY)}) {
        one(x);
        one(-x);
      }
    }
    const double top = value16(fmt, fmt.max_fin) + (value16(fmt, fmt.max_fin) - value16(fmt, fmt.max_fin - 1)) / 2;
    const float tf = static_cast<float>(top);
    for (float x : {tf, std::nextafter(tf, 0.f), std::nextafter(tf, INFINITY)}) one(x);
    for (uint64_t b = 0; b < (1ull << 32); b += 2003) one(bitsf(static_cast<uint32_t>(b)));
    check(bad == 0, std::string(name) + " rounding vs reference (" + std::to_string(bad) +
                        " bad), first " + first);
  };
  check_round(kHalf, detail::float_to_half, "float_to_half");
  check_round(kBf16, detail::float_to_bf16, "float_to_bf16");

#if defined(__FLT16_MAX__) && (defined(__x86_64__) || defined(__i386__))
  // The compiler's own _Float16 conversion is a second, independent reference.
  int bad16 = 0;
  for (uint64_t b = 0; b < (1ull << 32); b += 8191) {
    const float x = bitsf(static_cast<uint32_t>(b));
    if (std::isnan(x)) continue;
    const _Float16 y = static_cast<_Float16>(x);
    uint16_t want;
    std::memcpy(&want, &y, 2);
    if (detail::float_to_half(x) != want) ++bad16;
  }
  check(bad16 == 0, "float_to_half vs compiler _Float16");
#endif
}

#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("f16c"))) uint16_t f16c_narrow(float x) {
  return static_cast<uint16_t>(_mm_cvtsi128_si32(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT)));
}

// The vector kernels rely on F16C agreeing with the scalar conversions, NaNs included.
__attribute__((target("f16c"))) void test_f16c_agrees() {
  int bad_w = 0, bad_n = 0;
  for (uint32_t i = 0; i < 65536; ++i) {
    const float hw = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(i))));
    if (fbits(hw) != fbits(detail::half_to_float(static_cast<uint16_t>(i)))) ++bad_w;
  }
  auto narrow = [&](uint32_t b) {
    if (f16c_narrow(bitsf(b)) != detail::float_to_half(bitsf(b))) ++bad_n;
  };
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) narrow(static_cast<uint32_t>(b));
  for (uint32_t b : {0x7f800001u, 0xff800001u, 0x7fc00000u, 0x7fbfffffu, 0x7f801fffu, 0x7fffe000u})
    narrow(b);
  check(bad_w == 0, "half_to_float matches F16C on all 65536 patterns");
  check(bad_n == 0, "float_to_half matches F16C (sampled floats and NaNs)");
}
#endif

// ---- reduce_into ---------------------------------------------------------------------------

// Fills dst/src, runs every ISA, compares against generic (bitwise) and the reference.
void run_reduce_case(DataType t, ReduceOp op, size_t n, const std::vector<uint64_t>& da,
                     const std::vector<uint64_t>& sa) {
  Buf gen(t, n), src(t, n);
  for (size_t i = 0; i < n; ++i) {
    put(t, gen.data(), i, da[i]);
    put(t, src.data(), i, sa[i]);
  }
  detail::reduce_into_isa("generic", gen.data(), src.data(), n, t, op);
  const bool arith = op == ReduceOp::SUM || op == ReduceOp::AVERAGE || op == ReduceOp::PRODUCT;

  for (const char* isa : kIsas) {
    Buf dst(t, n);
    for (size_t i = 0; i < n; ++i) put(t, dst.data(), i, da[i]);
    if (!detail::reduce_into_isa(isa, dst.data(), src.data(), n, t, op)) continue;
    const std::string what = label(isa, t, reduce_op_name(op), n);
    check(dst.guards_ok() && src.guards_ok(), what + ": wrote outside the buffer");

    long bad_gen = -1, bad_ref = -1;
    for (size_t i = 0; i < n && (bad_gen < 0 || bad_ref < 0); ++i) {
      const uint64_t got = dst.at(i), g = gen.at(i), a = da[i], b = sa[i];
      // When both inputs are NaN, which payload survives an add or multiply depends
      // on hardware operand order; only NaN-ness is specified.
      const bool both_nan = is_nan(t, a) && is_nan(t, b);
      const bool same = got == g || (arith && both_nan && is_nan(t, got) && is_nan(t, g));
      if (!same && bad_gen < 0) bad_gen = static_cast<long>(i);
      const uint64_t want = ref_reduce(t, op, a, b);
      const bool ref_ok = got == want || (is_nan(t, want) && is_nan(t, got)) ||
                          (!arith && is_zero(t, want) && is_zero(t, got));
      if (!ref_ok && bad_ref < 0) bad_ref = static_cast<long>(i);
      if (bad_ref == static_cast<long>(i))
        std::fprintf(stderr, "  [%s] i=%zu a=%s b=%s got=%s want=%s\n", what.c_str(), i,
                     hex(a).c_str(), hex(b).c_str(), hex(got).c_str(), hex(want).c_str());
    }
    check(bad_gen < 0, what + ": differs from generic at " + std::to_string(bad_gen));
    check(bad_ref < 0, what + ": differs from reference at " + std::to_string(bad_ref));

    // Two sources into a third buffer, and into the first (in place): the same bits as
    // the copy-then-reduce above, NaN payloads included (same ISA, same operand order).
    Buf first(t, n), pair(t, n);
    for (size_t i = 0; i < n; ++i) put(t, first.data(), i, da[i]);
    detail::reduce_pair_isa(isa, pair.data(), first.data(), src.data(), n, t, op);
    long bad_pair = -1;
    for (size_t i = 0; i < n && bad_pair < 0; ++i)
      if (pair.at(i) != dst.at(i) || first.at(i) != da[i]) bad_pair = static_cast<long>(i);
    check(pair.guards_ok() && first.guards_ok(), what + ": reduce_pair wrote outside the buffer");
    check(bad_pair < 0, what + ": reduce_pair differs from reduce_into at " + std::to_string(bad_pair));
    detail::reduce_pair_isa(isa, first.data(), first.data(), src.data(), n, t, op);
    bad_pair = -1;
    for (size_t i = 0; i < n && bad_pair < 0; ++i)
      if (first.at(i) != dst.at(i)) bad_pair = static_cast<long>(i);
    check(bad_pair < 0, what + ": reduce_pair in place differs at " + std::to_string(bad_pair));
  }
}

void test_reduce() {
  for (DataType t : kTypes)
    for (ReduceOp op : kOps)
      for (size_t n : kLens) {
        std::vector<uint64_t> a(n), b(n);
        for (size_t i = 0; i < n; ++i) {
          a[i] = random_elem(t);
          b[i] = random_elem(t);
        }
        run_reduce_case(t, op, n, a, b);
      }

  // Every 16-bit pattern as dst against random src (and the reverse), so the vector
  // rounding sees every NaN, subnormal and overflow case.
  for (DataType t : {DataType::FLOAT16, DataType::BFLOAT16})
    for (ReduceOp op : kOps) {
      std::vector<uint64_t> all(65536), rnd(65536);
      for (size_t i = 0; i < 65536; ++i) {
        all[i] = i;
        rnd[i] = g_rng() & 0xffff;
      }
      run_reduce_case(t, op, 65536, all, rnd);
      run_reduce_case(t, op, 65536, rnd, all);
    }

  // Integer wrap-around matches numpy.
  {
    int32_t a[2] = {INT32_MAX, INT32_MIN}, b[2] = {1, -1};
    reduce_into(a, b, 2, DataType::INT32, ReduceOp::SUM);
    check(a[0] == INT32_MIN && a[1] == INT32_MAX, "int32 sum wraps");
    int8_t c[1] = {-128}, d[1] = {-1};
    reduce_into(c, d, 1, DataType::INT8, ReduceOp::PRODUCT);
    check(c[0] == -128, "int8 product wraps");
    int64_t e[1] = {INT64_MAX}, f[1] = {2};
    reduce_into(e, f, 1, DataType::INT64, ReduceOp::PRODUCT);
    check(e[0] == -2, "int64 product wraps");
  }
  // NaN propagates through min/max from either side, like np.minimum/np.maximum.
  for (const char* isa : kIsas) {
    if (!isa_runs(isa)) continue;
    for (ReduceOp op : {ReduceOp::MIN, ReduceOp::MAX}) {
      float a[9] = {NAN, 1, NAN, 1, 1, 1, 1, 1, NAN}, b[9] = {1, NAN, NAN, 1, 1, 1, 1, 1, 1};
      detail::reduce_into_isa(isa, a, b, 9, DataType::FLOAT32, op);
      check(std::isnan(a[0]) && std::isnan(a[1]) && std::isnan(a[2]) && a[3] == 1 && std::isnan(a[8]),
            std::string(isa) + " float32 " + reduce_op_name(op) + " propagates NaN");
      double c[5] = {NAN, 2, -INFINITY, 0, 0}, d[5] = {1, NAN, 3, INFINITY, -1};
      detail::reduce_into_isa(isa, c, d, 5, DataType::FLOAT64, op);
      const bool mn = op == ReduceOp::MIN;
      check(std::isnan(c[0]) && std::isnan(c[1]) && c[2] == (mn ? -INFINITY : 3) &&
                c[3] == (mn ? 0 : INFINITY) && c[4] == (mn ? -1 : 0),
            std::string(isa) + " float64 " + reduce_op_name(op) + " NaN/inf");
    }
  }
}

// ---- scale_buffer ------------------------------------------------------------------------

uint64_t ref_scale(DataType t, uint64_t v, double f) {
  switch (t) {
    case DataType::FLOAT16:
      return is_nan(t, v) ? 0x7e00 : round16(kHalf, static_cast<float>(fval(t, v)) * static_cast<float>(f));
    case DataType::BFLOAT16:
      return is_nan(t, v) ? 0x7fc0 : round16(kBf16, static_cast<float>(fval(t, v)) * static_cast<float>(f));
    case DataType::FLOAT32: return fbits(bitsf(static_cast<uint32_t>(v)) * static_cast<float>(f));
    case DataType::FLOAT64: return dbits(bitsd(v) * f);
    default: break;
  }
  const int bits = 8 * static_cast<int>(dtype_size(t));
  const bool is_unsigned = t == DataType::UINT8 || t == DataType::UINT16;
  double x;
  if (is_unsigned) x = static_cast<double>(v & ((1ull << bits) - 1));
  else if (bits == 64) x = static_cast<double>(static_cast<int64_t>(v));
  else x = static_cast<double>(static_cast<int64_t>((v ^ (1ull << (bits - 1))) - (1ull << (bits - 1))));
  const double r = std::trunc(x * f);
  const double lo = is_unsigned ? 0 : -std::ldexp(1, bits - 1);
  const double hi = is_unsigned ? std::ldexp(1, bits) - 1 : std::ldexp(1, bits - 1) - 1;
  int64_t out;
  if (r != r) out = 0;
  else if (r <= lo) out = static_cast<int64_t>(lo);
  else if (r >= hi) out = bits == 64 ? INT64_MAX : static_cast<int64_t>(hi);
  else out = static_cast<int64_t>(r);
  return static_cast<uint64_t>(out) & (bits == 64 ? ~0ull : (1ull << bits) - 1);
}

void run_scale_case(DataType t, size_t n, double f, const std::vector<uint64_t>& v) {
  Buf gen(t, n);
  for (size_t i = 0; i < n; ++i) put(t, gen.data(), i, v[i]);
  detail::scale_buffer_isa("generic", gen.data(), n, t, f);
  for (const char* isa : kIsas) {
    Buf b(t, n);
    for (size_t i = 0; i < n; ++i) put(t, b.data(), i, v[i]);
    if (!detail::scale_buffer_isa(isa, b.data(), n, t, f)) continue;
    const std::string what = label(isa, t, "scale", n) + " f=" + std::to_string(f);
    check(b.guards_ok(), what + ": wrote outside the buffer");
    long bad_gen = -1, bad_ref = -1;
    for (size_t i = 0; i < n; ++i) {
      const uint64_t got = b.at(i), want = ref_scale(t, v[i], f);
      if (got != gen.at(i) && bad_gen < 0) bad_gen = static_cast<long>(i);
      const bool ok = got == want || (is_nan(t, got) && is_nan(t, want));
      if (!ok && bad_ref < 0) {
        bad_ref = static_cast<long>(i);
        std::fprintf(stderr, "  [%s] i=%zu v=%s got=%s want=%s\n", what.c_str(), i,
                     hex(v[i]).c_str(), hex(got).c_str(), hex(want).c_str());
      }
    }
    check(bad_gen < 0, what + ": differs from generic at " + std::to_string(bad_gen));
    check(bad_ref < 0, what + ": differs from reference at " + std::to_string(bad_ref));
  }
}

void test_scale() {
  const double factors[] = {0.5, 1.0 / 3, -2.5, 1e-3, 3.0, 0.1};
  for (DataType t : kTypes)
    for (double f : factors)
      for (size_t n : kLens) {
        std::vector<uint64_t> v(n);
        for (auto& x : v) x = random_elem(t);
        run_scale_case(t, n, f, v);
      }
  std::vector<uint64_t> all(65536);
  for (size_t i = 0; i < 65536; ++i) all[i] = i;
  for (DataType t : {DataType::FLOAT16, DataType::BFLOAT16})
    for (double f : {1.0, 0.1, 1.0 / 3, 3.0, 1e-5, 70000.0}) run_scale_case(t, 65536, f, all);
  // Every 16-bit integer, through the clamping of the vector path (huge, negative and
  // non-finite factors, where that path hands over to generic).
  for (DataType t : {DataType::INT16, DataType::UINT16})
    for (double f : {0.1, -1.0, 1.0 / 3, 2.5, -70000.0, 1e300, double(NAN), double(INFINITY),
                     -double(INFINITY)})
      run_scale_case(t, 65536, f, all);

  // Integer semantics: truncate toward zero; out of range saturates.
  int32_t a[4] = {7, -7, 5, 1000000000};
  scale_buffer(a, 4, DataType::INT32, 0.5);
  check(a[0] == 3 && a[1] == -3 && a[2] == 2 && a[3] == 500000000, "int32 scale truncates");
  int8_t b[3] = {100, -100, 3};
  scale_buffer(b, 3, DataType::INT8, 2.0);
  check(b[0] == 127 && b[1] == -128 && b[2] == 6, "int8 scale saturates");
}

// ---- errors and dispatch -----------------------------------------------------------------

template <typename Fn>
bool throws_invalid(Fn fn) {
  try {
    fn();
  } catch (const std::invalid_argument&) {
    return true;
  }
  return false;
}

void test_errors_and_dispatch(const char* self) {
  uint8_t x[4] = {1, 0, 1, 0}, y[4] = {1, 1, 0, 0};
  check(throws_invalid([&] { reduce_into(x, y, 4, DataType::BOOL, ReduceOp::MAX); }),
        "bool reduce throws");
  check(throws_invalid([&] { reduce_into(x, y, 0, DataType::BOOL, ReduceOp::SUM); }),
        "bool reduce throws even for count 0");
  check(throws_invalid([&] { reduce_into(x, y, 4, DataType::UINT8, ReduceOp::ADASUM); }),
        "adasum throws");
  check(throws_invalid([&] { reduce_into(x, y, 4, static_cast<DataType>(42), ReduceOp::SUM); }),
        "unknown dtype throws");
  check(throws_invalid([&] { scale_buffer(x, 4, DataType::BOOL, 0.5); }), "bool scale throws");
  check(!throws_invalid([&] { reduce_into(nullptr, nullptr, 0, DataType::FLOAT32, ReduceOp::SUM); }),
        "count 0 with null pointers is a no-op");

  const std::string isa = reduce_isa();
  check(isa == "generic" || isa == "avx2" || isa == "avx512", "reduce_isa() is known: " + isa);
  check(!detail::reduce_into_isa("bogus", x, y, 4, DataType::UINT8, ReduceOp::SUM),
        "unknown isa name rejected");

  // The public path uses the chosen set: same bits as calling that set directly.
  std::vector<float> a(1003), b(1003), c;
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i) * 0.37f;
    b[i] = 1.0f / static_cast<float>(i + 1);
  }
  c = a;
  reduce_into(a.data(), b.data(), a.size(), DataType::FLOAT32, ReduceOp::SUM);
  detail::reduce_into_isa(isa.c_str(), c.data(), b.data(), c.size(), DataType::FLOAT32, ReduceOp::SUM);
  check(std::memcmp(a.data(), c.data(), a.size() * 4) == 0, "reduce_into uses the active set");

#if defined(__unix__) || defined(__APPLE__)
  // A fresh process per choice (this one has already used the kernels): re-run this
  // binary with --print-isa NAME, which selects NAME as init() does for REDUCE_ISA.
  auto child_isa = [self](const char* env) -> std::string {
    int fds[2];
    if (pipe(fds) != 0) return "pipe failed";
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      if (dup2(fds[1], 1) < 0 || !std::freopen("/dev/null", "w", stderr)) _exit(2);
      execl(self, self, "--print-isa", env, static_cast<char*>(nullptr));
      _exit(3);
    }
    close(fds[1]);
    char buf[32] = {};
    const ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got > 0 ? std::string(buf, static_cast<size_t>(got)) : "no answer";
  };
  check(child_isa("generic") == "generic", "HOROVODLITE_REDUCE_ISA=generic forces generic");
  const std::string want_avx2 = isa_runs("avx2") ? "avx2" : "generic";
  check(child_isa("avx2") == want_avx2, "HOROVODLITE_REDUCE_ISA=avx2 -> " + want_avx2);
  check(child_isa("avx512") == want_avx2, "HOROVODLITE_REDUCE_ISA=avx512 -> best available");
  check(child_isa("bogus") == want_avx2, "unknown HOROVODLITE_REDUCE_ISA is ignored");
#else
  (void)self;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::strcmp(argv[1], "--print-isa") == 0) {  // child mode, see above
    select_reduce_isa(argv[2]);
    std::fputs(reduce_isa(), stdout);
    return 0;
  }
  const char* env = std::getenv("HOROVODLITE_REDUCE_ISA");  // as init() would pass it
  if (env) select_reduce_isa(env);
  std::printf("active kernel set: %s (HOROVODLITE_REDUCE_ISA=%s); sets run here:", reduce_isa(),
              env ? env : "");
  for (const char* isa : kIsas)
    if (isa_runs(isa)) std::printf(" %s", isa);
  std::printf("\n");

  test_conversions();
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("f16c")) test_f16c_agrees();
#endif
  test_reduce();
  test_scale();
#if defined(__linux__)
  test_errors_and_dispatch("/proc/self/exe");
#else
  test_errors_and_dispatch(argv[0]);
#endif

  return hvdl::test::finish("reduce kernels");
}
