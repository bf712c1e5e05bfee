// Broadcast, chosen by size.
//
// Small messages are latency-bound: a binomial tree reaches N ranks in ceil(log2 N)
// hops (each rank that has the data sends it on to one new rank per round).
//
// Large messages are bandwidth-bound, and there the tree is poor: the root sends the
// whole message log2 N times. The pipelined chain (root -> r+1 -> r+2 ...) sends it
// once per link; the message is cut into segments, and a rank forwards segment k
// while it receives k+1, so the time is about (S + (N-2)*segment)/bandwidth.
// Scatter + ring allgather (van de Geijn) would make each rank send 2(N-1)/N * S,
// close to twice what the chain needs when ranks share one memory system, as here,
// where every transfer is a copy through the same memory bandwidth. So: tree below
// the threshold, chain above it. With two ranks both are a single transfer.
#include "broadcast.h"

#include <algorithm>
#include <vector>


namespace hvdl {

void binomial_tree_broadcast(Transport& t, void* buf, size_t bytes, int root) {
  const int n = t.size();
  const int vr = (t.rank() - root + n) % n;  // rank relative to the root
  int mask = 1;
  // Receive once, from the rank that differs from us in our lowest set bit.
  while (mask < n) {
    if (vr & mask) {
      t.wait(t.irecv((vr - mask + root) % n, buf, bytes));
      break;
    }
    mask <<= 1;
  }
  // Then send to the ranks below that bit, largest subtree first.
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (vr + mask < n) t.isend((vr + mask + root) % n, buf, bytes);
  t.wait_all();
}

void chain_broadcast(Transport& t, void* buf, size_t bytes, int root, size_t segment) {
  const int n = t.size();
  if (n == 1) return;
  const int vr = (t.rank() - root + n) % n;
  const int next = vr + 1 < n ? (t.rank() + 1) % n : -1;
  const int prev = (t.rank() - 1 + n) % n;
  char* p = static_cast<char*>(buf);
  const size_t nseg = std::max<size_t>(1, (bytes + segment - 1) / segment);
  auto len = [&](size_t k) { return std::min(segment, bytes - std::min(bytes, k * segment)); };
  if (vr == 0) {
    for (size_t k = 0; k < nseg; ++k) t.isend(next, p + k * segment, len(k));
    t.wait_all();
    return;
  }
  std::vector<Transport::Op> recvs(nseg);
  for (size_t k = 0; k < nseg; ++k) recvs[k] = t.irecv(prev, p + k * segment, len(k));
  for (size_t k = 0; k < nseg; ++k) {
    t.wait(recvs[k]);
    if (next >= 0) t.isend(next, p + k * segment, len(k));
  }
  t.wait_all();
}

void broadcast_bytes(Transport& t, void* buf, size_t bytes, int root,
                     const BroadcastOptions& opts) {
  const int n = t.size();
  if (n == 1) return;
  const size_t segment = std::max<size_t>(4096, opts.chain_segment_bytes);
  if (n == 2 || bytes < opts.chain_from_bytes)
    binomial_tree_broadcast(t, buf, bytes, root);
  else
    chain_broadcast(t, buf, bytes, root, segment);
}

}  // namespace hvdl
