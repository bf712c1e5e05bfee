// The staging and stream-synced transports (csrc/transport/device_transport.cc) without
// a GPU: the few CUDA runtime calls they make are replaced by a fake in which a stream
// is a queue of deferred work that runs only when something waits for it. A copy or a
// reduction that the transports forget to order therefore really runs late (and the
// data is wrong), as it could on a GPU. Ranks are threads over the harness's strict
// transport (harness.h: a receive must match a send of exactly its size, and lands as
// soon as both sides posted, as in MPI). The ring allreduce over
// each adapter, with a reducer queued on the same fake stream, must equal the ring over
// the plain transport bit for bit, at N = 1..5, many sizes and tiny segments.
//
//   g++ -O1 -std=c++17 -pthread -DHOROVODLITE_HAVE_CUDA -I csrc
//       tests/cpp/test_device_transport.cc csrc/transport/device_transport.cc
//       csrc/collectives/*.cc csrc/reduce/*.cc -o /tmp/t && /tmp/t
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../cuda/gpu_kernels.h"
#include "collectives/ring_allreduce.h"
#include "reduce/reduce.h"
#include "harness.h"
#include "transport/device_transport.h"

// ---- the fake CUDA runtime: only what device_transport.cc calls ----
namespace {
struct FakeStream {
  std::deque<std::function<void()>> work;
  size_t queued = 0, done = 0;
  void run_until(size_t n) {
    while (done < n) {
      auto f = std::move(work.front());
      work.pop_front();
      f();
      ++done;
    }
  }
  void push(std::function<void()> f) {
    work.push_back(std::move(f));
    ++queued;
  }
};
struct FakeEvent {
  FakeStream* s = nullptr;
  size_t at = 0;
};
}  // namespace

namespace hvdl::gpu {
void* event_create() { return new FakeEvent(); }
void event_destroy(void* ev) { delete static_cast<FakeEvent*>(ev); }
void event_record(void* ev, void* stream) {
  auto* e = static_cast<FakeEvent*>(ev);
  e->s = static_cast<FakeStream*>(stream);
  e->at = e->s->queued;
}
void event_synchronize(void* ev) {
  auto* e = static_cast<FakeEvent*>(ev);
  if (e->s) e->s->run_until(e->at);
}
void stream_synchronize(void* stream) {
  auto* s = static_cast<FakeStream*>(stream);
  s->run_until(s->queued);
}
void* malloc_host_pinned(size_t bytes) {
  void* p = std::malloc(bytes);
  std::memset(p, 0xAB, bytes);  // stale bytes are visible, not zeros
  return p;
}
void free_host_pinned(void* p) { std::free(p); }
void memcpy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) static_cast<FakeStream*>(stream)->push([=] { std::memcpy(dst, src, bytes); });
}
}  // namespace hvdl::gpu

namespace hvdl {
namespace {

// Kernels that run when the fake stream gets to them, like ours on the engine stream.
class QueuedReducer : public Reducer {
 public:
  explicit QueuedReducer(FakeStream* s) : s_(s) {}
  void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) const override {
    s_->push([=] { reduce_into(dst, src, count, dt, op); });
  }
  void scale(void* buf, size_t count, DataType dt, double f) const override {
    if (f != 1.0) s_->push([=] { scale_buffer(buf, count, dt, f); });
  }

 private:
  FakeStream* s_;
};

enum class Mode { kPlain, kStaged, kSynced };
constexpr size_t kRingSegmentBytes = 256;       // many ring segments
constexpr size_t kStagingSegmentBytes = 4096;  // many staged pieces (the least allowed)

// Each rank reduces `rounds` buffers one after another (the arena is reused and grows).
std::vector<std::vector<std::vector<char>>> run_ring(int n, size_t count, DataType dt, ReduceOp op,
                                                     Mode mode, int rounds) {
  auto world = test::ThreadWorldState::make(n);
  std::vector<int> all(n);
  for (int r = 0; r < n; ++r) all[r] = r;
  std::vector<std::vector<std::vector<char>>> out(n);
  test::spawn(n, [&](int r) {
      auto host = world->world(r)->create_group(all);
      FakeStream stream;
      QueuedReducer queued(&stream);
      std::unique_ptr<Transport> dev;
      if (mode == Mode::kStaged) dev = make_staging_transport(*host, &stream, kStagingSegmentBytes);
      if (mode == Mode::kSynced) dev = make_stream_synced_transport(*host, &stream);
      Transport& t = dev ? *dev : *host;
      const Reducer& red = dev ? static_cast<const Reducer&>(queued) : cpu_reducer();
      HostBuffer scratch;
      std::mt19937 rng(1000 * r + static_cast<unsigned>(count));
      for (int k = 0; k < rounds; ++k) {
        const size_t c = count + static_cast<size_t>(k) * 3;  // sizes change between rounds
        std::vector<char> buf(c * dtype_size(dt));
        for (size_t i = 0; i < c; ++i) {
          const int v = static_cast<int>(rng() % 9) - 2;
          if (dt == DataType::FLOAT32) reinterpret_cast<float*>(buf.data())[i] = v * 0.37f;
          else reinterpret_cast<int32_t*>(buf.data())[i] = v;
        }
        RingOptions ring;
        ring.segment_bytes = kRingSegmentBytes;
        ring_allreduce(t, red, scratch, {buf.data(), buf.data(), c, dt, op, 1.0, 0.5}, ring);
        gpu::stream_synchronize(&stream);  // what the engine's Device::end does
        out[r].push_back(std::move(buf));
      }
  });
  return out;
}

// One transfer through an adapter, outside any algorithm: the sender's data is written
// by queued work right before isend; the receiver completes it with wait() or only
// with wait_all(). Returns whether the receiver saw the data.
bool direct_transfer(Mode mode, size_t bytes, bool wait_each) {
  auto world = test::ThreadWorldState::make(2);
  bool ok = false;
  test::spawn(2, [&](int r) {
      auto host = world->world(r)->create_group({0, 1});
      FakeStream stream;
      auto dev = mode == Mode::kStaged ? make_staging_transport(*host, &stream, kStagingSegmentBytes)
                                       : make_stream_synced_transport(*host, &stream);
      std::vector<char> buf(bytes, 0);
      for (int round = 1; round <= 3; ++round) {
        if (r == 0) {
          char* p = buf.data();
          stream.push([=] { std::memset(p, round, bytes); });  // a producer kernel
          dev->isend(1, buf.data(), bytes);
          dev->wait_all();
        } else {
          Transport::Op op = dev->irecv(0, buf.data(), bytes);
          if (wait_each) dev->wait(op);
          dev->wait_all();
          gpu::stream_synchronize(&stream);
          ok = std::all_of(buf.begin(), buf.end(), [&](char c) { return c == round; }) &&
               (round == 1 || ok);
        }
      }
  });
  return ok;
}

}  // namespace
}  // namespace hvdl

int main() {
  using namespace hvdl;
  for (int n = 1; n <= 5; ++n)
    for (size_t count : {size_t(0), size_t(1), size_t(7), size_t(1000), size_t(20011)})
      for (DataType dt : {DataType::FLOAT32, DataType::INT32})
        for (ReduceOp op : {ReduceOp::SUM, ReduceOp::MAX}) {
          auto ref = run_ring(n, count, dt, op, Mode::kPlain, 3);
          for (Mode mode : {Mode::kStaged, Mode::kSynced}) {
            auto got = run_ring(n, count, dt, op, mode, 3);
            int bad = -1;
            for (int r = 0; r < n && bad < 0; ++r)
              if (got[r] != ref[r] || got[r] != got[0]) bad = r;
            CHECK(bad < 0, "%s n=%d count=%zu dtype=%s op=%s rank %d",
                  mode == Mode::kStaged ? "staged" : "synced", n, count, dtype_name(dt),
                  reduce_op_name(op), bad);
          }
        }
  for (Mode mode : {Mode::kStaged, Mode::kSynced})
    for (size_t bytes : {size_t(0), size_t(5), size_t(10000)})
      for (bool wait_each : {true, false})
        CHECK(direct_transfer(mode, bytes, wait_each), "direct %s transfer of %zu bytes (%s)",
              mode == Mode::kStaged ? "staged" : "synced", bytes,
              wait_each ? "wait" : "wait_all only");
  return test::finish("device transports");
}
