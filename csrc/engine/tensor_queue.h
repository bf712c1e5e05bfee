// Hand-off between callers' threads and a process set's background thread: callers
// add entries and wake the thread; the thread takes the fresh requests each round
// and looks entries up by name when a response says to execute them.
#pragma once
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "handle.h"
#include "message.h"

namespace hvdl {

using Clock = std::chrono::steady_clock;

// push() on a queue whose background thread has stopped (shut down, or failed: a
// peer was lost). Python sees a HorovodInternalError, like Horovod's.
struct QueueClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TensorEntry {
  Request req;
  const void* input = nullptr;
  void* output = nullptr;  // null: the op allocates the output into handle->out
  std::shared_ptr<HandleState> handle;
  // GPU tensors: recorded on the producer's stream at enqueue (a cudaEvent_t); the
  // engine's stream waits for it before reading. Null: nothing to wait for.
  std::shared_ptr<void> ready_event;
  // Taken by a round (take_fresh): this rank has put it forward, and only from then
  // can a response (an error naming it, say) be for it.
  bool put_forward = false;
  // Held until a caller blocks (a flush), or kHeldWindow at most, and it wakes nobody.
  // A gradient whose optimizer synchronizes in step(), where the engine has no core of
  // its own (horovodlite/_overlap.py): a round during backward could only take the core
  // from backward.
  bool held = false;
};

class TensorQueue {
 public:
  // Throws std::invalid_argument when the name is already in flight, and
  // std::runtime_error (with the reason given to close) once the queue is closed.
  // `wake_worker` false: the caller waits for it at once and that wakes the worker
  // (request_flush()) or runs the round itself (Worker::help()).
  // `now`: the caller's clock reading, when it has just taken one (Engine::enqueue).
  void push(std::unique_ptr<TensorEntry> e, bool wake_worker = true,
            Clock::time_point now = Clock::now());

  // Waits up to `timeout` for a reason to run a round; returns true if there is one
  // (see Worker for what counts). `batch_window`: how long fresh work may wait for
  // more to batch with it unless someone is blocked on a result.
  bool wait_for_work(std::chrono::nanoseconds timeout, std::chrono::nanoseconds batch_window,
                     size_t batch_bytes);
  // A caller blocked on a result may run the round itself (Worker::help): true when
  // there is fresh work, of at most `bytes` in all (`lone_bytes` if it is one tensor),
  // and no shutdown was asked for.
  bool fresh_within(size_t bytes, size_t lone_bytes = 0);
  // Non-blocking form of wait_for_work's test. Held entries (TensorEntry::held) are
  // ready by a flush, the batch's bytes or kHeldWindow only.
  bool has_fresh_ready(std::chrono::nanoseconds batch_window, size_t batch_bytes);
  // Non-blocking, for a worker that sleeps elsewhere (Doorbell): when the fresh work
  // is (or was) ready to go - a time <= now - or when its batching window closes;
  // time_point::max() with nothing fresh. Also tells push() the window and byte limit.
  Clock::time_point ready_time(std::chrono::nanoseconds batch_window, size_t batch_bytes);
  // Called (outside the lock) wherever the worker is woken: the worker's own sleep,
  // when it sleeps on something other than this queue's condition variable. Set
  // before any push.
  void set_waker(std::function<void()> w) { waker_ = std::move(w); }
  // `arriving` (optional) is set when callers look mid-burst: a tensor came within
  // kBurstGap and nobody has asked for a result yet, so more are likely on the way.
  // `now` as push()'s (the round's start: Worker::run_round).
  std::vector<Request> take_fresh(bool* arriving = nullptr, Clock::time_point now = Clock::now());
  static constexpr std::chrono::microseconds kBurstGap{100};
  // Held entries go on their own after this long: a peer may wait for them while this
  // rank's caller never comes to release them (blocked in something else first, an MPI
  // barrier of its own, say), where reduced during backward they would have gone. Longer
  // than a backward pass of the models trained on CPUs (smallcnn: ~120 ms).
  static constexpr std::chrono::seconds kHeldWindow{2};
  // The entry `name` this rank has put forward (take_fresh), or null: a response may
  // name a tensor that this rank's caller has only just submitted (a stall error for
  // the peers' request under a name this rank then uses) and which is not its yet.
  std::unique_ptr<TensorEntry> take(const std::string& name);
  // The entry `name` while it stays queued (only the worker thread takes entries, so
  // it may use the pointer until it takes it), or null.
  const TensorEntry* find(const std::string& name);
  // Work the worker must look after soon: entries put forward, or fresh ones not held.
  bool has_in_flight();
  // Whether a peer's round is worth joining now: an entry put forward (take_fresh)
  // waits for its response there, or the fresh batch is ready by the batching rules
  // (has_fresh_ready(): its window, its bytes, a flush, a shutdown).
  bool wants_round(std::chrono::nanoseconds batch_window, size_t batch_bytes);
  // Names of every tensor submitted and not yet executed (sorted).
  std::vector<std::string> in_flight_names();
  std::vector<std::unique_ptr<TensorEntry>> take_all();
  // The background thread has stopped: refuse new work from now on (it would wait
  // forever) and hand back what is still queued so it can be failed.
  std::vector<std::unique_ptr<TensorEntry>> close(const std::string& why);

  // A caller is blocked waiting: do not hold work back (held entries included).
  // `wake_worker` false: the caller runs the round itself (Worker::help).
  void request_flush(bool wake_worker = true);
  void wake_worker() { wake(); }  // the worker should look again (a caller ran a round)
  void request_shutdown();
  bool shutdown_requested();

 private:
  bool ready_locked(Clock::time_point now, std::chrono::nanoseconds window, size_t bytes);
  bool held_expired(Clock::time_point now) const;
  // When the fresh batch's window closes, or that of its held entries (max(): never).
  Clock::time_point next_window_locked(std::chrono::nanoseconds window) const;
  void wake();
  std::function<void()> waker_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, std::unique_ptr<TensorEntry>> table_;
  std::vector<std::string> fresh_;
  size_t fresh_bytes_ = 0;
  size_t held_fresh_ = 0;  // how many of fresh_ are held (TensorEntry::held)
  Clock::time_point oldest_held_;  // the oldest of them (kHeldWindow)
  // The worker's last batching window and byte limit, so push() knows when a
  // tensor makes the batch ready (a closing window wakes the worker by its timeout).
  std::chrono::nanoseconds window_hint_{0};
  size_t bytes_hint_ = SIZE_MAX;
  // oldest_fresh_: the oldest fresh entry that is not held (its window is the batch's).
  Clock::time_point oldest_fresh_, last_push_;
  bool flush_ = false, shutdown_ = false, closed_ = false;
  std::string closed_why_;
};

}  // namespace hvdl
