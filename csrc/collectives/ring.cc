// Reduce-scatter: at step s rank r sends block (r+shift-1-s) to its right neighbour
// and receives block (r+shift-2-s) from its left one, combining it with its own
// contribution. A block starts at one rank and gains one contribution per hop, so
// after N-1 steps rank r holds the complete reduction of block (r+shift). Every
// block is reduced on exactly one rank, in the same order whatever the data, so the
// result is deterministic; each rank sends (N-1)/N of the buffer.
//
// Within a step the block is cut into segments and the receive of segment k+1 is
// posted before segment k is reduced, so the adds overlap the transfer.
#include "ring.h"

#include <algorithm>
#include <cstring>

#include "partition.h"

namespace hvdl {

RingBlocks RingBlocks::even(size_t total, int parts) {
  RingBlocks b;
  for (int i = 0; i < parts; ++i) {
    b.offset.push_back(block_offset(total, parts, i));
    b.count.push_back(block_count(total, parts, i));
  }
  return b;
}

RingBlocks RingBlocks::of_sizes(const std::vector<size_t>& sizes) {
  RingBlocks b;
  size_t off = 0;
  for (size_t s : sizes) {
    b.offset.push_back(off);
    b.count.push_back(s);
    off += s;
  }
  return b;
}

namespace {
inline int wrap(int i, int n) { return ((i % n) + n) % n; }
}  // namespace

void ring_reduce_scatter(Transport& t, const Reducer& red, const void* src, void* dst,
                         const RingBlocks& blocks, DataType dt, ReduceOp op, int shift,
                         Buffer& scratch, size_t segment_bytes, void* own) {
  const int n = t.size(), r = t.rank();
  const size_t es = dtype_size(dt);
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  const bool in_place = in == out;
  if (n == 1) {
    char* to = own && !in_place ? static_cast<char*>(own) : out + blocks.offset[0] * es;
    if (to != in + blocks.offset[0] * es && blocks.count[0])
      std::memcpy(to, in + blocks.offset[0] * es, blocks.count[0] * es);
    return;
  }
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  const size_t seg = std::max<size_t>(1, (segment_bytes ? segment_bytes : kDefaultRingSegmentBytes) / es);
  char* slots = in_place ? scratch.reserve(2 * seg * es) : nullptr;
  auto seg_len = [&](size_t total, size_t k) {
    size_t off = k * seg;
    return off >= total ? size_t(0) : std::min(seg, total - off);
  };
  std::vector<Transport::Op> recvs;

  for (int s = 0; s < n - 1; ++s) {
    const int sb = wrap(r + shift - 1 - s, n), rb = wrap(r + shift - 2 - s, n);
    // The first block sent is still this rank's own contribution; later ones are
    // partial results built in the step before.
    const char* sptr = (s == 0 ? in : out) + blocks.offset[sb] * es;
    const char* mine = in + blocks.offset[rb] * es;
    // The last step's block is the finished one.
    char* rptr = own && !in_place && s == n - 2 ? static_cast<char*>(own)
                                                 : out + blocks.offset[rb] * es;
    const size_t scount = blocks.count[sb], rcount = blocks.count[rb];
    // The number of messages of a transfer follows from the block it carries alone,
    // so sender and receiver always agree on it (also when a block is empty, which
    // happens when there are fewer elements than ranks: then nothing is posted).
    const size_t ns = (scount + seg - 1) / seg, nr = (rcount + seg - 1) / seg;
    const size_t steps = std::max(ns, nr);
    recvs.assign(nr, 0);
    auto post = [&](size_t k) {
      if (k < nr) {
        char* into = in_place ? slots + (k % 2) * seg * es : rptr + k * seg * es;
        recvs[k] = t.irecv(left, into, seg_len(rcount, k) * es);
      }
      if (k < ns) t.isend(right, sptr + k * seg * es, seg_len(scount, k) * es);
    };
    if (steps > 0) post(0);
    for (size_t k = 0; k < steps; ++k) {
      if (k + 1 < steps) post(k + 1);
      if (k >= nr) continue;
      t.wait(recvs[k]);
      const size_t len = seg_len(rcount, k);
      if (in_place)
        red.reduce(rptr + k * seg * es, slots + (k % 2) * seg * es, len, dt, op);
      else  // received partial (in dst) combined with our own input
        red.reduce(rptr + k * seg * es, mine + k * seg * es, len, dt, op);
    }
    t.wait_all();
  }
}

void ring_allgather(Transport& t, void* buf, const RingBlocks& bytes, int shift,
                    const void* own_src) {
  const int n = t.size(), r = t.rank();
  char* base = static_cast<char*>(buf);
  const int own = wrap(r + shift, n);
  auto copy_own = [&] {
    if (own_src && bytes.count[own]) std::memcpy(base + bytes.offset[own], own_src, bytes.count[own]);
  };
  if (n == 1) {
    copy_own();
    return;
  }
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  for (int s = 0; s < n - 1; ++s) {
    const int sb = wrap(r + shift - s, n), rb = wrap(r + shift - s - 1, n);
    const char* from = s == 0 && own_src ? static_cast<const char*>(own_src) : base + bytes.offset[sb];
    Transport::Op recv = t.irecv(left, base + bytes.offset[rb], bytes.count[rb]);
    t.isend(right, from, bytes.count[sb]);
    if (s == 0) copy_own();  // overlaps the transfer: single-copy transports let the peer read meanwhile
    t.wait(recv);
    t.wait_all();
  }
}

}  // namespace hvdl
