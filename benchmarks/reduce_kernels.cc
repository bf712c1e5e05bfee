// Throughput of reduce_into (dst += src) per kernel set, next to memcpy of the same
// buffer size. GB/s counts the dst buffer size once per call, so a kernel that is
// purely memory-bound reads two buffers and writes one in the time memcpy reads one
// and writes one.
//
//   g++ -O2 -std=c++17 -I csrc benchmarks/reduce_kernels.cc csrc/reduce/*.cc -o /tmp/bench
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "reduce/reduce.h"

namespace hvdl {
namespace detail {
bool reduce_into_isa(const char* isa, void* dst, const void* src, size_t count, DataType dtype,
                     ReduceOp op);
uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);
}  // namespace detail
}  // namespace hvdl

using namespace hvdl;
using Clock = std::chrono::steady_clock;

// Best-of-5 rate, each sample repeating the call for at least ~30 ms so small
// buffers are not dominated by timer resolution.
template <typename Fn>
static double gbps(size_t bytes, Fn fn) {
  fn();  // warm caches and page tables
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    size_t iters = 0;
    auto t0 = Clock::now();
    double secs = 0;
    do {
      fn();
      ++iters;
      secs = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (secs < 0.03);
    best = std::max(best, bytes * iters / secs / 1e9);
  }
  return best;
}

static void fill(std::vector<uint8_t>& buf, DataType t, float v) {
  size_t n = buf.size() / dtype_size(t);
  for (size_t i = 0; i < n; ++i) {
    if (t == DataType::FLOAT32) {
      std::memcpy(buf.data() + 4 * i, &v, 4);
    } else if (t == DataType::INT16 || t == DataType::UINT16) {
      const uint16_t x = static_cast<uint16_t>(v * 2);  // small integers: no overflow
      std::memcpy(buf.data() + 2 * i, &x, 2);
    } else {
      uint16_t h = t == DataType::FLOAT16 ? detail::float_to_half(v) : detail::float_to_bf16(v);
      std::memcpy(buf.data() + 2 * i, &h, 2);
    }
  }
}

int main() {
  const size_t sizes[] = {64u << 10, 1u << 20, 16u << 20, 256u << 20};
  const char* size_names[] = {"64KiB", "1MiB", "16MiB", "256MiB"};
  const DataType types[] = {DataType::FLOAT32, DataType::BFLOAT16, DataType::FLOAT16,
                            DataType::INT16, DataType::UINT16};
  const char* isas[] = {"generic", "avx2"};

  std::printf("active set: %s\n", reduce_isa());
  std::printf("%-9s %-7s %9s %9s %9s   (GB/s)\n", "dtype", "size", "memcpy", "generic", "avx2");
  for (DataType t : types) {
    for (int si = 0; si < 4; ++si) {
      const size_t bytes = sizes[si], count = bytes / dtype_size(t);
      std::vector<uint8_t> dst(bytes), src(bytes);
      fill(src, t, 0.5f);
      double cp = gbps(bytes, [&] { std::memcpy(dst.data(), src.data(), bytes); });
      std::printf("%-9s %-7s %9.1f", dtype_name(t), size_names[si], cp);
      for (const char* isa : isas) {
        fill(dst, t, 1.0f);
        bool ok = true;
        double r = gbps(bytes, [&] {
          ok = detail::reduce_into_isa(isa, dst.data(), src.data(), count, t, ReduceOp::SUM);
        });
        if (ok) std::printf(" %9.1f", r); else std::printf(" %9s", "n/a");
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}
