// A stand-in for the cuda/ library (cuda/gpu_kernels.h) on machines without a GPU, so
// the engine's GPU path (CudaDevice, the staging transport, batched copies, the NCCL
// or MPI agreement) runs end to end in CI. Built into a test-only core with
// -DHOROVODLITE_FAKE_CUDA_RUNTIME=<this file> (see tests/test_cuda_build.py).
//
// "Device memory" is host memory, the kernels are the CPU kernels (whose results the
// GPU kernels match bit for bit), and a stream is a queue of deferred work that runs
// only when something waits for it (an event or stream synchronisation, or a copy from
// pageable memory), so work the engine forgets to order runs too late, as on a GPU.
// Stream 0 / 1 / 2 (the default streams a framework passes) run work at once.
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <stdexcept>

#include "../../cuda/gpu_kernels.h"
#include "reduce/reduce.h"

namespace hvdl::gpu {
namespace {

struct FakeStream {
  std::mutex mu;  // events may be waited for from another thread than the one queuing
  std::deque<std::function<void()>> work;
  size_t queued = 0, done = 0;
  void run_until(size_t n) {
    std::lock_guard<std::mutex> l(mu);
    while (done < n) {
      auto f = std::move(work.front());
      work.pop_front();
      f();
      ++done;
    }
  }
};
struct FakeEvent {
  FakeStream* s = nullptr;
  size_t at = 0;
};

bool is_default(void* stream) { return reinterpret_cast<uintptr_t>(stream) <= 2; }

void enqueue(void* stream, std::function<void()> f) {
  if (is_default(stream)) return f();
  auto* s = static_cast<FakeStream*>(stream);
  std::lock_guard<std::mutex> l(s->mu);
  s->work.push_back(std::move(f));
  ++s->queued;
}

thread_local int t_device = 0;

}  // namespace

bool runtime_available() { return true; }

void reduce_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op, void* stream) {
  if (dt == DataType::BOOL || op == ReduceOp::ADASUM || op == ReduceOp::AVERAGE)
    throw std::invalid_argument("fake reduce_into: unsupported dtype/op");
  enqueue(stream, [=] { hvdl::reduce_into(dst, src, count, dt, op); });
}

void reduce_scale_into(void* dst, const void* src, size_t count, DataType dt, ReduceOp op,
                       double factor, void* stream) {
  reduce_into(dst, src, count, dt, op, stream);
  scale(dst, count, dt, factor, stream);
}

void scale(void* buf, size_t count, DataType dt, double factor, void* stream) {
  if (count == 0 || factor == 1.0) return;
  enqueue(stream, [=] { scale_buffer(buf, count, dt, factor); });
}

void batched_copy(const CopyDesc* descs, int n, DataType dt, double factor, void* stream,
                  void* scratch, size_t scratch_bytes) {
  if (n > 0 && (scratch == nullptr || scratch_bytes < batched_copy_scratch_bytes(n)))
    throw std::invalid_argument("fake batched_copy: scratch too small");
  std::vector<CopyDesc> copy(descs, descs + n);  // the caller may reuse descs at once
  enqueue(stream, [=] {
    for (const auto& d : copy) {
      if (d.bytes) std::memcpy(d.dst, d.src, d.bytes);
      if (factor != 1.0) scale_buffer(d.dst, d.bytes / dtype_size(dt), dt, factor);
    }
  });
}

void* event_create() { return new FakeEvent(); }
void event_destroy(void* ev) { delete static_cast<FakeEvent*>(ev); }
void event_record(void* ev, void* stream) {
  auto* e = static_cast<FakeEvent*>(ev);
  if (is_default(stream)) {
    e->s = nullptr;
    return;
  }
  e->s = static_cast<FakeStream*>(stream);
  std::lock_guard<std::mutex> l(e->s->mu);
  e->at = e->s->queued;
}
void stream_wait_event(void* stream, void* ev) {
  // Work queued on `stream` from now on starts after the event: run up to it first.
  auto* e = static_cast<FakeEvent*>(ev);
  if (e->s && e->s != stream) e->s->run_until(e->at);
}
void event_synchronize(void* ev) {
  auto* e = static_cast<FakeEvent*>(ev);
  if (e->s) e->s->run_until(e->at);
}
// Asking lets the "GPU" make progress, one piece of work per query, as a real one runs
// on by itself: a loop of queries finishes, a single early look may still see it busy.
bool event_query(void* ev) {
  auto* e = static_cast<FakeEvent*>(ev);
  if (!e->s) return true;
  size_t done;
  {
    std::lock_guard<std::mutex> l(e->s->mu);
    done = e->s->done;
  }
  if (done < e->at) e->s->run_until(done + 1);
  std::lock_guard<std::mutex> l(e->s->mu);
  return e->s->done >= e->at;
}

void* stream_create(int) { return new FakeStream(); }
void stream_destroy(void* stream) { delete static_cast<FakeStream*>(stream); }
void stream_synchronize(void* stream) {
  if (is_default(stream)) return;
  auto* s = static_cast<FakeStream*>(stream);
  size_t n;
  {
    std::lock_guard<std::mutex> l(s->mu);
    n = s->queued;
  }
  s->run_until(n);
}

int current_device() { return t_device; }
void set_device(int device) { t_device = device; }
int pointer_device(const void*) { return -1; }
std::string pci_bus_id(int device) { return "0000:0" + std::to_string(device) + ":00.0"; }

void* malloc_device(size_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = std::aligned_alloc(256, (bytes + 255) & ~size_t(255));
  std::memset(p, 0xCD, bytes);  // garbage, as fresh device memory would be
  return p;
}
void free_device(void* p) { std::free(p); }
void* malloc_host_pinned(size_t bytes) { return bytes ? malloc_device(bytes) : nullptr; }
void free_host_pinned(void* p) { std::free(p); }
void memcpy_async(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes) enqueue(stream, [=] { std::memcpy(dst, src, bytes); });
}

}  // namespace hvdl::gpu
