// What a caller holds while its collective is in flight: completion, status, and
// for ops whose output size is only known after negotiation, the engine-owned output.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <thread>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "../common/dtype.h"
#include "../common/status.h"

namespace hvdl {

struct HandleState {
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> done{false};
  Status status;
  // Engine-allocated output (allgather, alltoall, ...): freed when the last owner,
  // possibly a Python array viewing it, lets go.
  std::shared_ptr<void> out;
  std::vector<int64_t> out_shape;  // in elements of out_dtype
  DataType out_dtype = DataType::UINT8;
  std::vector<int64_t> aux;  // alltoall: received splits; join: last joined rank
  int process_set = -1;      // whose engine runs it (a waiting caller may help it along)

  void complete(Status s) {
    settle(std::move(s));
    notify();
  }
  // complete() in two halves, so that a group's handles can all be marked done before
  // any waiter is woken: a caller sharing the core with the worker then finds every
  // one done, instead of being woken (and switched to) once per tensor.
  void settle(Status s) {
    std::lock_guard<std::mutex> l(mu);
    status = std::move(s);
    done.store(true, std::memory_order_release);
  }
  void notify() { cv.notify_all(); }
  // Small collectives finish within microseconds: check (yielding the core) for a
  // short while before paying for a sleep and a wake-up through the kernel.
  // Returns done(): false when `limit` passed first (callers wake up that often to
  // run signal handlers, so Ctrl-C and alarms work while a peer is slow).
  bool wait(std::chrono::nanoseconds limit = std::chrono::nanoseconds::max()) {
    // Done already (a caller that ran its own round): no clock, no lock.
    if (done.load(std::memory_order_acquire)) return true;
    auto start = std::chrono::steady_clock::now();
    auto until = start + std::chrono::microseconds(50);
    while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    std::unique_lock<std::mutex> l(mu);
    if (limit == std::chrono::nanoseconds::max()) {
      cv.wait(l, [&] { return done.load(); });
      return true;
    }
    return cv.wait_until(l, start + limit, [&] { return done.load(); });
  }
  bool poll() { return done.load(std::memory_order_acquire); }
};

class HandleTable {
 public:
  int64_t add(std::shared_ptr<HandleState> h) {
    std::lock_guard<std::mutex> l(mu_);
    int64_t id = next_++;
    table_[id] = std::move(h);
    return id;
  }
  std::shared_ptr<HandleState> get(int64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = table_.find(id);
    return it == table_.end() ? nullptr : it->second;
  }
  void release(int64_t id) {
    std::lock_guard<std::mutex> l(mu_);
    table_.erase(id);
  }

 private:
  std::mutex mu_;
  int64_t next_ = 1;
  std::unordered_map<int64_t, std::shared_ptr<HandleState>> table_;
};

}  // namespace hvdl
