// Taking a message that has arrived, without ever waiting for one that has not
// (internal to csrc/transport: the heartbeat's verdicts, the farewell notes).
//
// Why not MPI_Iprobe then MPI_Recv: under ULFM, at the end of a job that had lost a
// rank, that receive was seen to wait forever after the probe had said a farewell note
// was there (test_dead_or_frozen_rank_on_a_simulated_host[kill, ULFM]: the heartbeat
// thread in has_left's MPI_Recv, the main thread joining it, 2 of 14 runs). A matched
// probe (MPI_Improbe) takes the message it saw out of MPI's matching, so the receive
// that follows (MPI_Imrecv) is of exactly that message; and its wait is bounded anyway.
#pragma once
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

namespace hvdl {

// One message with `tag` from any member of `comm`, if one has arrived: true, with its
// bytes in *bytes and its sender in *source. False when none has, or when an MPI call
// failed (its code in *rc, else MPI_SUCCESS), or when the receive of a message seen did
// not end within `limit_s` (the message is then dropped: its buffer is left to MPI).
inline bool take_arrived(MPI_Comm comm, int tag, std::string* bytes, int* source, int* rc,
                         double limit_s = 1.0) {
  int flag = 0;
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  *rc = MPI_Improbe(MPI_ANY_SOURCE, tag, comm, &flag, &msg, &st);
  if (*rc != MPI_SUCCESS || !flag) return false;
  int n = 0;
  MPI_Get_count(&st, MPI_BYTE, &n);
  // On the heap: a receive that does not end in time still owns it.
  auto* buf = new std::string(static_cast<size_t>(std::max(n, 0)), '\0');
  MPI_Request req = MPI_REQUEST_NULL;
  *rc = MPI_Imrecv(&(*buf)[0], n, MPI_BYTE, &msg, &req);
  if (*rc != MPI_SUCCESS) return false;  // buf may be MPI's now: left to it
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  for (;;) {
    int done = 0;
    *rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (*rc != MPI_SUCCESS) return false;
    if (done) break;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  *bytes = std::move(*buf);
  delete buf;
  *source = st.MPI_SOURCE;
  return true;
}

}  // namespace hvdl
