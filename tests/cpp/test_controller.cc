// The negotiation round (csrc/engine/controller.cc) on 2 ranks as threads, over the
// harness's thread transport (harness.h). Checks that a round holds a
// step's cached tensors back while a rank is mid-burst and some are ready on only some
// ranks, never twice in a row, and never when nothing is partial or nobody is mid-burst.
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "engine/collective_op.h"
#include "engine/controller.h"
#include "harness.h"
#include "stand_in_allreduce.h"

namespace hvdl {
namespace {

Request req(const std::string& name) {
  Request q;
  q.name = name;
  q.shape = {4};
  return q;
}

// One round per entry on both ranks: (fresh names, mid-burst) for each rank. Returns
// the names each rank was told to run, per round.
using Plan = std::vector<std::pair<std::vector<std::string>, bool>>;
std::vector<std::vector<std::set<std::string>>> rounds(const Plan& r0, const Plan& r1) {
  auto world = test::ThreadWorldState::make(2);
  std::vector<std::vector<std::set<std::string>>> ran(2);
  test::spawn(2, [&](int r) {
    const Plan& plan = r == 0 ? r0 : r1;
    auto t = world->world(r)->create_group({0, 1});
    Controller c(*t, 64, 0, 0);
    for (auto& [names, arriving] : plan) {
      std::vector<Request> fresh;
      for (auto& n : names) fresh.push_back(req(n));
      RoundResult res = c.round(fresh, false, nullptr, nullptr, arriving,
                                std::chrono::milliseconds(1));
      std::set<std::string> names_run;
      for (auto& resp : res.responses) {
        names_run.insert(resp.name);
        Request local = req(resp.name);
        local.rank = r;
        c.executed(resp, &local);
      }
      ran[r].push_back(names_run);
      if (res.responses.empty() && c.next_deadline() > Clock::now() + std::chrono::seconds(1))
        ran[r].back().insert("<no deadline>");  // nothing ran and nothing would wake us
    }
  });
  return ran;
}

}  // namespace
}  // namespace hvdl

int main() {
  using namespace hvdl;
  using S = std::set<std::string>;
  // Round 1 puts A and B in the cache (through the coordinator). Round 2: rank 1 has
  // only A so far and is mid-burst: nothing runs (and a deadline is set). Round 3:
  // B arrives: both run together.
  {
    auto ran = rounds({{{"A", "B"}, false}, {{"A", "B"}, false}, {{}, false}},
                      {{{"A", "B"}, false}, {{"A"}, true}, {{"B"}, false}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][0] == S{"A", "B"}));
      CHECK(ran[r][1].empty());
      CHECK((ran[r][2] == S{"A", "B"}));
    }
  }
  // Never twice in a row: a rank still mid-burst in the next round gets A run anyway.
  {
    auto ran = rounds({{{"A", "B"}, false}, {{"A", "B"}, false}, {{}, false}, {{}, false}},
                      {{{"A", "B"}, false}, {{"A"}, true}, {{}, true}, {{"B"}, false}});
    for (int r = 0; r < 2; ++r) {
      CHECK(ran[r][1].empty());
      CHECK((ran[r][2] == S{"A"}));
      CHECK((ran[r][3] == S{"B"}));
    }
  }
  // Nobody mid-burst, or nothing partial: what is ready everywhere runs at once.
  {
    auto ran = rounds({{{"A", "B"}, false}, {{"A", "B"}, false}, {{}, false}, {{"A"}, true}},
                      {{{"A", "B"}, false}, {{"A"}, false}, {{"B"}, false}, {{"A"}, true}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][1] == S{"A"}));
      CHECK((ran[r][2] == S{"B"}));
      CHECK((ran[r][3] == S{"A"}));
    }
  }
  return hvdl::test::finish("controller");
}
