// PathTuner (csrc/collectives/path_tuner.h) against scripted costs:
//   g++ -O2 -std=c++17 -I csrc tests/cpp/test_path_tuner.cc -o /tmp/test_path_tuner
// 1. it tries every option during warm-up, then settles on the cheapest;
// 2. after settling it keeps looking at the losers, less and less often;
// 3. when the costs swap (the vCPUs moved), it follows within a few explorations, and
//    a loser that became far cheaper takes over at its next exploration, and noise
//    between close options does not flip the choice; when the way in use drifts 30%
//    dearer, the others are looked at again at once;
// 4. size classes and kinds are independent, and calls below min_bytes are not timed.
#include <cstdio>
#include <vector>

#include "collectives/path_tuner.h"
#include "harness.h"

using hvdl::PathTuner;


// Runs `calls` calls of `bytes` where option o costs cost[o] seconds per MiB; returns
// how often each option was chosen.
static std::vector<int> drive(PathTuner& t, size_t bytes, const std::vector<double>& cost, int calls) {
  std::vector<int> chosen(cost.size(), 0);
  for (int i = 0; i < calls; ++i) {
    const int o = t.choose(bytes);
    chosen[o]++;
    t.record(o, bytes, cost[o] * bytes / (1 << 20));
  }
  return chosen;
}

int main() {
  const size_t mib = 1 << 20;
  {
    PathTuner t(3);
    auto c = drive(t, 4 * mib, {2.0, 1.0, 3.0}, 6);
    CHECK(c[0] == 2 && c[1] == 2 && c[2] == 2);  // warm-up: each twice
    c = drive(t, 4 * mib, {2.0, 1.0, 3.0}, 2000);
    CHECK(c[1] > 1960);                 // settled on the cheapest
    CHECK(c[0] >= 3 && c[2] >= 3);      // ... still looking at the others
    CHECK(c[0] + c[2] < 30);            // ... rarely (backing off)
    c = drive(t, 4 * mib, {1.0, 5.0, 3.0}, 1100);  // the costs move
    CHECK(c[0] > 1000);
    // Another size class is still cold: its warm-up starts from scratch.
    c = drive(t, 64 * mib, {3.0, 2.0, 1.0}, 6);
    CHECK(c[0] == 2 && c[1] == 2 && c[2] == 2);
    CHECK(!t.timed(mib - 1) && t.timed(mib));
    // So is another kind of call of the same size.
    std::vector<int> k(3, 0);
    for (int i = 0; i < 6; ++i) k[t.choose(4 * mib, 1)]++;
    CHECK(k[0] == 2 && k[1] == 2 && k[2] == 2);
  }
  {
    // A loser that became the cheapest (the vCPUs moved) takes over at its next
    // exploration, however bad it looked before: its old cost is stale, not evidence.
    PathTuner t(3);
    drive(t, 4 * mib, {50.0, 15.0, 12.0}, 60);
    auto c = drive(t, 4 * mib, {10.0, 17.0, 13.0}, 200);
    CHECK(c[0] > 120);
  }
  {
    // ... while a loser's sample within 2x of its old cost blends in as before: one
    // sample a little under the winner's cost does not flip the choice.
    PathTuner t(2);
    drive(t, 4 * mib, {1.0, 1.5}, 100);
    auto c = drive(t, 4 * mib, {1.0, 0.95}, 40);
    CHECK(c[1] <= 2);
  }
  {
    // The way in use gets dearer while the losers got cheaper than they looked (their
    // costs are stale, and still above the winner's new one): the drift sends the
    // tuner to look at them at once, not after up to 1024 calls.
    PathTuner t(3);
    drive(t, 4 * mib, {50.0, 10.7, 35.0}, 3000);
    auto c = drive(t, 4 * mib, {9.0, 15.7, 17.0}, 60);
    CHECK(c[0] > 40);
  }
  {
    // Noise of +-20% around the way in use does not count as drift: the others are
    // still looked at less and less often.
    PathTuner t(3);
    drive(t, 4 * mib, {3.0, 1.0, 2.5}, 100);
    std::vector<int> c(3, 0);
    for (int i = 0; i < 3000; ++i) {
      const int o = t.choose(4 * mib);
      c[o]++;
      const double noise = (i % 5 == 0) ? 1.2 : (i % 5 == 1 ? 0.8 : 1.0);
      t.record(o, 4 * mib, (o == 0 ? 3.0 : o == 1 ? 1.0 : 2.5) * noise * 4);
    }
    CHECK(c[0] + c[2] < 30);
  }
  {
    PathTuner t(2);
    auto c = drive(t, 2 * mib, {1.0, 4.0}, 500);
    CHECK(c[0] > 480 && c[1] >= 3);
  }
  return hvdl::test::finish("path tuner");
}
