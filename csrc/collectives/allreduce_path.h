// One way to run an allreduce, and the plan it runs. A process set has a few such
// ways per device (allreduce_paths.h chooses among them); each is one object in one
// file of this folder:
//   ring_path.cc          the flat ring over the set's transport, host memory
//   cross_host_ring_path.cc  the flat ring across hosts, large blocks over direct TCP
//   shm_path.cc           the shared-memory pipeline, ordinary or streaming stores
//   zero_copy_path.cc     shared memory, reduced where the tensors lie (shared arenas)
//   hierarchical_path.cc  shared memory in each host, a ring across hosts
//   nccl_path.cc          NCCL on GPU memory
//   device_ring_path.cc   the ring on GPU memory, over a staging or CUDA-aware transport
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/device_collectives.h"
#include "../transport/transport.h"
#include "reducer.h"
#include "ring_allreduce.h"
#include "shm_allreduce.h"
#include "span_map.h"

namespace hvdl {

// out = (reduction over ranks of in * prescale) * postscale over the concatenation of
// `spans`, as if they were one buffer (a span's out may equal its in). Every rank of
// the set runs the same plan (counts, dtype, op, scales) at the same time.
struct AllreducePlan {
  std::vector<Span> spans;
  DataType dt = DataType::FLOAT32;
  ReduceOp op = ReduceOp::SUM;  // never AVERAGE: that is a SUM and a postscale
  double prescale = 1.0, postscale = 1.0;
  const Reducer* red = nullptr;  // ordered with the device's transport
  RingOptions ring;              // the set's ring settings and the timeline's phases
  // Set by a path whose can_run() could only answer for this rank, and which found,
  // with the others inside run(), that not all ranks can (zero copy: a rank's tensors
  // are not in its shared arena). It did nothing, on every rank; the next one runs.
  bool declined = false;

  size_t count() const {
    size_t c = 0;
    for (const Span& s : spans) c += s.count;
    return c;
  }
  size_t bytes() const { return count() * dtype_size(dt); }
  bool in_place() const {
    for (const Span& s : spans)
      if (s.in != s.out) return false;
    return true;
  }
};

class AllreducePath {
 public:
  virtual ~AllreducePath() = default;
  virtual const char* name() const = 0;
  // Whether it can run `plan`; the same answer on every rank for the same plan (or see
  // AllreducePlan::declined).
  virtual bool can_run(const AllreducePlan& plan) const = 0;
  // Throws on failure (a peer died, ...).
  virtual void run(AllreducePlan& plan) = 0;
  // Whether it reduces many spans as one buffer (no fusion buffer needed for them).
  virtual bool takes_spans() const { return false; }
  // Whether it needs every span in place (in == out): the caller copies first.
  virtual bool in_place_only() const { return false; }
  // Whether it would reduce this rank's `bytes` at `in` into `out` where they lie, with
  // no staging copy (zero copy, for arrays in the shared arena): a caller that would
  // copy them elsewhere first (a rider of the vote) should leave them to it.
  virtual bool reduces_where_they_lie(const void* in, const void* out, size_t bytes) const {
    (void)in, (void)out, (void)bytes;
    return false;
  }
  // Adds the values it runs with that no setting alone tells (the engine's report,
  // Worker::report), by key; most paths have none.
  virtual void report(std::map<std::string, std::string>& out) const { (void)out; }
};

// ---- the paths, one file each ----
// The flat ring over `t` (host memory; out of place it reads the input where it lies).
std::unique_ptr<AllreducePath> make_ring_path(Transport& t);
// The flat ring across hosts: over `tcp` (a TCP transport of the set's ranks, which it
// owns), except spans whose blocks are under `small_bytes`, which go over `small` (the
// set's transport, which outlives the path).
std::unique_ptr<AllreducePath> make_cross_host_ring_path(std::unique_ptr<Transport> tcp,
                                                         Transport& small, size_t small_bytes);
// The shared-memory pipeline through `shm`'s window, writing its slots with ordinary
// or (`stream`) non-temporal stores.
std::unique_ptr<AllreducePath> make_shm_path(std::shared_ptr<ShmCollectives> shm, bool stream);
// Shared memory where the tensors lie, for plans whose tensors every rank allocated
// in its shared arena (declines otherwise).
std::unique_ptr<AllreducePath> make_zero_copy_path(std::shared_ptr<ShmCollectives> shm);
// Shared memory inside each host (`local`, null when this rank is alone on its host)
// and a ring across hosts (`cross`); `cross_is_tcp`: `cross` is direct TCP.
// `cross_small`, `small_bytes`: HierarchicalOptions' (hierarchical_allreduce.h); it must
// live as long as `cross` (it is the transport `cross` wraps).
std::unique_ptr<AllreducePath> make_hierarchical_path(std::unique_ptr<ShmCollectives> local,
                                                      std::unique_ptr<Transport> cross,
                                                      const ShmOptions& o, bool cross_is_tcp,
                                                      Transport* cross_small = nullptr,
                                                      size_t small_bytes = 0);
// NCCL (or any library of whole collectives) on device memory, for the dtypes it reduces.
std::unique_ptr<AllreducePath> make_nccl_path(DeviceCollectives& lib);
// The ring in place on device memory over `t` (a staging or stream-synced transport
// whose copies and reducer order on the device's stream), `scratch` on the device.
std::unique_ptr<AllreducePath> make_device_ring_path(Transport& t, Buffer& scratch);

}  // namespace hvdl
