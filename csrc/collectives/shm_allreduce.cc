// Allreduce through shared memory: one copy in, a reduction that reads the peers'
// copies where they lie, one copy out.
//
// The buffer is cut into N blocks (partition.h) and rank r reduces block r. The
// blocks are walked in steps: step c takes piece c of every block (P elements
// each). Per step, every rank
//   1. IN:  copies its piece c of all N blocks into its staging slot,
//   2. RED: once all ranks have published step c, adds the peers' copies of piece c
//           of block r to its own (and applies postscale), and publishes the sum,
//   3. OUT: once all have reduced step c, copies the N reduced pieces out.
// Each stage publishes a counter (the global step number), and a rank is free to
// start the next step's IN while peers are still reducing the previous one: with
// S slots per rank, S steps are in flight, and no rank waits for a whole phase.
//
// Writing the slots with ordinary stores looks cheapest (the peers read them straight
// from this rank's cache), but every step then writes lines that the peers read the
// step before, and each such store must first take the line back from them. On a
// virtual machine whose two vCPUs can sit on different core complexes, that took
// 28 ms of a 64 MiB allreduce against 4 ms for the copy alone. Non-temporal stores
// invalidate without waiting for the line, and the peers read from memory instead:
// 3-4x faster there and no slower where cores share a cache, so they are the default.
//
// A rank's own piece of each step never goes through the window raw: it is copied
// to private memory, reduced there, and only the result is published; this saves
// reading it back from memory and taking shared lines for the reduction.
//
// Every piece is reduced by exactly one rank and copied by the others, so results
// are bitwise identical everywhere. Reduce-scatter stops after RED with an OUT of
// the rank's own piece; allgather skips RED. Hierarchical allreduce uses those two.
#include "shm_allreduce.h"

#include <signal.h>

#include <algorithm>
#include <stdexcept>

#include "../common/env.h"
#include "../reduce/copy.h"
#include "partition.h"

namespace hvdl {
namespace {
enum Counter { kIn = 0, kReduced = 1, kDone = 2 };
}

ShmOptions shm_options_from_env() {
  ShmOptions o;
  o.chunk_bytes = static_cast<size_t>(env_int("SHM_CHUNK_BYTES", static_cast<long long>(o.chunk_bytes)));
  o.slots = static_cast<int>(env_int("SHM_SLOTS", o.slots));
  o.stream_in_threshold = static_cast<size_t>(
      env_int("SHM_STREAM_IN_THRESHOLD", static_cast<long long>(o.stream_in_threshold)));
  o.stream_out_threshold = static_cast<size_t>(
      env_int("SHM_STREAM_OUT_THRESHOLD", static_cast<long long>(o.stream_out_threshold)));
  o.ring_threshold = static_cast<size_t>(
      env_int("SHM_RING_THRESHOLD", static_cast<long long>(o.ring_threshold)));
  o.chunk_bytes = std::max<size_t>(o.chunk_bytes, 4096);
  o.slots = std::max(o.slots, 2);
  return o;
}

static size_t piece_bytes_for(const ShmOptions& o, int ranks) {
  // 64-byte pieces keep every piece of every dtype on its own cache lines.
  return std::max<size_t>(64, (o.chunk_bytes / ranks) & ~size_t(63));
}

size_t ShmCollectives::window_bytes(const ShmOptions& o, int ranks) {
  return piece_bytes_for(o, ranks) * ranks * o.slots;
}

ShmCollectives::ShmCollectives(std::unique_ptr<ShmWindow> w, const ShmOptions& o)
    : win_(std::move(w)), opts_(o) {
  piece_bytes_ = piece_bytes_for(o, win_->size());
  slot_stride_ = piece_bytes_ * win_->size();
  if (window_bytes(o, win_->size()) > win_->bytes_per_rank())
    throw std::logic_error("shared-memory window smaller than the pipeline needs");
  own_.reserve(piece_bytes_ * o.slots);
  kill_at_step_ = static_cast<uint64_t>(env_int("SHM_TEST_KILL_AT_STEP", 0));
}

void ShmCollectives::allreduce(const Reducer& red, const void* in, void* out, size_t count,
                               DataType dt, ReduceOp op, double prescale, double postscale) {
  run(Pass::ALLREDUCE, &red, static_cast<const char*>(in), static_cast<char*>(out), count, dt, op,
      prescale, postscale);
}

void ShmCollectives::reduce_scatter(const Reducer& red, const void* in, void* out, size_t count,
                                    DataType dt, ReduceOp op, double prescale, double postscale) {
  run(Pass::REDUCE_SCATTER, &red, static_cast<const char*>(in), static_cast<char*>(out), count, dt,
      op, prescale, postscale);
}

void ShmCollectives::allgather(void* buf, size_t count, DataType dt) {
  run(Pass::ALLGATHER, nullptr, static_cast<const char*>(buf), static_cast<char*>(buf), count, dt,
      ReduceOp::SUM, 1.0, 1.0);
}

void ShmCollectives::run(Pass pass, const Reducer* red, const char* in, char* out, size_t count,
                         DataType dt, ReduceOp op, double prescale, double postscale) {
  ShmWindow& w = *win_;
  w.check_usable();
  const int n = w.size(), r = w.rank();
  const size_t es = dtype_size(dt);
  const size_t P = piece_bytes_ / es;
  const size_t steps = (block_count(count, n, 0) + P - 1) / P;  // block 0 is the largest
  if (steps == 0) return;
  const uint64_t K = static_cast<uint64_t>(opts_.slots);
  const bool stream_in = count * es >= opts_.stream_in_threshold;
  const bool stream_out = pass != Pass::REDUCE_SCATTER && count * es >= opts_.stream_out_threshold;

  // Piece c of block p: its element offset in the buffer and its length.
  auto piece = [&](size_t c, int p, size_t& off) {
    const size_t cnt = block_count(count, n, p), start = c * P;
    off = block_offset(count, n, p) + start;
    return start >= cnt ? size_t(0) : std::min(P, cnt - start);
  };
  auto slot = [&](int owner, uint64_t g, int p) {
    return w.data(owner) + ((g - 1) % K) * slot_stride_ + p * piece_bytes_;
  };
  auto own = [&](uint64_t g) { return own_.data() + ((g - 1) % K) * piece_bytes_; };
  auto all_reached = [&](int ctr, uint64_t v) {
    for (int p = 0; p < n; ++p)
      if (p != r && w.counter(p, ctr) < v) return false;
    return true;
  };

  auto copy_in = [&](size_t c, uint64_t g) {
    for (int p = 0; p < n; ++p) {
      if (pass == Pass::ALLGATHER && p != r) continue;
      size_t off, len = piece(c, p, off);
      if (!len) continue;
      // Our own piece stays private (and in cache) until it is reduced.
      const bool mine = p == r && pass != Pass::ALLGATHER;
      char* dst = mine ? own(g) : slot(r, g, p);
      copy_bytes(dst, in + off * es, len * es, stream_in && !mine);
      if (red) red->scale(dst, len, dt, prescale);
    }
    if (stream_in) copy_fence();  // streamed stores must land before IN is published
  };
  auto reduce = [&](size_t c, uint64_t g) {
    size_t off, len = piece(c, r, off);
    if (!len) return;
    char* dst = own(g);
    for (int k = 1; k < n; ++k) red->reduce(dst, slot((r + k) % n, g, r), len, dt, op);
    red->scale(dst, len, dt, postscale);
    if (pass == Pass::ALLREDUCE) {  // publish the result for the peers' OUT
      copy_bytes(slot(r, g, r), dst, len * es, stream_in);
      if (stream_in) copy_fence();
    }
  };
  auto copy_out = [&](size_t c, uint64_t g) {
    for (int p = 0; p < n; ++p) {
      if (pass == Pass::REDUCE_SCATTER ? p != r : (pass == Pass::ALLGATHER && p == r)) continue;
      size_t off, len = piece(c, p, off);
      const char* src = p == r && pass != Pass::ALLGATHER ? own(g) : slot(p, g, p);
      if (len) copy_bytes(out + off * es, src, len * es, stream_out);
    }
  };

  const uint64_t base = seq_;
  size_t ni = 0, nr = 0, no = 0;  // steps through IN, RED and OUT on this rank
  ShmWindow::Waiter waiter(w);
  try {
    while (no < steps) {
      bool progress = false;
      if (no < nr) {
        const uint64_t g = base + no + 1;
        if (pass == Pass::REDUCE_SCATTER || all_reached(kReduced, g)) {
          copy_out(no, g);
          w.publish(kDone, g);  // we no longer read anyone's slot of step g
          ++no, progress = true;
        }
      }
      if (nr < ni) {
        const uint64_t g = base + nr + 1;
        if (pass == Pass::ALLGATHER || all_reached(kIn, g)) {
          if (pass != Pass::ALLGATHER) reduce(nr, g);
          w.publish(kReduced, g);
          ++nr, progress = true;
        }
      }
      // IN reuses the slot of step g - K: everyone (this rank too) must be done with it.
      if (ni < steps && ni < no + K) {
        const uint64_t g = base + ni + 1;
        if (g <= K || all_reached(kDone, g - K)) {
          copy_in(ni, g);
          w.publish(kIn, g);
          if (g == kill_at_step_) raise(SIGKILL);
          ++ni, progress = true;
        }
      }
      if (progress) waiter.reset();
      else waiter.pause();
    }
  } catch (const std::exception& e) {
    w.abort(e.what());
    throw;
  }
  if (stream_out) copy_fence();
  seq_ += steps;
}

}  // namespace hvdl
