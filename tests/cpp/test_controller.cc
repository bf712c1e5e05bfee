// The negotiation round (csrc/engine/controller.cc) on 2 ranks as threads, over an
// in-process transport with the control collectives only. Checks that a round holds a
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

namespace hvdl {
namespace {

// Every control collective is "each rank deposits bytes, then all read all".
struct Hub {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> slots = std::vector<std::string>(2);
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<std::string> exchange(int rank, const std::string& mine) {
    std::unique_lock<std::mutex> l(mu);
    const uint64_t g = generation;
    slots[rank] = mine;
    if (++arrived == 2) {
      last = slots;
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(l, [&] { return generation != g; });
    }
    return last;
  }
  std::vector<std::string> last;
};

class HubTransport : public Transport {
 public:
  HubTransport(Hub& h, int rank) : h_(h), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return 2; }
  Op isend(int, const void*, size_t) override { return 0; }
  Op irecv(int, void*, size_t) override { return 0; }
  void wait(Op) override {}
  void wait_all() override {}
  void allreduce_and(uint64_t* words, size_t n) override {
    auto all = h_.exchange(rank_, std::string(reinterpret_cast<char*>(words), n * 8));
    for (auto& s : all)
      for (size_t i = 0; i < n; ++i) words[i] &= reinterpret_cast<const uint64_t*>(s.data())[i];
  }
  std::vector<std::string> gather(const std::string& mine, int) override {
    return h_.exchange(rank_, mine);
  }
  void broadcast(std::string& bytes, int root) override { bytes = h_.exchange(rank_, bytes)[root]; }
  void barrier() override { h_.exchange(rank_, ""); }
  void ring(uint64_t) override {}
  uint64_t poll_ring() override { return 0; }

 private:
  Hub& h_;
  int rank_;
};

// The coordinator validates through the op registry; an allreduce that accepts
// anything stands in for the real one (which would bring the whole engine along).
class AnyAllreduce : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLREDUCE; }
  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    resp.shape = reqs[0]->shape;
  }
  void execute(ExecContext&, const std::vector<const Response*>&,
               const std::vector<TensorEntry*>&) const override {}
};
OpRegistrar any_allreduce(std::make_unique<AnyAllreduce>());

int failures = 0;
#define CHECK(cond)                                                   \
  do {                                                                \
    if (!(cond)) {                                                    \
      ++failures;                                                     \
      std::fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #cond);    \
    }                                                                 \
  } while (0)

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
  Hub hub;
  std::vector<std::vector<std::set<std::string>>> ran(2);
  auto rank = [&](int r, const Plan& plan) {
    HubTransport t(hub, r);
    Controller c(t, 64, 0, 0);
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
  };
  std::thread a(rank, 0, r0), b(rank, 1, r1);
  a.join();
  b.join();
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
  std::printf("controller: %d failed\n", failures);
  return failures ? 1 : 0;
}
