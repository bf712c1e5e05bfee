// Collectives between the ranks of one host through a shared-memory window.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "../common/buffer.h"
#include "../common/dtype.h"
#include "../transport/shared_arena.h"
#include "../transport/shm_window.h"
#include "reducer.h"
#include "span_map.h"

namespace hvdl {

struct ShmOptions {
  size_t chunk_bytes = 256u << 10;  // one pipeline step, all ranks' pieces together
  int slots = 4;                    // steps in flight per rank
  // kAuto for both thresholds below: each allreduce of 1 MiB or more takes the way
  // measured fastest (path_tuner.h). Setting either fixes the choice by size.
  static constexpr size_t kAuto = SIZE_MAX;
  // Collectives of at least this many bytes write the staging slots with
  // non-temporal stores (see shm_allreduce.cc; 0 = always) ...
  size_t stream_in_threshold = kAuto;
  // ... and, if they do, so is their final output from this size on.
  size_t stream_out_threshold = 8u << 20;
  // Allreduces of at least this many bytes go through the ring instead (0: never);
  // see shm_choice.cc.
  size_t ring_threshold = kAuto;
  // The limits the pipeline needs (at least 4096-byte steps, 2 slots).
  ShmOptions& clamp() {
    chunk_bytes = chunk_bytes < 4096 ? 4096 : chunk_bytes;
    slots = slots < 2 ? 2 : slots;
    return *this;
  }
  bool tuned() const { return stream_in_threshold == kAuto && ring_threshold == kAuto; }
  // Non-temporal stores for a collective of `bytes` when the choice is fixed by size;
  // kAuto with nothing timed: ordinary stores, cheapest where the ranks share a cache.
  bool fixed_stream(size_t bytes) const {
    return stream_in_threshold != kAuto && bytes >= stream_in_threshold;
  }
};


// What ShmCollectives::allreduce computes, from every rank's input already at hand
// (engine/controller.h: riders): block b of the output (partition.h) is rank b's input
// op rank b+1's op ... op rank b-1's, times postscale - the order in which rank b
// reduces it in the window, so the bits are the window's. theirs[p] (p != rank) is
// rank p's input, only read; `in` is this rank's and may equal `out`; `scratch` has
// room for block 0 (the largest), used when it does. No prescale.
void combine_in_window_blocks(const Reducer& red, int rank, int n, const void* in,
                              const void* const* theirs, void* scratch, void* out,
                              size_t count, DataType dt, ReduceOp op, double postscale);

class ShmCollectives {
 public:
  // Window data each rank needs for `ranks` ranks with these options.
  static size_t window_bytes(const ShmOptions& o, int ranks);
  // `arenas` (may be null: no zero copy) are the window's ranks' shared arenas.
  ShmCollectives(std::unique_ptr<ShmWindow> w, const ShmOptions& o,
                 std::unique_ptr<PeerArenas> arenas = nullptr);

  int rank() const { return win_->rank(); }
  int size() const { return win_->size(); }
  // Called right after this rank publishes each pipeline step's input (its number, from
  // 1), i.e. in the middle of a collective; tests inject faults there
  // (engine/fault_injection.h). None by default.
  using StepHook = std::function<void(uint64_t step)>;
  void set_step_hook(StepHook h) { step_hook_ = std::move(h); }
  bool has_step_hook() const { return static_cast<bool>(step_hook_); }
  const char* mechanism() const { return win_->mechanism(); }

  // out = (sum over ranks of in * prescale) * postscale, for any reduce op, over the
  // concatenation of `spans`. Bitwise identical on every rank.
  void allreduce(const Reducer& red, const std::vector<Span>& spans, DataType dt, ReduceOp op,
                 double prescale, double postscale, bool stream);
  // Like allreduce of one span, but only this rank's block of out (partition.h,
  // `size()` parts) is written; the rest of out is left alone.
  void reduce_scatter(const Reducer& red, const void* in, void* out, size_t count, DataType dt,
                      ReduceOp op, double prescale, double postscale, bool stream);
  // Every rank's block of buf is copied into the same block on all the others.
  void allgather(void* buf, size_t count, DataType dt, bool stream);

  // Same result as allreduce, done where the tensors lie (no staging), when every
  // rank's spans are in its shared arena; returns false on every rank, having done
  // nothing, otherwise (or without arenas).
  // Collective: every rank calls it for the same allreduces.
  bool zero_copy_allreduce(const Reducer& red, const std::vector<Span>& spans, DataType dt,
                           ReduceOp op, double prescale, double postscale);
  // Allreduces done that way in this process, for tests.
  static uint64_t zero_copy_count();
  // Whether [p, p + bytes) lies in this rank's shared arena (false without arenas).
  bool in_own_arena(const void* p, size_t bytes) const {
    return arenas_ && arenas_->offset_of(rank(), p, bytes) >= 0;
  }

  // Rank 0 tells the others a small value (0-7) for its call number `call` (>= 1,
  // numbered alike on every rank); the others wait for it. Rank 0 cannot get a call
  // ahead of a rank still waiting, since every call needs all ranks.
  void announce(uint64_t call, int value);
  int await_announcement(uint64_t call);

  // This rank will not finish the collective the window's ranks are in (it failed
  // elsewhere, e.g. across hosts): the peers waiting on it stop with `why`, a
  // PeerFailure where `e` is one (shm_window.h), and the window is unusable after.
  void abandon(const std::exception& e);

 private:
  enum class Pass { ALLREDUCE, REDUCE_SCATTER, ALLGATHER };
  // The window's progress counters: the staged pipeline's stages, rank 0's
  // announcements, and zero copy's two exchanges (shm_zero_copy.cc).
  enum Counter { kIn, kReduced, kDone, kAnnounce, kDescribed, kWritten, kCounters };
  static_assert(kCounters <= ShmWindow::kNumCounters, "the window has too few counters");
  // After the slots: where a rank lists its spans' arena offsets for zero copy.
  static constexpr size_t kDescriptorBytes = 64u << 10;
  uint64_t* descriptor(int r) const {
    return reinterpret_cast<uint64_t*>(win_->data(r) + slot_stride_ * opts_.slots);
  }
  void run(Pass pass, const Reducer* red, const std::vector<Span>& spans, DataType dt,
           ReduceOp op, double prescale, double postscale, bool stream_in);

  std::unique_ptr<ShmWindow> win_;
  std::unique_ptr<PeerArenas> arenas_;
  uint64_t zero_copy_calls_ = 0;  // numbers the exchanges of span offsets
  ShmOptions opts_;
  size_t piece_bytes_ = 0, slot_stride_ = 0;
  // Pipeline steps done through this window; the same on every rank, since all run
  // the same passes over the same counts. It numbers the progress counters.
  uint64_t seq_ = 0;
  StepHook step_hook_;
};

}  // namespace hvdl
