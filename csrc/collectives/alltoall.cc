// Alltoall by pairwise exchange: in step s rank r sends to r+s and receives from r-s,
// so every rank has exactly one transfer in and one out at a time and no rank is
// flooded by N-1 senders at once. The step's exchange with the next peers is posted
// before waiting on the current one, so consecutive steps overlap a little without
// ever having more than two transfers per direction in flight.
#include "alltoall.h"

#include <cstring>

namespace hvdl {

void alltoallv(Transport& t, const void* src, const std::vector<size_t>& send_off,
               const std::vector<size_t>& send_bytes, void* dst,
               const std::vector<size_t>& recv_off, const std::vector<size_t>& recv_bytes) {
  const int n = t.size(), r = t.rank();
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
  auto copy_self = [&] {
    if (recv_bytes[r]) std::memcpy(out + recv_off[r], in + send_off[r], recv_bytes[r]);
  };
  if (n == 1) {
    copy_self();
    return;
  }
  std::vector<Transport::Op> recvs(n), sends(n);
  auto post = [&](int s) {
    const int to = (r + s) % n, from = (r - s + n) % n;
    recvs[s] = t.irecv(from, out + recv_off[from], recv_bytes[from]);
    sends[s] = t.isend(to, in + send_off[to], send_bytes[to]);
  };
  post(1);
  copy_self();  // while the first exchange is in flight
  for (int s = 1; s < n; ++s) {
    if (s + 1 < n) post(s + 1);
    t.wait(recvs[s]);
    t.wait(sends[s]);
  }
  t.wait_all();
}

}  // namespace hvdl
