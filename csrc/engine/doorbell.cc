#include "doorbell.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

namespace hvdl {

// One cache line per rank. `seq` is the futex word: anyone with news for rank r
// publishes the news, then bumps r's seq, then wakes r if it said it sleeps. r takes
// its ticket (seq) before looking for news, so news published after it looked always
// changes seq before r's futex_wait compares it, and the kernel does not put r to
// sleep. All accesses are sequentially consistent (the flag/seq handshake needs it).
struct alignas(64) Doorbell::Slot {
  uint32_t seq;
  uint32_t sleeping;
  uint64_t rung;
  int64_t rung_at_ns;  // steady_clock of the last ring (a measurement only)
};

std::unique_ptr<Doorbell> Doorbell::create(Transport& group) {
  auto w = ShmWindow::create(group, sizeof(Slot));
  if (!w) return nullptr;
  return std::unique_ptr<Doorbell>(new Doorbell(std::move(w)));
}

Doorbell::Doorbell(std::unique_ptr<ShmWindow> w)
    : window_(std::move(w)), rank_(window_->rank()), size_(window_->size()) {}

Doorbell::Slot& Doorbell::slot(int r) const { return *reinterpret_cast<Slot*>(window_->data(r)); }

// `sleeping`: 0 awake, kAnything asleep until any news, kOwnWork asleep until its own
// callers' news (a ring then bumps nothing: the sleeper's futex_wait must not return
// for it, and its rung() says what it missed once it looks).
namespace {
constexpr uint32_t kAnything = 1, kOwnWork = 2;
}

void Doorbell::wake(int r, bool ring) {
  Slot& s = slot(r);
  if (ring && __atomic_load_n(&s.sleeping, __ATOMIC_SEQ_CST) == kOwnWork) return;
  __atomic_add_fetch(&s.seq, 1, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s.sleeping, __ATOMIC_SEQ_CST))
    syscall(SYS_futex, &s.seq, FUTEX_WAKE, 1, nullptr, nullptr, 0);
}

void Doorbell::ring(uint64_t round) {
  // One clock reading for every peer: with the polling thread every caller's round
  // rings here, and a reading (~50 ns) per peer was most of a ring's cost.
  const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    uint64_t* rung = &slot(p).rung;
    uint64_t cur = __atomic_load_n(rung, __ATOMIC_SEQ_CST);
    __atomic_store_n(&slot(p).rung_at_ns, now, __ATOMIC_RELAXED);
    while (cur < round &&
           !__atomic_compare_exchange_n(rung, &cur, round, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
    }
    wake(p, true);
  }
}

uint64_t Doorbell::rung() const { return __atomic_load_n(&slot(rank_).rung, __ATOMIC_SEQ_CST); }

std::chrono::steady_clock::time_point Doorbell::rung_at() const {
  return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(
      __atomic_load_n(&slot(rank_).rung_at_ns, __ATOMIC_RELAXED)));
}

uint32_t Doorbell::ticket() const { return __atomic_load_n(&slot(rank_).seq, __ATOMIC_SEQ_CST); }

void Doorbell::sleep(uint32_t ticket, std::chrono::nanoseconds timeout, bool rings_wake) {
  if (timeout <= std::chrono::nanoseconds::zero()) return;
  Slot& s = slot(rank_);
  __atomic_store_n(&s.sleeping, rings_wake ? kAnything : kOwnWork, __ATOMIC_SEQ_CST);
  if (__atomic_load_n(&s.seq, __ATOMIC_SEQ_CST) == ticket) {
    struct timespec ts;
    ts.tv_sec = static_cast<time_t>(timeout.count() / 1000000000);
    ts.tv_nsec = static_cast<long>(timeout.count() % 1000000000);
    // Returns on a wake, a changed seq (EAGAIN), a signal (EINTR) or the timeout: the
    // caller re-checks its conditions in every case.
    syscall(SYS_futex, &s.seq, FUTEX_WAIT, ticket, &ts, nullptr, 0);
  }
  __atomic_store_n(&s.sleeping, 0, __ATOMIC_SEQ_CST);
}

}  // namespace hvdl
