// The hierarchical allreduce with its three stages overlapped, for several ranks per
// host: the buffer is cut into chunks and, while the ranks of one host reduce-scatter
// chunk i+2 through shared memory (and allgather chunk i-1), a helper thread runs the
// cross-host ring on this rank's block of chunk i (and of i+1, on two hosts). So the host's link is busy for
// almost the whole call instead of waiting for each local stage (at 1 Gbit/s the two
// local stages of 64 MiB cost ~15 % of the link time on a loaded 2-core machine).
//
// The shared-memory calls stay on the caller's thread, in one fixed order on every
// rank of the host (RS 0, RS 1, RS 2, AG 0, RS 3, AG 1, ..., AG K-1), as ShmCollectives needs;
// the helper thread owns the cross-host transport while a call runs.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/transport.h"
#include "reducer.h"
#include "ring_allreduce.h"
#include "shm_allreduce.h"

namespace hvdl {

class HierarchicalPipeline {
 public:
  HierarchicalPipeline(ShmCollectives& local, Transport& cross);
  ~HierarchicalPipeline();

  // Equal chunks for `bytes`: 1 below kMinChunk * 2 (then the plain sequence is as
  // fast); above 1 the call is pipelined.
  static int chunks_for(size_t bytes);
  static constexpr size_t kMinChunk = size_t(2) << 20;
  static constexpr int kMaxChunks = 16;
  // Where the chunks of `count` elements of `es` bytes start, plus `count` at the end.
  // The chunks_for() equal chunks, but the first and the last are each cut in two, a
  // 1/kEdgeDivisor piece at the outer end: the link waits for the first chunk's local
  // reduce-scatter and the call for the last one's allgather, and those two are not
  // overlapped with anything, so they are made small (at 1 Gbit/s on 2x2, 16 MiB: the
  // two stages of a 2 MiB chunk take ~2 ms of a 135 ms call). The next piece's local
  // stage still hides behind the small piece's cross-host ring while the link is
  // slower than memory by more than kEdgeDivisor.
  static std::vector<size_t> chunk_starts(size_t count, size_t es);
  static constexpr size_t kEdgeDivisor = 4;

  // out = allreduce(in * prescale) * postscale over local x cross, like
  // hierarchical_allreduce(). Bitwise identical on every rank: the chunks follow from
  // the size alone, and each element is still reduced on exactly one rank per stage.
  void run(const Reducer& red, const AllreduceArgs& a, bool stream, const RingOptions& ring);

 private:
  void helper();
  // Two hosts: the whole call's cross-host part, chunk after chunk, with the next
  // chunk's first transfer posted before this one's last (see the .cc).
  void pair_call(std::unique_lock<std::mutex>& lk);

  ShmCollectives& local_;
  Transport& cross_;
  HostBuffer scratch_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::thread thread_;
  bool stop_ = false;
  // The current call, set by run() before it hands out chunks.
  const Reducer* red_ = nullptr;
  char* out_ = nullptr;
  DataType dt_{};
  ReduceOp op_{};
  double postscale_ = 1.0;
  RingOptions ring_;
  std::vector<size_t> chunk_off_, chunk_cnt_;
  int given_ = 0, done_ = 0;  // chunks handed to / finished by the helper
  std::exception_ptr error_;
};

}  // namespace hvdl
