// The hand-off between callers and a process set's thread (csrc/engine/tensor_queue.h)
// alone: a response may only take an entry this rank has put forward (a stall error
// naming a tensor its caller has only just submitted must leave that one alone), a
// blocking caller's submission does not wake the worker, and what a helping caller
// may run (fresh_within).
#include <memory>
#include <string>

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

void fresh_within_limits() {
  TensorQueue q;
  CHECK(!q.fresh_within(1 << 20), "nothing fresh, yet something to run");
  q.push(entry("a", 16));  // 64 bytes
  CHECK(q.fresh_within(64));
  CHECK(!q.fresh_within(63));
  q.push(entry("b", 16));
  CHECK(!q.fresh_within(64) && q.fresh_within(128));
  q.take_fresh();
  CHECK(!q.fresh_within(1 << 20), "taken, yet still fresh");
  q.push(entry("c", 1));
  q.request_shutdown();
  CHECK(!q.fresh_within(1 << 20), "a shutdown round is the worker's");
}

}  // namespace

int main() {
  only_what_was_put_forward();
  blocking_submissions_do_not_wake();
  fresh_within_limits();
  return finish("tensor_queue");
}
