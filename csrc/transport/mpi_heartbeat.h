// The heartbeat of one process over MPI, on a thread of its own (so it never depends
// on the user's Python thread or on an engine thread being in a round). Every
// `period` it sends one byte to each peer and notes whom it heard from; a peer silent
// for the peer timeout (a frozen process: SIGSTOP, a hung file system) is declared
// dead in PeerHealth. Peers on this host are also watched through pidfds, which wake
// the thread the moment such a process exits. The thread sleeps in poll() between
// beats: a few wake-ups a second at most, nothing measurable while training.
//
// Each failure this rank declares (by whatever thread) is also told to the other ranks
// once, with its reason: the ranks notice a frozen peer up to a beat apart, and the one
// that notices first may give up and exit before the others notice; without the news
// they would name its exit, a consequence, instead of the frozen peer, the cause.
#pragma once
#include <mpi.h>

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace hvdl {

class MpiHeartbeat {
 public:
  // Collective over `world` (duplicated). pids[r]: rank r's pid if it runs on this
  // host, else 0. `departures` (may be empty) passes the farewells that arrived on to
  // PeerHealth::note_departed; it is called before every declaration, so a peer whose
  // script ended is said to have left when its exit or its silence is seen.
  MpiHeartbeat(MPI_Comm world, const std::vector<int>& local_pids, double timeout_s,
               std::function<void()> departures = {});
  // Collective again after a healthy run (every rank stops together, so none mistakes
  // the others' silence for a failure); after a failure it only stops the thread.
  ~MpiHeartbeat();

 private:
  void loop();
  void receive_all(std::vector<std::chrono::steady_clock::time_point>& heard);
  void receive_verdicts();
  void tell_verdicts();
  void note_departures() {
    if (departures_) departures_();
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  double timeout_s_, period_s_;
  std::vector<int> pidfds_;      // per rank, -1 if not local / unavailable
  std::vector<int> local_pids_;
  std::function<void()> departures_;
  int wake_fd_ = -1;             // eventfd: ends the poll at shutdown
  std::atomic<bool> stop_{false};
  MPI_Request recv_ = MPI_REQUEST_NULL;
  uint8_t in_ = 0, out_ = 0;
  std::vector<MPI_Request> sends_;
  // The news of failures: per rank, whether it has been told (or heard); the messages
  // in flight. Left allocated when the world breaks, as MPI may still read them.
  struct Verdicts {
    std::vector<std::string> bufs;
    std::vector<MPI_Request> reqs;
  };
  std::vector<char> told_;
  Verdicts* verdicts_ = new Verdicts();
  std::thread thread_;
};

}  // namespace hvdl
