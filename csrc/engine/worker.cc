#include "worker.h"

#include <sys/prctl.h>

#include <algorithm>
#include <thread>

#include "../common/logging.h"
#include "collective_op.h"
#include "fusion_planner.h"

namespace hvdl {

using namespace std::chrono;

Worker::Worker(std::unique_ptr<Transport> t, EngineParams p, int id)
    : transport_(std::move(t)),
      params_(p),
      id_(id),
      controller_(*transport_, p.cache_capacity, p.stall_warn_s, p.stall_fail_s) {
  thread_ = std::thread([this] { loop(); });
}

Worker::~Worker() { stop(); }

void Worker::stop() {
  queue_.request_shutdown();
  if (thread_.joinable()) thread_.join();
}

// Sleep until this rank has a reason to start a round (its own fresh work, a timer)
// or a peer rang because it started one. Ranks never spin through empty rounds: an
// idle rank sleeps in the OS and only checks for a peer's ring, more often while it
// has tensors in flight (a peer's arrival is then what it is waiting for).
void Worker::wait_for_round() {
  const auto window = duration_cast<nanoseconds>(duration<double, std::milli>(params_.cycle_time_ms));
  auto poll = microseconds(5);
  // Right after a round the next request or ring usually follows within microseconds
  // (training loops, synchronous calls): look without sleeping for a short while.
  const auto spin_until = Clock::now() + microseconds(30);
  for (;;) {
    if (Clock::now() < spin_until) {
      uint64_t rung = transport_->poll_ring();
      if (rung >= round_) return;
      if (queue_.has_fresh_ready(duration_cast<nanoseconds>(duration<double, std::milli>(params_.cycle_time_ms)),
                                 params_.fusion_threshold) || controller_.next_deadline() <= Clock::now()) {
        transport_->ring(round_);
        return;
      }
      std::this_thread::yield();
      continue;
    }
    auto deadline = controller_.next_deadline();
    auto now = Clock::now();
    bool local = deadline <= now;
    if (!local) {
      auto cap = queue_.has_in_flight() ? microseconds(50) : microseconds(1000);
      poll = std::min(poll * 2, cap);
      auto timeout = std::min<Clock::duration>(poll, deadline - now);
      local = queue_.wait_for_work(duration_cast<nanoseconds>(timeout), window,
                                   params_.fusion_threshold);
    }
    uint64_t rung = transport_->poll_ring();
    if (rung >= round_) return;  // a peer started this round: nothing to ring
    if (local) {
      transport_->ring(round_);
      return;
    }
  }
}

void Worker::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // short sleeps must stay short (default slack: 50 us)
  std::string why;
  while (running_) {
    try {
      wait_for_round();
      bool want_shutdown = queue_.shutdown_requested();
      RoundResult res = controller_.round(queue_.take_fresh(), want_shutdown);
      ++round_;
      stats_.rounds++;
      if (!res.cache_only) stats_.full_rounds++;
      execute(res.responses);
      if (res.shutdown) running_ = false;
    } catch (const std::exception& e) {
      HVDL_LOG(ERROR) << "process set " << id_ << ": background loop failed: " << e.what();
      why = std::string("horovodlite: background loop failed: ") + e.what();
      running_ = false;
    }
  }
  if (why.empty())
    why = queue_.shutdown_requested()
              ? "horovodlite has been shut down; the collective did not complete"
              : "horovodlite: another rank shut down (process set " + std::to_string(id_) +
                    "); this collective cannot complete. Call hvd.shutdown() on this rank too";
  // Closing also refuses later enqueues, which would otherwise wait forever.
  for (auto& e : queue_.close(why)) e->handle->complete(Status::error(Status::ABORTED, why));
}

void Worker::execute(const std::vector<Response>& responses) {
  ExecContext ctx{*transport_, cpu_reducer(), fusion_, scratch_, params_.fusion_threshold};
  for (auto& group : plan_fusion(responses, params_.fusion_threshold)) {
    std::vector<std::unique_ptr<TensorEntry>> owned;
    std::vector<TensorEntry*> entries;
    for (auto* r : group) {
      owned.push_back(r->name.empty() ? nullptr : queue_.take(r->name));
      entries.push_back(owned.back().get());
    }
    const Response& head = *group[0];
    Status st;
    if (!head.ok()) {
      st = Status::error(Status::MISMATCH, head.error);
    } else {
      try {
        find_op(head.op)->execute(ctx, group, entries);
        stats_.groups++;
        stats_.tensors += group.size();
      } catch (const std::exception& e) {
        st = Status::error(Status::INTERNAL, std::string("horovodlite: ") + op_type_name(head.op) +
                                                 " '" + head.name + "' failed: " + e.what());
      }
    }
    for (size_t i = 0; i < group.size(); ++i) {
      controller_.executed(*group[i], entries[i] ? &entries[i]->req : nullptr);
      if (entries[i]) entries[i]->handle->complete(st);
    }
  }
}

}  // namespace hvdl
