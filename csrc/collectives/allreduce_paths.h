// The allreduce paths of one process set on one device (host memory or one GPU), and
// the choice of one for each plan, in this order:
//   1. a "first" path, in the order added, whenever it can run the plan (zero copy,
//      NCCL): none moves fewer bytes;
//   2. otherwise a "contender": the chooser's pick (the timed choice with rank 0's
//      announcement, shm_choice.h), or without a chooser the first that can run it.
// The engine builds one per set for host memory (engine/allreduce_setup.cc) and one per
// set and GPU (engine/cuda_device.cc); the allreduce op only makes the plan.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../transport/tcp_transport.h"
#include "allreduce_path.h"
#include "shm_allreduce.h"

namespace hvdl {

class PathChooser {
 public:
  virtual ~PathChooser() = default;
  // The index of the contender that runs `plan`: the same on every rank.
  virtual int choose(const AllreducePlan& plan) = 0;
  // Contender `way` ran `plan` in `seconds`.
  virtual void record(int way, const AllreducePlan& plan, double seconds) = 0;
};

class AllreducePaths {
 public:
  // `name`: what the engine reports for the set ("ring", "shm", "hierarchical", ...);
  // `phase`: the timeline phase around every run, or null.
  AllreducePaths(std::string name, const char* phase) : name_(std::move(name)), phase_(phase) {}

  AllreducePaths& first(std::unique_ptr<AllreducePath> p);
  AllreducePaths& contender(std::unique_ptr<AllreducePath> p);
  AllreducePaths& chooser(std::unique_ptr<PathChooser> c);

  // Runs `plan` on the chosen path. Throws on failure.
  void run(AllreducePlan& plan);

  // Whether a group of many tensors goes to run() as many spans, where they lie (some
  // path here reduces spans as one buffer); otherwise the op packs them into one.
  bool takes_spans() const;
  // Whether run() needs every span in place: the op then copies the input first.
  bool in_place_only() const;
  // Whether a "first" path would reduce these buffers where they lie
  // (AllreducePath::reduces_where_they_lie).
  bool reduces_where_they_lie(const void* in, const void* out, size_t bytes) const;
  const std::string& name() const { return name_; }

  // For Engine::report(): the shared-memory options the paths run with (rank 0's),
  // how their window was made, and whether a test fault hook sits in them.
  struct ShmInfo {
    ShmOptions options;
    std::string mechanism;
    bool fault_hooked = false;
  };
  void set_shm_info(ShmInfo i) { shm_info_ = std::make_unique<ShmInfo>(std::move(i)); }
  const ShmInfo* shm_info() const { return shm_info_.get(); }
  // ... and what the direct TCP transport across hosts took, when one runs (its own
  // values, tcp_transport.h), or null.
  void set_cross_tcp(const TcpInfo& i) { cross_tcp_ = std::make_unique<TcpInfo>(i); }
  const TcpInfo* cross_tcp() const { return cross_tcp_.get(); }
  // Every path's AllreducePath::report().
  void report(std::map<std::string, std::string>& out) const;

 private:
  std::string name_;
  const char* phase_;
  std::vector<std::unique_ptr<AllreducePath>> first_, contenders_;
  std::unique_ptr<PathChooser> chooser_;
  std::unique_ptr<ShmInfo> shm_info_;
  std::unique_ptr<TcpInfo> cross_tcp_;
};

// The timed choice between the contenders [shm, shm streaming, ring] of one host's
// ranks (shm_choice.cc), announced by rank 0 through `shm`'s window.
std::unique_ptr<PathChooser> make_shm_choice(std::shared_ptr<ShmCollectives> shm,
                                             const ShmOptions& o);

}  // namespace hvdl
