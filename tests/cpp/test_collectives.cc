// The collective algorithms (csrc/collectives) over the harness's thread transport
// (harness.h): ranks are threads, every N from 1 to 8, block sizes with zeros, and
// segments of 64 bytes so that pipelining has many steps. The transport is stricter
// than MPI: a receive must match a send of exactly its size, so a sender and receiver
// that disagree on how a transfer is cut fail here instead of corrupting a later
// message.
//
//   g++ -O1 -std=c++17 -pthread -I csrc tests/cpp/test_collectives.cc \
//       csrc/collectives/{ring,ring_allreduce,broadcast,alltoall,cpu_reducer}.cc \
//       csrc/transport/transport.cc csrc/common/logging.cc \
//       csrc/engine/output_pool.cc csrc/reduce/*.cc -o /tmp/test_collectives && /tmp/test_collectives
#include <condition_variable>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "collectives/alltoall.h"
#include "collectives/broadcast.h"
#include "collectives/ring.h"
#include "collectives/ring_allreduce.h"
#include "engine/output_pool.h"
#include "harness.h"

namespace hvdl {
namespace {
using namespace test;

// 16 floats per segment: blocks of a few dozen elements take several segments.
constexpr size_t kSegmentBytes = 64;

// Rank r's value of element i: small integers, exact in float sums.
float val(int r, size_t i) { return static_cast<float>((r * 7 + i * 3) % 11) - 5.0f; }

void test_reduce_scatter(int n, const std::vector<size_t>& sizes, int shift, bool in_place) {
  RingBlocks blocks = RingBlocks::of_sizes(sizes);
  size_t total = 0;
  for (auto s : sizes) total += s;
  on_ranks(n, [&](Transport& t) {
    const int r = t.rank();
    std::vector<float> in(total), out(total, 99.0f);
    for (size_t i = 0; i < total; ++i) in[i] = val(r, i);
    HostBuffer scratch;
    std::vector<float> orig = in;
    void* dst = in_place ? in.data() : out.data();
    const int own = ((r + shift) % n + n) % n;
    // Out of place, every other trial asks for the finished block in a separate buffer.
    std::vector<float> own_buf(blocks.count[own] + 1, 77.0f);
    const bool separate = !in_place && (sizes.size() + shift) % 2 == 0;
    ring_reduce_scatter(t, cpu_reducer(), in.data(), dst, blocks, DataType::FLOAT32, ReduceOp::SUM,
                        shift, scratch, kSegmentBytes, separate ? own_buf.data() : nullptr);
    if (!in_place) CHECK(in == orig, "n=%d: out-of-place reduce-scatter modified its input", n);
    CHECK(own_buf.back() == 77.0f, "n=%d: wrote past the separate own block", n);
    auto res = [&](size_t i) {
      return separate ? own_buf[i - blocks.offset[own]] : static_cast<const float*>(dst)[i];
    };
    for (size_t i = blocks.offset[own]; i < blocks.offset[own] + blocks.count[own]; ++i) {
      float want = 0;
      for (int j = 0; j < n; ++j) want += val(j, i);
      if (res(i) != want) {
        CHECK(false, "reduce_scatter n=%d shift=%d in_place=%d rank %d elem %zu: %g != %g", n, shift,
              in_place, r, i, res(i), want);
        break;
      }
    }
  });
}

void test_allreduce(int n, size_t count) {
  std::vector<std::vector<float>> results(n);
  on_ranks(n, [&](Transport& t) {
    std::vector<float> buf(count);
    for (size_t i = 0; i < count; ++i) buf[i] = val(t.rank(), i);
    HostBuffer scratch;
    RingOptions opts;
    opts.segment_bytes = kSegmentBytes;
    ring_allreduce(t, cpu_reducer(), scratch,
                   {buf.data(), buf.data(), count, DataType::FLOAT32, ReduceOp::SUM, 1.0, 1.0}, opts);
    results[t.rank()] = buf;
  });
  for (size_t i = 0; i < count; ++i) {
    float want = 0;
    for (int j = 0; j < n; ++j) want += val(j, i);
    if (results[0][i] != want) {
      CHECK(false, "allreduce n=%d count=%zu elem %zu: %g != %g", n, count, i, results[0][i], want);
      break;
    }
  }
  for (int r = 1; r < n; ++r)
    CHECK(std::memcmp(results[r].data(), results[0].data(), count * 4) == 0,
          "allreduce n=%d count=%zu: rank %d differs from rank 0", n, count, r);
}

// The pair exchange (two ranks, one exchange of the whole buffer): one message up to
// kPairExchangeMaxBytes, above it segments through a window of kPairSlots, more
// segments than slots too. Against the reference, the same bits on both ranks (NaNs
// in MIN and MAX too: both fold in rank order), the input untouched out of place.
void test_pair_allreduce(size_t count, bool in_place, ReduceOp op, double postscale) {
  std::vector<std::vector<float>> results(2);
  auto value = [](int r, size_t i) {
    if (i % 97 == 5) return r == 0 ? std::nanf("1") : 3.0f;  // a NaN from rank 0 only
    if (i % 89 == 7) return r == 1 ? -std::nanf("2") : 4.0f;  // ... and from rank 1 only
    return val(r, i);
  };
  on_ranks(2, [&](Transport& t) {
    const int r = t.rank();
    std::vector<float> in(count), out(count, 99.0f);
    for (size_t i = 0; i < count; ++i) in[i] = value(r, i);
    const std::vector<float> orig = in;
    HostBuffer scratch;
    float* o = in_place ? in.data() : out.data();
    CHECK(pair_allreduce_host(t, cpu_reducer(), scratch, in.data(), o, count, DataType::FLOAT32, op,
                              postscale),
          "pair exchange declined %zu elements", count);
    if (!in_place)  // bytes, not ==: NaN != NaN
      CHECK(std::memcmp(in.data(), orig.data(), count * 4) == 0,
            "pair count=%zu: out of place modified its input", count);
    results[r].assign(o, o + count);
  });
  for (size_t i = 0; i < count; ++i) {
    const float a = value(0, i), b = value(1, i);
    // As numpy's minimum and maximum: a NaN from either side wins.
    float want = op == ReduceOp::SUM ? a + b : op == ReduceOp::PRODUCT ? a * b
                 : std::isnan(a) || std::isnan(b) ? std::nanf("")
                 : op == ReduceOp::MIN ? std::min(a, b) : std::max(a, b);
    want = static_cast<float>(want * postscale);
    const float got = results[0][i];
    if (!(got == want || (std::isnan(got) && std::isnan(want)))) {
      CHECK(false, "pair count=%zu in_place=%d op=%d elem %zu: %g != %g", count, in_place,
            static_cast<int>(op), i, got, want);
      break;
    }
  }
  CHECK(std::memcmp(results[0].data(), results[1].data(), count * 4) == 0,
        "pair count=%zu in_place=%d op=%d: rank 1 differs from rank 0", count, in_place,
        static_cast<int>(op));
}

void test_allgather(int n, const std::vector<size_t>& sizes, bool from_input) {
  RingBlocks blocks = RingBlocks::of_sizes(sizes);
  size_t total = 0;
  for (auto s : sizes) total += s;
  on_ranks(n, [&](Transport& t) {
    const int r = t.rank();
    std::vector<char> buf(total, 0), mine(sizes[r]);
    for (size_t i = 0; i < sizes[r]; ++i) mine[i] = static_cast<char>(r * 31 + i);
    if (from_input) {
      ring_allgather(t, buf.data(), blocks, 0, mine.data());
    } else {
      std::copy(mine.begin(), mine.end(), buf.begin() + blocks.offset[r]);
      ring_allgather(t, buf.data(), blocks, 0);
    }
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < sizes[j]; ++i)
        if (buf[blocks.offset[j] + i] != static_cast<char>(j * 31 + i)) {
          CHECK(false, "allgather n=%d rank %d: block %d byte %zu wrong", n, r, j, i);
          return;
        }
  });
}

void test_broadcast(int n, size_t bytes, int root, int algo) {
  on_ranks(n, [&](Transport& t) {
    std::vector<char> buf(bytes);
    for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<char>(t.rank() == root ? i * 7 + 1 : 0);
    if (algo == 0) binomial_tree_broadcast(t, buf.data(), bytes, root);
    else if (algo == 1) chain_broadcast(t, buf.data(), bytes, root, 64);
    else broadcast_bytes(t, buf.data(), bytes, root);
    for (size_t i = 0; i < bytes; ++i)
      if (buf[i] != static_cast<char>(i * 7 + 1)) {
        CHECK(false, "broadcast algo %d n=%d root %d bytes %zu: rank %d byte %zu wrong", algo, n, root,
              bytes, t.rank(), i);
        return;
      }
  });
}

void test_alltoall(int n, unsigned seed) {
  // sizes[j][k]: bytes rank j sends to rank k (zeros included).
  std::mt19937 rng(seed);
  std::vector<std::vector<size_t>> sizes(n, std::vector<size_t>(n));
  for (auto& row : sizes)
    for (auto& s : row) s = rng() % 4 == 0 ? 0 : rng() % 200;
  on_ranks(n, [&](Transport& t) {
    const int r = t.rank();
    std::vector<size_t> so(n), sb(n), ro(n), rb(n);
    size_t st = 0, rt = 0;
    for (int j = 0; j < n; ++j) {
      so[j] = st, sb[j] = sizes[r][j], st += sb[j];
      ro[j] = rt, rb[j] = sizes[j][r], rt += rb[j];
    }
    std::vector<char> in(st), out(rt);
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < sb[j]; ++i) in[so[j] + i] = static_cast<char>(r * 13 + j * 5 + i);
    alltoallv(t, in.data(), so, sb, out.data(), ro, rb);
    for (int j = 0; j < n; ++j)
      for (size_t i = 0; i < rb[j]; ++i)
        if (out[ro[j] + i] != static_cast<char>(j * 13 + r * 5 + i)) {
          CHECK(false, "alltoall n=%d seed %u: rank %d from %d byte %zu wrong", n, seed, r, j, i);
          return;
        }
  });
}

// The engine's output pool: freed outputs are reused by size; a freed block evicts
// the least recently freed ones to stay under the bound (set to 4 MiB in main).
void test_output_pool() {
  OutputPool& pool = OutputPool::get();
  void* first;
  {
    auto a = pool.allocate(1 << 20);
    first = a.get();
    CHECK(reinterpret_cast<uintptr_t>(first) % 4096 == 0, "pool block not page aligned");
  }
  CHECK(pool.cached_bytes() == (1u << 20), "freed block not cached: %zu", pool.cached_bytes());
  {
    auto b = pool.allocate((1 << 20) - 100);  // same page-rounded size: reused
    CHECK(b.get() == first, "cached block not reused");
    CHECK(pool.cached_bytes() == 0, "reused block still counted");
  }
  { auto c = pool.allocate(2 << 20); }
  { auto d = pool.allocate(1 << 20); }  // the 1 MiB block again
  CHECK(pool.cached_bytes() == (3u << 20), "cached %zu", pool.cached_bytes());
  { auto e = pool.allocate(3 << 20); }  // 3 + 3 > 4 MiB: evicts the oldest (the 2 MiB one)
  CHECK(pool.cached_bytes() == (4u << 20), "after eviction cached %zu", pool.cached_bytes());
  {
    auto again = pool.allocate(1 << 20);  // the more recently freed 1 MiB block survived
    CHECK(again.get() == first, "recently freed block was evicted");
  }
  { auto f = pool.allocate(8 << 20); }  // larger than the bound: not kept
  CHECK(pool.cached_bytes() == (4u << 20), "oversized block cached: %zu", pool.cached_bytes());
  auto z = pool.allocate(0);
  CHECK(z != nullptr, "zero-byte output must still be a valid pointer");
  pool.trim();
  CHECK(pool.cached_bytes() == 0, "trim left %zu", pool.cached_bytes());
  // From 4 MiB a block is whole 2 MiB pages, aligned to them (huge pages where lent).
  pool.set_limit(16u << 20);
  void* big;
  {
    auto g = pool.allocate((5u << 20) + 1);
    big = g.get();
    CHECK(reinterpret_cast<uintptr_t>(big) % (2u << 20) == 0, "large block not 2 MiB aligned");
  }
  CHECK(pool.cached_bytes() == (6u << 20), "large block cached as %zu", pool.cached_bytes());
  {
    auto h = pool.allocate(6u << 20);  // the same number of 2 MiB pages: reused
    CHECK(h.get() == big, "large block not reused");
  }
  pool.trim();
  pool.set_limit(4u << 20);
}

}  // namespace
}  // namespace hvdl

int main() {
  using namespace hvdl;
  OutputPool::get().set_limit(4u << 20);
  test_output_pool();
  std::mt19937 rng(7);
  for (int n = 1; n <= 8; ++n) {
    for (size_t count : {size_t(0), size_t(1), size_t(n - 1), size_t(n), size_t(n + 1), size_t(37),
                         size_t(16 * n + 5), size_t(1000)})
      test_allreduce(n, count);
    for (int trial = 0; trial < 6; ++trial) {
      std::vector<size_t> sizes(n);
      for (auto& s : sizes) s = rng() % 3 == 0 ? 0 : rng() % 70;  // uneven, with empty blocks
      for (int shift : {0, 1, n - 1})
        for (bool in_place : {true, false}) test_reduce_scatter(n, sizes, shift, in_place);
      test_allgather(n, sizes, false);
      test_allgather(n, sizes, true);
      test_alltoall(n, static_cast<unsigned>(n * 100 + trial));
    }
    for (int root = 0; root < n; ++root)
      for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(1000)})
        for (int algo = 0; algo < 3; ++algo) test_broadcast(n, bytes, root, algo);
  }
  const size_t one = kPairExchangeMaxBytes / 4;
  for (size_t count : {size_t(1), size_t(37), one, one + 1, 2 * one, (kPairSlots + 2) * one + 3})
    for (bool in_place : {true, false})
      for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MIN, ReduceOp::MAX, ReduceOp::PRODUCT})
        test_pair_allreduce(count, in_place, op, op == ReduceOp::SUM ? 0.5 : 1.0);
  return test::finish("collective algorithms (N = 1..8)");
}
