#include "direct_allgather.h"

#include "partition.h"

namespace hvdl {

void direct_allgather(Transport& t, void* buf, size_t count, size_t elem_bytes) {
  const int rank = t.rank(), n = t.size();
  char* b = static_cast<char*>(buf);
  const ByteSpan own = block_span(count, n, rank, elem_bytes);
  for (int p = 0; p < n; ++p) {
    if (p == rank) continue;
    const ByteSpan theirs = block_span(count, n, p, elem_bytes);
    if (theirs.bytes) t.irecv(p, b + theirs.at, theirs.bytes);
    if (own.bytes) t.isend(p, b + own.at, own.bytes);
  }
  t.wait_all();
}

}  // namespace hvdl
