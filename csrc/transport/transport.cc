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

namespace {

// Every peer's length first, then the messages: peers[i] gets mine(i) of bytes(i) bytes.
template <class Mine, class Bytes>
void exchange_by_lengths(Transport& t, const std::vector<int>& peers, Mine mine, Bytes bytes,
                         void* theirs, size_t stride, size_t* lens) {
  std::vector<uint64_t> got(peers.size()), mine_len(peers.size());
  for (size_t i = 0; i < peers.size(); ++i) {
    mine_len[i] = bytes(i);
    t.irecv(peers[i], &got[i], sizeof got[i]);
    t.isend(peers[i], &mine_len[i], sizeof mine_len[i]);
  }
  t.wait_all();
  for (size_t i = 0; i < peers.size(); ++i) {
    const int p = peers[i];
    if (got[i] > stride)
      throw std::runtime_error("exchange_with: rank " + std::to_string(p) + " sends " +
                               std::to_string(got[i]) + " bytes, more than the " +
                               std::to_string(stride) + " expected");
    lens[p] = static_cast<size_t>(got[i]);
    t.irecv(p, static_cast<char*>(theirs) + p * stride, lens[p]);
    t.isend(p, mine(i), bytes(i));
  }
  t.wait_all();
}

}  // namespace

void Transport::exchange_with(const std::vector<int>& peers, const void* mine, size_t bytes,
                              void* theirs, size_t stride, size_t* lens) {
  exchange_by_lengths(
      *this, peers, [mine](size_t) { return mine; }, [bytes](size_t) { return bytes; }, theirs,
      stride, lens);
}

void Transport::exchange_each(const std::vector<int>& peers, const void* const* mine,
                              const size_t* bytes, void* theirs, size_t stride, size_t* lens) {
  exchange_by_lengths(
      *this, peers, [mine](size_t i) { return mine[i]; }, [bytes](size_t i) { return bytes[i]; },
      theirs, stride, lens);
}

}  // namespace hvdl
