#include "mpi_heartbeat.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "../common/logging.h"
#include "mpi_failures.h"
#include "mpi_take_arrived.h"
#include "peer_health.h"

namespace hvdl {

using Clock = std::chrono::steady_clock;

namespace {
int open_pidfd(int pid) {
#ifdef SYS_pidfd_open
  return pid > 0 ? static_cast<int>(syscall(SYS_pidfd_open, pid, 0)) : -1;
#else
  (void)pid;
  return -1;
#endif
}
constexpr int kBeatTag = 7;
constexpr int kVerdictTag = 8;  // int32 failed rank, then the reason's text
}  // namespace

MpiHeartbeat::MpiHeartbeat(MPI_Comm world, const std::vector<int>& local_pids, double timeout_s,
                           std::function<void()> departures)
    : timeout_s_(timeout_s), local_pids_(local_pids), departures_(std::move(departures)) {
  MPI_Comm_dup(world, &comm_);
  mpi_failures::adopt(comm_);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
  // Ten beats per timeout (at most one a second, at least every 20 ms): a peer is
  // declared dead after missing most of them, within the timeout.
  period_s_ = std::clamp(timeout_s / 10, 0.02, 1.0);
  pidfds_.assign(size_, -1);
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && r < static_cast<int>(local_pids.size())) pidfds_[r] = open_pidfd(local_pids[r]);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  sends_.assign(size_, MPI_REQUEST_NULL);
  told_.assign(size_, 0);
  MPI_Irecv(&in_, 1, MPI_BYTE, MPI_ANY_SOURCE, kBeatTag, comm_, &recv_);
  thread_ = std::thread([this] { loop(); });
}

void MpiHeartbeat::receive_all(std::vector<Clock::time_point>& heard) {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Test(&recv_, &flag, &st);
    if (rc != MPI_SUCCESS) {
      mpi_failures::raise(comm_, rc, "the heartbeat's MPI_Test");
    }
    if (!flag) return;
    if (st.MPI_SOURCE >= 0 && st.MPI_SOURCE < size_) heard[st.MPI_SOURCE] = Clock::now();
    MPI_Irecv(&in_, 1, MPI_BYTE, MPI_ANY_SOURCE, kBeatTag, comm_, &recv_);
  }
}

void MpiHeartbeat::receive_verdicts() {
  PeerHealth& health = PeerHealth::get();
  for (;;) {
    std::string buf;
    int from = -1, rc = MPI_SUCCESS;
    const bool got = take_arrived(comm_, kVerdictTag, &buf, &from, &rc);
    if (rc != MPI_SUCCESS) mpi_failures::raise(comm_, rc, "the heartbeat's receive of a verdict");
    if (!got) return;
    int32_t failed = -1;
    if (buf.size() < sizeof(failed)) continue;
    std::memcpy(&failed, buf.data(), sizeof(failed));
    if (failed < 0 || failed >= size_ || failed == rank_) continue;
    told_[failed] = 1;  // the declarer tells everyone; no need to pass it on
    health.declare(failed, buf.substr(sizeof(failed)) + " (as rank " +
                               std::to_string(from) + " saw it)");
  }
}

void MpiHeartbeat::tell_verdicts() {
  PeerHealth& health = PeerHealth::get();
  for (int f = 0; f < size_; ++f) {
    if (told_[f] || f == rank_ || !health.failed(f)) continue;
    told_[f] = 1;
    const int32_t who = f;
    std::string msg(reinterpret_cast<const char*>(&who), sizeof(who));
    msg += health.reason(f);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || health.failed(p)) continue;
      verdicts_->bufs.push_back(msg);
      verdicts_->reqs.push_back(MPI_REQUEST_NULL);
      int rc = MPI_Isend(verdicts_->bufs.back().data(), static_cast<int>(msg.size()), MPI_BYTE, p,
                         kVerdictTag, comm_, &verdicts_->reqs.back());
      if (rc != MPI_SUCCESS) mpi_failures::raise(comm_, rc, "the heartbeat's MPI_Isend");
    }
  }
}

void MpiHeartbeat::loop() {
  pthread_setname_np(pthread_self(), "hvdl-heartbeat");  // findable in top / /proc
  PeerHealth& health = PeerHealth::get();
  std::vector<Clock::time_point> heard(size_, Clock::now());
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(timeout_s_));
  // Declared dead after this much silence: the timeout less two beats, so the
  // failure is seen within the timeout even though we only look once a beat.
  const auto silence_limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(std::max(timeout_s_ - 2 * period_s_, period_s_ * 2)));
  bool vouching = true;
  std::vector<pollfd> fds;
  std::vector<int> fd_rank;
  try {
    while (!stop_.load()) {
      note_departures();
      receive_all(heard);
      receive_verdicts();
      // An engine thread stuck outside every wait: stop vouching for this process,
      // so the peers treat it like a frozen one (and say so here once).
      std::string stuck = health.stuck_thread(timeout);
      if (!stuck.empty() && vouching)
        HVDL_LOG(ERROR) << "the engine thread of " << stuck << " has not answered for "
                        << timeout_s_ << " s; no longer sending heartbeats, so peers will give up";
      vouching = stuck.empty();
      for (int p = 0; p < size_ && vouching; ++p) {
        if (p == rank_ || health.failed(p)) continue;
        int done = 1;
        if (sends_[p] != MPI_REQUEST_NULL) MPI_Test(&sends_[p], &done, MPI_STATUS_IGNORE);
        if (!done) continue;  // the last beat is still on its way: never pile them up
        int rc = MPI_Isend(&out_, 1, MPI_BYTE, p, kBeatTag, comm_, &sends_[p]);
        if (rc != MPI_SUCCESS) mpi_failures::raise(comm_, rc, "the heartbeat's MPI_Isend");
      }
      const auto now = Clock::now();
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || health.failed(p)) continue;
        if (now - heard[p] > silence_limit) {
          double s = std::chrono::duration<double>(now - heard[p]).count();
          char buf[160];
          std::snprintf(buf, sizeof(buf),
                        "no heartbeat for %.1f s (frozen or unreachable; "
                        "HOROVODLITE_PEER_TIMEOUT_SECONDS=%g)",
                        s, timeout_s_);
          health.declare(p, buf);
        }
      }
      tell_verdicts();
      fds.clear();
      fd_rank.clear();
      fds.push_back({wake_fd_, POLLIN, 0});
      fd_rank.push_back(-1);
      for (int p = 0; p < size_; ++p)
        if (pidfds_[p] >= 0 && !health.failed(p)) {
          fds.push_back({pidfds_[p], POLLIN, 0});
          fd_rank.push_back(p);
        }
      int n = poll(fds.data(), fds.size(), static_cast<int>(period_s_ * 1000));
      // A peer's exit may be the consequence of a failure it told us of just before:
      // take the news first, so the cause is declared before the exit; and a peer
      // whose script ended said farewell before it exited.
      if (n > 0) note_departures(), receive_verdicts();
      if (n > 0)
        for (size_t i = 1; i < fds.size(); ++i)
          if (fds[i].revents)
            health.declare(fd_rank[i], "its process exited (pid " +
                                           std::to_string(local_pids_[fd_rank[i]]) + ")");
    }
  } catch (const std::exception& e) {
    // raise() declared the failure already; nothing more for this thread to watch.
    HVDL_LOG(DEBUG) << "heartbeat stopped: " << e.what();
  }
}

MpiHeartbeat::~MpiHeartbeat() {
  PeerHealth& health = PeerHealth::get();
  bool healthy = !health.any_failed();
  if (healthy) {
    // Meet every peer while the thread still beats and watches (a peer that dies now
    // fails this wait instead of hanging it), then stop.
    MPI_Request r;
    int rc = MPI_Ibarrier(comm_, &r);
    while (rc == MPI_SUCCESS) {
      int flag = 0;
      rc = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
      if (flag || health.any_failed()) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    healthy = rc == MPI_SUCCESS && !health.any_failed();
  }
  stop_.store(true);
  uint64_t one = 1;
  if (write(wake_fd_, &one, sizeof(one)) < 0) {
  }
  if (thread_.joinable()) thread_.join();
  close(wake_fd_);
  for (int fd : pidfds_)
    if (fd >= 0) close(fd);
  mpi_failures::forget(comm_);
  if (!healthy) return;  // a broken world: leave its requests (and their buffers) be
  MPI_Cancel(&recv_);
  MPI_Wait(&recv_, MPI_STATUS_IGNORE);
  for (auto& s : sends_)
    if (s != MPI_REQUEST_NULL) MPI_Wait(&s, MPI_STATUS_IGNORE);
  delete verdicts_;  // none were sent: the world stayed healthy
  std::string beat;  // drain the beats still arriving (Comm_free wants none pending)
  int from = -1, rc = MPI_SUCCESS;
  while (take_arrived(comm_, kBeatTag, &beat, &from, &rc)) {
  }
  MPI_Comm_free(&comm_);
}

}  // namespace hvdl
