#include "shm_window.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "../common/logging.h"
#include "peer_health.h"

namespace hvdl {

namespace {

enum State : uint32_t { kStarting = 0, kOpen = 1, kClosed = 2, kAborted = 3 };
constexpr const char* kNamePrefix = "horovodlite-";  // named fallback, under /dev/shm

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

bool process_alive(int pid, int pidfd) {
  if (pidfd >= 0) {
    pollfd p{pidfd, POLLIN, 0};
    // A pidfd becomes readable once the process has exited, reaped or not.
    return poll(&p, 1, 0) == 0;
  }
  return !(kill(pid, 0) == -1 && errno == ESRCH);
}

// Named segments whose creator is gone: what a crash between shm_open and
// shm_unlink (the only window where a name exists) leaves behind.
void sweep_stale_named_segments() {
  DIR* d = opendir("/dev/shm");
  if (!d) return;
  const size_t plen = std::strlen(kNamePrefix);
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, kNamePrefix, plen) != 0) continue;
    int pid = std::atoi(e->d_name + plen);
    if (pid > 0 && kill(pid, 0) == -1 && errno == ESRCH)
      shm_unlink((std::string("/") + e->d_name).c_str());
  }
  closedir(d);
}

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

struct ShmWindow::Header {
  struct alignas(64) Line {
    uint64_t v;
  };
  alignas(64) int32_t pid;
  uint32_t state;
  uint32_t peer_failure;  // set with kAborted: `why` is a peer's failure, not our own error
  // One cache line per counter: each is written by its owner only and polled by
  // the others, so no two of them ever share a line.
  Line counters[kNumCounters];
  char why[512];
};
uint64_t* ShmWindow::counter_ptr(int r, int i) const {
  static_assert(sizeof(Header) <= kHeaderBytes, "header must fit its page");
  return &header(r)->counters[i].v;
}

bool ShmWindow::map(int fd, size_t total) {
  if (fd < 0) return false;
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return false;
  base_ = static_cast<char*>(p);
  return true;
}

std::unique_ptr<ShmWindow> ShmWindow::create(Transport& g, size_t bytes_per_rank, bool named) {
  // Rank 0's settings hold for all, so ranks never disagree about the layout.
  std::string cfg;
  if (g.rank() == 0) {
    std::ostringstream os;
    os << bytes_per_rank << ' ' << (named ? 1 : 0);
    cfg = os.str();
  }
  g.broadcast(cfg, 0);
  std::istringstream is(cfg);
  int force_named = 0;
  is >> bytes_per_rank >> force_named;

  std::unique_ptr<ShmWindow> w(new ShmWindow());
  w->rank_ = g.rank();
  w->size_ = g.size();
  if (const std::vector<int>* watched = g.watched_ranks()) w->watched_ = *watched;
  w->bytes_per_rank_ = bytes_per_rank;
  w->region_bytes_ = kHeaderBytes + round_up(bytes_per_rank, 4096);
  w->total_bytes_ = w->region_bytes_ * w->size_;
  const size_t total = w->total_bytes_;

  auto agree = [&](bool ok) {
    uint64_t v = ok ? 1 : 0;
    g.allreduce_and(&v, 1);
    return v == 1;
  };
  auto unmap = [&] {
    if (w->base_) munmap(w->base_, total);
    w->base_ = nullptr;
  };

  bool ok = false;
  if (!force_named) {
    // memfd: nothing named ever exists. Peers reopen rank 0's descriptor via /proc.
    std::string where;
    int fd = -1;
    if (g.rank() == 0) {
      fd = memfd_create("horovodlite-shm", MFD_CLOEXEC);
      if (fd >= 0 && ftruncate(fd, static_cast<off_t>(total)) == 0)
        where = "/proc/" + std::to_string(getpid()) + "/fd/" + std::to_string(fd);
    }
    g.broadcast(where, 0);
    if (g.rank() != 0 && !where.empty()) fd = open(where.c_str(), O_RDWR | O_CLOEXEC);
    ok = !where.empty() && w->map(fd, total);
    ok = agree(ok);  // rank 0 keeps its descriptor open until every peer has it
    if (fd >= 0) close(fd);
    if (!ok) unmap();
  }
  if (!ok) {
    std::string name;
    int fd = -1;
    if (g.rank() == 0) {
      sweep_stale_named_segments();
      static std::atomic<int> serial{0};
      name = std::string("/") + kNamePrefix + std::to_string(getpid()) + "-" +
             std::to_string(serial++);
      fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd < 0 || ftruncate(fd, static_cast<off_t>(total)) != 0) {
        if (fd >= 0) shm_unlink(name.c_str());
        name.clear();
      }
    }
    g.broadcast(name, 0);
    if (g.rank() != 0 && !name.empty()) fd = shm_open(name.c_str(), O_RDWR, 0600);
    bool mine = !name.empty() && w->map(fd, total);
    if (fd >= 0) close(fd);
    ok = agree(mine);  // every rank has mapped it (or given up): the name can go
    if (g.rank() == 0 && !name.empty()) shm_unlink(name.c_str());
    if (!ok) {
      unmap();
      HVDL_LOG(WARNING) << "shared-memory window of " << total << " bytes could not be mapped"
                        << (mine ? " by a peer" : std::string(": ") + std::strerror(errno));
      return nullptr;
    }
    w->named_ = true;
  }

  // First touch of our own region (its pages then sit near this rank), then say we
  // are here. Peers read our pid only after the barrier.
  Header* me = w->header(w->rank_);
  std::memset(w->base_ + w->region_bytes_ * w->rank_, 0, w->region_bytes_);
  me->pid = static_cast<int32_t>(getpid());
  __atomic_store_n(&me->state, static_cast<uint32_t>(kOpen), __ATOMIC_RELEASE);
  g.barrier();

  w->pids_.resize(w->size_);
  w->pidfds_.assign(w->size_, -1);
  for (int r = 0; r < w->size_; ++r) {
    w->pids_[r] = w->header(r)->pid;
    if (r != w->rank_) w->pidfds_[r] = open_pidfd(w->pids_[r]);
    // Map the peers' pages into our page table now rather than inside a collective.
    volatile char sink = 0;
    for (size_t off = 0; off < w->region_bytes_; off += 4096) sink = w->base_[w->region_bytes_ * r + off];
    (void)sink;
  }
  HVDL_LOG(DEBUG) << "shared-memory window: " << w->size_ << " ranks x " << bytes_per_rank
                  << " bytes via " << w->mechanism();
  return w;
}

ShmWindow::~ShmWindow() {
  if (base_) {
    Header* me = header(rank_);
    // Closing because a rank was lost: leave that news for host-mates still waiting
    // here, so they name the lost rank, not this orderly departure, as the cause.
    const std::string lost = PeerHealth::get().first_failure();
    if (__atomic_load_n(&me->state, __ATOMIC_ACQUIRE) != kAborted && !lost.empty()) {
      std::snprintf(me->why, sizeof(me->why), "%s", lost.c_str());
      me->peer_failure = 1;
      __atomic_store_n(&me->state, static_cast<uint32_t>(kAborted), __ATOMIC_RELEASE);
    }
    if (__atomic_load_n(&me->state, __ATOMIC_ACQUIRE) != kAborted)
      __atomic_store_n(&me->state, static_cast<uint32_t>(kClosed), __ATOMIC_RELEASE);
    munmap(base_, total_bytes_);
  }
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
}

void ShmWindow::abort(const std::string& why, bool peer_failure) {
  if (failed_) return;
  failed_ = true;
  failure_ = why;
  Header* me = header(rank_);
  std::snprintf(me->why, sizeof(me->why), "%s", why.c_str());
  me->peer_failure = peer_failure ? 1 : 0;
  __atomic_store_n(&me->state, static_cast<uint32_t>(kAborted), __ATOMIC_RELEASE);
}

void ShmWindow::check_usable() const {
  if (failed_)
    throw std::runtime_error("the shared-memory path is unusable after an earlier failure (" +
                             failure_ + ")");
}

void ShmWindow::check_peers() {
  // A frozen peer (SIGSTOP) neither exits nor publishes: only the heartbeat can tell.
  PeerHealth& health = PeerHealth::get();
  health.check_pids(pids_);
  // A failure elsewhere in the set, as every transport wait watches it (watched_wait.h):
  // in a hierarchical allreduce a host-mate waits here on a rank whose cross-host part
  // has failed, and that rank may already have left the collective without aborting
  // this window (it learned of the failure outside it).
  if (!watched_.empty()) health.check(&watched_);
  PeerHealth::beat();
  // A peer that exited is a failure of the world, not only of this window: say so
  // (naming its rank and host), so every set stops waiting on it.
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && !process_alive(pids_[r], pidfds_[r]))
      health.declare_pid(pids_[r], "its process exited (pid " + std::to_string(pids_[r]) + ")");
  health.check_pids(pids_);
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const Header* h = header(r);
    uint32_t st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
    std::string who = "local rank " + std::to_string(r) + " (pid " + std::to_string(pids_[r]) + ")";
    if (st == kAborted) {
      // Most often it gave up because a rank was lost: that failure is the news.
      if (health.any_failed()) health.check(nullptr);
      char why[sizeof(h->why)];
      std::memcpy(why, h->why, sizeof(why));
      why[sizeof(why) - 1] = '\0';
      if (h->peer_failure) throw PeerFailure(why);  // its news: a rank failed
      throw std::runtime_error(who + " gave up a shared-memory collective: " + why);
    }
    if (st == kClosed)
      throw std::runtime_error(who + " left while a shared-memory collective was in progress");
    if (!process_alive(pids_[r], pidfds_[r])) {
      health.declare_pid(pids_[r], "its process exited (pid " + std::to_string(pids_[r]) + ")");
      health.check_pids(pids_);
      throw std::runtime_error(who + " exited during a shared-memory collective");
    }
  }
}

void ShmWindow::Waiter::pause() {
  using namespace std::chrono;
  if (spin_ && idle_ < 256) {  // the usual wait: a peer a few hundred nanoseconds behind
    ++idle_;
    cpu_relax();
    return;
  }
  auto now = steady_clock::now();
  if (idle_ == (spin_ ? 256u : 0u)) since_ = checked_ = now;
  ++idle_;
  if (now - checked_ >= milliseconds(1)) {
    checked_ = now;
    w_.check_peers();
  }
  auto waited = now - since_;
  if (spin_ && waited < microseconds(50)) {
    cpu_relax();
  } else if (waited < microseconds(500)) {
    sched_yield();
  } else {
    std::this_thread::sleep_for(waited < milliseconds(5) ? microseconds(20) : microseconds(200));
  }
}

}  // namespace hvdl
