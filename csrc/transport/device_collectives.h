// Whole collectives that a library runs on device memory (NCCL): the alternative to
// running the algorithms of collectives/ over a Transport. Ranks are those of one
// process set; every call is collective over it and returns once the work is queued on
// the CUDA stream given at creation (not when it has finished).
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "../common/dtype.h"
#include "transport.h"

namespace hvdl {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  virtual std::string name() const = 0;  // e.g. "NCCL 2.23.4", for logs
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Whether allreduce/reducescatter can reduce `dt` (NCCL has no 16-bit integers);
  // where not, the caller reduces over its own transport instead.
  virtual bool reduces(DataType dt) const { return dtype_is_reducible(dt); }
  // dst = op over all ranks' src (SUM, PRODUCT, MIN, MAX; the caller turns AVERAGE into
  // SUM and a scale). src may equal dst.
  virtual void allreduce(const void* src, void* dst, size_t count, DataType dt, ReduceOp op) = 0;
  // dst holds size() blocks of `bytes`, block r coming from rank r's src.
  virtual void allgather(const void* src, void* dst, size_t bytes) = 0;
  // root's `bytes` of buf end up in buf everywhere.
  virtual void broadcast(void* buf, size_t bytes, int root) = 0;
  // src holds size() blocks of `count` elements; dst gets block rank() reduced.
  virtual void reducescatter(const void* src, void* dst, size_t count, DataType dt,
                             ReduceOp op) = 0;

  // Point-to-point transfers posted as one group (alltoallv, allgatherv, uneven
  // reducescatter): they may complete in any order, so none may depend on another.
  struct Transfer {
    int peer;
    void* buf;
    size_t bytes;
    bool send;
  };
  virtual void exchange(const std::vector<Transfer>& transfers) = 0;

  // A peer was lost: end the work queued on the stream that waits for it (its kernels
  // would spin on the GPU forever), so the stream can drain. Nothing may be called
  // afterwards.
  virtual void abort() {}
};

// NCCL (nccl_collectives.cc), loaded at run time, queuing on `stream` (a cudaStream_t of
// `device`). Collective over `ctrl`'s ranks, which carries NCCL's bootstrap id; the
// calling thread's current device must be `device`. Throws std::runtime_error naming
// the NCCL error.
std::unique_ptr<DeviceCollectives> make_nccl_collectives(Transport& ctrl, int device,
                                                         void* stream);

}  // namespace hvdl
