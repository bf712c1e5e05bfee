// TCP data plane (tcp_transport.h). Wire format: every message is an 8-byte length
// then its bytes, so a receive that expects another size fails with both sizes named
// instead of mixing two messages. Messages to one peer go out in the order posted and
// are matched in the order the receives are posted, as MPI matches one tag.
#include "tcp_transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../common/logging.h"
#include "peer_health.h"
#include "watched_wait.h"

namespace hvdl {
namespace {

constexpr uint64_t kMagic = 0x68766c7463703031ull;  // "hvltcp01"
constexpr int kConnectTimeoutMs = 5000;
constexpr int kSetupTimeoutMs = 60000;

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

struct Net {
  uint32_t addr = 0, mask = 0;  // host order
  std::string iface;            // or an interface name
};

// "10.0.0.0/24,eth1" -> networks and interface names.
std::vector<Net> parse_include(const std::string& spec) {
  std::vector<Net> out;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    Net n;
    auto slash = item.find('/');
    in_addr a{};
    if (inet_pton(AF_INET, item.substr(0, slash).c_str(), &a) == 1) {
      int bits = slash == std::string::npos ? 32 : std::atoi(item.c_str() + slash + 1);
      bits = std::max(0, std::min(32, bits));
      n.mask = bits == 0 ? 0 : ~uint32_t(0) << (32 - bits);
      n.addr = ntohl(a.s_addr) & n.mask;
    } else {
      n.iface = item;
    }
    out.push_back(n);
  }
  return out;
}

// This host's IPv4 addresses that the include list allows (all non-loopback ones
// when it is empty), in interface order.
std::vector<std::string> local_addresses(const std::vector<Net>& include) {
  std::vector<std::string> out;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) != 0) return out;
  for (ifaddrs* i = ifs; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    if (include.empty() && (i->ifa_flags & IFF_LOOPBACK)) continue;
    uint32_t a = ntohl(reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    bool ok = include.empty();
    for (const Net& n : include)
      ok = ok || (n.iface.empty() ? (a & n.mask) == n.addr : n.iface == i->ifa_name);
    if (!ok) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, buf, sizeof buf);
    if (std::find(out.begin(), out.end(), buf) == out.end()) out.push_back(buf);
  }
  freeifaddrs(ifs);
  return out;
}

// Blocks in poll() on `fd` for `ev` until it is ready or `timeout_ms` passed (false),
// in slices of WaitWatch::kPollMs: between them `watch` looks at the peers' health,
// so a peer declared failed meanwhile ends the setup with a PeerFailure naming it.
bool poll_watched(int fd, short ev, int timeout_ms, const WaitWatch& watch) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) return false;
    pollfd pfd{fd, ev, 0};
    int rc = ::poll(&pfd, 1, std::min(left, WaitWatch::kPollMs));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return false;
    watch.check();
  }
}

bool io_all(int fd, void* p, size_t n, bool write_it, int timeout_ms, const WaitWatch& watch) {
  char* c = static_cast<char*>(p);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (n) {
    ssize_t k = write_it ? ::send(fd, c, n, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recv(fd, c, n, MSG_DONTWAIT);
    if (k > 0) {
      c += k, n -= static_cast<size_t>(k);
      continue;
    }
    if (k == 0 && !write_it) return false;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
    int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                    deadline - std::chrono::steady_clock::now()).count());
    if (left <= 0) return false;
    if (!poll_watched(fd, static_cast<short>(write_it ? POLLOUT : POLLIN), left, watch)) return false;
  }
  return true;
}

struct Hello {
  uint64_t magic, token;
  uint32_t rank, pad;
};

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

// Connects to addr:port within the timeout and greets; -1 when that peer is not ours.
int connect_to(const std::string& addr, int port, uint64_t token, int me, int them,
               const WaitWatch& watch) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  set_nonblocking(fd);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, addr.c_str(), &sa.sin_addr);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  if (rc != 0 && errno == EINPROGRESS) {
    int err = 0;
    socklen_t len = sizeof err;
    bool ready = false;
    try {
      ready = poll_watched(fd, POLLOUT, kConnectTimeoutMs, watch);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (ready && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0) rc = 0;
  }
  Hello h{kMagic, token, static_cast<uint32_t>(me), 0}, r{};
  bool greeted = false;
  try {
    greeted = rc == 0 && io_all(fd, &h, sizeof h, true, kSetupTimeoutMs, watch) &&
              io_all(fd, &r, sizeof r, false, kSetupTimeoutMs, watch);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (!greeted || r.magic != kMagic || r.token != token ||
      static_cast<int>(r.rank) != them) {
    ::close(fd);
    return -1;
  }
  return fd;
}

class TcpTransport : public Transport {
 public:
  TcpTransport(std::unique_ptr<Transport> base, std::vector<int> fds, TcpInfo info)
      : base_(std::move(base)), peers_(fds.size()), info_(std::move(info)),
        timeout_s_(info_.options.timeout_s),
        // never so long that the liveness checks between polls would wait for it
        spin_(std::chrono::microseconds(std::min(info_.options.spin_us, WaitWatch::kPollMs * 1000))) {
    for (size_t i = 0; i < fds.size(); ++i) peers_[i].fd = fds[i];
    if (const std::vector<int>* w = base_->world_ranks()) members_ = *w;
    if (const std::vector<int>* w = base_->watched_ranks()) watched_ = *w;
  }

  ~TcpTransport() override {
    try {
      // After a failure or an abandoned collective nothing here may wait: the
      // transfers never finish (and their buffers may be gone).
      if (!broken_) wait_all();
    } catch (const std::exception& e) {
      HVDL_LOG(DEBUG) << "tcp transport: " << e.what();
    }
    for (Peer& p : peers_)
      if (p.fd >= 0) ::close(p.fd);
  }

  int rank() const override { return base_->rank(); }
  int size() const override { return base_->size(); }
  const TcpInfo& info() const { return info_; }

  Op isend(int peer, const void* buf, size_t bytes) override {
    Op id = add(peer, true, const_cast<void*>(buf), bytes);
    // start at once: the socket buffer takes the first bytes
    guarded([&] { progress_peer(peer); });
    return id;
  }

  Op irecv(int peer, void* buf, size_t bytes) override { return add(peer, false, buf, bytes); }

  void wait(Op op) override {
    WaitWatch w(watched(), timeout_s_, "a TCP transfer (HOROVODLITE_TCP_TIMEOUT_SECONDS)");
    guarded([&] {
      moved_at_ = std::chrono::steady_clock::now();
      while (!ops_.at(op).done) step(w);
    });
  }

  void wait_all() override {
    WaitWatch w(watched(), timeout_s_, "a TCP transfer (HOROVODLITE_TCP_TIMEOUT_SECONDS)");
    guarded([&] {
      moved_at_ = std::chrono::steady_clock::now();
      while (pending_ > 0) step(w);
    });
    ops_.clear();
  }

  // The TCP streams carry no notices: a peer's news (it gave up a collective) and
  // its failure come through the wrapped transport and PeerHealth.
  void check_alive() override {
    PeerHealth::get().check(watched());
    base_->check_alive();
  }
  const std::vector<int>* world_ranks() const override {
    return members_.empty() ? nullptr : &members_;
  }
  const std::vector<int>* watched_ranks() const override { return watched(); }

  // Given up half way: what is in flight will never finish in step with the peers, so
  // it is forgotten (no byte of its buffers is touched again), the peers are told
  // through the wrapped transport, and every later wait here fails at once.
  void abandon(const std::string& why) override {
    forget_all();
    base_->abandon(why);
  }

  void allreduce_and(uint64_t* words, size_t n) override { base_->allreduce_and(words, n); }
  std::vector<std::string> gather(const std::string& mine, int root) override {
    return base_->gather(mine, root);
  }
  void broadcast(std::string& bytes, int root) override { base_->broadcast(bytes, root); }
  void barrier() override { base_->barrier(); }
  void exchange_all(const void* mine, size_t bytes, void* theirs, size_t stride,
                    size_t* lens) override {
    base_->exchange_all(mine, bytes, theirs, stride, lens);
  }
  void exchange_with(const std::vector<int>& peers, const void* mine, size_t bytes, void* theirs,
                     size_t stride, size_t* lens) override {
    base_->exchange_with(peers, mine, bytes, theirs, stride, lens);
  }
  void exchange_each(const std::vector<int>& peers, const void* const* mine, const size_t* bytes,
                     void* theirs, size_t stride, size_t* lens) override {
    base_->exchange_each(peers, mine, bytes, theirs, stride, lens);
  }
  void tend_vote(bool done) override { base_->tend_vote(done); }
  std::unique_ptr<Transport> split(int color, int key) override { return base_->split(color, key); }
  void ring(uint64_t round) override { base_->ring(round); }
  uint64_t poll_ring() override { return base_->poll_ring(); }

 private:
  struct OpState {
    int peer;
    bool send;
    char* buf;
    size_t bytes, moved = 0;
    bool done = false;
  };
  struct Peer {
    int fd = -1;
    std::deque<Op> sends, recvs;  // not yet complete, in order
    uint64_t out_hdr = 0, in_hdr = 0;
    size_t out_hdr_moved = 0, in_hdr_moved = 0;
  };

  Op add(int peer, bool send, void* buf, size_t bytes) {
    if (broken_) guarded([] {});  // throws: the streams are out of step
    if (peer < 0 || peer >= size() || peer == rank())
      throw std::invalid_argument("tcp transport: bad peer " + std::to_string(peer));
    ops_.push_back(OpState{peer, send, static_cast<char*>(buf), bytes});
    Op id = static_cast<Op>(ops_.size() - 1);
    (send ? peers_[peer].sends : peers_[peer].recvs).push_back(id);
    ++pending_;
    return id;
  }

  [[noreturn]] void fail(int peer, const std::string& what) {
    throw std::runtime_error("tcp transport: rank " + std::to_string(rank()) + " <-> rank " +
                             std::to_string(peer) + " of its cross-host group: " + what);
  }

  const std::vector<int>* watched() const { return watched_.empty() ? nullptr : &watched_; }
  int world_rank(int peer) const {
    return peer >= 0 && peer < static_cast<int>(members_.size()) ? members_[peer] : -1;
  }

  // The connection to `peer` broke in the middle of a transfer: its process died (the
  // kernel closed its sockets) or it left. Unless the peer said first that it gave up
  // the collective (then that is the news), it has failed: declared, so every wait on
  // it, in every process set, ends with the same error.
  [[noreturn]] void lost(int peer, const std::string& what) {
    base_->check_alive();
    PeerHealth& h = PeerHealth::get();
    h.declare(world_rank(peer), "its TCP connection (cross-host data) broke mid-transfer: " + what +
                                    " (the process died or left)");
    h.check(watched());
    const std::string first = h.first_failure();
    throw PeerFailure(first.empty() ? "tcp transport: " + what : first);
  }

  // Any wait that ends in an exception leaves the streams out of step.
  template <class F>
  void guarded(F&& f) {
    if (broken_) {
      check_alive();
      throw std::runtime_error("tcp transport: unusable after an earlier failure");
    }
    try {
      f();
    } catch (...) {
      forget_all();
      throw;
    }
  }

  void forget_all() {
    broken_ = true;
    for (Peer& p : peers_) p.sends.clear(), p.recvs.clear();
    ops_.clear();
    pending_ = 0;
  }

  void finish(Peer& p, std::deque<Op>& q) {
    ops_[q.front()].done = true;
    q.pop_front();
    --pending_;
    (void)p;
  }

  // Moves what the sockets of `peer` take or hold now, without blocking; true if any
  // byte moved.
  bool progress_peer(int peer) {
    Peer& p = peers_[peer];
    bool moved = false;
    while (!p.sends.empty()) {
      OpState& o = ops_[p.sends.front()];
      if (o.moved == 0 && p.out_hdr_moved == 0) p.out_hdr = o.bytes;
      iovec iov[2];
      int n = 0;
      if (p.out_hdr_moved < 8)
        iov[n++] = {reinterpret_cast<char*>(&p.out_hdr) + p.out_hdr_moved, 8 - p.out_hdr_moved};
      if (o.moved < o.bytes) iov[n++] = {o.buf + o.moved, std::min<size_t>(o.bytes - o.moved, 1u << 30)};
      msghdr m{};
      m.msg_iov = iov;
      m.msg_iovlen = n;
      ssize_t k = n ? ::sendmsg(p.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        lost(peer, errno_text("send"));
      }
      moved = moved || k > 0;
      size_t h = std::min<size_t>(static_cast<size_t>(k), 8 - p.out_hdr_moved);
      p.out_hdr_moved += h;
      o.moved += static_cast<size_t>(k) - h;
      if (p.out_hdr_moved == 8 && o.moved == o.bytes) {
        p.out_hdr_moved = 0;
        finish(p, p.sends);
      }
    }
    while (!p.recvs.empty()) {
      OpState& o = ops_[p.recvs.front()];
      ssize_t k;
      if (p.in_hdr_moved < 8) {
        k = ::recv(p.fd, reinterpret_cast<char*>(&p.in_hdr) + p.in_hdr_moved, 8 - p.in_hdr_moved,
                   MSG_DONTWAIT);
      } else if (o.moved < o.bytes) {
        k = ::recv(p.fd, o.buf + o.moved, std::min<size_t>(o.bytes - o.moved, 1u << 30), MSG_DONTWAIT);
      } else {
        k = 0;
      }
      if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        if (errno == EINTR) continue;
        lost(peer, errno_text("recv"));
      }
      if (k == 0 && (p.in_hdr_moved < 8 || o.moved < o.bytes))
        lost(peer, "the peer closed the connection");
      moved = moved || k > 0;
      if (p.in_hdr_moved < 8) {
        p.in_hdr_moved += static_cast<size_t>(k);
        if (p.in_hdr_moved == 8 && p.in_hdr != o.bytes)
          fail(peer, "it sent a message of " + std::to_string(p.in_hdr) + " bytes where " +
                         std::to_string(o.bytes) + " were expected");
      } else {
        o.moved += static_cast<size_t>(k);
      }
      if (p.in_hdr_moved == 8 && o.moved == o.bytes) {
        p.in_hdr_moved = 0;
        finish(p, p.recvs);
      }
    }
    return moved;
  }

  // Progress on every peer; when nothing moved, sleep in poll() until a socket is
  // ready, at most WaitWatch::kPollMs at a time: between sleeps the wait looks at the
  // peers' health and notices and at its deadline (watched_wait.h), so a frozen or
  // dead peer on another host ends it within the peer timeout, not the TCP one.
  void step(WaitWatch& w) {
    bool moved = false;
    for (int i = 0; i < static_cast<int>(peers_.size()); ++i)
      if (!peers_[i].sends.empty() || !peers_[i].recvs.empty()) moved = progress_peer(i) || moved;
    const auto now = std::chrono::steady_clock::now();
    if (moved || pending_ == 0) {
      moved_at_ = now;
      w.progress();
      // Moving without ever sleeping must still look now and then (a peer that
      // trickles bytes while another member is dead).
      if (++busy_steps_ % 1024 == 0) check_alive();
      return;
    }
    // Shortly after the wait began or the last byte moved, look again instead of
    // sleeping: falling asleep and being woken costs more than a small reply's trip.
    if (now - moved_at_ < spin_) {
      if (++busy_steps_ % 1024 == 0) check_alive();
      return;
    }
    fds_.clear();
    who_.clear();
    for (int i = 0; i < static_cast<int>(peers_.size()); ++i) {
      Peer& p = peers_[i];
      short ev = (p.sends.empty() ? 0 : POLLOUT) | (p.recvs.empty() ? 0 : POLLIN);
      if (ev) fds_.push_back({p.fd, ev, 0}), who_.push_back(i);
    }
    int rc = ::poll(fds_.data(), fds_.size(), w.poll_ms());
    if (rc < 0 && errno != EINTR) throw std::runtime_error(errno_text("tcp transport: poll"));
    for (size_t i = 0; rc > 0 && i < fds_.size(); ++i)
      if (fds_[i].revents & (POLLERR | POLLNVAL)) lost(who_[i], "connection error");
    if (rc <= 0) {
      // The peer the oldest transfer waits on is the one to blame at the deadline.
      check_alive();
      w.check(who_.empty() ? -1 : world_rank(who_[0]));
    }
  }

  std::unique_ptr<Transport> base_;
  std::vector<Peer> peers_;
  std::vector<OpState> ops_;
  size_t pending_ = 0;
  std::vector<pollfd> fds_;
  std::vector<int> who_;
  const TcpInfo info_;
  const double timeout_s_;
  std::chrono::steady_clock::duration spin_;
  std::chrono::steady_clock::time_point moved_at_;
  std::vector<int> members_;  // world ranks, by rank in this group (empty: unknown)
  std::vector<int> watched_;  // whose failure ends our waits (transport.h)
  bool broken_ = false;       // a wait failed or a collective was abandoned
  uint64_t busy_steps_ = 0;
};

// addresses "a,b" and port of every rank, as published.
struct Card {
  std::vector<std::string> addrs;
  int port = 0;
};

}  // namespace

std::unique_ptr<Transport> make_tcp_transport(std::unique_ptr<Transport>& base, const TcpOptions& o) {
  Transport& t = *base;
  const int n = t.size(), me = t.rank();
  std::string why;
  std::vector<std::string> mine;
  if (o.one_machine && o.if_include.empty()) {
    mine = {"127.0.0.1"};
  } else {
    mine = local_addresses(parse_include(o.if_include));
    if (mine.empty()) why = "no IPv4 address matches '" + o.if_include + "'";
  }
  // Listen on exactly the addresses offered (never on any other of this host).
  std::vector<int> listeners;
  std::vector<std::string> listening;  // their addresses
  int port = 0;
  for (const std::string& a : mine) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, a.c_str(), &sa.sin_addr);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0 || ::listen(fd, 256) != 0) {
      if (fd >= 0) ::close(fd);
      if (port == 0) continue;  // the first that works fixes the port; others may not get it
      continue;
    }
    if (port == 0) {
      socklen_t len = sizeof sa;
      getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
      port = ntohs(sa.sin_port);
    }
    set_nonblocking(fd);
    listeners.push_back(fd);
    listening.push_back(a);
  }
  if (listeners.empty() && why.empty()) why = "could not listen on " + (mine.empty() ? "" : mine[0]);
  std::string card;
  for (size_t i = 0; i < mine.size(); ++i) card += (i ? "," : "") + mine[i];
  card += " " + std::to_string(listeners.empty() ? 0 : port);
  // Everyone learns everyone's card; rank 0 adds a token that tells this group's
  // connections from any other's.
  auto all = t.gather(card, 0);
  std::string table;
  if (me == 0) {
    std::random_device rd;
    table = std::to_string((uint64_t(rd()) << 32) ^ rd());
    for (auto& c : all) table += "\n" + c;
  }
  t.broadcast(table, 0);
  std::istringstream is(table);
  uint64_t token = 0;
  is >> token;
  std::vector<Card> cards(n);
  for (int i = 0; i < n; ++i) {
    std::string addrs;
    is >> addrs >> cards[i].port;
    std::stringstream ss(addrs);
    std::string a;
    while (std::getline(ss, a, ',')) cards[i].addrs.push_back(a);
  }
  std::vector<int> fds(n, -1);
  bool ok = why.empty();
  for (int i = 0; i < n; ++i) ok = ok && cards[i].port > 0;
  // Every wait below looks at the group's health between short polls (watched_wait.h),
  // so a peer that dies during the setup ends it with an error naming that peer (once
  // the heartbeat, its pidfd or a closed connection declared it), not after the setup
  // time.
  WaitWatch watch(t.watched_ranks(), 0, "TCP connection setup");
  auto close_all = [&] {
    for (int fd : listeners) ::close(fd);
    for (int& fd : fds)
      if (fd >= 0) ::close(fd), fd = -1;
  };
  try {
    // Lower ranks never wait for higher ones before accepting, so this cannot deadlock:
    // connect to every lower rank (its listener queues us), then accept the higher ones.
    for (int j = 0; ok && j < me; ++j) {
      for (const std::string& a : cards[j].addrs)
        if ((fds[j] = connect_to(a, cards[j].port, token, me, j, watch)) >= 0) break;
      if (fds[j] < 0) {
        watch.check();  // it failed: say so, rather than that it cannot be reached
        ok = false;
        why = "cannot reach rank " + std::to_string(j) + " at " +
              (cards[j].addrs.empty() ? "?" : cards[j].addrs[0]) + ":" + std::to_string(cards[j].port);
      }
    }
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kSetupTimeoutMs);
    int expected = ok ? n - 1 - me : 0;
    while (expected > 0) {
      std::vector<pollfd> pf;
      for (int fd : listeners) pf.push_back({fd, POLLIN, 0});
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      deadline - std::chrono::steady_clock::now()).count());
      int rc = left <= 0 ? 0 : ::poll(pf.data(), pf.size(), std::min(left, WaitWatch::kPollMs));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0 && left > 0) {
        watch.check();
        continue;
      }
      if (rc <= 0) {
        ok = false;
        std::string missing;
        for (int i = me + 1; i < n; ++i)
          if (fds[i] < 0) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
        why = "rank(s) " + missing + " did not connect within the setup time";
        break;
      }
      for (auto& p : pf) {
        if (!(p.revents & POLLIN)) continue;
        int fd = ::accept4(p.fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) continue;
        Hello h{}, r{kMagic, token, static_cast<uint32_t>(me), 0};
        bool ours = false;
        try {
          ours = io_all(fd, &h, sizeof h, false, kSetupTimeoutMs, watch) && h.magic == kMagic &&
                 h.token == token && static_cast<int>(h.rank) > me && static_cast<int>(h.rank) < n &&
                 fds[h.rank] < 0 && io_all(fd, &r, sizeof r, true, kSetupTimeoutMs, watch);
        } catch (...) {
          ::close(fd);
          throw;
        }
        if (!ours) {
          ::close(fd);  // not one of ours (another job, a stray connection)
          continue;
        }
        fds[h.rank] = fd;
        --expected;
      }
    }
  } catch (...) {
    close_all();
    throw;
  }
  for (int fd : listeners) ::close(fd);
  uint64_t all_ok = ok ? 1 : 0;
  t.allreduce_and(&all_ok, 1);
  if (!all_ok) {
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
    if (!ok) HVDL_LOG(WARNING) << "cross-host data over MPI instead of direct TCP: " << why;
    return nullptr;
  }
  for (int fd : fds) {
    if (fd < 0) continue;
    set_nonblocking(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    // A deep send queue keeps the link busy while this rank is descheduled (on a
    // loaded machine, for milliseconds): 16 MiB where allowed (root), else the
    // system's maximum, which the kernel doubles.
    int want = 16 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want) != 0) {
      want = 4 << 20;
      setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
    }
  }
  return std::make_unique<TcpTransport>(std::move(base), std::move(fds),
                                        TcpInfo{o, listening});
}

const TcpInfo* tcp_info(const Transport& t) {
  const auto* tcp = dynamic_cast<const TcpTransport*>(&t);
  return tcp ? &tcp->info() : nullptr;
}

}  // namespace hvdl
