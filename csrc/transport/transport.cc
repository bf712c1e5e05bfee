// What every transport can do with its own primitives (transport.h).
#include "transport.h"

#include <cstring>

namespace hvdl {

size_t Transport::exchange_pair(const void* mine, size_t bytes, void* theirs, size_t max_bytes) {
  if (size() != 2) throw std::logic_error("exchange_pair: the group has " + std::to_string(size()) +
                                          " ranks, not 2");
  // Rank 0 gathers both messages and broadcasts them, lengths first.
  auto all = gather(std::string(static_cast<const char*>(mine), bytes), 0);
  std::string both;
  if (rank() == 0) {
    const uint64_t len0 = all[0].size();
    both.assign(reinterpret_cast<const char*>(&len0), sizeof len0);
    both += all[0] + all[1];
  }
  broadcast(both, 0);
  uint64_t len0 = 0;
  if (both.size() < sizeof len0) throw std::runtime_error("exchange_pair: truncated message");
  std::memcpy(&len0, both.data(), sizeof len0);
  const size_t off = sizeof len0 + (rank() == 0 ? len0 : 0);
  const size_t len = rank() == 0 ? both.size() - off : len0;
  if (len > max_bytes)
    throw std::runtime_error("exchange_pair: the peer sent " + std::to_string(len) +
                             " bytes, more than the " + std::to_string(max_bytes) + " expected");
  std::memcpy(theirs, both.data() + off, len);
  return len;
}

}  // namespace hvdl
