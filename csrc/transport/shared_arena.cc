#include "shared_arena.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <sstream>
#include <stdexcept>

#include "../common/logging.h"

namespace hvdl {

namespace {
constexpr size_t kPage = 4096, kHuge = 2u << 20;
size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }
}  // namespace

namespace {
std::string g_unavailable;  // why there is no arena, once that is known
// Process-wide like the arena itself (its arrays outlive init() and shutdown()).
std::atomic<size_t> g_reserve{64ull << 30};
std::atomic<bool> g_made{false};
}

bool SharedArena::reserve_bytes(size_t bytes) {
  g_reserve = bytes;
  return g_made.load();
}

bool SharedArena::exists() { return g_made.load(); }

// Process-wide, not the engine's: the arena is the process's memory, not a world's.
// hvd.shared_empty() allocates from it before hvd.init() and after shutdown(), the
// arrays it hands out outlive any engine (and are given back to it when Python frees
// them), and its peers map it by this process's pid and fd, which must not change
// when the engine is re-initialised.
SharedArena* SharedArena::get_if_any() {
  // Never destroyed: arrays may outlive main.
  static SharedArena* a = []() -> SharedArena* {
    try {
      g_made = true;
      return new SharedArena();
    } catch (const std::exception& e) {
      g_unavailable = e.what();
      HVDL_LOG(DEBUG) << e.what() << "; allreduces take the staged path";
      return nullptr;
    }
  }();
  return a;
}

SharedArena& SharedArena::get() {
  SharedArena* a = get_if_any();
  if (!a) throw std::runtime_error(g_unavailable);
  return *a;
}

SharedArena::SharedArena() {
  capacity_ = round_up(g_reserve.load(), kHuge);
  fd_ = memfd_create("horovodlite-arena", MFD_CLOEXEC);
  if (fd_ < 0 || ftruncate(fd_, static_cast<off_t>(capacity_)) != 0)
    throw std::runtime_error(std::string("horovodlite: cannot make the shared arena: ") +
                             std::strerror(errno));
  void* p = mmap(nullptr, capacity_, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd_, 0);
  if (p == MAP_FAILED)
    throw std::runtime_error(std::string("horovodlite: cannot map the shared arena: ") +
                             std::strerror(errno));
  base_ = static_cast<char*>(p);
  pid_ = getpid();
  free_[0] = capacity_;
}

std::shared_ptr<void> SharedArena::allocate(size_t bytes) {
  if (getpid() != pid_)
    throw std::runtime_error("horovodlite: shared arrays cannot be allocated in a forked child");
  const size_t len = round_up(bytes ? bytes : 1, kPage);
  const size_t align = len >= kHuge ? kHuge : kPage;
  size_t off = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = free_.begin();
    for (; it != free_.end(); ++it) {
      off = round_up(it->first, align);
      if (off + len <= it->first + it->second) break;
    }
    if (it == free_.end()) throw std::bad_alloc();
    const size_t start = it->first, end = it->first + it->second;
    free_.erase(it);
    if (start < off) free_[start] = off - start;
    if (off + len < end) free_[off + len] = end - (off + len);
    in_use_ += len;
  }
  return std::shared_ptr<void>(base_ + off, [this, off, len](void*) { release(off, len); });
}

void SharedArena::release(size_t off, size_t len) {
  // A forked child shares the pages with its parent, whose array this still is there.
  if (getpid() != pid_) return;
  // The pages go back to the kernel; the next block here starts as zero pages again.
  fallocate(fd_, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(off),
            static_cast<off_t>(len));
  std::lock_guard<std::mutex> l(mu_);
  in_use_ -= len;
  auto next = free_.lower_bound(off);
  if (next != free_.end() && off + len == next->first) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == off) {
      prev->second += len;
      return;
    }
  }
  free_[off] = len;
}

size_t SharedArena::bytes_in_use() {
  std::lock_guard<std::mutex> l(mu_);
  return in_use_;
}

std::string SharedArena::path() const {
  return "/proc/" + std::to_string(pid_) + "/fd/" + std::to_string(fd_);
}

std::unique_ptr<PeerArenas> PeerArenas::map(Transport& g) {
  std::string mine;
  if (SharedArena* a = SharedArena::get_if_any())
    mine = a->path() + " " + std::to_string(a->capacity());
  // Everyone's "path capacity" (or "" where this rank has no arena), in rank order.
  auto all = g.gather(mine, 0);
  std::string joined;
  if (g.rank() == 0)
    for (auto& s : all) joined += s + "\n";
  g.broadcast(joined, 0);

  std::unique_ptr<PeerArenas> p(new PeerArenas());
  p->rank_ = g.rank();
  p->bases_.assign(g.size(), nullptr);
  p->caps_.assign(g.size(), 0);
  std::istringstream lines(joined);
  std::string line;
  bool ok = !mine.empty();  // then so is every other line, or some map below fails
  for (int r = 0; ok && r < g.size() && std::getline(lines, line); ++r) {
    if (r == g.rank()) {
      p->bases_[r] = SharedArena::get().base();
      p->caps_[r] = SharedArena::get().capacity();
      continue;
    }
    std::istringstream is(line);
    std::string path;
    size_t cap = 0;
    int fd = (is >> path >> cap) ? open(path.c_str(), O_RDWR | O_CLOEXEC) : -1;
    void* m = fd < 0 ? MAP_FAILED
                     : mmap(nullptr, cap, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (fd >= 0) close(fd);
    ok = m != MAP_FAILED;
    if (!ok) {
      HVDL_LOG(DEBUG) << "cannot map local rank " << r << "'s shared arena: " << std::strerror(errno);
      break;
    }
    p->bases_[r] = static_cast<char*>(m);
    p->caps_[r] = cap;
  }
  uint64_t v = ok ? 1 : 0;
  g.allreduce_and(&v, 1);
  if (!v) return nullptr;  // the destructor unmaps what this rank did map
  return p;
}

PeerArenas::~PeerArenas() {
  for (size_t r = 0; r < bases_.size(); ++r)
    if (static_cast<int>(r) != rank_ && bases_[r]) munmap(bases_[r], caps_[r]);
}

}  // namespace hvdl
