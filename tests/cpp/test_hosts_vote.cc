// The negotiation vote through the hosts' leaders (engine/hosts_vote.h), ranks as
// threads over a grid of topologies: after every exchange each rank reads every
// rank's message, byte for byte and at its length, over many rounds of changing
// lengths (the shared-memory buffers alternate between rounds, and a leader's
// assembled message is read in place). Where the topology gains nothing (one host,
// one rank per host) no rank makes one.
#include <numeric>

#include "engine/hosts_vote.h"
#include "harness.h"

namespace hvdl {
namespace {

constexpr size_t kCapacity = 1000;

char byte_of(int rank, int round, size_t i) { return static_cast<char>(rank * 131 + round * 7 + i); }
size_t length_of(int rank, int round) { return (rank * 37 + round * 211) % (kCapacity + 1); }

void check_topology(const std::vector<int>& hosts, bool expected) {
  const int n = static_cast<int>(hosts.size());
  auto world = test::ThreadWorldState::make(n, hosts);
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::unique_ptr<Transport>> ts(n);
  test::spawn(n, [&](int r) { ts[r] = world->world(r)->create_group(all); });
  test::spawn(n, [&](int r) {
    auto v = HostsVote::create(*ts[r], hosts, kCapacity);
    CHECK((v != nullptr) == expected, "n=%d rank %d: made %d", n, r, v != nullptr);
    if (!v) return;
    CHECK(v->capacity() >= kCapacity);
    int wrong = 0;
    for (int round = 0; round < 60; ++round) {
      const size_t len = length_of(r, round);
      char* out = v->outbox();
      for (size_t i = 0; i < len; ++i) out[i] = byte_of(r, round, i);
      v->exchange(len);
      for (int p = 0; p < n; ++p) {
        const size_t want = length_of(p, round);
        if (v->length(p) != want) {
          ++wrong;
          continue;
        }
        const char* in = v->inbox(p);
        for (size_t i = 0; i < want; ++i)
          if (in[i] != byte_of(p, round, i)) {
            ++wrong;
            break;
          }
      }
    }
    CHECK(wrong == 0, "n=%d rank %d: %d messages wrong", n, r, wrong);
  });
}

}  // namespace
}  // namespace hvdl

int main() {
  using namespace hvdl;
  check_topology({0, 0, 1, 1}, true);        // 2 hosts x 2
  check_topology({0, 0, 1}, true);           // a lone rank leads its own host
  check_topology({0, 1, 1, 2, 2, 2}, true);  // 3 hosts, uneven
  check_topology({1, 0, 1, 0}, true);        // interleaved: ranks 0 and 1 lead
  check_topology({0, 0, 0}, false);          // one host: the ShmVote alone serves
  check_topology({0, 1, 2}, false);          // one rank per host: nothing shared
  return test::finish("hosts_vote");
}
