// The background thread of one process set: waits for work (or a peer's wake-up),
// runs a negotiation round, executes what was agreed and completes the handles.
// Each process set has its own, so sets never wait on each other.
#pragma once
#include <atomic>
#include <map>
#include <string>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "../collectives/broadcast.h"
#include "../common/settings.h"
#include "../transport/transport.h"
#include "autotune.h"
#include "allreduce_setup.h"
#include "controller.h"
#include "parameters.h"
#include "device.h"
#include "doorbell.h"
#include "shm_vote.h"
#include "tensor_queue.h"
#include "timeline.h"

namespace hvdl {

struct ExecContext;

// What a process set's engine needs of the settings (engine.cc's params_from()).
struct EngineParams {
  size_t fusion_threshold = 128u << 20;
  double cycle_time_ms = 1.0;
  size_t cache_capacity = 1024;
  double stall_warn_s = 60, stall_fail_s = 0;
  size_t segment_bytes = 1u << 20;  // ring pipelining
  bool autotune = false;            // rank 0 of the global set tunes the knobs above
  double peer_timeout_s = 30;       // a peer silent this long is declared dead (0: not watched)
  std::string failure_report_dir;   // horovodlite-run's first-failure report
  AutotuneOptions autotune_options;
  BroadcastOptions broadcast;
  GpuOptions gpu;
  // The allreduce paths' settings (SHM, HIERARCHICAL_ALLREDUCE, SHM_*).
  Settings settings;
};

// What the workers of one engine share: the engine's state, passed down (not
// process-wide), so engines running as threads in one process (tests/cpp) stay apart.
struct EngineState {
  Timeline timeline;  // written on world rank 0 only
  // This rank's GPU, fixed by its first GPU tensor (one GPU per rank, as in Horovod);
  // -1 before. A rank that has joined uses it for the identity it contributes.
  std::atomic<int> process_gpu{-1};
};

struct WorkerStats {
  std::atomic<uint64_t> rounds{0}, full_rounds{0}, groups{0}, tensors{0}, bytes{0};
  // Full rounds whose requests and answer went through the shared-memory vote.
  std::atomic<uint64_t> full_rounds_in_vote{0};
  // Where a collective's time goes (ns, summed; a clock read each, so always on):
  // from the oldest fresh tensor's submission to the round that takes it (rounds
  // with fresh work, counted in fresh_rounds), the negotiation (Controller::round)
  // and the execution of every round, and - with a Doorbell - from a peer's ring to
  // this rank starting that round (counted in ring_wakes).
  std::atomic<uint64_t> fresh_rounds{0}, submit_to_round_ns{0}, negotiate_ns{0}, execute_ns{0};
  std::atomic<uint64_t> ring_wakes{0}, ring_to_round_ns{0};
  // Allreduces whose data rode with the vote (controller.h): no exchange of their own.
  std::atomic<uint64_t> rider_groups{0};
  std::atomic<uint64_t> folded_riders{0};  // of them, folded on the way (hosts_vote.h)
  std::atomic<uint64_t> split_riders{0};   // of them, split (one block to each peer)
  // Rounds a blocked caller ran on its own thread (Worker::help).
  std::atomic<uint64_t> caller_rounds{0}, turn_wait_ns{0};  // and their wait for the turn
};

class Worker {
 public:
  // host_of_member[i]: host index of the set's rank i (chooses the allreduce path).
  // `state` outlives the worker.
  Worker(std::unique_ptr<Transport> t, EngineParams p, int id, EngineState& state,
         const std::vector<int>& host_of_member = {});
  ~Worker();  // requests shutdown and joins the thread

  TensorQueue& queue() { return queue_; }
  Transport& transport() { return *transport_; }
  const WorkerStats& stats() const { return stats_; }
  // The knobs in effect (they change at round boundaries under autotune).
  Tunables tunables() const {
    std::lock_guard<std::mutex> l(shown_mu_);
    return shown_;
  }
  int id() const { return id_; }
  // Called by a caller blocked on one of this set's results: runs the next round on
  // the caller's thread if the set's own thread is idle and the work is small host
  // work (worker.cc says when). True if it ran one.
  bool help();
  // Whether a blocked caller of a host collective of `bytes` may run its round (help()):
  // then its submission need not wake this set's thread.
  bool may_help(size_t bytes, int device) const {
    return callers_run() && device < 0 && bytes <= lone_caller_bytes_;
  }
  const char* allreduce_algorithm() const { return allreduce_->name().c_str(); }
  void stop();
  // What this set's engine runs with, as name -> value (Engine::report()).
  std::map<std::string, std::string> report() const;

 private:
  void loop();
  // Whoever runs rounds or looks at the transport holds the turn (turn_): this
  // set's thread, or a caller in help(). The thread gives it up while it yields or
  // sleeps (off_turn); false from a wait: a round ran meanwhile, start over.
  bool wait_for_round(std::unique_lock<std::timed_mutex>& turn);
  bool sleep_until_round(std::unique_lock<std::timed_mutex>& turn);  // with a Doorbell
  void take_turn(std::unique_lock<std::timed_mutex>& turn);
  template <class Idle>
  bool off_turn(std::unique_lock<std::timed_mutex>& turn, Idle idle);
  template <class Fn>
  void guarded(Fn fn);
  void run_round();  // negotiate, execute, complete (the turn held)
  // Rings: tell the peers that round_ has started; the highest round a peer rang (the
  // transport's: since its last look). Through the doorbell where there is one.
  void ring_peers() { doorbell_ ? doorbell_->ring(round_) : transport_->ring(round_); }
  uint64_t rung_now() { return doorbell_ ? doorbell_->rung() : transport_->poll_ring(); }
  // Whether callers run rounds at all: a limit set, and no GPU in this process (a CUDA
  // device is current per thread).
  bool callers_run() const { return caller_runs_bytes_ > 0 && state_.process_gpu.load() < 0; }
  // How long a wait looks without sleeping after a round: right after one the next
  // request or ring usually follows within microseconds (training loops, synchronous
  // calls). Not after a caller's round (help()): that caller is about to come back
  // with its next call, and this thread's looks would hold the turn it then asks for.
  std::chrono::microseconds spin_after_round() const {
    return caller_ran_last_ ? std::chrono::microseconds(0) : std::chrono::microseconds(30);
  }
  // How often an idle engine looks at the transport (a peer's failure, a collective
  // it gave up) and beats: 10 times a second, or 10 times per peer timeout if shorter.
  std::chrono::nanoseconds look_every() const;
  // The batching window (cycle time), which also bounds how long a round holds back.
  std::chrono::nanoseconds cycle() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double, std::milli>(params_.cycle_time_ms));
  }
  // Runs the round's responses; returns the bytes executed (what the autotuner scores).
  uint64_t execute(const RoundResult& round, Timeline* tl, Clock::time_point agreed);
  // A split rider's round (controller.h): this rank's block folded in rank order from
  // every rank's block (peer_inputs), scaled, then sent to every peer while theirs
  // arrive in `out`.
  void run_split_rider(ExecContext& ctx, const void* in, const void* const* theirs, void* out,
                       size_t count, DataType dt, ReduceOp op, double postscale);
  void fold_by_hosts(ExecContext& ctx, const void* in, const void* const* theirs, void* out,
                     size_t count, DataType dt, ReduceOp op);
  void setup_vote(const std::vector<int>& host_of_member);
  // What this rank's pending tensor for `cached` sends with the vote, or {} (controller.h).
  Rider rider_for(const Response& cached);
  void apply(const Tunables& t);

  std::unique_ptr<Transport> transport_;
  EngineState& state_;
  EngineParams params_;
  int id_;
  TensorQueue queue_;
  Controller controller_;
  // The allreduce paths on host memory (the GPU's are its device's). Before devices_,
  // whose host device runs them.
  std::unique_ptr<AllreducePaths> allreduce_;
  DeviceSet devices_;  // host memory and the GPU this process uses, with their buffers
  std::unique_ptr<Doorbell> doorbell_;  // null: rings through the transport (make_doorbell)
  bool sleeps_ = false;  // WAKEUP=auto: the thread sleeps on the doorbell (else it polls)
  bool shm_vote_ = false;  // the vote goes through shared memory (else the transport)
  bool hosts_vote_ = false;  // through shared memory and the hosts' leaders (hosts_vote.h)
  // How a rider's result is folded: as the path the tensor would otherwise take does,
  // so that its bits do not depend on whether it rode (HOSTS: each host's riders in
  // rank order, then the hosts' folds, as the hosts' vote folds them on their way;
  // the hierarchical path's bits on 2 hosts x 2 ranks).
  // (Its own name: vote_exchange.h's RiderFold is how a vote folds riders on the way.)
  enum class RiderOrder { RANK_ORDER, BLOCKS, HOSTS };
  RiderOrder rider_order_ = RiderOrder::RANK_ORDER;
  std::vector<std::vector<int>> rider_hosts_;  // HOSTS: the set's ranks_by_host
  static constexpr int kMaxRiderRanks = 8;  // over the transport (controller.h's set_vote)
  // VOTE_RIDER_BYTES's auto values (controller.h's riders).
  static constexpr long long kAutoRiderBytes = 64 << 10;   // two ranks across hosts
  static constexpr long long kAutoShmRiderBytes = 512 << 10;  // two, shared-memory vote
  static constexpr long long kAutoRiderSends = 32 << 10;   // more: all of a rank's copies
  static constexpr long long kAutoSplitRiderBytes = 64 << 10;  // split riders, 3-8 hosts
  // The shared-memory vote also carries the round's requests and the coordinator's
  // answer (Controller::gather_requests) when they fit: a step's worth of new names.
  static constexpr size_t kShmVoteMinBytes = 64 << 10;
  static constexpr std::chrono::microseconds kCrossHostRingHold{50};
  std::chrono::microseconds ring_hold_{0};  // how long a ring waits for the vote (0: not)
  WorkerStats stats_;
  std::timed_mutex turn_;
  std::atomic<int> wanted_{0};    // callers in help() waiting for the turn
  bool caller_ran_last_ = false;  // the last round was a caller's (the turn held)
  bool one_host_ = false;  // every member of the set on this host
  static constexpr std::chrono::microseconds kHelpWait{200};
  static constexpr long long kAutoCallerRunsBytes = 64 << 10;  // CALLER_RUNS_BYTES's auto
  static constexpr size_t kAutoLoneOneHostBytes = 1 << 20;      // and a lone tensor's, one host
  size_t caller_runs_bytes_ = 0;  // help()'s limit (CALLER_RUNS_BYTES; 0: never)
  size_t lone_caller_bytes_ = 0;  // and for a lone fresh tensor (>= caller_runs_bytes_)
  uint64_t round_ = 1;
  std::atomic<bool> running_{true};
  std::string why_;  // why the set stopped (set with running_ false by a failed round)
  const bool records_timeline_;  // world rank 0, global set
  std::unique_ptr<Autotuner> tuner_;
  mutable std::mutex shown_mu_;
  Tunables shown_;
  std::thread thread_;
};

}  // namespace hvdl
