// Ring allreduce: the buffer is cut into N blocks. In the reduce-scatter phase, at
// step s each rank sends block (r - s) to its right neighbour and receives block
// (r - s - 1) from its left one, adding it into its own copy; after N-1 steps rank r
// holds the complete sum of block (r + 1). The allgather phase passes those finished
// blocks around the ring N-1 more times. Each rank sends 2(N-1)/N of the buffer in
// total, whatever N is, which is why the ring is bandwidth-optimal.
//
// Within a reduce-scatter step the block is cut into segments: the receive of segment
// k+1 is posted before segment k is reduced, so the adds overlap the transfer.
// Every block is reduced on exactly one rank and then copied, so all ranks end with
// bitwise identical results.
#include "ring_allreduce.h"

#include "../common/env.h"
#include "partition.h"

namespace hvdl {

size_t ring_segment_bytes() {
  static const size_t v = static_cast<size_t>(env_int("RING_SEGMENT_BYTES", 1 << 20));
  return v < 64 ? 64 : v;
}

void ring_allreduce(Transport& t, const Reducer& red, void* buf, size_t count, DataType dt,
                    ReduceOp op, double postscale, Buffer& scratch) {
  const int n = t.size(), r = t.rank();
  const size_t es = dtype_size(dt);
  char* base = static_cast<char*>(buf);
  if (n == 1 || count == 0) {
    red.scale(buf, count, dt, postscale);
    return;
  }
  const int right = (r + 1) % n, left = (r - 1 + n) % n;
  auto blk = [&](int i) { return ((i % n) + n) % n; };
  const size_t seg = std::max<size_t>(1, ring_segment_bytes() / es);
  char* slots = scratch.reserve(2 * seg * es);

  for (int s = 0; s < n - 1; ++s) {
    const int sb = blk(r - s), rb = blk(r - s - 1);
    char* sptr = base + block_offset(count, n, sb) * es;
    char* rptr = base + block_offset(count, n, rb) * es;
    const size_t scount = block_count(count, n, sb), rcount = block_count(count, n, rb);
    // Both neighbours cut their blocks into the same segments, so segment k of what
    // we send lines up with segment k of what the left neighbour sends us.
    const size_t nseg = std::max((scount + seg - 1) / seg, (rcount + seg - 1) / seg);
    auto seg_len = [&](size_t total, size_t k) {
      size_t off = k * seg;
      return off >= total ? size_t(0) : std::min(seg, total - off);
    };
    std::vector<Transport::Op> recvs(nseg);
    auto post = [&](size_t k) {
      recvs[k] = t.irecv(left, slots + (k % 2) * seg * es, seg_len(rcount, k) * es);
      t.isend(right, sptr + k * seg * es, seg_len(scount, k) * es);
    };
    if (nseg > 0) post(0);
    for (size_t k = 0; k < nseg; ++k) {
      if (k + 1 < nseg) post(k + 1);
      t.wait(recvs[k]);
      red.reduce(rptr + k * seg * es, slots + (k % 2) * seg * es, seg_len(rcount, k), dt, op);
    }
    t.wait_all();
  }

  const int own = blk(r + 1);
  red.scale(base + block_offset(count, n, own) * es, block_count(count, n, own), dt, postscale);

  for (int s = 0; s < n - 1; ++s) {
    const int sb = blk(r + 1 - s), rb = blk(r - s);
    t.sendrecv(right, base + block_offset(count, n, sb) * es, block_count(count, n, sb) * es,
               left, base + block_offset(count, n, rb) * es, block_count(count, n, rb) * es);
    t.wait_all();
  }
}

}  // namespace hvdl
