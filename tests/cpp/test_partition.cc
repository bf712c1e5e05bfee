// The ring's chunk arithmetic, without MPI:
//   g++ -O2 -std=c++17 -pthread -I csrc tests/cpp/test_partition.cc \
//       csrc/collectives/ring_allreduce.cc csrc/collectives/ring.cc -o /tmp/test_partition
//
// 1. partition.h: blocks tile [0, count) in order, sizes differ by at most one, the
//    first count % parts blocks are the larger ones, for every count < parts too.
// 2. The real ring_allreduce over an in-process transport (one thread per rank,
//    FIFO mailboxes per ordered pair of ranks, like MPI's matching order) for
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

using namespace hvdl;

namespace {

int g_failed = 0, g_passed = 0;

void check(bool ok, const std::string& what) {
  if (ok) {
    ++g_passed;
  } else if (++g_failed <= 20) {
    std::printf("FAIL: %s\n", what.c_str());
  }
}

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

struct Mailbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> msgs;  // FIFO: MPI matches messages of one pair in order
};

class Fabric {
 public:
  explicit Fabric(int n) : n_(n), boxes_(n * n) {
    for (auto& b : boxes_) b = std::make_unique<Mailbox>();
  }
  Mailbox& box(int from, int to) { return *boxes_[from * n_ + to]; }
  int size() const { return n_; }
  std::atomic<int> size_errors{0};

 private:
  int n_;
  std::vector<std::unique_ptr<Mailbox>> boxes_;
};

class ThreadTransport : public Transport {
 public:
  ThreadTransport(Fabric& f, int rank) : f_(f), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return f_.size(); }

  // Sends are buffered (copied now), so they complete at once.
  Op isend(int peer, const void* buf, size_t bytes) override {
    check_peer(peer);
    Mailbox& b = f_.box(rank_, peer);
    {
      std::lock_guard<std::mutex> l(b.mu);
      b.msgs.emplace_back(static_cast<const char*>(buf), bytes);
    }
    b.cv.notify_all();
    ops_.push_back({-1, nullptr, 0, true});
    return static_cast<Op>(ops_.size() - 1);
  }
  Op irecv(int peer, void* buf, size_t bytes) override {
    check_peer(peer);
    ops_.push_back({peer, static_cast<char*>(buf), bytes, false});
    order_[peer].push_back(static_cast<int>(ops_.size() - 1));
    return static_cast<Op>(ops_.size() - 1);
  }
  // Receives complete in the order they were posted per peer (as in MPI).
  void wait(Op op) override {
    PendingOp& p = ops_.at(op);
    while (!p.done) complete_next(p.peer);
  }
  void wait_all() override {
    for (size_t i = 0; i < ops_.size(); ++i) wait(static_cast<Op>(i));
    ops_.clear();
    order_.clear();
  }

  void allreduce_and(uint64_t*, size_t) override { throw std::logic_error("not used by the ring"); }
  std::vector<std::string> gather(const std::string&, int) override { throw std::logic_error("unused"); }
  void broadcast(std::string&, int) override { throw std::logic_error("unused"); }
  void barrier() override { throw std::logic_error("unused"); }
  void ring(uint64_t) override {}
  uint64_t poll_ring() override { return 0; }

 private:
  struct PendingOp {
    int peer;
    char* buf;
    size_t bytes;
    bool done;
  };
  void check_peer(int peer) {
    if (peer < 0 || peer >= f_.size() || peer == rank_)
      throw std::logic_error("bad peer " + std::to_string(peer));
  }
  void complete_next(int peer) {
    auto& q = order_[peer];
    int idx = q.front();
    q.pop_front();
    Mailbox& b = f_.box(peer, rank_);
    std::unique_lock<std::mutex> l(b.mu);
    // A receive nobody sends to is a protocol bug (MPI would hang or match it with a
    // later message): report it instead of hanging.
    if (!b.cv.wait_for(l, std::chrono::seconds(5), [&] { return !b.msgs.empty(); }))
      throw std::runtime_error("rank " + std::to_string(rank_) + " waits for a message from rank " +
                               std::to_string(peer) + " that is never sent");
    std::string m = std::move(b.msgs.front());
    b.msgs.pop_front();
    l.unlock();
    PendingOp& p = ops_[idx];
    if (m.size() != p.bytes) f_.size_errors++;
    std::memcpy(p.buf, m.data(), std::min(m.size(), p.bytes));
    p.done = true;
  }

  Fabric& f_;
  int rank_;
  std::vector<PendingOp> ops_;
  std::map<int, std::deque<int>> order_;
};

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
  Fabric fabric(n);
  TestReducer red;
  std::vector<std::vector<int64_t>> ints(n, std::vector<int64_t>(count));
  std::vector<std::vector<float>> floats(n, std::vector<float>(count));
  std::vector<std::vector<float>> float_out(n, std::vector<float>(count, -12345.0f));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) ints[r][i] = int_value(r, i), floats[r][i] = float_value(r, i);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadTransport t(fabric, r);
        HostBuffer scratch;
        RingOptions seg;
        seg.segment_bytes = g_segment_bytes;
        ring_allreduce(t, red, ints[r].data(), count, DataType::INT64, ReduceOp::SUM, postscale,
                       scratch, seg);
        // out of place: the input is only read, the output starts as garbage
        RingOptions oop = seg;
        oop.input = floats[r].data();
        ring_allreduce(t, red, float_out[r].data(), count, DataType::FLOAT32, ReduceOp::SUM, 1.0,
                       scratch, oop);
        t.wait_all();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::string what = "ring n=" + std::to_string(n) + " count=" + std::to_string(count) +
                           " postscale=" + std::to_string(postscale);
  for (int r = 0; r < n; ++r) check(errors[r].empty(), what + ": rank threw " + errors[r]);
  check(fabric.size_errors == 0, what + ": a message size did not match its receive");
  for (int b = 0; b < n * n; ++b)
    check(fabric.box(b / n, b % n).msgs.empty(), what + ": messages left unreceived");
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
  Fabric fabric(n);
  TestReducer red;
  std::vector<std::vector<int64_t>> src(n, std::vector<int64_t>(count)), dst(n, std::vector<int64_t>(count, -1));
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i) src[r][i] = int_value(r, i);
  const auto orig = src;
  const RingBlocks blocks = RingBlocks::even(count, n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadTransport t(fabric, r);
        HostBuffer scratch;
        ring_reduce_scatter(t, red, src[r].data(), dst[r].data(), blocks, DataType::INT64,
                            ReduceOp::SUM, shift, scratch, g_segment_bytes);
        t.wait_all();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  const std::string what = "reduce-scatter n=" + std::to_string(n) + " count=" +
                           std::to_string(count) + " shift=" + std::to_string(shift);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    check(errors[r].empty(), what + ": rank threw " + errors[r]);
    const int own = (r + shift) % n;
    for (size_t i = blocks.offset[own]; i < blocks.offset[own] + blocks.count[own]; ++i) {
      int64_t sum = 0;
      for (int q = 0; q < n; ++q) sum += int_value(q, i);
      ok = ok && dst[r][i] == sum;
    }
  }
  check(ok, what + ": own block is not the full sum");
  check(src == orig, what + ": the input was modified");
  check(fabric.size_errors == 0, what + ": a message size did not match its receive");
}

void run_allgather(int n, const std::vector<size_t>& sizes, int shift) {
  Fabric fabric(n);
  const RingBlocks blocks = RingBlocks::of_sizes(sizes);
  size_t total = 0;
  for (size_t b : sizes) total += b;
  std::vector<std::vector<char>> buf(n, std::vector<char>(total, 0));
  auto byte = [](int block, size_t i) { return static_cast<char>(block * 37 + i * 11 + 1); };
  for (int r = 0; r < n; ++r) {
    const int own = (r + shift) % n;
    for (size_t i = 0; i < blocks.count[own]; ++i) buf[r][blocks.offset[own] + i] = byte(own, i);
  }
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ThreadTransport t(fabric, r);
        ring_allgather(t, buf[r].data(), blocks, shift);
        t.wait_all();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& th : threads) th.join();
  std::string what = "allgather n=" + std::to_string(n) + " shift=" + std::to_string(shift) + " sizes";
  for (size_t b : sizes) what += " " + std::to_string(b);
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    check(errors[r].empty(), what + ": rank threw " + errors[r]);
    for (int b = 0; b < n; ++b)
      for (size_t i = 0; i < blocks.count[b]; ++i) ok = ok && buf[r][blocks.offset[b] + i] == byte(b, i);
  }
  check(ok, what + ": a block is missing or wrong");
  check(fabric.size_errors == 0, what + ": a message size did not match its receive");
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
  std::printf("%d passed, %d failed\n", g_passed, g_failed);
  return g_failed ? 1 : 0;
}
