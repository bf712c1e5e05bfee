// The tests' in-process world (like Gloo's base_test.h): ranks are threads, one
// ThreadTransport moves their bytes, and CHECK counts failures.
//
//   auto world = ThreadWorldState::make(4, {0, 0, 1, 1});   // 4 ranks on 2 "hosts"
//   spawn(4, [&](int r) {
//     Engine e;
//     e.init(world->world(r), settings);                    // the engine, as threads
//     ...
//   });
//   return finish("engine");
//
// The transport is complete (data plane, control plane, wake-ups, split, groups), so
// the engine, its negotiation, fusion and every host path (ring, shared memory,
// hierarchical) run over it unchanged; on_ranks(n, fn) gives the algorithms alone a
// transport per thread-rank. Faults: kill(r) makes every transfer to, from
// or by world rank r fail on every rank at once (a peer that died); freeze(r) stops
// rank r inside its next transport call until thaw(r) (a peer that hangs).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "transport/transport.h"
#include "transport/world.h"

namespace hvdl {
namespace test {

// ---- CHECK: counts and reports, never aborts (the other ranks must go on) ----
inline std::atomic<int>& failures() {
  static std::atomic<int> f{0};
  return f;
}
inline std::atomic<int>& passes() {
  static std::atomic<int> p{0};
  return p;
}
#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (cond) {                                                        \
      ++::hvdl::test::passes();                                        \
    } else {                                                           \
      ++::hvdl::test::failures();                                      \
      std::fprintf(stderr, "FAIL %s:%d: %s", __FILE__, __LINE__, #cond); \
      ::hvdl::test::detail_note("" __VA_ARGS__);                       \
    }                                                                  \
  } while (0)
template <class... A>
void detail_note(const char* fmt, A... args) {
  if (*fmt) {
    std::fputs(": ", stderr);
    std::fprintf(stderr, fmt, args...);
  }
  std::fputc('\n', stderr);
}
// Prints the tally (pytest and ctest read the exit code) and returns main's result.
inline int finish(const char* what) {
  std::printf("%s: %d passed, %d failed\n", what, passes().load(), failures().load());
  return failures() ? 1 : 0;
}

// ---- spawn: n ranks as threads; an exception escaping a rank is a failure ----
inline void spawn(int n, const std::function<void(int rank)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        ++failures();
        std::fprintf(stderr, "FAIL rank %d threw: %s\n", r, e.what());
      }
    });
  for (auto& t : threads) t.join();
}

// ---- the world and its transport ----
class ThreadWorldState;

// A posted receive; it completes as soon as the matching send is there.
struct RecvOp {
  int peer;
  char* buf;
  size_t bytes;
  bool done;
  std::string error;  // a send of another size matched it
};

// One group's message space: FIFO queues per (source, destination, channel) of sends
// not yet matched, and per (source, destination) of receives not yet matched.
struct Fabric {
  std::string id;
  std::vector<int> members;  // world ranks, in group-rank order
  std::map<std::tuple<int, int, int>, std::deque<std::vector<char>>> box;
  std::map<std::pair<int, int>, std::deque<RecvOp*>> posted;
  std::vector<std::atomic<uint64_t>> rung;  // per group rank: highest round rung by a peer
  // Group ranks whose transport is gone (its process would have exited): waiting for
  // them fails, as it does for a killed rank.
  std::vector<bool> left;
  explicit Fabric(std::string i, std::vector<int> m)
      : id(std::move(i)), members(std::move(m)), rung(members.size()), left(members.size()) {}
};

class ThreadWorldState : public std::enable_shared_from_this<ThreadWorldState> {
 public:
  // `hosts[r]`: the host id of world rank r (default: all on one host).
  static std::shared_ptr<ThreadWorldState> make(int n, std::vector<int> hosts = {}) {
    auto s = std::shared_ptr<ThreadWorldState>(new ThreadWorldState(n, std::move(hosts)));
    return s;
  }
  int size() const { return n_; }
  const std::vector<int>& hosts() const { return hosts_; }
  std::unique_ptr<World> world(int rank);

  void kill(int world_rank) {
    std::lock_guard<std::mutex> l(mu);
    dead[world_rank] = true;
    cv.notify_all();
  }
  void freeze(int world_rank) {
    std::lock_guard<std::mutex> l(mu);
    frozen[world_rank] = true;
  }
  void thaw(int world_rank) {
    std::lock_guard<std::mutex> l(mu);
    frozen[world_rank] = false;
    cv.notify_all();
  }
  // Whether world rank r is blocked by freeze() right now.
  bool stopped(int r) {
    std::lock_guard<std::mutex> l(mu);
    return stopped_[r];
  }

  // The fabric named `key`, made by the first rank that asks.
  std::shared_ptr<Fabric> fabric(const std::string& key, const std::vector<int>& members) {
    std::lock_guard<std::mutex> l(mu);
    auto& f = fabrics_[key];
    if (!f) f = std::make_shared<Fabric>(key, members);
    return f;
  }

  // One lock and condition for everything: simple, and speed does not matter here.
  std::mutex mu;
  std::condition_variable cv;
  std::vector<bool> dead, frozen;
  std::vector<bool> stopped_;

 private:
  ThreadWorldState(int n, std::vector<int> hosts)
      : dead(n), frozen(n), stopped_(n), n_(n), hosts_(std::move(hosts)) {
    if (hosts_.empty()) hosts_.assign(n, 0);
  }
  int n_;
  std::vector<int> hosts_;
  std::map<std::string, std::shared_ptr<Fabric>> fabrics_;
};

class ThreadTransport final : public Transport {
 public:
  ThreadTransport(std::shared_ptr<ThreadWorldState> s, std::shared_ptr<Fabric> f, int rank)
      : s_(std::move(s)), f_(std::move(f)), rank_(rank) {}
  ~ThreadTransport() override {
    std::lock_guard<std::mutex> l(s_->mu);
    for (int p = 0; p < size(); ++p) f_->posted.erase({p, rank_});  // they point into ops_
    f_->left[rank_] = true;
    s_->cv.notify_all();
  }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(f_->members.size()); }
  // What a real transport's health check finds: a frozen rank stops here, a killed one
  // (or a killed peer) fails, as in every transfer.
  void check_alive() override {
    std::unique_lock<std::mutex> l(s_->mu);
    gate(l, -1);
    for (int p = 0; p < size(); ++p)
      if (p != rank_ && s_->dead[world_of(p)])
        throw std::runtime_error("thread transport: rank " + std::to_string(p) + " died");
  }

  Op isend(int peer, const void* buf, size_t bytes) override {
    check_peer(peer);
    std::unique_lock<std::mutex> l(s_->mu);
    gate(l, peer);
    const char* p = static_cast<const char*>(buf);
    f_->box[{rank_, peer, kData}].emplace_back(p, p + bytes);  // eager: done at once
    match(rank_, peer);
    ops_.push_back({-1, nullptr, 0, true, {}});
    return static_cast<Op>(ops_.size() - 1);
  }
  Op irecv(int peer, void* buf, size_t bytes) override {
    check_peer(peer);
    std::unique_lock<std::mutex> l(s_->mu);
    gate(l, peer);
    ops_.push_back({peer, static_cast<char*>(buf), bytes, false, {}});
    f_->posted[{peer, rank_}].push_back(&ops_.back());
    match(peer, rank_);
    return static_cast<Op>(ops_.size() - 1);
  }
  void wait(Op op) override {
    std::unique_lock<std::mutex> l(s_->mu);
    RecvOp& r = ops_.at(op);
    while (!r.done) {
      gate(l, -1);
      if (s_->dead[world_of(r.peer)])
        throw std::runtime_error("thread transport: rank " + std::to_string(r.peer) + " died");
      if (f_->left[r.peer])
        throw std::runtime_error("thread transport: rank " + std::to_string(r.peer) +
                                 " left (it died or shut down)");
      s_->cv.wait_for(l, std::chrono::milliseconds(50));
    }
    if (!r.error.empty()) throw std::logic_error(r.error);
  }
  void wait_all() override {
    for (size_t i = 0; i < ops_.size(); ++i) wait(static_cast<Op>(i));
    ops_.clear();
  }

  void allreduce_and(uint64_t* words, size_t n) override {
    std::string mine(reinterpret_cast<const char*>(words), n * 8);
    auto all = gather(mine, 0);
    std::string result = mine;
    for (auto& a : all)
      for (size_t i = 0; i < n; ++i) {
        uint64_t x, y;
        std::memcpy(&x, result.data() + i * 8, 8);
        std::memcpy(&y, a.data() + i * 8, 8);
        x &= y;
        std::memcpy(&result[i * 8], &x, 8);
      }
    broadcast(result, 0);
    std::memcpy(words, result.data(), n * 8);
  }
  std::vector<std::string> gather(const std::string& mine, int root) override {
    std::unique_lock<std::mutex> l(s_->mu);
    if (rank_ != root) {
      put(l, root, kControl, mine);
      return {};
    }
    std::vector<std::string> all(size());
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) {
        all[p] = mine;
      } else {
        auto m = take(l, p, kControl);
        all[p].assign(m.begin(), m.end());
      }
    }
    return all;
  }
  void broadcast(std::string& bytes, int root) override {
    std::unique_lock<std::mutex> l(s_->mu);
    if (rank_ == root) {
      for (int p = 0; p < size(); ++p)
        if (p != rank_) put(l, p, kControl, bytes);
    } else {
      auto m = take(l, root, kControl);
      bytes.assign(m.begin(), m.end());
    }
  }
  void barrier() override {
    uint64_t w = 1;
    allreduce_and(&w, 1);
  }
  std::unique_ptr<Transport> split(int color, int key) override {
    std::string mine = std::to_string(color) + " " + std::to_string(key);
    auto all = gather(mine, 0);
    std::string joined;
    for (auto& a : all) joined += a + ";";
    broadcast(joined, 0);
    std::vector<std::tuple<int, int, int>> same;  // key, group rank, world rank
    size_t pos = 0;
    for (int p = 0; p < size(); ++p) {
      size_t end = joined.find(';', pos);
      int c = 0, k = 0;
      std::sscanf(joined.substr(pos, end - pos).c_str(), "%d %d", &c, &k);
      pos = end + 1;
      if (c == color) same.emplace_back(k, p, f_->members[p]);
    }
    std::sort(same.begin(), same.end());
    std::vector<int> members;
    int me = -1;
    for (auto& t : same) {
      if (std::get<1>(t) == rank_) me = static_cast<int>(members.size());
      members.push_back(std::get<2>(t));
    }
    auto f = s_->fabric(f_->id + "/split" + std::to_string(splits_++) + ":" + std::to_string(color),
                        members);
    return std::make_unique<ThreadTransport>(s_, f, me);
  }

  void ring(uint64_t round) override {
    for (int p = 0; p < size(); ++p) {
      if (p == rank_) continue;
      auto& r = f_->rung[p];
      uint64_t cur = r.load();
      while (cur < round && !r.compare_exchange_weak(cur, round)) {
      }
    }
  }
  uint64_t poll_ring() override { return f_->rung[rank_].exchange(0); }

  // Everything sent to this rank was received: no stray message is left for a later
  // collective (a sender and receiver that cut a transfer differently leave one).
  bool drained() {
    std::lock_guard<std::mutex> l(s_->mu);
    for (int p = 0; p < size(); ++p)
      for (int chan : {kData, kControl}) {
        auto it = f_->box.find({p, rank_, chan});
        if (it != f_->box.end() && !it->second.empty()) return false;
      }
    return true;
  }

 private:
  enum Channel { kData = 0, kControl = 1 };
  // Like MPI, a message lands in the receiver's buffer as soon as both sides have
  // posted, whichever thread gets there second, not when the receiver waits: memory
  // handed to a transfer may change at any time until its wait returns. Receives from
  // one peer match its sends in posting order. Caller holds the lock.
  void match(int from, int to) {
    auto& sent = f_->box[{from, to, kData}];
    auto& recvs = f_->posted[{from, to}];
    while (!sent.empty() && !recvs.empty()) {
      RecvOp& r = *recvs.front();
      const std::vector<char>& m = sent.front();
      if (m.size() != r.bytes)
        r.error = "thread transport: rank " + std::to_string(to) + " expected " +
                  std::to_string(r.bytes) + " bytes from rank " + std::to_string(from) +
                  ", got " + std::to_string(m.size());
      else if (r.bytes)
        std::memcpy(r.buf, m.data(), r.bytes);
      r.done = true;
      sent.pop_front();
      recvs.pop_front();
    }
    s_->cv.notify_all();
  }
  int world_of(int p) const { return f_->members.at(p); }
  void check_peer(int p) const {
    if (p < 0 || p >= size() || p == rank_)
      throw std::logic_error("thread transport: rank " + std::to_string(rank_) + " addressed peer " +
                             std::to_string(p) + " of " + std::to_string(size()));
  }
  // Every call: a frozen rank stops here; a dead rank (or a call to a dead peer) fails.
  void gate(std::unique_lock<std::mutex>& l, int peer) {
    const int me = world_of(rank_);
    if (s_->frozen[me]) {
      s_->stopped_[me] = true;
      s_->cv.wait(l, [&] { return !s_->frozen[me]; });
      s_->stopped_[me] = false;
    }
    if (s_->dead[me]) throw std::runtime_error("thread transport: this rank was killed");
    if (peer >= 0 && s_->dead[world_of(peer)])
      throw std::runtime_error("thread transport: rank " + std::to_string(peer) + " died");
  }
  void put(std::unique_lock<std::mutex>& l, int peer, int chan, const std::string& bytes) {
    gate(l, peer);
    f_->box[{rank_, peer, chan}].emplace_back(bytes.begin(), bytes.end());
    s_->cv.notify_all();
  }
  std::vector<char> take(std::unique_lock<std::mutex>& l, int peer, int chan) {
    auto& q = f_->box[{peer, rank_, chan}];
    for (;;) {
      gate(l, -1);
      if (!q.empty()) break;
      if (s_->dead[world_of(peer)])
        throw std::runtime_error("thread transport: rank " + std::to_string(peer) + " died");
      if (f_->left[peer])
        throw std::runtime_error("thread transport: rank " + std::to_string(peer) +
                                 " left (it died or shut down)");
      s_->cv.wait_for(l, std::chrono::milliseconds(50));
    }
    std::vector<char> m = std::move(q.front());
    q.pop_front();
    return m;
  }

  std::shared_ptr<ThreadWorldState> s_;
  std::shared_ptr<Fabric> f_;
  int rank_;
  int splits_ = 0;  // numbers this transport's splits alike on every member
  std::deque<RecvOp> ops_;  // a deque: the fabric's posted list points into it
};

class ThreadWorld final : public World {
 public:
  ThreadWorld(std::shared_ptr<ThreadWorldState> s, int rank)
      : s_(std::move(s)), topo_(topology_of(s_->hosts(), rank)), rank_(rank) {}
  const Topology& topology() const override { return topo_; }
  bool threads_supported() const override { return true; }
  std::unique_ptr<Transport> create_group(const std::vector<int>& ranks) override {
    std::string key = "group";
    for (int r : ranks) key += "," + std::to_string(r);
    key += "#" + std::to_string(made_[key]++);  // the same list may be made again later
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return nullptr;
    return std::make_unique<ThreadTransport>(s_, s_->fabric(key, ranks),
                                             static_cast<int>(it - ranks.begin()));
  }

 private:
  std::shared_ptr<ThreadWorldState> s_;
  Topology topo_;
  int rank_;
  std::map<std::string, int> made_;
};

inline std::unique_ptr<World> ThreadWorldState::world(int rank) {
  return std::make_unique<ThreadWorld>(shared_from_this(), rank);
}

// For the algorithms alone: body(transport) on n ranks of one group as threads, then a
// check that every message sent was received. A rank still running after `timeout_s`
// waits for a message that is never sent (a protocol bug): every rank is then killed,
// so each waiting one fails instead of hanging.
inline void on_ranks(int n, const std::function<void(Transport&)>& body, double timeout_s = 60) {
  auto state = ThreadWorldState::make(n);
  std::vector<int> all(n);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(state->world(r)->create_group(all));
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        body(*ts[r]);
      } catch (const std::exception& e) {
        ++failures();
        std::fprintf(stderr, "FAIL n=%d: rank %d threw: %s\n", n, r, e.what());
      }
      ++done;
    });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (done < n && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const bool stuck = done < n;
  CHECK(!stuck, "n=%d: %d rank(s) still waiting after %g s", n, n - done.load(), timeout_s);
  if (stuck)
    for (int r = 0; r < n; ++r) state->kill(r);
  for (auto& t : threads) t.join();
  if (stuck) return;
  for (int r = 0; r < n; ++r)
    CHECK(static_cast<ThreadTransport&>(*ts[r]).drained(), "n=%d: messages left for rank %d", n, r);
}

}  // namespace test
}  // namespace hvdl
