// Process-wide state: the world, one Worker per process set, the handle table.
// Callers' threads enqueue here; everything after that happens on the workers.
#pragma once
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

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
};

class Engine {
 public:
  static Engine& get();

  void init(long long fortran_comm, const std::vector<int>& ranks);
  void shutdown();
  bool initialized();
  const Topology& topology();
  bool threads_supported();

  // Returns a handle id. Throws std::invalid_argument for a duplicate in-flight
  // name, std::runtime_error when not initialised or not a member of the set.
  int64_t enqueue(EnqueueArgs a);
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
  const EngineParams& params() { return params_; }

 private:
  Worker* worker_for(int id);
  std::mutex mu_;
  std::unique_ptr<World> world_;
  std::map<int, std::unique_ptr<Worker>> workers_;
  std::map<int, std::vector<int>> set_ranks_;
  int next_set_id_ = 1;
  HandleTable handles_;
  EngineParams params_;
};

}  // namespace hvdl
