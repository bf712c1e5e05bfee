// Allreduce of tensors that every rank of the host allocated in its shared arena
// (shared_arena.h): rank r reduces block r of the batch (partition.h) straight from
// every rank's input and writes the result straight into every rank's output.
//
// The staged pipeline (shm_allreduce.cc) moves each byte through a staging slot
// twice, and on a VM whose two vCPUs share one L3 those slot lines, written by one
// core and read by the other, cost a third of its time: a ResNet-50 batch took
// 1.45x as long as every rank adding its 102 MB in place. Here each input line is
// read once from memory and each output line written once, the least any in-place
// allreduce can do; a prototype of this loop ran in 1.0x that time.
//
// Block r is touched by rank r only, in every rank's tensors, so no rank reads what
// another writes, and the reduction order (own first, then r+1, r+2, ...) is the
// staged pipeline's: results are bitwise identical on every rank and to that path.
// Two exchanges through the window bound it: the span offsets (which also say every
// rank has its inputs ready) and "done" (every output is complete).
#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <vector>

#include "../reduce/copy.h"
#include "partition.h"
#include "shm_allreduce.h"

namespace hvdl {
namespace {
std::atomic<uint64_t> g_zero_copy{0};  // process-wide: a test counter, read without an engine
}  // namespace

uint64_t ShmCollectives::zero_copy_count() { return g_zero_copy.load(); }

bool ShmCollectives::zero_copy_allreduce(const Reducer& red, const std::vector<Span>& spans,
                                         DataType dt, ReduceOp op, double prescale,
                                         double postscale) {
  if (!arenas_) return false;  // the same on every rank: PeerArenas::map agreed
  ShmWindow& w = *win_;
  w.check_usable();
  const int n = w.size(), r = w.rank();
  const size_t es = dtype_size(dt);
  const uint64_t call = ++zero_copy_calls_;

  // [call][all in the arena][(input offset, output offset) per span]
  uint64_t* mine = descriptor(r);
  const size_t fits = kDescriptorBytes / sizeof(uint64_t) - 2;
  bool eligible = spans.size() * 2 <= fits;
  for (size_t i = 0; eligible && i < spans.size(); ++i) {
    const int64_t in = arenas_->offset_of(r, spans[i].in, spans[i].count * es);
    const int64_t out = arenas_->offset_of(r, spans[i].out, spans[i].count * es);
    eligible = in >= 0 && out >= 0;
    mine[2 + 2 * i] = static_cast<uint64_t>(in);
    mine[3 + 2 * i] = static_cast<uint64_t>(out);
  }
  mine[0] = call;
  mine[1] = eligible ? 1 : 0;

  auto await_all = [&](int counter) {
    ShmWindow::Waiter waiter(w);
    for (int p = 0; p < n; ++p)
      while (p != r && w.counter(p, counter) < call) waiter.pause();
  };
  try {
    w.publish(kDescribed, call);
    // The others will read our "no" and fall back too; no need to wait for theirs.
    // (We cannot overwrite this descriptor before they have read it: the fallback
    // cannot finish without them, and they read it before starting theirs.)
    if (!eligible) return false;
    await_all(kDescribed);
    for (int p = 0; p < n; ++p)
      if (!descriptor(p)[1]) return false;  // every rank decides alike
    // A peer's descriptor stays put until it has seen our "written" below.
    auto in_of = [&](int p, size_t i, size_t at) -> const char* {
      if (p == r) return static_cast<const char*>(spans[i].in) + at * es;
      return arenas_->base(p) + descriptor(p)[2 + 2 * i] + at * es;
    };
    auto out_of = [&](int p, size_t i, size_t at) -> char* {
      if (p == r) return static_cast<char*>(spans[i].out) + at * es;
      return arenas_->base(p) + descriptor(p)[3 + 2 * i] + at * es;
    };

    const SpanMap map(spans);
    const size_t count = map.count(), off = block_offset(count, n, r), len = block_count(count, n, r);
    // Pieces that stay in L1 from the reduction to the copies out.
    const size_t B = std::max<size_t>(1, (16u << 10) / es);
    std::vector<char> scaled(prescale != 1.0 ? B * es : 0);
    map.each_part(spans, off, len, [&](size_t i, size_t at0, size_t k0, size_t) {
      for (size_t j = 0; j < k0; j += B) {
        const size_t m = std::min(B, k0 - j), at = at0 + j;
        char* dst = out_of(r, i, at);
        if (spans[i].in != spans[i].out) copy_bytes(dst, in_of(r, i, at), m * es, false);
        red.scale(dst, m, dt, prescale);
        for (int q = 1; q < n; ++q) {
          const char* src = in_of((r + q) % n, i, at);
          if (!scaled.empty()) {  // a peer's input is read-only to us
            copy_bytes(scaled.data(), src, m * es, false);
            red.scale(scaled.data(), m, dt, prescale);
            src = scaled.data();
          }
          red.reduce(dst, src, m, dt, op);
        }
        red.scale(dst, m, dt, postscale);
        for (int q = 1; q < n; ++q) copy_bytes(out_of((r + q) % n, i, at), dst, m * es, false);
      }
    });
    w.publish(kWritten, call);
    await_all(kWritten);
  } catch (const std::exception& e) {
    abandon(e);
    throw;
  }
  g_zero_copy.fetch_add(1);
  return true;
}

}  // namespace hvdl
