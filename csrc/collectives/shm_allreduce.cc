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
// Writing the slots with ordinary stores is cheapest where the ranks share a cache
// (the peers read them straight from it). Where they do not, every step writes lines
// that the peers read the step before, and each such store must first take the line
// back from them: on a VM whose two vCPUs sat on different core complexes that took
// 28 ms of a 64 MiB allreduce against 4 ms for the copy alone. Non-temporal stores
// invalidate without waiting for the line, and the peers read from memory instead.
// Which case holds can change while a job runs, so the caller picks (path_tuner.h).
//
// A rank's own piece of each step never goes through the window raw: it is reduced
// where it lies (in the output), and only the result is published.
//
// Every piece is reduced by exactly one rank and copied by the others, so results
// are bitwise identical everywhere. Reduce-scatter stops after RED; allgather skips
// RED. Hierarchical allreduce uses those two.
#include "shm_allreduce.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "../reduce/copy.h"
#include "../transport/peer_health.h"
#include "partition.h"

namespace hvdl {

void combine_in_window_blocks(const Reducer& red, int rank, int n, const void* in,
                              const void* const* theirs, void* scratch, void* out,
                              size_t count, DataType dt, ReduceOp op, double postscale) {
  const size_t es = dtype_size(dt);
  auto input = [&](int p, size_t off) {
    return static_cast<const char*>(p == rank ? in : theirs[p]) + off * es;
  };
  for (int b = 0; b < n; ++b) {
    const size_t off = block_offset(count, n, b), len = block_count(count, n, b);
    if (!len) continue;
    char* dst = static_cast<char*>(out) + off * es;
    // In place, `in`'s block b is read by the fold below: fold elsewhere unless it
    // is the start (b == rank).
    char* acc = in == out && b != rank ? static_cast<char*>(scratch) : dst;
    // The first fold reads block b's start where it lies (no copy into acc first).
    if (n > 1) red.reduce_pair(acc, input(b, off), input((b + 1) % n, off), len, dt, op);
    else if (acc != input(b, off)) std::memcpy(acc, input(b, off), len * es);
    for (int q = 2; q < n; ++q) red.reduce(acc, input((b + q) % n, off), len, dt, op);
    red.scale(acc, len, dt, postscale);
    if (acc != dst) std::memcpy(dst, acc, len * es);
  }
}

static size_t piece_bytes_for(const ShmOptions& o, int ranks) {
  // 64-byte pieces keep every piece of every dtype on its own cache lines.
  return std::max<size_t>(64, (o.chunk_bytes / ranks) & ~size_t(63));
}

size_t ShmCollectives::window_bytes(const ShmOptions& o, int ranks) {
  return piece_bytes_for(o, ranks) * ranks * o.slots + kDescriptorBytes;
}

ShmCollectives::ShmCollectives(std::unique_ptr<ShmWindow> w, const ShmOptions& o,
                               std::unique_ptr<PeerArenas> arenas)
    : win_(std::move(w)), arenas_(std::move(arenas)), opts_(o) {
  piece_bytes_ = piece_bytes_for(o, win_->size());
  slot_stride_ = piece_bytes_ * win_->size();
  if (window_bytes(o, win_->size()) > win_->bytes_per_rank())
    throw std::logic_error("shared-memory window smaller than the pipeline needs");
}

void ShmCollectives::allreduce(const Reducer& red, const std::vector<Span>& spans, DataType dt,
                               ReduceOp op, double prescale, double postscale, bool stream) {
  run(Pass::ALLREDUCE, &red, spans, dt, op, prescale, postscale, stream);
}

void ShmCollectives::reduce_scatter(const Reducer& red, const void* in, void* out, size_t count,
                                    DataType dt, ReduceOp op, double prescale, double postscale,
                                    bool stream) {
  run(Pass::REDUCE_SCATTER, &red, {{in, out, count}}, dt, op, prescale, postscale, stream);
}

void ShmCollectives::allgather(void* buf, size_t count, DataType dt, bool stream) {
  run(Pass::ALLGATHER, nullptr, {{buf, buf, count}}, dt, ReduceOp::SUM, 1.0, 1.0, stream);
}

void ShmCollectives::abandon(const std::exception& e) {
  win_->abort(e.what(), dynamic_cast<const PeerFailure*>(&e) != nullptr);
}

void ShmCollectives::announce(uint64_t call, int value) {
  win_->publish(kAnnounce, call * 8 + static_cast<uint64_t>(value));
}

int ShmCollectives::await_announcement(uint64_t call) {
  ShmWindow& w = *win_;
  w.check_usable();
  ShmWindow::Waiter waiter(w);
  try {
    for (;;) {
      const uint64_t v = w.counter(0, kAnnounce);
      if (v / 8 == call) return static_cast<int>(v % 8);
      if (v / 8 > call) throw std::logic_error("shared-memory collectives out of step");
      waiter.pause();
    }
  } catch (const std::exception& e) {
    abandon(e);
    throw;
  }
}

void ShmCollectives::run(Pass pass, const Reducer* red, const std::vector<Span>& spans,
                         DataType dt, ReduceOp op, double prescale, double postscale,
                         bool stream_in) {
  ShmWindow& w = *win_;
  w.check_usable();
  const int n = w.size(), r = w.rank();
  const size_t es = dtype_size(dt);
  const SpanMap map(spans);
  const size_t count = map.count();
  auto each_part = [&](size_t off, size_t len, auto&& fn) {  // fn(span, offset in it, n, done)
    map.each_part(spans, off, len, [&](size_t i, size_t at, size_t k, size_t done) {
      fn(spans[i], at, k, done);
    });
  };
  const size_t P = piece_bytes_ / es;
  const size_t steps = (block_count(count, n, 0) + P - 1) / P;  // block 0 is the largest
  if (steps == 0) return;
  const uint64_t K = static_cast<uint64_t>(opts_.slots);
  const size_t bytes = count * es;
  // Non-temporal mode streams the final output too, from its threshold on: it will
  // not be read again soon. Where the ranks share a cache, neither pays.
  const bool stream_out =
      stream_in && pass != Pass::REDUCE_SCATTER && bytes >= opts_.stream_out_threshold;

  // Piece c of block p: its element offset in the buffer and its length.
  auto piece = [&](size_t c, int p, size_t& off) {
    const size_t cnt = block_count(count, n, p), start = c * P;
    off = block_offset(count, n, p) + start;
    return start >= cnt ? size_t(0) : std::min(P, cnt - start);
  };
  auto slot = [&](int owner, uint64_t g, int p) {
    return w.data(owner) + ((g - 1) % K) * slot_stride_ + p * piece_bytes_;
  };
  auto all_reached = [&](int ctr, uint64_t v) {
    for (int p = 0; p < n; ++p)
      if (p != r && w.counter(p, ctr) < v) return false;
    return true;
  };

  auto copy_in = [&](size_t c, uint64_t g) {
    for (int p = 0; p < n; ++p) {
      // Our own piece stays where it is until it is reduced (see RED).
      if (pass == Pass::ALLGATHER ? p != r : p == r) continue;
      size_t off, len = piece(c, p, off);
      if (!len) continue;
      char* dst = slot(r, g, p);
      each_part(off, len, [&](const Span& s, size_t at, size_t k, size_t done) {
        copy_bytes(dst + done * es, static_cast<const char*>(s.in) + at * es, k * es, stream_in);
      });
      if (red) red->scale(dst, len, dt, prescale);
    }
    if (stream_in) copy_fence();  // streamed stores must land before IN is published
  };
  // Reduces straight into the output: the input lines were just read, so the sum is
  // written where they already sit in the cache, and only the result is published.
  auto reduce = [&](size_t c, uint64_t g) {
    size_t off, len = piece(c, r, off);
    char* pub = slot(r, g, r);
    // In sub-blocks that stay in L1 from the reduction to the copy that publishes them.
    const size_t B = std::max<size_t>(1, (16u << 10) / es);
    each_part(off, len, [&](const Span& s, size_t at, size_t k, size_t done) {
      for (size_t i = 0; i < k; i += B) {
        const size_t m = std::min(B, k - i);
        char* dst = static_cast<char*>(s.out) + (at + i) * es;
        const char* own = static_cast<const char*>(s.in) + (at + i) * es;
        int q = 1;
        if (prescale != 1.0 || n == 1) {
          if (own != dst) copy_bytes(dst, own, m * es, false);
          red->scale(dst, m, dt, prescale);
        } else {
          // Out of place, the first fold reads the input where it lies: no copy first.
          red->reduce_pair(dst, own, slot((r + 1) % n, g, r) + (done + i) * es, m, dt, op);
          q = 2;
        }
        for (; q < n; ++q)
          red->reduce(dst, slot((r + q) % n, g, r) + (done + i) * es, m, dt, op);
        red->scale(dst, m, dt, postscale);
        if (pass == Pass::ALLREDUCE) copy_bytes(pub + (done + i) * es, dst, m * es, stream_in);
      }
    });
    if (pass == Pass::ALLREDUCE && stream_in) copy_fence();
  };
  auto copy_out = [&](size_t c, uint64_t g) {
    if (pass == Pass::REDUCE_SCATTER) return;  // RED wrote our block, the only one wanted
    for (int p = 0; p < n; ++p) {
      if (p == r) continue;
      size_t off, len = piece(c, p, off);
      const char* src = slot(p, g, p);
      each_part(off, len, [&](const Span& s, size_t at, size_t k, size_t done) {
        copy_bytes(static_cast<char*>(s.out) + at * es, src + done * es, k * es, stream_out);
      });
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
          if (step_hook_) step_hook_(g);
          ++ni, progress = true;
        }
      }
      if (progress) waiter.reset();
      else waiter.pause();
    }
  } catch (const std::exception& e) {
    abandon(e);
    throw;
  }
  if (stream_out) copy_fence();
  seq_ += steps;
}

}  // namespace hvdl
