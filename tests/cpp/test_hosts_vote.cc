// The negotiation vote through the hosts' leaders (engine/hosts_vote.h), ranks as
// threads over a grid of topologies: after every exchange each rank reads every
// rank's message, byte for byte and at its length, over many rounds of changing
// lengths (the shared-memory buffers alternate between rounds, and a leader's
// assembled message is read in place). Where the topology gains nothing (one host,
// one rank per host) no rank makes one. Riders that every rank sends fold on their way
// (each host's in rank order, then the hosts' by host id) to the bits the test folds
// itself, and every message keeps its length and every byte beside its rider.
#include <cstring>
#include <map>
#include <numeric>

#include "engine/hosts_vote.h"
#include "harness.h"

namespace hvdl {
namespace {

constexpr size_t kCapacity = 1000;

char byte_of(int rank, int round, size_t i) { return static_cast<char>(rank * 131 + round * 7 + i); }
size_t length_of(int rank, int round) { return (rank * 37 + round * 211) % (kCapacity + 1); }

// Every rank's transport over all the ranks of `hosts` (hosts[r]: rank r's host), with
// the world they live in.
struct Ranks {
  std::shared_ptr<test::ThreadWorldState> world;
  std::vector<std::unique_ptr<Transport>> ts;
};
Ranks ranks_on(const std::vector<int>& hosts) {
  const int n = static_cast<int>(hosts.size());
  Ranks k{test::ThreadWorldState::make(n, hosts), std::vector<std::unique_ptr<Transport>>(n)};
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  test::spawn(n, [&](int r) { k.ts[r] = k.world->world(r)->create_group(all); });
  return k;
}

void check_topology(const std::vector<int>& hosts, bool expected) {
  const int n = static_cast<int>(hosts.size());
  Ranks ranks = ranks_on(hosts);
  auto& ts = ranks.ts;
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

// A message of the fold test: [tag][rider bytes][rider: floats][tail].
constexpr size_t kHead = 2 * sizeof(uint64_t);
RiderSpan find_test_rider(const char* msg, size_t len) {
  uint64_t w[2];
  if (len < kHead) return {};
  std::memcpy(w, msg, sizeof w);
  return {w[0], kHead, static_cast<size_t>(w[1])};
}
float value_of(int rank, int round, size_t i) {
  return static_cast<float>((rank * 7 + round * 3 + i) % 29) * 0.37f + 1e-3f * rank;
}

// Round kinds: 0, every rank sends the same rider (it folds); 1, rank 0's host sends
// none; 2, the last rank sends another tag (its host, if it has several ranks, cannot
// fold); 3, no rank sends one. In 1 and 2 the other hosts fold theirs and cut them
// out, but nothing is folded for all: the riders are not intact.
void check_folds(const std::vector<int>& hosts) {
  const int n = static_cast<int>(hosts.size());
  Ranks ranks = ranks_on(hosts);
  auto& ts = ranks.ts;
  std::map<int, std::vector<int>> by_host;
  for (int i = 0; i < n; ++i) by_host[hosts[i]].push_back(i);
  test::spawn(n, [&](int r) {
    auto v = HostsVote::create(*ts[r], hosts, kCapacity);
    CHECK(v != nullptr);
    if (!v) return;
    int wrong = 0, folded = 0;
    for (int round = 0; round < 40; ++round) {
      const int kind = round % 4;
      const size_t count = 1 + (round * 13) % 200, tail = (round * 5 + r) % 40;
      auto tag_of = [&](int p) -> uint64_t {
        if (kind == 3 || (kind == 1 && hosts[p] == hosts[0])) return 0;
        return kind == 2 && p == n - 1 ? 8 : 7;
      };
      auto bytes_of = [&](int p) { return tag_of(p) ? count * sizeof(float) : 0; };
      auto message_of = [&](int p) {
        std::vector<char> m(kHead + bytes_of(p) + (round * 5 + p) % 40);
        const uint64_t w[2] = {tag_of(p), bytes_of(p)};
        std::memcpy(m.data(), w, sizeof w);
        for (size_t i = 0; i < bytes_of(p) / sizeof(float); ++i) {
          const float x = value_of(p, round, i);
          std::memcpy(m.data() + kHead + i * sizeof x, &x, sizeof x);
        }
        for (size_t i = kHead + bytes_of(p); i < m.size(); ++i) m[i] = byte_of(p, round, i);
        return m;
      };
      const std::vector<char> mine = message_of(r);
      CHECK(mine.size() == kHead + bytes_of(r) + tail);
      std::memcpy(v->outbox(), mine.data(), mine.size());
      RiderFold f;
      f.find = &find_test_rider;
      f.tag = tag_of(r);
      f.dt = DataType::FLOAT32;
      f.op = ReduceOp::SUM;
      v->fold_riders(&f);
      v->exchange(mine.size());
      // Every message at its length, every byte but a rider's as sent.
      for (int p = 0; p < n; ++p) {
        const std::vector<char> want = message_of(p);
        if (v->length(p) != want.size()) {
          ++wrong;
          continue;
        }
        const char* in = v->inbox(p);
        if (std::memcmp(in, want.data(), kHead) != 0 ||
            std::memcmp(in + kHead + bytes_of(p), want.data() + kHead + bytes_of(p),
                        want.size() - kHead - bytes_of(p)) != 0)
          ++wrong;
      }
      const auto* got = static_cast<const float*>(v->folded_riders());
      if (kind != 0) {
        CHECK(got == nullptr, "n=%d rank %d round %d: folded riders that differ", n, r, round);
        CHECK(v->riders_intact() == (kind == 3), "n=%d rank %d round %d: intact %d", n, r, round,
              v->riders_intact());
        continue;
      }
      CHECK(got != nullptr, "n=%d rank %d round %d: no fold", n, r, round);
      if (!got) continue;
      ++folded;
      for (size_t i = 0; i < count; ++i) {
        float total = 0;
        bool first_host = true;
        for (auto& kv : by_host) {
          float part = value_of(kv.second[0], round, i);
          for (size_t k = 1; k < kv.second.size(); ++k) part = part + value_of(kv.second[k], round, i);
          total = first_host ? part : total + part;
          first_host = false;
        }
        if (std::memcmp(&total, got + i, sizeof total) != 0) {
          ++wrong;
          break;
        }
      }
    }
    CHECK(wrong == 0, "n=%d rank %d: %d messages or folds wrong", n, r, wrong);
    CHECK(folded == 10, "n=%d rank %d: %d rounds folded", n, r, folded);
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
  check_folds({0, 0, 1, 1});
  check_folds({0, 0, 1});
  check_folds({0, 1, 1, 2, 2, 2});
  check_folds({1, 0, 1, 0});
  return test::finish("hosts_vote");
}
