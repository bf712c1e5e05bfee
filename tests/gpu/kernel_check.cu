// Standalone correctness + bandwidth check of the GPU kernels (cuda/gpu_kernels.h).
//
// Build from the repository root (sm_90 = H100/H200; use sm_80 for A100):
//   nvcc -std=c++17 -O2 -arch=sm_90 -Xcompiler=-Wall,-Wextra,-ffp-contract=off -Icuda tests/gpu/kernel_check.cu cuda/*.cu -o kernel_check
// Run: ./kernel_check            (exit status 1 if any check failed, 0 otherwise)
//      ./kernel_check --no-bench (correctness only)
//
// Every kernel result is compared with a CPU reference that follows the rules written
// in gpu_kernels.h, independently implemented here (own fp16/bf16 rounding), bit for
// bit; the only tolerance is that any NaN matches any NaN. Bytes around every output
// range are filled with a sentinel and checked, so head/tail overruns are caught.
// Without a GPU it prints a "no GPU" line and exits 0.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu_kernels.h"

using hvdl::DataType;
using hvdl::ReduceOp;
namespace gpu = hvdl::gpu;

namespace {

// ---------------------------------------------------------------------------------
// Reference arithmetic
// ---------------------------------------------------------------------------------
struct H16 { uint16_t bits; };  // IEEE binary16
struct B16 { uint16_t bits; };  // bfloat16

uint32_t f2u(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float u2f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

float widen_h16_slow(uint16_t h) {
  const int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const float sign = (h & 0x8000) ? -1.0f : 1.0f;
  if (e == 0) return sign * std::ldexp(static_cast<float>(m), -24);
  if (e == 31) return m ? std::nanf("") : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(1024 + m), e - 25);
}
float widen(H16 h) {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t i = 0; i < 65536; ++i) t[i] = widen_h16_slow(static_cast<uint16_t>(i));
    return t;
  }();
  return table[h.bits];
}
float widen(B16 b) { return u2f(static_cast<uint32_t>(b.bits) << 16); }

// Round-to-nearest-even on the bit patterns (checked against CUDA's host conversions
// for every 7th float32 pattern when this test was written).
H16 narrow_h16(float f) {
  const uint32_t u = f2u(f);
  const uint16_t sign = (u >> 16) & 0x8000;
  const uint32_t a = u & 0x7fffffff;
  if (a > 0x7f800000) return H16{static_cast<uint16_t>(sign | 0x7e00)};   // NaN
  if (a >= 0x477ff000) return H16{static_cast<uint16_t>(sign | 0x7c00)};  // >= 65520: inf
  if (a >= 0x38800000) {  // normal binary16: rebias, round away 13 bits
    uint32_t r = a - (112u << 23);
    r += 0xfff + ((r >> 13) & 1);
    return H16{static_cast<uint16_t>(sign | (r >> 13))};
  }
  if (a < 0x33000000) return H16{sign};  // below half the smallest subnormal (ties to 0)
  const uint32_t m = (a & 0x7fffff) | 0x800000;  // value = m * 2^(e - 150)
  const int shift = 126 - static_cast<int>(a >> 23);  // 14..24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  return H16{static_cast<uint16_t>(sign | q)};
}
B16 narrow_b16(float f) {
  const uint32_t u = f2u(f);
  if (std::isnan(f)) return B16{static_cast<uint16_t>(((u >> 16) & 0x8000) | 0x7fc0)};
  const uint64_t r = static_cast<uint64_t>(u) + 0x7fffu + ((u >> 16) & 1u);
  return B16{static_cast<uint16_t>(r >> 16)};
}
template <typename T> T narrow(float f);
template <> H16 narrow<H16>(float f) { return narrow_h16(f); }
template <> B16 narrow<B16>(float f) { return narrow_b16(f); }

template <typename T> constexpr bool kHalf = std::is_same_v<T, H16> || std::is_same_v<T, B16>;

template <typename T> bool is_nan(T x) {
  if constexpr (kHalf<T>) return std::isnan(widen(x));
  else if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
  else return false;
}
template <typename T> auto cmp(T x) { if constexpr (kHalf<T>) return widen(x); else return x; }

// Independent of the kernel's code path: volatile keeps the host compiler from fusing
// or re-associating anything.
template <typename T> T ref_op(ReduceOp op, T a, T b) {
  if (op == ReduceOp::MIN || op == ReduceOp::MAX) {
    const auto x = cmp(a), y = cmp(b);
    bool take_b = false;
    if (!(std::is_floating_point_v<decltype(x)> && x != x)) {
      const bool b_nan = std::is_floating_point_v<decltype(y)> && y != y;
      take_b = b_nan || (op == ReduceOp::MIN ? y < x : y > x);
    }
    return take_b ? b : a;
  }
  const bool mul = op == ReduceOp::PRODUCT;
  if constexpr (kHalf<T>) {
    volatile float x = widen(a), y = widen(b);
    volatile float r = mul ? x * y : x + y;
    return narrow<T>(r);
  } else if constexpr (std::is_floating_point_v<T>) {
    volatile T r = mul ? a * b : a + b;
    return r;
  } else {
    // At least unsigned int: narrower operands would be promoted to signed int.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    const U r = mul ? static_cast<U>(static_cast<U>(a) * static_cast<U>(b))
                    : static_cast<U>(static_cast<U>(a) + static_cast<U>(b));
    return static_cast<T>(r);
  }
}

template <typename T> T ref_scale(T x, double f) {
  if constexpr (kHalf<T>) {
    volatile float r = widen(x) * static_cast<float>(f);
    return narrow<T>(r);
  } else if constexpr (std::is_same_v<T, float>) {
    volatile float r = x * static_cast<float>(f);
    return r;
  } else if constexpr (std::is_same_v<T, double>) {
    volatile double r = x * f;
    return r;
  } else {
    volatile double r = static_cast<double>(x) * f;
    return static_cast<T>(static_cast<int64_t>(r));
  }
}

template <typename T> bool same(T a, T b) {
  if (is_nan(a) && is_nan(b)) return true;
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T> std::string hex(T x) {
  unsigned char b[sizeof(T)];
  std::memcpy(b, &x, sizeof(T));
  std::string s = "0x";
  char buf[4];
  for (size_t i = sizeof(T); i-- > 0;) { std::snprintf(buf, sizeof buf, "%02x", b[i]); s += buf; }
  return s;
}

// ---------------------------------------------------------------------------------
// Test data
// ---------------------------------------------------------------------------------
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
};

// Floats: half raw bit patterns (every class: NaN, inf, subnormal, huge), half values
// within 2^-3..2^3 so that sums and products of neighbours actually round.
template <typename T> T random_value(Rng& r) {
  const uint64_t bits = r.next();
  const bool raw = bits & 1;
  const uint64_t sign = (bits >> 1) & 1, k = (bits >> 2) % 7;  // exponent offset 0..6
  if constexpr (std::is_same_v<T, H16>) {
    if (raw) return T{static_cast<uint16_t>(bits >> 16)};
    return T{static_cast<uint16_t>((sign << 15) | ((12 + k) << 10) | ((bits >> 20) & 0x3ff))};
  } else if constexpr (std::is_same_v<T, B16>) {
    if (raw) return T{static_cast<uint16_t>(bits >> 16)};
    return T{static_cast<uint16_t>((sign << 15) | ((124 + k) << 7) | ((bits >> 20) & 0x7f))};
  } else if constexpr (std::is_same_v<T, float>) {
    if (raw) return u2f(static_cast<uint32_t>(bits >> 32));
    return u2f(static_cast<uint32_t>((sign << 31) | ((124 + k) << 23) | ((bits >> 20) & 0x7fffff)));
  } else if constexpr (std::is_same_v<T, double>) {
    const uint64_t b = raw ? r.next()
                           : (sign << 63) | ((1020 + k) << 52) | (r.next() & 0xfffffffffffffull);
    double d;
    std::memcpy(&d, &b, 8);
    return d;
  } else if constexpr (sizeof(T) == 8) {
    // |x| < 2^62 and |factor| <= 1.25 keep x * factor inside int64, the range where the
    // CPU's and the GPU's double->int64 conversions agree.
    return static_cast<T>(static_cast<int64_t>(bits) >> 2);
  } else {
    return static_cast<T>(bits >> 7);
  }
}

template <typename T> std::vector<T> random_vector(size_t n, Rng& r) {
  std::vector<T> v(n);
  for (auto& x : v) x = random_value<T>(r);
  return v;
}

// Factors cover exact (0.5), inexact (1/3), negative and small; 1.0 checks the no-op.
const double kScaleFactors[] = {0.5, 1.0 / 3.0, -1.25, 1e-3, 1.0};

template <typename Fn> void with_type(DataType dt, Fn&& fn) {
  switch (dt) {
    case DataType::UINT8: fn(uint8_t{}); break;
    case DataType::INT8: fn(int8_t{}); break;
    case DataType::INT16: fn(int16_t{}); break;
    case DataType::UINT16: fn(uint16_t{}); break;
    case DataType::INT32: fn(int32_t{}); break;
    case DataType::INT64: fn(int64_t{}); break;
    case DataType::FLOAT16: fn(H16{}); break;
    case DataType::BFLOAT16: fn(B16{}); break;
    case DataType::FLOAT32: fn(float{}); break;
    case DataType::FLOAT64: fn(double{}); break;
    default: throw std::logic_error("test dtype");
  }
}

const DataType kTypes[] = {DataType::FLOAT16, DataType::BFLOAT16, DataType::FLOAT32,
                           DataType::FLOAT64, DataType::INT32,    DataType::INT64,
                           DataType::UINT8,   DataType::INT8,     DataType::INT16,
                           DataType::UINT16};
const ReduceOp kOps[] = {ReduceOp::SUM, ReduceOp::AVERAGE, ReduceOp::MIN, ReduceOp::MAX,
                         ReduceOp::PRODUCT};
const size_t kLengths[] = {0, 1, 3, 1000, (size_t{1} << 20) + 7};

#define CK(call)                                                                    \
  do {                                                                              \
    cudaError_t e_ = (call);                                                        \
    if (e_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call,             \
                   cudaGetErrorString(e_));                                         \
      std::exit(2);                                                                 \
    }                                                                               \
  } while (0)

// ---------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------
constexpr unsigned char kSentinel = 0xA5;
constexpr size_t kGuard = 64;  // sentinel bytes checked after each output range

struct Results {
  int passed = 0, failed = 0, reported = 0;
  void fail(const std::string& what) {
    ++failed;
    if (reported++ < 30) std::printf("FAIL %s\n", what.c_str());
  }
  void check(bool ok, const std::string& what) { ok ? void(++passed) : fail(what); }
};

struct DeviceArena {
  unsigned char* p = nullptr;
  size_t size = 0;
  void ensure(size_t n) {
    if (n <= size) return;
    if (p) CK(cudaFree(p));
    CK(cudaMalloc(&p, n));
    size = n;
  }
  ~DeviceArena() { if (p) cudaFree(p); }
};

DeviceArena g_a, g_b, g_scratch;

// Compares `count` elements of T at byte offset `off` of `got` with `want`, and the
// sentinel bytes everywhere else in got[0, total).
template <typename T>
bool compare_region(const std::vector<unsigned char>& got, size_t off, const std::vector<T>& want,
                    std::string* detail) {
  for (size_t i = 0; i < want.size(); ++i) {
    T g;
    std::memcpy(&g, got.data() + off + i * sizeof(T), sizeof(T));
    if (!same(g, want[i])) {
      *detail = "elem " + std::to_string(i) + " got " + hex(g) + " want " + hex(want[i]);
      return false;
    }
  }
  return true;
}

bool sentinel_ok(const std::vector<unsigned char>& got, size_t from, size_t to, std::string* d) {
  for (size_t i = from; i < to; ++i)
    if (got[i] != kSentinel) { *d = "overwrite at byte " + std::to_string(i); return false; }
  return true;
}

// kind: 0 reduce_into, 1 reduce_scale_into, 2 scale
template <typename T>
void reduce_case(Results& res, Rng& rng, int kind, DataType dt, ReduceOp op, size_t n,
                 size_t doff, size_t soff, double factor) {
  const size_t bytes = n * sizeof(T);
  const std::vector<T> d0 = random_vector<T>(n, rng), s0 = random_vector<T>(n, rng);
  const size_t total = doff + bytes + kGuard;
  g_a.ensure(total);
  g_b.ensure(soff + bytes + kGuard);
  CK(cudaMemset(g_a.p, kSentinel, total));
  if (bytes) {
    CK(cudaMemcpy(g_a.p + doff, d0.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(g_b.p + soff, s0.data(), bytes, cudaMemcpyHostToDevice));
  }

  std::string what = std::string(kind == 0 ? "reduce_into" : kind == 1 ? "reduce_scale_into" : "scale") +
                     " " + hvdl::dtype_name(dt) + (kind == 2 ? "" : std::string(" ") + hvdl::reduce_op_name(op)) +
                     " n=" + std::to_string(n) + " dst+" + std::to_string(doff) + "B" +
                     (kind == 2 ? "" : " src+" + std::to_string(soff) + "B") +
                     (kind == 0 ? "" : " factor=" + std::to_string(factor));
  try {
    if (kind == 0) gpu::reduce_into(g_a.p + doff, g_b.p + soff, n, dt, op, nullptr);
    else if (kind == 1) gpu::reduce_scale_into(g_a.p + doff, g_b.p + soff, n, dt, op, factor, nullptr);
    else gpu::scale(g_a.p + doff, n, dt, factor, nullptr);
    CK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    res.fail(what + ": threw " + e.what());
    return;
  }

  std::vector<T> want(n);
  for (size_t i = 0; i < n; ++i) {
    if (kind == 2) { want[i] = factor == 1.0 ? d0[i] : ref_scale(d0[i], factor); continue; }
    T r = ref_op(op, d0[i], s0[i]);
    if (kind == 1 && factor != 1.0) r = ref_scale(r, factor);
    want[i] = r;
  }
  std::vector<unsigned char> got(total);
  CK(cudaMemcpy(got.data(), g_a.p, total, cudaMemcpyDeviceToHost));
  std::string d;
  const bool ok = sentinel_ok(got, 0, doff, &d) && compare_region(got, doff, want, &d) &&
                  sentinel_ok(got, doff + bytes, total, &d);
  res.check(ok, what + ": " + d);
}

// Lays `lens` (bytes) out at random gaps in a source and a destination arena, runs one
// batched_copy and checks every region and every gap byte.
template <typename T>
void batched_case(Results& res, Rng& rng, const std::string& name, DataType dt,
                  const std::vector<size_t>& lens, double factor, bool byte_gaps) {
  const size_t e = factor == 1.0 ? 1 : sizeof(T);
  const size_t n = lens.size();
  // Gaps keep element alignment mostly; byte_gaps also shifts by odd bytes to reach the
  // byte-misaligned paths.
  auto gap = [&] { return byte_gaps ? rng.below(40) : e * rng.below(9); };
  std::vector<size_t> soff(n), doff(n);
  size_t s_total = 0, d_total = 0;
  for (size_t i = 0; i < n; ++i) {
    s_total += gap(); soff[i] = s_total; s_total += lens[i];
    d_total += gap(); doff[i] = d_total; d_total += lens[i];
  }
  s_total += kGuard; d_total += kGuard;
  std::vector<unsigned char> src(s_total);
  for (auto& b : src) b = static_cast<unsigned char>(rng.next());
  // Typed random values for the regions so float scaling sees real numbers.
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j + sizeof(T) <= lens[i]; j += sizeof(T)) {
      const T v = random_value<T>(rng);
      std::memcpy(src.data() + soff[i] + j, &v, sizeof(T));
    }
  g_a.ensure(d_total);
  g_b.ensure(s_total);
  CK(cudaMemset(g_a.p, kSentinel, d_total));
  CK(cudaMemcpy(g_b.p, src.data(), s_total, cudaMemcpyHostToDevice));

  std::vector<gpu::CopyDesc> descs(n);
  for (size_t i = 0; i < n; ++i) descs[i] = {g_a.p + doff[i], g_b.p + soff[i], lens[i]};
  const size_t scratch = gpu::batched_copy_scratch_bytes(static_cast<int>(n));
  g_scratch.ensure(scratch + 8);
  const std::string what = "batched_copy " + name + " " + hvdl::dtype_name(dt) + " regions=" +
                           std::to_string(n) + " factor=" + std::to_string(factor);
  try {
    gpu::batched_copy(descs.data(), static_cast<int>(n), dt, factor, nullptr, g_scratch.p,
                      scratch);
    descs.assign(n, gpu::CopyDesc{nullptr, nullptr, 0});  // host copy must be free to reuse
    CK(cudaDeviceSynchronize());
  } catch (const std::exception& ex) {
    res.fail(what + ": threw " + ex.what());
    return;
  }
  std::vector<unsigned char> got(d_total);
  CK(cudaMemcpy(got.data(), g_a.p, d_total, cudaMemcpyDeviceToHost));
  std::string d;
  size_t cursor = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!sentinel_ok(got, cursor, doff[i], &d)) break;
    bool ok;
    if (factor == 1.0) {
      ok = std::memcmp(got.data() + doff[i], src.data() + soff[i], lens[i]) == 0;
      if (!ok) d = "region " + std::to_string(i) + " bytes differ";
    } else {
      std::vector<T> want(lens[i] / sizeof(T));
      for (size_t j = 0; j < want.size(); ++j) {
        T v;
        std::memcpy(&v, src.data() + soff[i] + j * sizeof(T), sizeof(T));
        want[j] = ref_scale(v, factor);
      }
      ok = compare_region(got, doff[i], want, &d);
      if (!ok) d = "region " + std::to_string(i) + " (" + std::to_string(lens[i]) + "B) " + d;
    }
    if (!ok) break;
    cursor = doff[i] + lens[i];
  }
  if (d.empty()) sentinel_ok(got, cursor, d_total, &d);
  res.check(d.empty(), what + ": " + d);
}

template <typename Ex, typename Fn> void expect_throw(Results& res, const std::string& what, Fn fn) {
  try {
    fn();
  } catch (const Ex&) {
    res.check(true, what);
    return;
  } catch (const std::exception& e) {
    res.fail(what + ": wrong exception " + e.what());
    return;
  }
  res.fail(what + ": did not throw");
}

void correctness(Results& res) {
  Rng rng{12345};
  for (DataType dt : kTypes) {
    with_type(dt, [&](auto tag) {
      using T = decltype(tag);
      const size_t e = sizeof(T);
      // (dst, src) byte offsets: aligned, same misalignment (scalar head + vectors +
      // tail), different misalignment (all scalar), and not element-aligned at all.
      std::vector<std::pair<size_t, size_t>> offs = {{0, 0}, {e, e}, {0, e}, {3 * e, 5 * e}};
      if (e > 1) { offs.push_back({1, 1}); offs.push_back({1, 3}); }
      for (size_t n : kLengths) {
        for (auto [doff, soff] : offs) {
          int fi = 0;
          for (ReduceOp op : kOps) {
            reduce_case<T>(res, rng, 0, dt, op, n, doff, soff, 1.0);
            reduce_case<T>(res, rng, 1, dt, op, n, doff, soff, kScaleFactors[fi++ % 5]);
          }
        }
        // scale has no src, so only the dst offset matters.
        std::vector<size_t> douts = {0, e, 3 * e};
        if (e > 1) douts.push_back(1);  // not element-aligned
        for (size_t doff : douts)
          for (double f : kScaleFactors) reduce_case<T>(res, rng, 2, dt, ReduceOp::SUM, n, doff, 0, f);
      }

      // batched_copy with scaling in this dtype.
      const size_t unit_elems = 16384 / e;
      const std::vector<size_t> mixed_elems = {0, 1, 3, 1000, (size_t{1} << 20) + 7, unit_elems,
                                               unit_elems + 1, unit_elems - 1, 0, 5,
                                               3 * unit_elems + 2};
      std::vector<size_t> mixed(mixed_elems.size());
      for (size_t i = 0; i < mixed.size(); ++i) mixed[i] = mixed_elems[i] * e;
      std::vector<size_t> tiny(3000);
      for (auto& l : tiny) l = rng.below(41) * e;
      for (double f : {0.5, -1.25, 1.0 / 3.0}) {
        batched_case<T>(res, rng, "mixed", dt, mixed, f, false);
        batched_case<T>(res, rng, "mixed-bytegaps", dt, mixed, f, true);
        batched_case<T>(res, rng, "tiny", dt, tiny, f, false);
      }
      batched_case<T>(res, rng, "big", dt, {((size_t{1} << 22) + 3) * e}, -1.25, false);
      batched_case<T>(res, rng, "copy-mixed", dt, mixed, 1.0, true);
    });
  }

  // Plain copies: arbitrary byte lengths and offsets reach every word width (16..1).
  std::vector<size_t> odd = {0, 1, 2, 3, 15, 16, 17, 16383, 16384, 16385, 100000, (1u << 22) + 13, 0, 7};
  for (int rep = 0; rep < 4; ++rep) batched_case<uint8_t>(res, rng, "bytes", DataType::UINT8, odd, 1.0, true);
  std::vector<size_t> tiny_bytes(10000);
  for (auto& l : tiny_bytes) l = rng.below(70);
  batched_case<uint8_t>(res, rng, "tiny-bytes", DataType::UINT8, tiny_bytes, 1.0, true);
  batched_case<uint8_t>(res, rng, "bool-copy", DataType::BOOL, odd, 1.0, true);
  batched_case<uint8_t>(res, rng, "all-empty", DataType::FLOAT32, {0, 0, 0}, 1.0, false);
  batched_case<uint8_t>(res, rng, "none", DataType::FLOAT32, {}, 1.0, false);

  // Argument validation.
  g_a.ensure(1024);
  g_b.ensure(1024);
  g_scratch.ensure(1024);
  expect_throw<std::invalid_argument>(res, "reduce ADASUM rejected", [] {
    gpu::reduce_into(g_a.p, g_b.p, 4, DataType::FLOAT32, ReduceOp::ADASUM, nullptr);
  });
  expect_throw<std::invalid_argument>(res, "reduce BOOL rejected", [] {
    gpu::reduce_into(g_a.p, g_b.p, 4, DataType::BOOL, ReduceOp::SUM, nullptr);
  });
  expect_throw<std::invalid_argument>(res, "scale BOOL rejected", [] {
    gpu::scale(g_a.p, 4, DataType::BOOL, 2.0, nullptr);
  });
  expect_throw<std::invalid_argument>(res, "batched_copy small scratch rejected", [] {
    gpu::CopyDesc c[2] = {{g_a.p, g_b.p, 8}, {g_a.p + 8, g_b.p + 8, 8}};
    gpu::batched_copy(c, 2, DataType::FLOAT32, 1.0, nullptr, g_scratch.p,
                      gpu::batched_copy_scratch_bytes(2) - 1);
  });
  expect_throw<std::invalid_argument>(res, "batched_copy partial element rejected", [] {
    gpu::CopyDesc c[1] = {{g_a.p, g_b.p, 6}};
    gpu::batched_copy(c, 1, DataType::FLOAT32, 0.5, nullptr, g_scratch.p, 1024);
  });
  try {
    gpu::scale(g_a.p, 4, DataType::BOOL, 1.0, nullptr);  // identity: allowed, no launch
    res.check(true, "scale BOOL by 1");
  } catch (const std::exception& e) {
    res.fail(std::string("scale BOOL by 1 threw ") + e.what());
  }
  CK(cudaDeviceSynchronize());
  CK(cudaGetLastError());
}

// ---------------------------------------------------------------------------------
// Bandwidth
// ---------------------------------------------------------------------------------
double time_ms(cudaStream_t s, int iters, const std::function<void()>& fn) {
  for (int i = 0; i < 2; ++i) fn();  // warm-up (also first-launch residency queries)
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaEventRecord(a, s));
  for (int i = 0; i < iters; ++i) fn();
  CK(cudaEventRecord(b, s));
  CK(cudaEventSynchronize(b));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, a, b));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  return ms / iters;
}

void bandwidth() {
  size_t free_b = 0, total_b = 0;
  CK(cudaMemGetInfo(&free_b, &total_b));
  size_t max_bytes = size_t{1} << 30;
  while (max_bytes > (size_t{1} << 20) && 2 * max_bytes + (size_t{64} << 20) > free_b) max_bytes /= 2;

  unsigned char *dst = nullptr, *src = nullptr;
  CK(cudaMalloc(&dst, max_bytes + 64));
  CK(cudaMalloc(&src, max_bytes + 64));
  CK(cudaMemset(dst, 0, max_bytes + 64));
  CK(cudaMemset(src, 0, max_bytes + 64));
  cudaStream_t s = static_cast<cudaStream_t>(gpu::stream_create(gpu::current_device()));
  const int kRegions = 64;
  void* scratch = gpu::malloc_device(gpu::batched_copy_scratch_bytes(kRegions));

  std::printf("\nbandwidth (GB/s = 1e9 B/s; reduce moves 3x bytes, copies 2x bytes)\n");
  std::printf("%10s %12s %20s %20s %22s\n", "size", "memcpy D2D", "reduce f32 (%copy)",
              "reduce bf16 (%copy)", "batched_copy x64 (%)");
  for (size_t bytes = size_t{1} << 20; bytes <= max_bytes; bytes *= 2) {
    const int iters = static_cast<int>(std::clamp<size_t>((size_t{8} << 30) / bytes, 5, 500));
    const double t_copy = time_ms(s, iters, [&] {
      CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
    });
    const double t_f32 = time_ms(s, iters, [&] {
      gpu::reduce_into(dst, src, bytes / 4, DataType::FLOAT32, ReduceOp::SUM, s);
    });
    const double t_bf16 = time_ms(s, iters, [&] {
      gpu::reduce_into(dst, src, bytes / 2, DataType::BFLOAT16, ReduceOp::SUM, s);
    });
    std::vector<gpu::CopyDesc> descs(kRegions);
    const size_t per = bytes / kRegions;
    for (int i = 0; i < kRegions; ++i) descs[i] = {dst + i * per, src + i * per, per};
    const double t_batch = time_ms(s, iters, [&] {
      gpu::batched_copy(descs.data(), kRegions, DataType::FLOAT32, 1.0, s, scratch,
                        gpu::batched_copy_scratch_bytes(kRegions));
    });
    const double copy_gbs = 2.0 * bytes / (t_copy * 1e6);
    const double f32_gbs = 3.0 * bytes / (t_f32 * 1e6);
    const double bf16_gbs = 3.0 * bytes / (t_bf16 * 1e6);
    const double batch_gbs = 2.0 * per * kRegions / (t_batch * 1e6);
    char label[32];
    std::snprintf(label, sizeof label, "%zu MiB", bytes >> 20);
    std::printf("%10s %12.1f %12.1f (%4.0f%%) %12.1f (%4.0f%%) %14.1f (%4.0f%%)\n", label,
                copy_gbs, f32_gbs, 100 * f32_gbs / copy_gbs, bf16_gbs, 100 * bf16_gbs / copy_gbs,
                batch_gbs, 100 * batch_gbs / copy_gbs);
  }
  // The scalar path (dst and src misaligned differently) at one size, for reference.
  const size_t bytes = std::min<size_t>(max_bytes, size_t{256} << 20);
  const double t_mis = time_ms(s, 20, [&] {
    gpu::reduce_into(dst, src + 4, bytes / 4, DataType::FLOAT32, ReduceOp::SUM, s);
  });
  std::printf("reduce f32 %zu MiB with src offset +4 B (no 16-byte vectors): %.1f GB/s\n",
              bytes >> 20, 3.0 * bytes / (t_mis * 1e6));
  gpu::stream_synchronize(s);
  gpu::free_device(scratch);
  gpu::stream_destroy(s);
  CK(cudaFree(dst));
  CK(cudaFree(src));
}

}  // namespace

int main(int argc, char** argv) {
  const bool bench = !(argc > 1 && std::strcmp(argv[1], "--no-bench") == 0);
  if (!gpu::runtime_available()) {
    std::printf("no GPU: CUDA driver or device not available, nothing to check\n");
    return 0;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, gpu::current_device()));
  std::printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor,
              prop.multiProcessorCount);
  Results res;
  correctness(res);
  std::printf("%d passed, %d failed\n", res.passed, res.failed);
  if (bench) bandwidth();
  return res.failed == 0 ? 0 : 1;
}
