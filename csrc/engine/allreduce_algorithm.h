// Which allreduce a process set runs on host memory, chosen once when its worker
// starts, from where its ranks live and the environment:
//   - every rank on this host: "shm", which times the shared-memory pipeline against
//     the ring and keeps the faster (allreduce_algorithm.cc),
//   - several hosts with the same number of ranks each: shared memory inside each
//     host and a ring across hosts ("hierarchical"),
//   - otherwise (or SHM=0 / HIERARCHICAL_ALLREDUCE=0 in the settings): the
//     flat ring, which the op runs itself (no object).
// HOROVODLITE_HIERARCHICAL_ALLREDUCE=1 forces the hierarchical form even on one host.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../collectives/reducer.h"
#include "../collectives/ring_allreduce.h"
#include "../collectives/shm_allreduce.h"
#include "../common/dtype.h"
#include "../common/settings.h"
#include "../transport/transport.h"

namespace hvdl {

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  virtual const char* name() const = 0;
  // Its phase name on the timeline.
  virtual const char* phase() const = 0;
  // out = (reduction over ranks of in * prescale) * postscale; in may equal out.
  // Host memory only. `ring`: the set's ring settings, for any ring it runs.
  // Throws on failure (a peer died, ...).
  virtual void run(const Reducer& red, const void* in, void* out, size_t count, DataType dt,
                   ReduceOp op, double prescale, double postscale, const RingOptions& ring) = 0;
  // Whether run_spans() reduces the spans as one buffer: then many tensors reduce as
  // one, where they lie, without a fusion buffer, and the fusion planner groups large
  // tensors too. Otherwise it runs them one by one.
  virtual bool takes_spans() const { return false; }
  // The shared-memory options it runs with (rank 0's) and how its window was made,
  // for Engine::report(); null / "" without shared memory.
  virtual const ShmOptions* shm_options() const { return nullptr; }
  virtual std::string window_mechanism() const { return ""; }
  // Whether a test fault hook sits in its shared-memory pipeline (fault_injection.h).
  virtual bool fault_hooked() const { return false; }
  virtual void run_spans(const Reducer& red, const std::vector<Span>& spans, DataType dt,
                         ReduceOp op, double prescale, double postscale, const RingOptions& ring) {
    for (const Span& s : spans) run(red, s.in, s.out, s.count, dt, op, prescale, postscale, ring);
  }
};

// Collective over `set`. host_of_member[i] is the host index of the set's rank i
// (empty: unknown, use the ring). Returns nullptr for the flat ring, also when a
// shared-memory segment could not be set up (on every rank alike).
// `settings`: SHM, HIERARCHICAL_ALLREDUCE, SHM_* (rank 0's hold for every rank).
std::unique_ptr<AllreduceAlgorithm> make_allreduce_algorithm(Transport& set,
                                                             const std::vector<int>& host_of_member,
                                                             const Settings& settings);
// The SHM_* settings as the shared-memory collectives' options.
ShmOptions shm_options(const Settings& s);

}  // namespace hvdl
