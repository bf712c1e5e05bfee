// The timeline: rank 0 records what happened to each tensor (negotiation with the
// moment each rank was ready, queueing behind other work, each phase of its
// collective) as Chrome-trace JSON that Perfetto and chrome://tracing load, and that
// `python -m horovodlite.timeline` renders. The engine thread only appends events to
// an in-memory queue; a writer thread formats and writes them, so recording never
// waits for the disk. When nothing records, the engine's cost is one pointer test.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../collectives/phase_observer.h"
#include "message.h"
#include "tensor_queue.h"

namespace hvdl {

// Collects the phases an op reports while it executes one group.
class GroupTrace : public PhaseObserver {
 public:
  struct Span {
    const char* phase;
    Clock::time_point begin, end;
  };
  void begin(const char* phase) override { spans_.push_back({phase, Clock::now(), {}}); }
  void end(const char* phase) override {
    for (auto it = spans_.rbegin(); it != spans_.rend(); ++it)
      if (it->phase == phase && it->end == Clock::time_point{}) {
        it->end = Clock::now();
        return;
      }
  }
  const std::vector<Span>& spans() const { return spans_; }

 private:
  std::vector<Span> spans_;
};

class Timeline {
 public:
  // One per engine (EngineState, worker.h); the engine starts it on world rank 0 only.
  Timeline() = default;
  ~Timeline() { stop(); }
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  // Starts writing to `path` (truncating it); a running timeline is stopped first.
  // Throws std::runtime_error when the file cannot be created.
  void start(const std::string& path, bool mark_cycles);
  // Writes what is queued, closes the JSON array and the file. Harmless when stopped.
  void stop();
  // Non-null while recording. The engine tests this once per round.
  Timeline* recording() { return active_.load(std::memory_order_acquire) ? this : nullptr; }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // ---- called by the engine thread of the global process set (rank 0) ----
  void cycle_start(Clock::time_point t);
  // `ready[r]`: when rank r enqueued the tensor (zero time_point: unknown / joined).
  void negotiated(const std::string& name, const std::vector<Clock::time_point>& ready,
                  Clock::time_point agreed);
  void queued(const std::string& name, Clock::time_point agreed, Clock::time_point started);
  // One executed group: every member gets the op's span and the phases it reported.
  void executed(const std::vector<const Response*>& group, const std::vector<size_t>& bytes,
                Clock::time_point begin, Clock::time_point end, const GroupTrace& trace);

 private:
  struct Event {
    char ph;           // 'X' complete, 'i' instant
    const char* name;  // a literal: NEGOTIATE, RING_ALLGATHER, ...
    std::string tensor;  // track; empty = the cycle track
    int64_t ts_ns = 0, dur_ns = 0;
    int32_t rank = -1, group_size = -1;
    int64_t bytes = -1, group = -1;
  };
  void stop_locked();
  void push(Event e);
  void push_all(std::vector<Event>& events);
  void writer_loop();
  void write_event(const Event& e, std::string& out);
  int track_of(const std::string& tensor, std::string& out);
  int64_t since_start(Clock::time_point t) const;

  std::mutex mu_;  // guards events_, stopping_, file_ hand-over
  std::condition_variable cv_;
  std::vector<Event> events_;
  bool stopping_ = false;
  std::atomic<bool> active_{false}, mark_cycles_{false};
  std::mutex life_mu_;  // serialises start/stop
  std::thread writer_;
  std::FILE* file_ = nullptr;
  std::atomic<Clock::rep> start_{0};  // steady-clock ticks; read by the engine thread
  uint64_t next_group_ = 0;
  // Writer thread only.
  std::unordered_map<std::string, int> tracks_;
  int next_track_ = 1;
  bool first_event_ = true;
};

}  // namespace hvdl
