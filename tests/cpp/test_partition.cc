// The ring's chunk arithmetic, without MPI:
//   g++ -O2 -std=c++17 -pthread -I csrc tests/cpp/test_partition.cc \
//       csrc/collectives/ring_allreduce.cc csrc/collectives/ring.cc -o /tmp/test_partition
//
// 1. partition.h: blocks tile [0, count) in order, sizes differ by at most one, the
//    first count % parts blocks are the larger ones, for every count < parts too.
// 2. The real ring_allreduce over the harness's thread transport (harness.h: one
//    thread per rank, FIFO per ordered pair of ranks, like MPI's matching order) for
//    N = 1..7, counts 0..(a few segments), several segment sizes: exact integer
//    sums on every rank (in place), float results bitwise identical on every rank
//    (out of place, input untouched), every
//    message received with exactly the size that was sent.
// 3. The two ring phases on their own: out-of-place reduce-scatter (the input is
//    only read) for both block shifts, and allgather of uneven blocks, empty ones
//    included.
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/partition.h"
#include "collectives/ring_allreduce.h"
#include "harness.h"

using namespace hvdl;
using namespace hvdl::test;

namespace {

// One CHECK for every test (harness.h); `what` says which case.
void check(bool ok, const std::string& what) { CHECK(ok, "%s", what.c_str()); }

// ---- 1. partition.h ----------------------------------------------------------------

void test_blocks() {
  const size_t counts[] = {0, 1, 2, 3, 5, 7, 8, 17, 63, 64, 65, 1000, 1001, (size_t(1) << 40) + 3};
  for (size_t count : counts) {
    for (int parts = 1; parts <= 9; ++parts) {
      size_t expect_off = 0;
      bool ok = true;
      for (int i = 0; i < parts; ++i) {
        size_t c = block_count(count, parts, i), o = block_offset(count, parts, i);
        size_t want = count / parts + (static_cast<size_t>(i) < count % parts ? 1 : 0);
        ok = ok && o == expect_off && c == want;
        expect_off += c;
      }
      ok = ok && expect_off == count;
      check(ok, "blocks tile count=" + std::to_string(count) + " parts=" + std::to_string(parts));
    }
  }
}

// ---- 2. the ring over an in-process transport -----------------------------------

// Plain reducer for the two element types the test uses.
class TestReducer : public Reducer {
 public:
  void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp) const override {
    if (dt == DataType::INT64) {
      auto* d = static_cast<int64_t*>(dst);
      auto* s = static_cast<const int64_t*>(src);
      for (size_t i = 0; i < count; ++i) d[i] += s[i];
    } else {
      auto* d = static_cast<float*>(dst);
      auto* s = static_cast<const float*>(src);
      for (size_t i = 0; i < count; ++i) d[i] += s[i];
    }
  }
  void scale(void* buf, size_t count, DataType dt, double f) const override {
    if (f == 1.0) return;
    if (dt == DataType::INT64) {
      auto* p = static_cast<int64_t*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] = static_cast<int64_t>(p[i] * f);
    } else {
      auto* p = static_cast<float*>(buf);
      for (size_t i = 0; i < count; ++i) p[i] *= static_cast<float>(f);
    }
  }
};

// Element i of rank r: distinct per (rank, i) so a block taken from the wrong place
// or reduced twice shows up in the sum.
int64_t int_value(int r, size_t i) { return static_cast<int64_t>((r + 1) * 1000003 + i * 7); }
float float_value(int r, size_t i) { return 1.0f / static_cast<float>(3 + r * 131 + i % 977); }

// The ring's pipelining segment under test (argv[1]; default: the ring's own).
size_t g_segment_bytes = kDefaultRingSegmentBytes;

void run_ring(int n, size_t count, double postscale) {
  TestReducer red;
  std::vector<std::vector<int64_t>> ints(n, std::vector<int64_t>(count));
  std::vector<std::vector<float>> floats(n, std::vector<float>(count));
  std::vector<std::vector<float>> float_out(n, std::vector<float>(count, -12345.0f));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ints[r][i] = int_value(r, i), floats[r][i] = float_value(r, i);
  on_ranks(n, [&](Transport& t) {
        const int r = t.rank();
        HostBuffer scratch;
        RingOptions seg;
        seg.segment_bytes = g_segment_bytes;
        ring_allreduce(t, red, scratch,
                       {ints[r].data(), ints[r].data(), count, DataType::INT64, ReduceOp::SUM, 1.0,
                        postscale},
                       seg);
        // out of place: the input is only read, the output starts as garbage
        ring_allreduce(t, red, scratch,
                       {floats[r].data(), float_out[r].data(), count, DataType::FLOAT32,
                        ReduceOp::SUM, 1.0, 1.0},
                       seg);
        t.wait_all();
  });
  // on_ranks checked that no rank threw (a receive of the wrong size throws) and that
  // no message was left unreceived.
  const std::string what = "ring n=" + std::to_string(n) + " count=" + std::to_string(count) +
                           " postscale=" + std::to_string(postscale);
  bool ints_ok = true, floats_same = true, floats_close = true, input_kept = true;
  for (size_t i = 0; i < count; ++i) {
    int64_t sum = 0;
    double fsum = 0;
    for (int r = 0; r < n; ++r) sum += int_value(r, i), fsum += float_value(r, i);
    const int64_t want = static_cast<int64_t>(sum * postscale);
    for (int r = 0; r < n; ++r) {
      ints_ok = ints_ok && ints[r][i] == want;
      floats_same = floats_same && std::memcmp(&float_out[r][i], &float_out[0][i], 4) == 0;
      input_kept = input_kept && floats[r][i] == float_value(r, i);
    }
    floats_close = floats_close && std::abs(float_out[0][i] - fsum) <= 1e-6 * n * std::abs(fsum);
  }
  check(ints_ok, what + ": integer sums wrong");
  check(floats_same, what + ": float results differ between ranks");
  check(floats_close, what + ": float sums wrong (out of place)");
  check(input_kept, what + ": out of place, the input was modified");
}

// Out-of-place reduce-scatter: rank r's block (r + shift) of dst is the full sum,
// src is untouched.
void run_reduce_scatter(int n, size_t count, int shift) {
  TestReducer red;
  std::vector<std::vector<int64_t>> src(n, std::vector<int64_t>(count)), dst(n, std::vector<int64_t>(count, -1));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) src[r][i] = int_value(r, i);
  const auto orig = src;
  const RingBlocks blocks = RingBlocks::even(count, n);
  on_ranks(n, [&](Transport& t) {
    const int r = t.rank();
    HostBuffer scratch;
    ring_reduce_scatter(t, red, src[r].data(), dst[r].data(), blocks, DataType::INT64,
                        ReduceOp::SUM, shift, scratch, g_segment_bytes);
    t.wait_all();
  });
  const std::string what = "reduce-scatter n=" + std::to_string(n) + " count=" +
                           std::to_string(count) + " shift=" + std::to_string(shift);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    const int own = (r + shift) % n;
    for (size_t i = blocks.offset[own]; i < blocks.offset[own] + blocks.count[own]; ++i) {
      int64_t sum = 0;
      for (int q = 0; q < n; ++q) sum += int_value(q, i);
      ok = ok && dst[r][i] == sum;
    }
  }
  check(ok, what + ": own block is not the full sum");
  check(src == orig, what + ": the input was modified");
}

void run_allgather(int n, const std::vector<size_t>& sizes, int shift) {
  const RingBlocks blocks = RingBlocks::of_sizes(sizes);
  size_t total = 0;
  for (size_t b : sizes) total += b;
  std::vector<std::vector<char>> buf(n, std::vector<char>(total, 0));
  auto byte = [](int block, size_t i) { return static_cast<char>(block * 37 + i * 11 + 1); };
  for (int r = 0; r < n; ++r) {
    const int own = (r + shift) % n;
    for (size_t i = 0; i < blocks.count[own]; ++i) buf[r][blocks.offset[own] + i] = byte(own, i);
  }
  on_ranks(n, [&](Transport& t) {
    ring_allgather(t, buf[t.rank()].data(), blocks, shift);
    t.wait_all();
  });
  std::string what = "allgather n=" + std::to_string(n) + " shift=" + std::to_string(shift) + " sizes";
  for (size_t b : sizes) what += " " + std::to_string(b);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    for (int b = 0; b < n; ++b)
      for (size_t i = 0; i < blocks.count[b]; ++i) ok = ok && buf[r][blocks.offset[b] + i] == byte(b, i);
  }
  check(ok, what + ": a block is missing or wrong");
}

}  // namespace

int main(int argc, char** argv) {
  test_blocks();
  // Segment size: argv[1] (the pytest wrapper runs this binary with tiny ones) or the
  // ring's default. Counts cover < N, = N, just over multiples of N, and several
  // segments per block.
  if (argc > 1) g_segment_bytes = static_cast<size_t>(std::strtoull(argv[1], nullptr, 10));
  const size_t seg_elems = g_segment_bytes / 8;
  std::printf("segment bytes %zu\n", g_segment_bytes);
  std::vector<size_t> counts = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 31, 64, 100, 257};
  for (size_t k : {size_t(1), size_t(2), size_t(3)})
    for (int n = 2; n <= 7; ++n) counts.push_back(k * seg_elems * n + (k % n));
  for (int n = 1; n <= 7; ++n)
    for (size_t count : counts) run_ring(n, count, n == 3 ? 1.0 / 3 : 1.0);
  for (int n = 2; n <= 5; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(n - 1), size_t(n) + 1, 3 * seg_elems * n + 1})
      for (int shift : {0, 1}) run_reduce_scatter(n, count, shift);
  for (int n = 2; n <= 5; ++n)
    for (int shift : {0, 1}) {
      std::vector<size_t> uneven, with_empty;
      for (int i = 0; i < n; ++i) {
        uneven.push_back(static_cast<size_t>(i * 3 + 1) * g_segment_bytes / 2 + i);
        with_empty.push_back(i % 2 ? 0 : static_cast<size_t>(i + 1) * 100);
      }
      run_allgather(n, uneven, shift);
      run_allgather(n, with_empty, shift);
    }
  return finish("partition and ring");
}
