// Process-wide state: the world, one Worker per process set, the handle table.
// Callers' threads enqueue here; everything after that happens on the workers.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../common/settings.h"
#include "../transport/world.h"
#include "handle.h"
#include "worker.h"

namespace hvdl {

struct EnqueueArgs {
  int process_set = 0;
  Request req;
  const void* input = nullptr;
  void* output = nullptr;
  // GPU tensors (req.device >= 0): the cudaStream_t that produced the input, if any.
  bool has_stream = false;
  void* stream = nullptr;
  // A blocking call: its caller waits for the handle at once, and that wait starts
  // the work (Engine::wait), so where the caller may run the round itself
  // (Worker::may_help) the submission need not wake the set's thread.
  bool caller_waits = false;
  // Held until a caller blocks (TensorEntry::held); host memory only (GPU tensors go
  // as ever: the GPU's work overlaps backward without taking a core).
  bool held = false;
};

class Engine {
 public:
  // The process's engine, for the binding: Python's hvd.* calls have no handle to pass
  // around, and MPI can be initialised once per process anyway. Tests make their own
  // Engine per thread-rank.
  static Engine& get();
  Engine() = default;
  ~Engine();

  // Starts the engine over `world` (the MPI world, or the tests' threads); no effect
  // when already started. `settings`: read by the caller at init()
  // (Settings::from_env()); every layer gets its values from here.
  void init(std::unique_ptr<World> world, const Settings& settings);
  void shutdown();
  bool initialized();
  const Topology& topology();
  bool threads_supported();

  // Returns a handle id. Throws std::invalid_argument for a duplicate in-flight
  // name, std::runtime_error when not initialised or not a member of the set.
  int64_t enqueue(EnqueueArgs a) { return handles_.add(submit(std::move(a))); }
  // enqueue() for a caller that waits at once and holds the state itself: no handle
  // id (the table's lock and map were ~0.1 us of a 4 KiB blocking call). track() gives
  // it one later, where that caller stops waiting before it is done.
  std::shared_ptr<HandleState> submit(EnqueueArgs a);
  int64_t track(std::shared_ptr<HandleState> h) { return handles_.add(std::move(h)); }
  std::shared_ptr<HandleState> handle(int64_t id);
  void release(int64_t id) { handles_.release(id); }
  // Blocks until done or `limit` passed; returns done. The caller releases the GIL.
  bool wait(HandleState& h, std::chrono::nanoseconds limit = std::chrono::nanoseconds::max());

  // Process sets: collective over all ranks. Returns the new id.
  int add_process_set(const std::vector<int>& ranks);
  void remove_process_set(int id);
  // Ranks of a set (world ranks); empty if unknown. Set 0 is everyone.
  std::vector<int> process_set_ranks(int id);
  int process_set_rank(int id);  // -1 if this rank is not a member

  std::map<std::string, uint64_t> stats(int process_set);
  Tunables tunables(int process_set);
  // World rank 0 writes the timeline; on other ranks these do nothing.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();
  // "ring", "shm" or "hierarchical": how this rank's allreduces in the set run.
  std::string allreduce_algorithm(int process_set);
  // What the set's engine and the process-wide parts (log level, kernels, pools) run
  // with, read back from them: the settings test checks every setting arrived.
  std::map<std::string, std::string> report(int process_set);
  const EngineParams& params() { return params_; }
  // The settings of the current (or last) init().
  Settings settings() {
    std::lock_guard<std::mutex> l(mu_);
    return settings_;
  }

 private:
  Worker* worker_for(int id);
  std::mutex mu_;
  EngineState state_;  // before the workers, which use it
  std::unique_ptr<World> world_;
  std::map<int, std::shared_ptr<Worker>> workers_;  // shared: a helping caller holds one
  std::map<int, std::vector<int>> set_ranks_;
  int next_set_id_ = 1;
  HandleTable handles_;
  EngineParams params_;
  Settings settings_;
};

}  // namespace hvdl
