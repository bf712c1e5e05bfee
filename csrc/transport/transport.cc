// What every transport can do with its own primitives (transport.h).
#include "transport.h"

#include <cstring>

namespace hvdl {

void Transport::exchange_all(const void* mine, size_t bytes, void* theirs, size_t stride,
                             size_t* lens) {
  // Rank 0 gathers every message and broadcasts them all, their lengths first.
  auto all = gather(std::string(static_cast<const char*>(mine), bytes), 0);
  const int n = size();
  std::string msg;
  if (rank() == 0) {
    for (auto& part : all) {
      const uint64_t len = part.size();
      msg.append(reinterpret_cast<const char*>(&len), sizeof len);
    }
    for (auto& part : all) msg += part;
  }
  broadcast(msg, 0);
  size_t off = n * sizeof(uint64_t);
  if (msg.size() < off) throw std::runtime_error("exchange_all: truncated message");
  for (int p = 0; p < n; ++p) {
    uint64_t len = 0;
    std::memcpy(&len, msg.data() + p * sizeof len, sizeof len);
    if (off + len > msg.size()) throw std::runtime_error("exchange_all: truncated message");
    if (p != rank()) {
      if (len > stride)
        throw std::runtime_error("exchange_all: rank " + std::to_string(p) + " sent " +
                                 std::to_string(len) + " bytes, more than the " +
                                 std::to_string(stride) + " expected");
      std::memcpy(static_cast<char*>(theirs) + p * stride, msg.data() + off, len);
      lens[p] = len;
    }
    off += len;
  }
}

}  // namespace hvdl
