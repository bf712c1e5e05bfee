// Liveness of the world's ranks, kept apart from stalls. A stall is the user's
// business (a rank may spend ten minutes in evaluation); a rank whose process died
// or whose process/engine stopped answering is a failure. Whoever notices one first
// (the heartbeat monitor, a pidfd, an MPI error return, a shared-memory wait)
// declares it here, once; every wait of the engine checks here, so every pending and
// future collective of a set with that rank fails with a PeerFailure naming the rank
// and its host instead of waiting forever.
//
// Engine threads also beat here (beat(), a relaxed store, from their waits), so the
// monitor can stop vouching for this process when one of them is stuck outside any
// wait for longer than the peer timeout: its peers then declare it dead.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvdl {

struct PeerFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class PeerHealth {
 public:
  static PeerHealth& get();

  // A new world: ranks' hosts and pids (indexed by world rank), this rank, and the
  // timeout after which a silent peer is declared dead. Forgets earlier failures.
  void reset(int my_rank, std::vector<std::string> hosts, std::vector<int> pids,
             double timeout_s);
  // Where each declared failure is also written (one line per failure, for the
  // launcher's first-failure report); "" = nowhere.
  void set_report_dir(const std::string& dir) {
    std::lock_guard<std::mutex> l(mu_);
    report_dir_ = dir;
  }
  double timeout_s() const { return timeout_s_; }
  int my_rank() const { return my_rank_; }
  int size() const { return static_cast<int>(hosts_.size()); }
  // "rank 2 (host h, pid 123)"
  std::string describe(int rank) const;

  // Declares `rank` failed (-1: an unknown rank, e.g. a revoked communicator). Only
  // the first declaration per rank counts; the first of all runs the failure hooks.
  void declare(int rank, const std::string& why);
  // declare() for the rank whose process is `pid` on this host (shared-memory windows
  // know their peers by pid); nothing if no rank has that pid.
  void declare_pid(int pid, const std::string& why);
  bool any_failed() const { return any_.load(std::memory_order_acquire); }
  // Whether any world of this process ever lost a member; reset() keeps it (elastic
  // training re-forms the world after a failure, but MPI_Finalize may still wait for
  // the dead process).
  bool ever_failed() const { return ever_.load(std::memory_order_acquire); }
  bool failed(int rank) const;
  // `rank`'s script ended: the farewell it sends as it exits has arrived (told by the
  // MPI world, which receives those notes: mpi_transport.cc). A failure declared for
  // it later (its process exited, its heartbeat stopped) is then worded as its leaving,
  // not as a death; it counts as a failure all the same (it is gone). Until reset().
  void note_departed(int rank);
  // Why `rank` was declared failed, as its declarer put it ("" while healthy): what
  // the heartbeat tells the other ranks, so every survivor names the same cause.
  std::string reason(int rank) const;
  // Throws PeerFailure if one of `world_ranks` (nullptr: any rank) has failed; where
  // several have, the one declared first is the cause (a survivor that gave up on a
  // frozen peer and exited is a consequence, whatever the ranks' order).
  void check(const std::vector<int>* world_ranks) const {
    if (any_failed()) check_slow(world_ranks);
  }
  // The same, for peers known by pid (shared-memory windows know their peers so).
  void check_pids(const std::vector<int>& pids) const {
    if (any_failed()) check_pids_slow(pids);
  }
  // The first failure's message ("" if none).
  std::string first_failure() const;
  // Run once, on the declaring thread, at the first failure (revoking communicators).
  void on_failure(std::function<void()> hook);

  // ---- engine threads' heartbeat ----
  // A thread that registers promises to call beat() at least every few milliseconds
  // while it waits; Registration's destructor withdraws the promise.
  class Registration {
   public:
    explicit Registration(const std::string& who);
    ~Registration();
    Registration(const Registration&) = delete;
    Registration& operator=(const Registration&) = delete;

   private:
    int slot_;
  };
  static void beat();
  // The name of a registered thread that has not beaten for `limit`, or "".
  std::string stuck_thread(std::chrono::steady_clock::duration limit) const;

 private:
  void check_slow(const std::vector<int>* world_ranks) const;
  void check_pids_slow(const std::vector<int>& pids) const;
  std::string message_for(int rank) const;

  mutable std::mutex mu_;
  std::atomic<bool> any_{false};
  std::atomic<bool> ever_{false};
  int my_rank_ = 0;
  double timeout_s_ = 30;
  std::vector<std::string> hosts_;
  std::vector<int> pids_;
  std::vector<std::string> why_;  // per rank, "" while healthy
  std::vector<std::string> reason_;  // per rank, the `why` it was declared with
  std::vector<uint64_t> order_;   // per rank, when it was declared (1, 2, ...; 0 healthy)
  std::vector<char> departed_;    // per rank, its farewell arrived (note_departed)
  uint64_t declared_ = 0;         // declarations so far in this world
  std::string unknown_why_;       // a failure of a rank we could not tell
  std::string first_;
  std::string report_dir_;
  std::vector<std::function<void()>> hooks_;

  struct Slot {
    std::atomic<int64_t> last_ns{0};
    std::atomic<bool> used{false};
    std::string who;
  };
  static constexpr int kSlots = 64;
  Slot slots_[kSlots];
};

}  // namespace hvdl
