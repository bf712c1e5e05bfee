// The negotiation round (csrc/engine/controller.cc) on 2 ranks as threads, its vote
// through an exchange that carries the negotiation (as the shared-memory vote does):
// a request every rank sent alike is answered in the vote, its input riding along;
// anything else (different requests, a coordinator still holding some, a cached
// tensor) goes the usual way, and the answers are the same.
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "engine/collective_op.h"
#include "engine/controller.h"
#include "harness.h"
#include "stand_in_allreduce.h"

namespace hvdl {
namespace {

// Every rank's message to every other in memory, two buffers per rank used by odd and
// even exchanges, as the shared-memory vote keeps them (engine/shm_vote.cc).
struct Board {
  explicit Board(int n) : buf(n, std::vector<std::string>(2, std::string(kCap, '\0'))),
                          len(n, std::vector<size_t>(2)), count(n, 0) {}
  static constexpr size_t kCap = 8192;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<std::string>> buf;
  std::vector<std::vector<size_t>> len;
  std::vector<uint64_t> count;
};

class BoardVote final : public VoteExchange {
 public:
  BoardVote(Board& b, int rank) : b_(b), me_(rank) {}
  size_t capacity() const override { return Board::kCap; }
  char* outbox() override { return &b_.buf[me_][(votes_ + 1) % 2][0]; }
  void exchange(size_t bytes) override {
    sent.push_back(bytes);
    std::unique_lock<std::mutex> l(b_.mu);
    const uint64_t v = ++votes_;
    b_.len[me_][v % 2] = bytes;
    b_.count[me_] = v;
    b_.cv.notify_all();
    b_.cv.wait(l, [&] {
      for (uint64_t c : b_.count)
        if (c < v) return false;
      return true;
    });
  }
  const char* inbox(int p) const override { return b_.buf[p][votes_ % 2].data(); }
  size_t length(int p) const override { return b_.len[p][votes_ % 2]; }
  bool carries_negotiation() const override { return true; }
  std::vector<size_t> sent;  // this rank's message sizes, one per exchange

 private:
  Board& b_;
  int me_;
  uint64_t votes_ = 0;
};

Request req(const std::string& name, int64_t count = 4) {
  Request q;
  q.name = name;
  q.dtype = DataType::FLOAT32;
  q.shape = {count};
  return q;
}

struct Ran {
  std::set<std::string> names;
  bool in_vote = false, cache_only = true;
  std::string rider;  // the peer's input when it rode, as text
  std::string error;
  size_t vote_bytes = 0;  // this rank's first message of the round (its vote)
};

// One round per entry on both ranks; each rank's tensors hold "<name>@<rank>" (padded to
// 16 bytes: 4 floats), the rider the engine would send for them.
using Plan = std::vector<std::vector<Request>>;
std::vector<std::vector<Ran>> rounds(const Plan& r0, const Plan& r1, size_t capacity = 64) {
  auto world = test::ThreadWorldState::make(2);
  Board board(2);
  std::vector<std::vector<Ran>> ran(2);
  test::spawn(2, [&](int r) {
    const Plan& plan = r == 0 ? r0 : r1;
    auto t = world->world(r)->create_group({0, 1});
    Controller c(*t, capacity, 0, 0);
    std::map<std::string, std::string> inputs;
    auto vote = std::make_unique<BoardVote>(board, r);
    BoardVote* seen = vote.get();
    c.set_vote(std::move(vote), 64, [&](const Response& resp) {
      auto it = inputs.find(resp.name);
      if (it == inputs.end() || resp.op != OpType::ALLREDUCE || !resp.ok()) return Rider{};
      return Rider{it->second.data(), it->second.size()};
    });
    for (auto& fresh : plan) {
      for (auto& q : fresh) {
        std::string data = q.name + "@" + std::to_string(r);
        data.resize(4 * q.shape[0], '.');
        inputs[q.name] = data;
      }
      const size_t before = seen->sent.size();
      RoundResult res = c.round(fresh, false);
      Ran got;
      if (seen->sent.size() > before) got.vote_bytes = seen->sent[before];
      got.in_vote = res.full_in_vote;
      got.cache_only = res.cache_only;
      for (auto& resp : res.responses) {
        got.names.insert(resp.name);
        if (!resp.ok()) got.error = resp.error;
        Request local = req(resp.name);
        local.rank = r;
        c.executed(resp, &local);
      }
      if (res.peer_inputs) {
        const Response& one = res.responses.at(0);
        CHECK(res.responses.size() == 1);
        CHECK(res.peer_inputs[r] == nullptr);
        got.rider.assign(static_cast<const char*>(res.peer_inputs[1 - r]), 4 * one.shape[0]);
      }
      ran[r].push_back(got);
    }
  });
  return ran;
}

}  // namespace
}  // namespace hvdl

int main() {
  using namespace hvdl;
  using S = std::set<std::string>;
  // Both ranks ask for u1 (uncached): answered in the vote, the peer's input rode.
  {
    auto ran = rounds({{req("u1")}}, {{req("u1")}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][0].names == S{"u1"}));
      CHECK(ran[r][0].in_vote && !ran[r][0].cache_only);
      CHECK(ran[r][0].rider.rfind("u1@" + std::to_string(1 - r), 0) == 0);
    }
  }
  // Different requests of one size: nothing runs (each waits for the other rank), and
  // the next round's matching requests complete both through the coordinator (which
  // is no longer idle), with no rider.
  {
    auto ran = rounds({{req("A")}, {req("B")}}, {{req("B")}, {req("A")}});
    for (int r = 0; r < 2; ++r) {
      CHECK(ran[r][0].names.empty());
      CHECK((ran[r][1].names == S{"A", "B"}));
      CHECK(ran[r][1].rider.empty());
    }
  }
  // A mismatch (shapes) is the coordinator's error on both ranks, not a rider.
  {
    auto ran = rounds({{req("m", 4)}}, {{req("m", 8)}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][0].names == S{"m"}));
      CHECK(ran[r][0].error == "shapes differ");
      CHECK(ran[r][0].rider.empty());
    }
  }
  // Arguments both ranks found invalid: the coordinator's error, made in the vote.
  {
    Request e = req("e");
    e.error = "ValueError: bad";
    auto ran = rounds({{e}}, {{e}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][0].names == S{"e"}) && ran[r][0].in_vote && ran[r][0].rider.empty());
      CHECK(ran[r][0].error.find("rank 0: bad; rank 1: bad") != std::string::npos);
    }
  }
  // Rank 0's coordinator holds X (rank 1 has not asked yet): the next round's common
  // request goes through the coordinator, not answered in the vote; then X completes.
  {
    auto ran = rounds({{req("X")}, {req("u")}, {}}, {{}, {req("u")}, {req("X")}});
    for (int r = 0; r < 2; ++r) {
      CHECK(ran[r][0].names.empty());
      CHECK((ran[r][1].names == S{"u"}));
      CHECK(ran[r][1].rider.empty());
      CHECK((ran[r][2].names == S{"X"}));
    }
  }
  // A cached tensor still rides with the vote alone (second call of c).
  {
    auto ran = rounds({{req("c")}, {req("c")}}, {{req("c")}, {req("c")}});
    for (int r = 0; r < 2; ++r) {
      CHECK(!ran[r][1].in_vote && ran[r][1].cache_only);
      CHECK(ran[r][1].rider.rfind("c@" + std::to_string(1 - r), 0) == 0);
    }
  }
  // Two requests on a rank: no answer in the vote, both run through the coordinator.
  {
    auto ran = rounds({{req("p"), req("q")}}, {{req("p"), req("q")}});
    for (int r = 0; r < 2; ++r) {
      CHECK((ran[r][0].names == S{"p", "q"}));
      CHECK(ran[r][0].rider.empty());
    }
  }
  // The vote's words are packed (Controller::pack_vote): with a cache of 1024 entries
  // and a lone cached tensor at bit 0, [flags][k = 1][3 words], the rider's tag triple
  // and its 16 bytes make an 80-byte message (the full words would be 49 + 3 + 2).
  // Seventy tensors fill bits 0-69; then rank 0 has only t69 ready (word 1: k = 2) and
  // rank 1 only t0 (k = 1): neither runs (the words a rank left out count as not
  // ready), and the next round, each with the other's, runs both.
  {
    Plan warm;
    for (int i = 0; i < 70; ++i) warm.push_back({req("t" + std::to_string(i))});
    Plan p0 = warm, p1 = warm;
    p0.push_back({req("t0")});
    p1.push_back({req("t0")});
    p0.push_back({req("t69")});
    p1.push_back({req("t0")});
    p0.push_back({req("t0")});
    p1.push_back({req("t69")});
    auto ran = rounds(p0, p1, 1024);
    for (int r = 0; r < 2; ++r) {
      const Ran& lone = ran[r][70];
      CHECK((lone.names == S{"t0"}) && lone.cache_only);
      CHECK(lone.vote_bytes == (2 + 3) * 8 + 3 * 8 + 16);
      CHECK(lone.rider.rfind("t0@" + std::to_string(1 - r), 0) == 0);
      CHECK(ran[r][71].names.empty());
      // (each rank's lone cached tensor rides, though the other's differs: 16 bytes)
      CHECK(ran[r][71].vote_bytes == (r == 0 ? (2 + 3 * 2) * 8 : (2 + 3) * 8) + 3 * 8 + 16);
      CHECK((ran[r][72].names == S{"t0", "t69"}));
    }
  }
  return hvdl::test::finish("controller_vote");
}
