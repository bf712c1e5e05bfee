// The hand-off between callers and a process set's thread (csrc/engine/tensor_queue.h)
// alone: a response may only take an entry this rank has put forward (a stall error
// naming a tensor its caller has only just submitted must leave that one alone), a
// blocking caller's submission does not wake the worker, a flush is for the batch
// there is (not the next one), a batch that starts while the worker sleeps ends that
// sleep at its window, what a helping caller may run (fresh_within), and that a held
// entry (a gradient held until step()) waits for a flush or the batch's bytes only.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "engine/tensor_queue.h"
#include "harness.h"

using namespace hvdl;
using namespace hvdl::test;

namespace {

std::unique_ptr<TensorEntry> entry(const std::string& name, int64_t elements) {
  auto e = std::make_unique<TensorEntry>();
  e->req.name = name;
  e->req.dtype = DataType::FLOAT32;
  e->req.shape = {elements};
  e->handle = std::make_shared<HandleState>();
  return e;
}

void only_what_was_put_forward() {
  TensorQueue q;
  q.push(entry("z", 4));
  CHECK(q.take("z") == nullptr, "a response took an entry this rank had not put forward");
  CHECK(q.find("z") != nullptr, "the entry left the queue");
  auto fresh = q.take_fresh();
  CHECK(fresh.size() == 1 && fresh[0].name == "z");
  auto e = q.take("z");
  CHECK(e != nullptr, "the entry put forward could not be taken");
  CHECK(!q.has_in_flight());
  // The same name again: a new entry, fresh until the next round takes it.
  q.push(entry("z", 4));
  CHECK(q.take("z") == nullptr);
  CHECK(q.take_fresh().size() == 1);
  CHECK(q.take("z") != nullptr);
}

void blocking_submissions_do_not_wake() {
  TensorQueue q;
  int wakes = 0;
  q.set_waker([&] { ++wakes; });
  q.push(entry("a", 4), /*wake_worker=*/false);
  CHECK(wakes == 0, "a blocking caller's submission woke the worker %d time(s)", wakes);
  q.request_flush();  // what its wait does when it cannot run the round itself
  CHECK(wakes == 1, "wakes=%d", wakes);
  q.take_fresh();
  q.push(entry("b", 4));  // the first of a batch, submitted asynchronously
  CHECK(wakes == 2, "an asynchronous submission did not wake the worker (wakes=%d)", wakes);
}

void a_flush_is_for_the_batch_there_is() {
  TensorQueue q;
  const auto window = std::chrono::seconds(10);
  q.request_flush();  // a caller waited while nothing was fresh (its work was put forward)
  q.push(entry("next", 4));
  CHECK(!q.has_fresh_ready(window, SIZE_MAX),
        "a flush left standing made the next batch's first tensor ready on its own");
  q.request_flush();
  CHECK(q.has_fresh_ready(window, SIZE_MAX), "a flush did not release the batch");
  q.take_fresh();
  q.push(entry("after", 4));
  CHECK(!q.has_fresh_ready(window, SIZE_MAX), "the flush outlived the round that took its batch");
}

// An idle worker sleeps long (its timeout); a batch that starts meanwhile must end
// that sleep when its window closes, not when the timeout does (an async tensor would
// otherwise wait for its caller's synchronize). Bounds far apart: 10 ms against 5 s.
void a_batch_ends_a_long_sleep_at_its_window() {
  TensorQueue q;
  using namespace std::chrono;
  bool ready = false;
  steady_clock::time_point woke;
  std::thread worker([&] {
    ready = q.wait_for_work(seconds(5), milliseconds(10), SIZE_MAX);
    woke = steady_clock::now();
  });
  std::this_thread::sleep_for(milliseconds(50));  // the worker is asleep by now
  const auto pushed = steady_clock::now();
  q.push(entry("async", 4));
  worker.join();
  const double waited = duration<double>(woke - pushed).count();
  CHECK(ready, "the worker's wait ended without the batch being ready");
  CHECK(waited < 2.5, "the worker slept %.2f s past a 10 ms window (its 5 s timeout)", waited);
}

void fresh_within_limits() {
  TensorQueue q;
  CHECK(!q.fresh_within(1 << 20), "nothing fresh, yet something to run");
  q.push(entry("a", 16));  // 64 bytes
  CHECK(q.fresh_within(64));
  CHECK(!q.fresh_within(63));
  // A lone tensor may have a larger limit of its own (one that rides with the vote).
  CHECK(q.fresh_within(32, 64) && !q.fresh_within(32, 63));
  q.push(entry("b", 16));
  CHECK(!q.fresh_within(64) && q.fresh_within(128));
  CHECK(!q.fresh_within(64, 1 << 20), "two tensors took the lone tensor's limit");
  q.take_fresh();
  CHECK(!q.fresh_within(1 << 20), "taken, yet still fresh");
  q.push(entry("c", 1));
  q.request_shutdown();
  CHECK(!q.fresh_within(1 << 20), "a shutdown round is the worker's");
}

// A held entry has a long window of its own (kHeldWindow) and wakes nobody: a flush
// (a caller blocked in step()) or the batch's bytes release it before that. Beside it, an entry that is not
// held keeps its window, and takes the held ones with it when that closes.
void held_entries_wait_for_a_flush() {
  using namespace std::chrono;
  TensorQueue q;
  int wakes = 0;
  q.set_waker([&] { ++wakes; });
  const auto window = milliseconds(1);
  auto held = [](const std::string& name, int64_t elements) {
    auto e = entry(name, elements);
    e->held = true;
    return e;
  };
  q.push(held("g0", 4));
  q.push(held("g1", 4));
  CHECK(wakes == 0, "held submissions woke the worker %d time(s)", wakes);
  CHECK(!q.has_in_flight(), "held entries alone count as work to look after");
  CHECK(q.ready_time(window, SIZE_MAX) > Clock::now() + TensorQueue::kHeldWindow / 2,
        "a held batch has the batching window");
  std::this_thread::sleep_for(milliseconds(5));
  CHECK(!q.has_fresh_ready(window, SIZE_MAX), "a held batch went when the window passed");
  CHECK(!q.wants_round(window, SIZE_MAX), "a held batch joins a peer's round");
  CHECK(!q.wait_for_work(milliseconds(20), window, SIZE_MAX), "a worker found held work ready");
  CHECK(q.has_fresh_ready(window, 32), "a held batch of the fusion buffer's bytes stayed");
  q.request_flush();
  CHECK(wakes == 1 && q.has_fresh_ready(window, SIZE_MAX), "a flush did not release held work");
  CHECK(q.take_fresh().size() == 2);
  CHECK(q.has_in_flight(), "entries put forward are not in flight");
  q.take("g0");
  q.take("g1");
  // An entry not held keeps its window; its round (or any other that the held entries
  // did not make ready: a peer's, a controller deadline's) leaves them behind.
  q.push(held("h", 4));
  q.push(entry("a", 4));
  CHECK(wakes == 2, "the first entry with a window did not wake the worker (wakes=%d)", wakes);
  CHECK(q.has_in_flight());
  std::this_thread::sleep_for(milliseconds(5));
  CHECK(q.has_fresh_ready(window, SIZE_MAX), "the window of the entry not held never closed");
  auto taken = q.take_fresh();
  CHECK(taken.size() == 1 && taken[0].name == "a", "a round for another entry took a held one");
  CHECK(q.take("h") == nullptr && q.find("h") != nullptr, "the held entry left the queue");
  CHECK(!q.has_fresh_ready(seconds(0), SIZE_MAX), "the held entry left behind has a window");
  q.take("a");
  q.push(entry("k", 4));  // with no window: ready at once
  CHECK(q.has_fresh_ready(seconds(0), SIZE_MAX), "an entry beside a held one left behind waits");
  q.request_flush();
  taken = q.take_fresh();
  CHECK(taken.size() == 2, "a flush left %zu of 2 entries behind", 2 - taken.size());
  q.take("h");
  q.take("k");
  q.push(entry("m", 4));
  CHECK(q.has_fresh_ready(seconds(0), SIZE_MAX), "the last round's count of held entries stayed");
  q.take_fresh();
  q.take("m");
  // Unreleased, held entries go after kHeldWindow: a peer may be waiting for them.
  q.push(held("late", 4));
  const auto pushed = Clock::now();
  CHECK(!q.wait_for_work(milliseconds(50), window, SIZE_MAX));
  CHECK(q.wait_for_work(TensorQueue::kHeldWindow * 2, window, SIZE_MAX),
        "held entries never went without a flush");
  CHECK(Clock::now() - pushed >= TensorQueue::kHeldWindow, "held entries went before their window");
  CHECK(q.take_fresh().size() == 1, "the held entry's own round left it behind");
}

}  // namespace

int main() {
  only_what_was_put_forward();
  blocking_submissions_do_not_wake();
  a_flush_is_for_the_batch_there_is();
  a_batch_ends_a_long_sleep_at_its_window();
  fresh_within_limits();
  held_entries_wait_for_a_flush();
  return finish("tensor_queue");
}
