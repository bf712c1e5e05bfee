// Transport and World over MPI. Each transport owns three duplicated communicators so
// that bulk data, negotiation and wake-up messages can never match each other's
// receives, and so that several process sets can run on their own threads.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <climits>
#include <mutex>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <chrono>

#include "../common/logging.h"
#include "held_ring.h"
#include "mpi_failures.h"
#include "mpi_heartbeat.h"
#include "mpi_take_arrived.h"
#include "peer_health.h"
#include "watched_wait.h"
#include "world.h"

namespace hvdl {
namespace {

// MPI counts are ints: larger transfers are split into pieces of this many bytes.
constexpr size_t kMaxPiece = size_t(1) << 30;

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) mpi_failures::raise(MPI_COMM_NULL, rc, what);
}

// OpenMPI's blocking calls spin at full speed while waiting for a peer, which on a
// machine with fewer cores than threads starves the very peer being waited for.
// We wait politely instead (wait_until, watched_wait.h: test briefly, then yield,
// then sleep with a growing interval). Each MPI_Test also drives progress (e.g. the
// single-copy transfers). No wait is without a way out: an error return (a failed peer
// under ULFM, a revoked communicator) ends it, and once a millisecond of waiting
// `watch` (a failed member, the deadline if it has one) and `check()` (a peer that
// abandoned the collective) may end it with an exception.
template <class Check>
void wait_polite(MPI_Request* reqs, int n, MPI_Comm comm, const char* what, WaitWatch& watch,
                 Check&& check, MPI_Status* statuses = MPI_STATUSES_IGNORE) {
  wait_until(
      [&] {
        int flag = 0;
        int rc = MPI_Testall(n, reqs, &flag, statuses);
        if (rc != MPI_SUCCESS) mpi_failures::raise(comm, rc, what);
        return flag != 0;
      },
      watch, check);
}

// A wake-up carrying this instead of a round number: the sender gave up a collective
// half way (a local error during its execution), so the data stream between the
// ranks of this set is out of step and nobody may wait on it any more.
constexpr uint64_t kAbandoned = UINT64_MAX;

// exchange_all()'s messages on the negotiation communicator.
constexpr int kExchangeTag = 7;

// The largest piece of an exchange_all() message. OpenMPI's TCP btl sends a message over
// its eager limit (64 KiB, its header included) by rendezvous: the receiver's answer
// crosses the link before the data does. A vote with a 64 KiB rider is just over it: on
// two simulated hosts at 10 Gbit/s its round took 363-404 us, and 157-184 us sent as
// pieces under the limit, which all go at once. (A small first piece, to show sooner
// that the peer came, cost more than it saved: a 4 KiB rider's call went from 1.14-1.25x
// MPI_Allreduce's speed to 0.72-0.75x.)
constexpr size_t kVotePiece = 65536 - 1024;

class MpiTransport : public Transport {
 public:
  // `also_watched`: world ranks whose failure ends this group's waits besides its
  // members' (transport.h, watched_ranks()).
  explicit MpiTransport(MPI_Comm base, const std::vector<int>& also_watched = {}) {
    check(MPI_Comm_dup(base, &data_), "MPI_Comm_dup");
    check(MPI_Comm_dup(base, &ctrl_), "MPI_Comm_dup");
    check(MPI_Comm_dup(base, &bell_), "MPI_Comm_dup");
    for (MPI_Comm c : {data_, ctrl_, bell_}) mpi_failures::adopt(c);
    members_ = mpi_failures::world_ranks_of(data_);
    watched_ = members_;
    for (int r : also_watched)
      if (std::find(watched_.begin(), watched_.end(), r) == watched_.end()) watched_.push_back(r);
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
    for (int p = 0; p < size_; ++p)
      if (p != rank_) everyone_else_.push_back(p);
    bell_out_.assign(size_, 0);
    post_bell_recv();
  }

  ~MpiTransport() override {
    for (MPI_Comm c : {data_, ctrl_, bell_}) mpi_failures::forget(c);
    // After a peer failed, nothing here may wait on it: leave the requests and
    // communicators be (the process will not finalize this world either).
    if (broken()) return;
    try {
      // Wake-ups may still be in flight towards us; let every rank finish sending,
      // then consume what arrived so freeing the communicator leaves nothing behind.
      if (!bell_sends_.empty())
        wait(bell_sends_.data(), static_cast<int>(bell_sends_.size()), bell_,
             "MPI_Waitall (wake-ups)");
      barrier();
    } catch (const std::exception& e) {
      HVDL_LOG(DEBUG) << "closing a transport after a failure: " << e.what();
      return;
    }
    MPI_Cancel(&bell_req_);
    MPI_Wait(&bell_req_, MPI_STATUS_IGNORE);
    int flag = 1;
    while (flag) {
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, 0, bell_, &flag, &st);
      if (flag) {
        uint64_t v;
        MPI_Recv(&v, 1, MPI_UINT64_T, st.MPI_SOURCE, 0, bell_, MPI_STATUS_IGNORE);
      }
    }
    try {
      wait_all();
    } catch (const std::exception&) {
      return;
    }
    MPI_Comm_free(&bell_);
    MPI_Comm_free(&ctrl_);
    MPI_Comm_free(&data_);
  }

  // Also reads the wake-ups that arrived (keeping the rounds for poll_ring()), so a
  // peer's notice that it abandoned a collective is seen by whoever waits outside.
  void check_alive() override { watch(); }
  const std::vector<int>* world_ranks() const override { return &members_; }
  const std::vector<int>* watched_ranks() const override { return &watched_; }

  void abandon(const std::string& why) override {
    drain();
    if (!abandoned_.empty()) return;
    abandoned_ = "horovodlite: this process set can run no more collectives: " + why;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      MPI_Request r;
      if (MPI_Isend(&kAbandonedValue, 1, MPI_UINT64_T, p, 0, bell_, &r) == MPI_SUCCESS)
        MPI_Request_free(&r);  // never waited on: the peer may be gone
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  Op isend(int peer, const void* buf, size_t bytes) override {
    return post(peer, const_cast<void*>(buf), bytes, true);
  }
  Op irecv(int peer, void* buf, size_t bytes) override { return post(peer, buf, bytes, false); }

  void wait(Op op) override {
    auto [begin, end] = ops_.at(op);
    try {
      wait(reqs_.data() + begin, end - begin, data_, "MPI_Waitall (data)");
    } catch (const PeerFailure&) {
      throw;
    } catch (...) {
      drain();
      throw;
    }
  }

  void wait_all() override {
    if (!reqs_.empty()) {
      try {
        wait(reqs_.data(), static_cast<int>(reqs_.size()), data_, "MPI_Waitall (data)");
      } catch (const PeerFailure&) {
        // The transfers never finish: forget them, the next collective must not wait
        // on them again (a failure has been declared; this set is done).
        reqs_.clear();
        ops_.clear();
        throw;
      } catch (...) {
        drain();  // a collective given up half way: nothing may touch its buffers after
        throw;
      }
    }
    reqs_.clear();
    ops_.clear();
  }

  void allreduce_and(uint64_t* words, size_t n) override {
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, words, static_cast<int>(n), MPI_UINT64_T, MPI_BAND, ctrl_, &r),
          "MPI_Iallreduce");
    WaitWatch w(&watched_, 0, "negotiation");
    wait_vote(&r, 1, w, MPI_STATUSES_IGNORE);
  }

  std::vector<std::string> gather(const std::string& mine, int root) override {
    int len = static_cast<int>(mine.size());
    std::vector<int> lens(rank_ == root ? size_ : 0), displs;
    MPI_Request r;
    check(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, ctrl_, &r), "MPI_Igather");
    wait(&r, 1, ctrl_, "negotiation");
    std::string all;
    if (rank_ == root) {
      displs.resize(size_);
      int total = 0;
      for (int i = 0; i < size_; ++i) displs[i] = total, total += lens[i];
      all.resize(total);
    }
    check(MPI_Igatherv(mine.data(), len, MPI_BYTE, all.data(), lens.data(), displs.data(),
                       MPI_BYTE, root, ctrl_, &r),
          "MPI_Igatherv");
    wait(&r, 1, ctrl_, "negotiation");
    std::vector<std::string> out;
    if (rank_ == root)
      for (int i = 0; i < size_; ++i) out.emplace_back(all.substr(displs[i], lens[i]));
    return out;
  }

  void broadcast(std::string& bytes, int root) override {
    long long len = static_cast<long long>(bytes.size());
    MPI_Request r;
    check(MPI_Ibcast(&len, 1, MPI_LONG_LONG, root, ctrl_, &r), "MPI_Ibcast");
    wait(&r, 1, ctrl_, "negotiation");
    bytes.resize(static_cast<size_t>(len));
    check(MPI_Ibcast(bytes.data(), static_cast<int>(len), MPI_BYTE, root, ctrl_, &r), "MPI_Ibcast");
    wait(&r, 1, ctrl_, "negotiation");
  }

  // On the negotiation communicator, whose collectives never match point-to-point
  // messages; every rank calls it in the same rounds, and MPI keeps each peer's
  // messages in order, so one tag serves.
  void exchange_all(const void* mine, size_t bytes, void* theirs, size_t stride,
                    size_t* lens) override {
    exchange_with(everyone_else_, mine, bytes, theirs, stride, lens);
  }

  void exchange_with(const std::vector<int>& with, const void* mine, size_t bytes, void* theirs,
                     size_t stride, size_t* lens) override {
    exchange(with, [mine](int) { return mine; }, [bytes](int) { return bytes; }, theirs, stride, lens);
  }

  void exchange_each(const std::vector<int>& with, const void* const* mine, const size_t* bytes,
                     void* theirs, size_t stride, size_t* lens) override {
    exchange(with, [mine](int i) { return mine[i]; }, [bytes](int i) { return bytes[i]; }, theirs,
             stride, lens);
  }

  void tend_vote(bool done) override {
    if (done) held_.joined();
    else if (uint64_t due = held_.due()) send_ring(due);
  }

  void barrier() override {
    MPI_Request r;
    check(MPI_Ibarrier(ctrl_, &r), "MPI_Ibarrier");
    wait(&r, 1, ctrl_, "negotiation");
  }

  std::unique_ptr<Transport> split(int color, int key) override;

  void ring(uint64_t round) override {
    if (!held_.hold(round)) send_ring(round);
  }
  void hold_rings(std::chrono::nanoseconds delay) override { held_.set_delay(delay); }
  RingCounts ring_counts() const override { return {held_.sent(), held_.saved()}; }

  uint64_t poll_ring() override {
    uint64_t best = early_ring_;
    early_ring_ = 0;
    for (;;) {
      int flag = 0;
      MPI_Status st;
      int rc = MPI_Test(&bell_req_, &flag, &st);
      if (rc != MPI_SUCCESS) mpi_failures::raise(bell_, rc, "MPI_Test (wake-up)");
      if (!flag) break;
      take_bell(bell_in_, st);
      best = std::max(best, bell_in_);
      post_bell_recv();
    }
    check_alive();
    return best;
  }

 private:
  void send_ring(uint64_t round) {
    held_.count_sent();
    if (!bell_sends_.empty()) {
      wait(bell_sends_.data(), static_cast<int>(bell_sends_.size()), bell_,
           "MPI_Waitall (wake-ups)");
      bell_sends_.clear();
    }
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      bell_out_[p] = round;
      MPI_Request r;
      check(MPI_Isend(&bell_out_[p], 1, MPI_UINT64_T, p, 0, bell_, &r), "MPI_Isend (wake-up)");
      bell_sends_.push_back(r);
    }
  }

  // exchange_with()/exchange_each(): peer with[i] gets mine(i) of bytes(i) bytes, as
  // pieces of kVotePiece bytes (above: why), every piece but the last full: a shorter
  // one, maybe empty, ends the message. All pieces are sent at once; a receiver posts
  // its next piece when one arrives full (more_pieces()).
  template <class Mine, class Bytes>
  void exchange(const std::vector<int>& with, Mine mine, Bytes bytes, void* theirs, size_t stride,
                size_t* lens) {
    const int peers = static_cast<int>(with.size());
    xreqs_.resize(peers);
    xgot_.assign(peers, 0);
    size_t most = 0;
    for (int i = 0; i < peers; ++i) {
      post_piece(with, i, theirs, stride);
      most = std::max(most, bytes(i));
      const char* p = static_cast<const char*>(mine(i));
      for (size_t left = bytes(i);; p += kVotePiece, left -= kVotePiece) {
        const size_t n = std::min(left, kVotePiece);
        MPI_Request r;
        check(MPI_Isend(p, static_cast<int>(n), MPI_BYTE, with[i], kExchangeTag, ctrl_, &r),
              "MPI_Isend");
        xreqs_.push_back(r);
        if (n < kVotePiece) break;
      }
    }
    held_.lengthen(most);
    const int all = static_cast<int>(xreqs_.size());
    xstatus_.resize(all);
    WaitWatch w(&watched_, 0, "negotiation");
    // Where every message is one piece, one wait for everything. Else the receives
    // first: a piece sent by rendezvous (a transport with a lower eager limit) completes
    // only once its receive is posted, after the piece before it.
    const bool one_piece = most < kVotePiece;
    wait_vote(xreqs_.data(), one_piece ? all : peers, w, xstatus_.data());
    while (more_pieces(with, theirs, stride)) wait_vote(xreqs_.data(), peers, w, xstatus_.data());
    if (!one_piece) wait_vote(xreqs_.data() + peers, all - peers, w, MPI_STATUSES_IGNORE);
    for (int i = 0; i < peers; ++i) lens[with[i]] = xgot_[i];
  }

  // exchange()'s receive of peer with[i]'s next piece, after the xgot_[i] bytes it has.
  void post_piece(const std::vector<int>& with, int i, void* theirs, size_t stride) {
    char* at = static_cast<char*>(theirs) + with[i] * stride + xgot_[i];
    const size_t room = std::min(stride - xgot_[i], kVotePiece);
    check(MPI_Irecv(at, static_cast<int>(room), MPI_BYTE, with[i], kExchangeTag, ctrl_, &xreqs_[i]),
          "MPI_Irecv");
  }

  // After a wait on exchange()'s receives: counts what each brought (a receive that
  // completed in an earlier wait reads as empty) and posts the next piece where one
  // arrived full. True if any was posted.
  bool more_pieces(const std::vector<int>& with, void* theirs, size_t stride) {
    bool more = false;
    for (int i = 0; i < static_cast<int>(with.size()); ++i) {
      int got = 0;
      check(MPI_Get_count(&xstatus_[i], MPI_BYTE, &got), "MPI_Get_count");
      xgot_[i] += static_cast<size_t>(got);
      if (static_cast<size_t>(got) == kVotePiece) {
        post_piece(with, i, theirs, stride);
        more = true;
      }
    }
    return more;
  }

  // The round's vote (every member enters it), waited for as any other wait: a held
  // ring goes out at the first test after it is due, and is dropped if the vote
  // completes first (every peer came). The hold (50 us) ends within the wait's spin
  // and yield phases, which test back to back.
  void wait_vote(MPI_Request* reqs, int n, WaitWatch& w, MPI_Status* st) {
    wait_until(
        [&] {
          int flag = 0;
          int rc = MPI_Testall(n, reqs, &flag, st);
          if (rc != MPI_SUCCESS) mpi_failures::raise(ctrl_, rc, "negotiation");
          if (flag) held_.joined();
          else if (uint64_t due = held_.due()) send_ring(due);
          return flag != 0;
        },
        w, [this] { watch(); });
  }

  void post_bell_recv() {
    MPI_Irecv(&bell_in_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, 0, bell_, &bell_req_);
  }

  Op post(int peer, void* buf, size_t bytes, bool send) {
    int begin = static_cast<int>(reqs_.size());
    char* p = static_cast<char*>(buf);
    size_t left = bytes;
    do {  // a zero-byte message is still posted so both sides match
      size_t n = std::min(left, kMaxPiece);
      MPI_Request r;
      int rc = send ? MPI_Isend(p, static_cast<int>(n), MPI_BYTE, peer, 0, data_, &r)
                    : MPI_Irecv(p, static_cast<int>(n), MPI_BYTE, peer, 0, data_, &r);
      check(rc, send ? "MPI_Isend" : "MPI_Irecv");
      reqs_.push_back(r);
      p += n;
      left -= n;
    } while (left > 0);
    ops_.emplace_back(begin, static_cast<int>(reqs_.size()));
    return static_cast<Op>(ops_.size() - 1);
  }

  // Before the buffers of a collective given up half way are freed: cancel what is
  // outstanding, and give what already matched (the peers drain too) a moment to
  // finish. A send still unmatched then is to a peer that cancelled its receive, so
  // it never reads our buffer.
  void drain() {
    for (auto& r : reqs_)
      if (r != MPI_REQUEST_NULL) MPI_Cancel(&r);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    for (;;) {
      bool left = false;
      for (auto& r : reqs_) {
        if (r == MPI_REQUEST_NULL) continue;
        int flag = 0;
        MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
        if (!flag) left = true;
      }
      if (!left || std::chrono::steady_clock::now() > until) break;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    reqs_.clear();
    ops_.clear();
  }

  // No deadline: a collective waits as long as its peers are alive (a frozen one is
  // declared dead by the heartbeat after the peer timeout).
  void wait(MPI_Request* reqs, int n, MPI_Comm comm, const char* what) {
    WaitWatch w(&watched_, 0, what);
    wait_polite(reqs, n, comm, what, w, [this] { watch(); });
  }

  // While waiting on the data or negotiation plane: a failed member or a peer that
  // abandoned a collective ends the wait. Wake-ups that arrive meanwhile are kept for
  // the next poll_ring().
  void watch() {
    PeerHealth::get().check(&watched_);
    // A ring held for a round whose vote has not begun (rings are only hints, so one
    // sent late is harmless; one never sent could leave a waiting peer asleep).
    if (uint64_t due = held_.due()) send_ring(due);
    for (;;) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Test(&bell_req_, &flag, &st) != MPI_SUCCESS || !flag) break;
      take_bell(bell_in_, st);
      early_ring_ = std::max(early_ring_, bell_in_);
      post_bell_recv();
    }
    if (!abandoned_.empty()) throw std::runtime_error(abandoned_);
  }

  void take_bell(uint64_t& v, const MPI_Status& st) {
    if (v != kAbandoned) return;
    v = 0;
    if (abandoned_.empty())
      abandoned_ = "horovodlite: rank " + std::to_string(st.MPI_SOURCE) +
                   " of this process set gave up a collective half way (a local error while "
                   "it ran; see that rank's error); this process set can run no more "
                   "collectives";
  }

  bool broken() const {
    if (!abandoned_.empty()) return true;
    PeerHealth& h = PeerHealth::get();
    if (!h.any_failed()) return false;
    try {
      h.check(&watched_);
      return false;
    } catch (const PeerFailure&) {
      return true;
    }
  }

  MPI_Comm data_, ctrl_, bell_;
  std::vector<int> members_;  // world ranks, by rank in this group
  std::vector<int> watched_;  // members_ and the ranks of the group it was split from
  std::string abandoned_;     // non-empty: a collective was given up half way
  uint64_t early_ring_ = 0;   // a wake-up seen while waiting on something else
  static inline uint64_t kAbandonedValue = kAbandoned;
  int rank_ = 0, size_ = 1;
  std::vector<MPI_Request> reqs_;
  std::vector<std::pair<int, int>> ops_;
  MPI_Request bell_req_;
  uint64_t bell_in_ = 0;
  std::vector<uint64_t> bell_out_;
  std::vector<MPI_Request> bell_sends_;
  std::vector<int> everyone_else_;  // exchange_all()'s peers
  // exchange_with()'s, kept for their capacity: receives by peer, then every send
  std::vector<MPI_Request> xreqs_;
  std::vector<MPI_Status> xstatus_;
  std::vector<size_t> xgot_;  // bytes received so far, by peer
  HeldRing held_;
};

// A transport over its own duplicate of `sub`, which is then freed.
std::unique_ptr<Transport> adopt(MPI_Comm sub, const std::vector<int>& also_watched = {}) {
  auto t = std::make_unique<MpiTransport>(sub, also_watched);
  MPI_Comm_free(&sub);
  return t;
}

// ---- leaving and arriving ----
// A rank whose script ends calls MPI_Finalize and waits there for the others, or
// exits without it (its world lost a member, a grown elastic job); a peer that calls
// hvd.init() again meanwhile would wait for it forever in the communicator's creation.
// So every leaving process first says so to every rank, on a communicator of its own
// made at MPI_Init, and every collective that makes communicators (init,
// add_process_set) waits for its peers through arrive(), which fails on such a note
// instead of hanging. The heartbeat reads the notes too (note_departures), so a peer
// whose exit it sees afterwards is said to have left, not to have died.
MPI_Comm g_farewell = MPI_COMM_NULL;  // a dup of MPI_COMM_WORLD, for those notes only
std::vector<char> g_left;             // by MPI_COMM_WORLD rank: its note has arrived
// Init's waits and the heartbeat's thread both read the notes: two threads probing
// the same note would both receive it, and the second would wait for another.
std::mutex g_farewell_mu;
// A communicator creation we gave up on is still pending: MPI_Finalize could wait for
// it forever, so the process exits without it (the launcher then ends the job).
bool g_abandoned_creation = false;

void say_farewell() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (g_farewell == MPI_COMM_NULL || fin) return;
  int me = 0, n = 1;
  MPI_Comm_rank(g_farewell, &me);
  MPI_Comm_size(g_farewell, &n);
  static const uint8_t note = 1;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    MPI_Request r;  // tiny, so sent eagerly: nobody has to be receiving
    if (MPI_Isend(&note, 1, MPI_BYTE, p, 0, g_farewell, &r) == MPI_SUCCESS) MPI_Request_free(&r);
  }
}

// Reads the notes that arrived into g_left; whether MPI_COMM_WORLD rank `w` has left.
bool has_left(int w) {
  if (g_farewell == MPI_COMM_NULL) return false;
  std::lock_guard<std::mutex> l(g_farewell_mu);
  std::string note;
  int from = -1, rc = MPI_SUCCESS;
  while (take_arrived(g_farewell, 0, &note, &from, &rc))
    if (from >= 0 && from < static_cast<int>(g_left.size())) g_left[from] = 1;
  return w >= 0 && w < static_cast<int>(g_left.size()) && g_left[w];
}

// The MPI_COMM_WORLD rank of each member of `comm`, by rank in `comm` (MPI_UNDEFINED
// for a process of another MPI_COMM_WORLD: one spawned to grow an elastic job).
std::vector<int> comm_world_ranks(MPI_Comm comm) {
  MPI_Group world, mine;
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  MPI_Comm_group(comm, &mine);
  int n = 0;
  MPI_Group_size(mine, &n);
  std::vector<int> in(n), as_world(n, MPI_UNDEFINED);
  for (int i = 0; i < n; ++i) in[i] = i;
  MPI_Group_translate_ranks(mine, n, in.data(), world, as_world.data());
  MPI_Group_free(&world);
  MPI_Group_free(&mine);
  return as_world;
}

// Throws, naming them, when members of `comm` have left (their farewell arrived).
void fail_if_departed(MPI_Comm comm, const char* what) {
  std::string list;
  for (int w : comm_world_ranks(comm))
    if (has_left(w)) list += (list.empty() ? "" : ", ") + std::to_string(w);
  if (list.empty()) return;
  g_abandoned_creation = true;
  throw PeerFailure(std::string("horovodlite: ") + what + ": rank(s) " + list +
                    " of MPI_COMM_WORLD have left (their script ended); MPI cannot make a "
                    "new group with them");
}

// Tells PeerHealth which ranks of a world have left; `world_of_rank`: comm_world_ranks
// of that world (PeerHealth numbers ranks as the world does).
void note_departures(const std::vector<int>& world_of_rank) {
  for (size_t r = 0; r < world_of_rank.size(); ++r)
    if (has_left(world_of_rank[r])) PeerHealth::get().note_departed(static_cast<int>(r));
}

// How the waits of a world being made wait (arrive, the first dup and allgathers):
// as every wait does (watched_wait.h), and also failing on the farewell of a member
// of `comm` (`farewells`). In a running world (`in_world`) any declared failure of it
// ends the wait; not at init, where the failures PeerHealth knows of are the previous
// world's, and where `limit_s` (> 0) bounds the wait instead, since no heartbeat
// watches a world not made yet. Giving up leaves the creation pending, which
// finalize_at_exit must know. It also revokes `comm` (under ULFM): a peer whose part
// of the collective waits on ours (a dissemination barrier's next round) would
// otherwise wait until its own limit, since only a revoke, not a failure elsewhere
// in the schedule, ends its request.
void wait_arriving(MPI_Request* r, MPI_Comm comm, const char* what, double limit_s, bool in_world,
                   bool farewells = true) {
  WaitWatch w(nullptr, limit_s, what, in_world);
  try {
    wait_polite(r, 1, comm, what, w, [&] {
      if (farewells) fail_if_departed(comm, what);
    });
  } catch (const PeerFailure&) {
    g_abandoned_creation = true;
    mpi_failures::revoke(comm);
    throw;
  }
}

// Waits until every rank of `comm` has reached this point (a non-blocking barrier;
// wait_arriving's rules). `what` names the call.
void arrive(MPI_Comm comm, const char* what, bool in_world, double limit_s = 0) {
  MPI_Request r;
  check(MPI_Ibarrier(comm, &r), what);
  wait_arriving(&r, comm, what, limit_s, in_world);
}

// MPI_Comm_dup as arrive() waits: a rank that gave up its own wait for us (its start
// timeout) posted the barrier we met, but will never dup.
MPI_Comm dup_arriving(MPI_Comm base, const char* what, double limit_s) {
  MPI_Comm out;
  MPI_Request r;
  check(MPI_Comm_idup(base, &out, &r), what);
  wait_arriving(&r, base, what, limit_s, false);
  return out;
}

// MPI_Allgather of `count` items each, as arrive() waits: the world's first exchanges
// (host names, pids) run before any heartbeat, so a rank that freezes or leaves right
// then must not hold the others forever.
void allgather_arriving(const void* in, int count, MPI_Datatype type, void* out, MPI_Comm comm,
                        const char* what, double limit_s) {
  MPI_Request r;
  check(MPI_Iallgather(in, count, type, out, count, type, comm, &r), what);
  wait_arriving(&r, comm, what, limit_s, false);
}

// The ranks of `base` listed in `ranks`, in that order, as a new communicator;
// MPI_COMM_NULL on the others. Collective over `base`; fails (instead of waiting
// forever) when a rank of `base` has died or left (arrive()).
MPI_Comm split_members(MPI_Comm base, const std::vector<int>& ranks, int me, bool in_world,
                       double limit_s = 0, const char* what = "hvd.init(comm=ranks)") {
  arrive(base, in_world ? "adding a process set (MPI_Comm_split)" : what, in_world, limit_s);
  auto it = std::find(ranks.begin(), ranks.end(), me);
  const bool member = it != ranks.end();
  MPI_Comm sub;
  check(MPI_Comm_split(base, member ? 0 : MPI_UNDEFINED, static_cast<int>(it - ranks.begin()), &sub),
        "MPI_Comm_split");
  return sub;
}

std::unique_ptr<Transport> MpiTransport::split(int color, int key) {
  MPI_Comm sub;
  check(MPI_Comm_split(ctrl_, color, key, &sub), "MPI_Comm_split");
  return adopt(sub, watched_);
}

bool g_we_initialized = false;

bool may_finalize() { return !g_abandoned_creation && !PeerHealth::get().ever_failed(); }

void finalize_at_exit() {
  // Whether it finalizes or not, a leaving process says so: a peer waiting for it in a
  // communicator's creation (one we gave up, or the next hvd.init()) fails on the note
  // instead of waiting until its own timeout.
  say_farewell();
  // MPI_Finalize is collective in practice: after a peer was lost it can wait for
  // that peer forever. A broken world is left unfinalized; the process just exits
  // (the launcher then reports it, which is what a failed job should get).
  if (!may_finalize()) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  MPI_Finalize();
}

// MPI_Init waits (in PMIx's fence) for every rank of the job to start it, and nothing
// can interrupt it: a rank that froze or never got that far would hold the others
// there forever. So past the start timeout the waiting process ends itself, saying
// why (the launcher then ends the job); every later wait of init() raises instead.
// The farewells' communicator (waiting as the rest of init() does: dup_arriving,
// without farewells to look at yet). Collective over MPI_COMM_WORLD, right after
// MPI_Init; once.
void open_farewells(double start_timeout_s) {
  if (g_farewell != MPI_COMM_NULL) return;
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  g_left.assign(n, 0);
  MPI_Comm farewell;
  MPI_Request r;
  const char* what = "hvd.init() (MPI_Comm_dup after MPI_Init; HOROVODLITE_START_TIMEOUT)";
  check(MPI_Comm_idup(MPI_COMM_WORLD, &farewell, &r), what);
  wait_arriving(&r, MPI_COMM_WORLD, what, start_timeout_s, false, false);
  MPI_Comm_set_errhandler(farewell, MPI_ERRORS_RETURN);
  g_farewell = farewell;
}

class InitWatchdog {
 public:
  explicit InitWatchdog(double limit_s) {
    if (limit_s <= 0) return;
    thread_ = std::thread([this, limit_s] {
      std::unique_lock<std::mutex> l(mu_);
      if (cv_.wait_for(l, std::chrono::duration<double>(limit_s), [this] { return done_; })) return;
      std::fprintf(stderr,
                   "horovodlite: hvd.init() gives up: MPI_Init has waited %g s for the other "
                   "ranks of the job to start it (one froze, died or started late?); "
                   "HOROVODLITE_START_TIMEOUT=%g s bounds that wait. Exiting.\n",
                   limit_s, limit_s);
      std::fflush(stderr);
      _exit(1);
    });
  }
  ~InitWatchdog() {
    {
      std::lock_guard<std::mutex> l(mu_);
      done_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

void ensure_mpi_initialized(double start_timeout_s) {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return;
  int provided = 0;
  {
    InitWatchdog watchdog(start_timeout_s);
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  }
  g_we_initialized = true;
  // MPI can be initialised only once per process, so it lives until exit and
  // init() -> shutdown() -> init() reuses it; mpirun expects MPI_Finalize before exit.
  std::atexit(finalize_at_exit);
  // Every rank starts here, so the farewells' communicator is made now.
  open_farewells(start_timeout_s);
}

std::string host_name(const std::string& override_name) {
  if (!override_name.empty()) return override_name;
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

class MpiWorld : public World {
 public:
  // `start_timeout_s`: how long the world's first exchanges may wait for a rank.
  MpiWorld(MPI_Comm comm, const std::string& hostname, double start_timeout_s)
      : comm_(comm), start_timeout_s_(start_timeout_s) {
    mpi_failures::adopt(comm_);
    MPI_Comm_rank(comm_, &topo_.rank);
    MPI_Comm_size(comm_, &topo_.size);
    int provided = 0;
    MPI_Query_thread(&provided);
    threads_ = provided == MPI_THREAD_MULTIPLE;
    compute_topology(host_name(hostname));
  }
  ~MpiWorld() override {
    heartbeat_.reset();  // collective when healthy: every rank stops watching together
    mpi_failures::forget(comm_);
    if (!PeerHealth::get().any_failed()) MPI_Comm_free(&comm_);
  }

  void watch_peers(double timeout_s) override {
    // Every rank's pid, so peers on this host can be watched through pidfds and the
    // failure message can name the process.
    int me = static_cast<int>(getpid());
    std::vector<int> pids(topo_.size);
    allgather_arriving(&me, 1, MPI_INT, pids.data(), comm_, "hvd.init() (exchanging pids)",
                       start_timeout_s_);
    PeerHealth::get().reset(topo_.rank, host_names_, pids, timeout_s);
    mpi_failures::set_world(comm_);
    mpi_failures::arm_revoke();
    if (timeout_s <= 0) return;
    if (!threads_) {
      HVDL_LOG(WARNING) << "MPI gives no MPI_THREAD_MULTIPLE: peers are not watched by a "
                           "heartbeat (a frozen peer is not detected)";
      return;
    }
    std::vector<int> local(topo_.size, 0);
    for (int r = 0; r < topo_.size; ++r)
      if (topo_.host_of_rank[r] == topo_.host_of_rank[topo_.rank]) local[r] = pids[r];
    heartbeat_ = std::make_unique<MpiHeartbeat>(
        comm_, local, timeout_s, [world_of_rank = comm_world_ranks(comm_)] { note_departures(world_of_rank); });
  }

  const Topology& topology() const override { return topo_; }
  bool threads_supported() const override { return threads_; }

  std::unique_ptr<Transport> create_group(const std::vector<int>& ranks) override {
    MPI_Comm sub = split_members(comm_, ranks, topo_.rank, true);
    return sub == MPI_COMM_NULL ? nullptr : adopt(sub);
  }

 private:
  void compute_topology(std::string me) {
    // Hosts are told apart by name (not MPI_COMM_TYPE_SHARED) so a test can map ranks
    // of one machine onto several "hosts" and exercise the cross-host paths.
    me.resize(255, '\0');
    std::vector<char> all(static_cast<size_t>(topo_.size) * 255);
    allgather_arriving(me.data(), 255, MPI_CHAR, all.data(), comm_,
                       "hvd.init() (exchanging host names)", start_timeout_s_);
    std::vector<std::string> names(topo_.size);
    for (int i = 0; i < topo_.size; ++i) names[i].assign(&all[i * 255], 255);
    std::vector<std::string> hosts;  // host ids in order of first appearance
    std::vector<int> host_of_rank(topo_.size);
    for (int i = 0; i < topo_.size; ++i) {
      auto it = std::find(hosts.begin(), hosts.end(), names[i]);
      host_of_rank[i] = static_cast<int>(it - hosts.begin());
      if (it == hosts.end()) hosts.push_back(names[i]);
    }
    topo_ = topology_of(host_of_rank, topo_.rank);
    host_names_.clear();
    for (auto& n : names) host_names_.push_back(n.c_str());  // without the padding
  }

  MPI_Comm comm_;
  double start_timeout_s_;
  std::vector<std::string> host_names_;
  std::unique_ptr<MpiHeartbeat> heartbeat_;
  Topology topo_;
  bool threads_ = false;
};

}  // namespace

std::unique_ptr<World> make_mpi_world(long long fortran_comm, const std::vector<int>& ranks,
                                      const std::string& hostname, double start_timeout_s) {
  // After a failure MPI's world is unusable, except to survivors that brought a
  // communicator of the living (elastic training: ULFM's shrink, or a merge of it).
  const std::string lost = PeerHealth::get().first_failure();
  if (!lost.empty() && fortran_comm < 0)
    throw std::runtime_error(
        "horovodlite cannot be initialized again in this process: its MPI world lost a "
        "member (" + lost + "); MPI cannot be used after that. Start a new job.");
  ensure_mpi_initialized(start_timeout_s);
  MPI_Comm base = fortran_comm < 0 ? MPI_COMM_WORLD : MPI_Comm_f2c(static_cast<MPI_Fint>(fortran_comm));
  MPI_Comm comm;
  char what[200];
  std::snprintf(what, sizeof what,
                "hvd.init()%s, waiting for every rank to reach it (one froze, died or started "
                "late? HOROVODLITE_START_TIMEOUT=%g s)",
                ranks.empty() ? "" : " with comm=ranks", start_timeout_s);
  if (ranks.empty()) {
    arrive(base, what, false, start_timeout_s);  // then the dup cannot wait for a rank that left
    comm = dup_arriving(base, what, start_timeout_s);
  } else {
    int me = 0;
    MPI_Comm_rank(base, &me);
    comm = split_members(base, ranks, me, false, start_timeout_s, what);
    if (comm == MPI_COMM_NULL)
      throw std::invalid_argument("init(comm=ranks): rank " + std::to_string(me) +
                                  " is not in the given rank list");
  }
  return std::make_unique<MpiWorld>(comm, hostname, start_timeout_s);
}

bool mpi_built() { return true; }

void mpi_open_farewells(double start_timeout_s) { open_farewells(start_timeout_s); }
void mpi_say_farewell() { say_farewell(); }
bool mpi_may_finalize() { return may_finalize(); }

}  // namespace hvdl
