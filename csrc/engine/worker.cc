#include "worker.h"

#include <sys/prctl.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "../common/logging.h"
#include "../transport/peer_health.h"
#include "collective_op.h"
#include "fault_injection.h"
#include "fusion_planner.h"
#include "hosts_vote.h"
#include "ops/op_util.h"
#include "../collectives/direct_allgather.h"
#include "../collectives/partition.h"
#include "../collectives/ring_allreduce.h"
#include "../collectives/shm_allreduce.h"

namespace hvdl {

using namespace std::chrono;

namespace {
// A collective was given up half way (here or by a peer): the set ends on every rank.
struct SetAbandoned : std::runtime_error {
  using std::runtime_error::runtime_error;
};
}  // namespace

// Bytes of tensor data a response moves per rank (what the autotuner and timeline count).
static size_t payload_bytes(const Response& r) {
  if (!r.ok() || r.op == OpType::BARRIER || r.op == OpType::JOIN) return 0;
  return tensor_bytes(r.shape, r.dtype);
}

static bool on_one_host(const std::vector<int>& hosts) {
  return !hosts.empty() &&
         std::all_of(hosts.begin(), hosts.end(), [&](int h) { return h == hosts[0]; });
}

// A Doorbell where every member of the set is on this host: peers ring through it
// (a store to shared memory) instead of an MPI message per peer, which a caller's
// round paid for in its ring and its look for one (~0.8 us of a 4 KiB call, the
// progress engine run twice), and the set's thread sleeps on it with WAKEUP=auto.
// The same on every rank (the same hosts; Doorbell::create agrees on failure).
static std::unique_ptr<Doorbell> make_doorbell(Transport& t, const std::vector<int>& hosts,
                                               const Settings& s) {
  const std::string mode = s.str(Setting::WAKEUP);
  if (mode != "auto" && mode != "poll" && t.rank() == 0) {
    HVDL_LOG(WARNING) << "HOROVODLITE_WAKEUP='" << mode << "' is neither auto nor poll; using poll";
  }
  if (t.size() < 2 || !on_one_host(hosts)) return nullptr;
  auto d = Doorbell::create(t);
  if (!d && t.rank() == 0) {
    HVDL_LOG(INFO) << "no shared memory for the wake-up doorbell; rings go through MPI";
  }
  return d;
}

// The negotiation vote through shared memory where every member is on this host and
// SHM_NEGOTIATION is on (the same on every rank: forwarded settings, the same hosts).
static std::unique_ptr<ShmVote> make_shm_vote(Transport& t, const std::vector<int>& hosts,
                                              const Settings& s, size_t capacity) {
  if (t.size() < 2 || !s.flag(Setting::SHM_NEGOTIATION) || !on_one_host(hosts)) return nullptr;
  auto v = ShmVote::create(t, capacity);
  if (!v && t.rank() == 0)
    HVDL_LOG(INFO) << "no shared memory for the negotiation vote; it goes through MPI";
  return v;
}

Worker::Worker(std::unique_ptr<Transport> t, EngineParams p, int id, EngineState& state,
               const std::vector<int>& host_of_member)
    : transport_(std::move(t)),
      state_(state),
      params_(p),
      id_(id),
      controller_(*transport_, p.cache_capacity, p.stall_warn_s, p.stall_fail_s),
      allreduce_(make_host_allreduce_paths(*transport_, host_of_member, p.settings)),
      devices_(*transport_, p.gpu, *allreduce_),
      records_timeline_(id == 0 && transport_->rank() == 0) {
  one_host_ = on_one_host(host_of_member);
  doorbell_ = make_doorbell(*transport_, host_of_member, p.settings);
  sleeps_ = doorbell_ && p.settings.str(Setting::WAKEUP) == "auto";
  if (sleeps_) queue_.set_waker([d = doorbell_.get()] { d->wake_self(); });
  setup_vote(host_of_member);
  // Across hosts a ring is a network message per peer, and in a loop of calls every
  // peer comes to the round on its own: hold it into the vote (held_ring.h). 50 us:
  // a vote between two simulated hosts completed in ~20 us once both were in it.
  if (!one_host_) ring_hold_ = kCrossHostRingHold;
  transport_->hold_rings(ring_hold_);
  // Callers run their own small rounds (help()): a lone 4 KiB allreduce on 2 ranks of
  // one host went from 10.6-11.1 to 9.1-9.5 us. Across hosts, where more ranks and
  // engine threads than cores share a host's cores, the hand-off waits for the
  // scheduler: 4 KiB on 2x2 simulated hosts took 57 us against 64-107 us with the
  // set's thread running it, on 3x2 200 against 296 us. With one rank per host (the
  // vote from every rank to every rank over the transport) only a rider's round, one
  // exchange, gained (alternating launches of latency_pieces.py): 2x1 at 10 Gbit/s
  // 4 KiB 20-22 against 29-34 us, 16 KiB 24-31 against 41-44, 32 KiB 31-39 against
  // 36-57, 3x1 at 10 Gbit/s 4-8 KiB 54-95 against 62-115; where the caller ran the
  // ring (3x1, 32-64 KiB) it took 209-246 us against 158-235. So there the caller runs
  // rounds up to the riders' limit. (An older engine had measured it slower on 2x1,
  // 36.5 -> 43-47 us a lone 4 KiB call.) The same on every rank, though nothing needs
  // it to be.
  // Unset, a lone tensor is the caller's up to the riders' limit where that is larger:
  // it rides with the vote, so its round is one pass, and handing it over would cost
  // the two context switches. (Batches keep the 64 KiB limit: a larger one in a
  // training step measured no better run by the caller.) On one host also up to 1 MiB,
  // past the riders (512 KiB): the window's ~80 us pass is short enough that the two
  // switches still show (2 ranks, lone 1 MiB calls, 5 alternating launches each: medians
  // 137.0 us handed over, 105.3 us run by the caller).
  constexpr long long kUnset = std::numeric_limits<long long>::min();
  const long long set = p.settings.integer_or(Setting::CALLER_RUNS_BYTES, kUnset);
  const bool every_rank_across_hosts = !one_host_ && !hosts_vote_;
  const long long auto_bytes = every_rank_across_hosts
                                   ? static_cast<long long>(controller_.rider_bytes())
                                   : kAutoCallerRunsBytes;
  caller_runs_bytes_ = static_cast<size_t>(set != kUnset ? std::max(0LL, set) : auto_bytes);
  lone_caller_bytes_ =
      set != kUnset || !caller_runs_bytes_
          ? caller_runs_bytes_
          : std::max({caller_runs_bytes_, controller_.rider_bytes(), controller_.split_rider_bytes(),
                      one_host_ ? kAutoLoneOneHostBytes : size_t(0)});
  shown_.fusion_threshold = p.fusion_threshold;
  shown_.cycle_time_ms = p.cycle_time_ms;
  shown_.segment_bytes = p.segment_bytes;
  if (p.autotune && records_timeline_) tuner_ = std::make_unique<Autotuner>(shown_, p.autotune_options);
  thread_ = std::thread([this] { loop(); });
}

// How the negotiation vote travels, and whether it carries riders (controller.h), the
// same on every rank (forwarded settings, the same hosts).
// Riders: across hosts every exchange is a TCP round trip, and the rider saves one; on
// one host, through the shared-memory vote, it saves the shared-memory allreduce's own
// pass. Over MPI on one host the saving was a few us against a larger MPI message
// (over sm's 4 KiB eager limit from 4 KiB of data), measured no faster, so there only
// on request. The auto limit follows the copies of a rider a rank sends each round
// (through the hosts' vote, a leader: one folded rider to each other host). One copy:
// 64 KiB (two ranks, or two hosts through their leaders: there a rider crosses a link
// once, as the bytes of the ring or MPI_Allreduce do). More: the copies within 32 KiB
// (3 ranks: 16 KiB each, 4: 10.9 KiB), what a 1 Gbit/s link moves in 0.26 ms. On 3x1
// at 1 Gbit/s a 16 KiB rider takes the link's 262 us for its 32 KB, where the ring
// (2(N-1)/N of the data) took 181-293 us (MPI 178); but 12 KiB riding took 200 us
// against the ring's 179-245, and at 10 Gbit/s riding 16 KiB was faster (0.65-1.08x
// MPI's speed against 0.44-0.54x): 10 KiB for every rank to every rank measured no
// better, so the limit stays. Through the leaders of 3 hosts the alternative is the
// hierarchical path: on 3x2 it took 585-700 us at 12-16 KiB against 205-272 riding.
// Measured 4 KiB, one rider: 2x2 hosts 177-285 us against 382-761 us without, 3x1
// 122-149 against 276-307, 3x2 594 against 1078-2102. 2x2 with the riders folded on
// their way at 64 KiB: 16-64 KiB at 0.96-1.02x MPI_Allreduce's speed, against
// 0.49-0.98x without riders. Two ranks through the shared-memory vote: 512 KiB, since
// there a rider's one pass beat the window's pipeline (copy in, fold, copy out, a wait
// between each) up to there: 128-512 KiB 0.52-1.03x MPI_Allreduce's speed through the
// window, 0.97-1.32x riding (alternating launches, leaving out the machine's slow
// mode); at 1 MiB the window was faster.
void Worker::setup_vote(const std::vector<int>& host_of_member) {
  const int n = transport_->size();
  const bool shm_wanted = n >= 2 && one_host_ && params_.settings.flag(Setting::SHM_NEGOTIATION);
  auto by_host = ranks_by_host(host_of_member);
  // Some host has several of the set's ranks, and so do not all.
  const bool shared_hosts = by_host.size() > 1 && by_host.size() < static_cast<size_t>(n);
  const bool hosts_wanted = shared_hosts && params_.settings.flag(Setting::HOSTS_VOTE);
  auto riders_for = [&](size_t copies) {
    const long long auto_rider = copies > 1   ? (kAutoRiderSends / copies) & ~63LL
                                 : shm_wanted ? kAutoShmRiderBytes
                                              : kAutoRiderBytes;
    return static_cast<size_t>(std::clamp<long long>(
        params_.settings.integer_or(Setting::VOTE_RIDER_BYTES,
                                    one_host_ && !shm_wanted ? 0 : auto_rider),
        0, static_cast<long long>(kPairExchangeMaxBytes)));
  };
  size_t rider_max = riders_for(hosts_wanted ? by_host.size() - 1 : n - 1);
  auto riders = [this](const Response& r) { return rider_for(r); };
  if (auto v = make_shm_vote(*transport_, host_of_member, params_.settings,
                             std::max(controller_.message_bytes(rider_max), kShmVoteMinBytes))) {
    shm_vote_ = true;
    // Riders are folded as the shared-memory window folds (block b from rank b on);
    // without the window (SHM=0) small allreduces take the pair exchange (rank order)
    // on two ranks.
    rider_order_ = params_.settings.flag(Setting::SHM) ? RiderOrder::BLOCKS : RiderOrder::RANK_ORDER;
    controller_.set_vote(std::move(v), rider_max, riders);
  } else if (rider_max > 0 && n >= 2 && n <= kMaxRiderRanks) {
    // As the pair exchange folds (rank order); where hosts share ranks, by hosts, as
    // the hosts' vote folds them on their way (HostsVote), with it or without.
    rider_order_ = shared_hosts ? RiderOrder::HOSTS : RiderOrder::RANK_ORDER;
    rider_hosts_ = std::move(by_host);
    std::unique_ptr<VoteExchange> x;
    if (hosts_wanted)
      x = HostsVote::create(*transport_, host_of_member, controller_.message_bytes(rider_max));
    hosts_vote_ = x != nullptr;
    size_t split_max = 0;
    if (!x) {  // null on every rank alike: every rank then sends to every rank
      rider_max = riders_for(n - 1);
      // Three or more ranks, each its host's only one: a larger lone tensor is split
      // with the vote (controller.h), so its call is two exchanges that each move
      // (N-1)/N of it, at the ring's bytes; the vote and the ring were 1 + 2(N-1)
      // steps. 3x1 simulated hosts, alternating launches (latency_pieces.py), us per
      // call: at 1 Gbit/s 24 KiB 512-644 -> 362-607, 32 KiB 611-757 -> 467-679, 48 KiB
      // 644-799 -> 571-674, 64 KiB (the link's rate either way) 720-805 -> 709-836;
      // at 10 Gbit/s 24-64 KiB 8-20 % faster (24 KiB 506-542 -> 414-424), but 256 KiB
      // 679-978 -> 1361-1575, so 64 KiB. Below the whole riders' limit (16 KiB on
      // three) a whole rider stays: 16 KiB split measured 0.62x MPI_Allreduce's speed
      // against 0.85x whole.
      if (n >= 3 && !shared_hosts)
        split_max = static_cast<size_t>(std::clamp<long long>(
            params_.settings.integer_or(Setting::VOTE_SPLIT_RIDER_BYTES, kAutoSplitRiderBytes), 0,
            static_cast<long long>(kPairExchangeMaxBytes)));
      x = make_transport_vote_exchange(*transport_, controller_.message_bytes(rider_max, split_max));
    }
    controller_.set_vote(std::move(x), rider_max, riders, split_max);
  }
}

Worker::~Worker() { stop(); }

std::map<std::string, std::string> Worker::report() const {
  auto s = [](auto v) { return std::to_string(v); };
  const EngineParams& p = params_;
  const AutotuneOptions& a = p.autotune_options;
  std::map<std::string, std::string> r = {
      {"cache_capacity", s(controller_.cache_capacity())},
      {"stall_warn_s", s(p.stall_warn_s)},
      {"stall_fail_s", s(p.stall_fail_s)},
      {"broadcast_chain_from_bytes", s(p.broadcast.chain_from_bytes)},
      {"broadcast_chain_segment_bytes", s(p.broadcast.chain_segment_bytes)},
      {"gpu_operations", p.gpu.operations},
      {"gpu_staging_segment_bytes", s(p.gpu.staging_segment_bytes)},
      {"autotuner", tuner_ ? "on" : "off"},
      {"autotune_warmup_samples", s(a.warmup_samples)},
      {"autotune_steps_per_sample", s(a.steps_per_sample)},
      {"autotune_samples_per_setting", s(a.samples_per_setting)},
      {"autotune_confirm_rounds", s(a.confirm_rounds)},
      {"autotune_min_sample_ms", s(a.min_sample_ms)},
      {"allreduce", allreduce_algorithm()},
      {"one_host", one_host_ ? "1" : "0"},
      {"wakeup", sleeps_ ? "futex" : "poll"},
      {"rings", doorbell_ ? "shm" : "transport"},
      {"ring_hold_us", s(ring_hold_.count())},
      {"negotiation", shm_vote_ ? "shm" : hosts_vote_ ? "hosts" : "transport"},
      // What the votes really carry (0: no riders), not just what was asked for.
      {"vote_rider_bytes", s(controller_.rider_bytes())},
      {"vote_split_rider_bytes", s(controller_.split_rider_bytes())},
      {"caller_runs_bytes", s(caller_runs_bytes_)},
      {"caller_runs_lone_bytes", s(lone_caller_bytes_)},
      {"peer_timeout_s", s(p.peer_timeout_s)},
      {"failure_report_dir", p.failure_report_dir},
  };
  // What the paths run with, by their own account (the hierarchical path over TCP:
  // tcp_min_bytes, the threshold it sends small blocks over MPI by).
  allreduce_->report(r);
  // The direct TCP transport's own values, when one runs (hierarchical, across hosts).
  if (const TcpInfo* tcp = allreduce_->cross_tcp()) {
    std::string addrs;
    for (const std::string& a : tcp->addresses) addrs += (addrs.empty() ? "" : ",") + a;
    r["tcp_if_include"] = tcp->options.if_include;
    r["tcp_addresses"] = addrs;
    r["tcp_timeout_s"] = s(tcp->options.timeout_s);
    r["tcp_spin_us"] = s(tcp->options.spin_us);
  }
  if (const AllreducePaths::ShmInfo* shm = allreduce_->shm_info()) {
    const ShmOptions* o = &shm->options;
    r["shm_chunk_bytes"] = s(o->chunk_bytes);
    r["shm_slots"] = s(o->slots);
    r["shm_stream_in_threshold"] = s(o->stream_in_threshold);
    r["shm_stream_out_threshold"] = s(o->stream_out_threshold);
    r["shm_ring_threshold"] = s(o->ring_threshold);
    r["shm_test_kill_at_step"] = shm->fault_hooked ? s(test_kill_step(p.settings)) : "0";
    r["shm_mechanism"] = shm->mechanism;
  }
  return r;
}

void Worker::stop() {
  queue_.request_shutdown();
  if (thread_.joinable()) thread_.join();
}

// Sleep until this rank has a reason to start a round (its own fresh work, a timer)
// or a peer rang because it started one. Ranks never spin through empty rounds: an
// idle rank sleeps in the OS and only checks for a peer's ring, more often while it
// has tensors in flight (a peer's arrival is then what it is waiting for).
bool Worker::wait_for_round(std::unique_lock<std::timed_mutex>& turn) {
  if (sleeps_) return sleep_until_round(turn);
  const nanoseconds window = cycle();
  auto poll = nanoseconds(microseconds(5));
  const auto spin_until = Clock::now() + spin_after_round();
  // Only a round changes the controller's deadlines (stall checks, readiness reports).
  const auto deadline = controller_.next_deadline();
  // A peer's ring: joined when the queue wants a round (TensorQueue::wants_round) or
  // after look_every() at most (the rule is sleep_until_round()'s, which says why).
  auto ring_seen = Clock::time_point::max();
  uint64_t rung = 0;  // the highest round rung so far (the transport hands each ring once)
  auto joins = [&](uint64_t polled) {
    rung = std::max(rung, polled);
    if (rung < round_) return false;
    const auto now = Clock::now();
    if (ring_seen == Clock::time_point::max()) ring_seen = now;
    return queue_.wants_round(window, params_.fusion_threshold) || now - ring_seen >= look_every();
  };
  for (;;) {
    // A rank waiting here may be waiting for a peer that will never come: a failure
    // of a member ends the wait (and every collective of this set) at once.
    transport_->check_alive();
    PeerHealth::beat();
    if (Clock::now() < spin_until) {
      if (joins(rung_now())) return true;
      if (queue_.has_fresh_ready(window, params_.fusion_threshold) || deadline <= Clock::now()) {
        ring_peers();
        return true;
      }
      if (!off_turn(turn, [] { std::this_thread::yield(); })) return false;
      continue;
    }
    auto now = Clock::now();
    bool local = deadline <= now;
    if (!local) {
      // With nothing in flight a peer's ring can wait (joins() above), and a
      // submission wakes this thread. So an idle engine looks at the transport only
      // as often as the doorbell's (look_every()), instead of every millisecond: each
      // look runs MPI's progress engine (1000 a second slowed other MPI work on the
      // same ranks), and takes the core from the caller.
      poll = queue_.has_in_flight() ? std::min(poll * 2, nanoseconds(microseconds(50))) : look_every();
      auto timeout = std::min<Clock::duration>(poll, deadline - now);
      if (ring_seen != Clock::time_point::max())
        timeout = std::min<Clock::duration>(timeout, ring_seen + look_every() - now);
      if (!off_turn(turn, [&] {
            local = queue_.wait_for_work(duration_cast<nanoseconds>(timeout), window,
                                         params_.fusion_threshold);
          }))
        return false;
    }
    if (joins(rung_now())) return true;  // a peer started it: nothing to ring
    if (local) {
      ring_peers();
      return true;
    }
  }
}

// With a Doorbell nothing needs polling: callers and peers wake this thread, which
// otherwise sleeps until its batching window closes or a controller deadline comes.
// It still looks at the transport now and then (look_every): a peer's failure or a
// collective it gave up arrive there, and the heartbeat wants a beat well within the
// peer timeout. Each look costs the idle engine ~50-80 us of CPU (an MPI_Test runs
// MPI's whole progress engine): 10 a second are noise.
nanoseconds Worker::look_every() const {
  return params_.peer_timeout_s > 0 && params_.peer_timeout_s < 1
             ? duration_cast<nanoseconds>(duration<double>(params_.peer_timeout_s / 10))
             : nanoseconds(milliseconds(100));
}

bool Worker::sleep_until_round(std::unique_lock<std::timed_mutex>& turn) {
  const auto kLookEvery = look_every();
  const nanoseconds window = cycle();
  const auto spin_until = Clock::now() + spin_after_round();
  const auto deadline = controller_.next_deadline();
  auto looked = Clock::now() - kLookEvery;  // look once per round at least
  // A peer's ring while nothing here waits for the peers (no tensor put forward): a
  // round now could only run nothing of this rank's, or the first few of a batch its
  // caller is still submitting, and the rest would then need a round of their own;
  // waking for it takes the core from the caller. So such a rank joins once its
  // caller's batch is ready (the batching window or a flush, as for a round of its
  // own; a blocked caller runs it itself: help()), or after look_every at most; a rank
  // with work put forward joins at once: the round may be what that work waits for
  // (TensorQueue::wants_round). Sleeping meanwhile, it asks not to be woken by rings.
  auto ring_seen = Clock::time_point::max();
  for (;;) {
    const uint32_t ticket = doorbell_->ticket();
    const bool rung = doorbell_->rung() >= round_;
    auto now = Clock::now();
    if (rung) {
      if (ring_seen == Clock::time_point::max()) ring_seen = now;
      if (queue_.wants_round(window, params_.fusion_threshold) || now - ring_seen >= kLookEvery) {
        stats_.ring_wakes++;
        stats_.ring_to_round_ns += duration_cast<nanoseconds>(now - doorbell_->rung_at()).count();
        return true;
      }
    }
    auto ready = queue_.ready_time(window, params_.fusion_threshold);
    if (ready <= now || deadline <= now) {
      ring_peers();
      return true;
    }
    if (now - looked >= kLookEvery) {
      looked = now;
      transport_->check_alive();
      PeerHealth::beat();
      // Only a peer's "abandoned" message travels there now; poll_ring() notes it
      // and check_alive() throws it.
      transport_->poll_ring();
      transport_->check_alive();
    }
    if (now < spin_until) {
      if (!off_turn(turn, [] { std::this_thread::yield(); })) return false;
      continue;
    }
    auto until = std::min({ready, deadline, looked + kLookEvery});
    if (rung) until = std::min(until, ring_seen + kLookEvery);
    if (!off_turn(turn, [&] { doorbell_->sleep(ticket, duration_cast<nanoseconds>(until - now), !rung); }))
      return false;
  }
}

// Runs `fn` (a wait and/or a round); a failure ends the set: running_ false, why_
// says why, and the thread that owns the loop closes the queue with it.
template <class Fn>
void Worker::guarded(Fn fn) {
  try {
    fn();
  } catch (const PeerFailure& e) {
    why_ = e.what();
    running_ = false;
  } catch (const SetAbandoned& e) {
    HVDL_LOG(ERROR) << e.what();
    why_ = e.what();
    running_ = false;
  } catch (const std::exception& e) {
    HVDL_LOG(ERROR) << "process set " << id_ << ": background loop failed: " << e.what();
    why_ = std::string("horovodlite: background loop failed: ") + e.what();
    running_ = false;
  }
}

void Worker::take_turn(std::unique_lock<std::timed_mutex>& turn) {
  // A caller waiting in help() goes first: it runs the round this thread would start
  // (a mutex hands itself to whoever asks first, often this thread again).
  const auto until = Clock::now() + kHelpWait;
  while (wanted_.load(std::memory_order_acquire) > 0 && Clock::now() < until)
    std::this_thread::yield();
  // Beating meanwhile: a caller's round may take a while, and this thread is not stuck.
  while (!turn.try_lock_for(std::chrono::milliseconds(1))) PeerHealth::beat();
}

template <class Idle>
bool Worker::off_turn(std::unique_lock<std::timed_mutex>& turn, Idle idle) {
  const uint64_t round = round_;
  turn.unlock();
  idle();
  take_turn(turn);
  return round_ == round && running_;
}

void Worker::run_round() {
  const auto started = Clock::now();
  bool want_shutdown = queue_.shutdown_requested();
  Timeline* tl = records_timeline_ ? state_.timeline.recording() : nullptr;
  if (tl && tl->mark_cycles()) tl->cycle_start(started);
  bool arriving = false;
  // One clock reading for the round's start, its batch and its negotiation (each read
  // is ~50 ns here, of a 4 KiB call's few us).
  auto fresh = queue_.take_fresh(&arriving, started);
  if (!fresh.empty()) {
    auto oldest = started;
    for (auto& q : fresh) oldest = std::min(oldest, q.ready_at);
    stats_.fresh_rounds++;
    stats_.submit_to_round_ns += duration_cast<nanoseconds>(started - oldest).count();
  }
  RoundResult res = controller_.round(std::move(fresh), want_shutdown, tl,
                                      tuner_ ? tuner_->proposal() : nullptr, arriving, cycle(),
                                      started);
  ++round_;
  stats_.rounds++;
  if (!res.cache_only) stats_.full_rounds++;
  if (res.full_in_vote) stats_.full_rounds_in_vote++;
  if (res.tunables) apply(*res.tunables);  // every rank, before this round's work
  const auto agreed = Clock::now();
  stats_.negotiate_ns += duration_cast<nanoseconds>(agreed - started).count();
  uint64_t bytes = execute(res, tl, agreed);
  stats_.execute_ns += duration_cast<nanoseconds>(Clock::now() - agreed).count();
  if (tuner_) tuner_->record(res.responses, bytes, Clock::now());
  if (res.shutdown) running_ = false;
}

// The caller's turn. A caller blocked on its own small host collective would
// otherwise hand it to this set's thread and wait to be handed the result: two
// wake-ups, each a context switch where the two threads share a core, and with more
// ranks than cores each a wait for the scheduler (2x2 hosts on two cores: 30-40 us
// from submission to the round, of a 150 us call). So, while the set's thread is
// between looks (yielding or asleep: it holds the turn otherwise), the caller starts
// the round as that thread would - ring, negotiate, execute - on its own thread.
// Everything a round touches is the turn-holder's, so the rounds stay one sequence.
// Not for GPU work (a device is current per thread) or large batches (a long round
// would keep the caller from its signal handlers), nor more than once per fresh
// batch: a round that found the tensor not ready everywhere leaves it to the thread.
bool Worker::help() {
  if (!callers_run() || !queue_.fresh_within(caller_runs_bytes_, lone_caller_bytes_)) return false;
  // The set's thread gives the turn up at its next yield or sleep (take_turn) unless
  // it is in a round, which may take this caller's work with it: then, after
  // kHelpWait, the usual way (the work is flushed to the thread).
  wanted_.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock<std::timed_mutex> turn(turn_, std::defer_lock);
  // Free at once in a loop of blocking calls: then no clock is read (two reads were
  // ~0.1 us of a 4 KiB call).
  bool got = turn.try_lock();
  if (!got) {
    const auto asked = Clock::now();
    got = turn.try_lock_for(kHelpWait);
    stats_.turn_wait_ns += duration_cast<nanoseconds>(Clock::now() - asked).count();
  }
  wanted_.fetch_sub(1, std::memory_order_acq_rel);
  if (!got || !running_ || !queue_.fresh_within(caller_runs_bytes_, lone_caller_bytes_)) return false;
  guarded([&] {
    // Ring unless a peer already started this round. (Liveness: the round's waits
    // check it, as the set's thread's do.)
    if (rung_now() < round_) ring_peers();
    caller_ran_last_ = true;
    queue_.request_flush(false);  // the blocked caller's work goes, held entries too
    run_round();
  });
  stats_.caller_rounds++;
  // The set's thread slept without knowing of this work. Wake it if the round left
  // any in flight (it waits for the peers' rounds, looking often) or ended the set
  // (it closes the queue: loop()).
  if (!running_ || queue_.has_in_flight()) queue_.wake_worker();
  return true;
}

void Worker::loop() {
  prctl(PR_SET_TIMERSLACK, 1000UL);  // short sleeps must stay short (default slack: 50 us)
  // Findable in top and /proc (benchmarks/torch_training.py counts its wake-ups).
  prctl(PR_SET_NAME, ("hvdl-set" + std::to_string(id_)).c_str());
  PeerHealth::Registration beating("process set " + std::to_string(id_));
  while (running_) {
    std::unique_lock<std::timed_mutex> turn(turn_, std::defer_lock);
    take_turn(turn);
    guarded([&] {
      if (running_ && wait_for_round(turn)) {
        caller_ran_last_ = false;
        run_round();
      }
    });
  }
  std::string why = why_;
  if (!why.empty()) {
    // Say which of this rank's tensors the failure took down (what was in flight).
    auto names = queue_.in_flight_names();
    if (!names.empty()) {
      std::string list;
      for (size_t i = 0; i < names.size() && i < 8; ++i) list += (i ? ", '" : "'") + names[i] + "'";
      if (names.size() > 8) list += " and " + std::to_string(names.size() - 8) + " more";
      why += "; process set " + std::to_string(id_) + " had in flight: " + list;
    }
    HVDL_LOG(DEBUG) << why;
  }
  if (why.empty())
    why = queue_.shutdown_requested()
              ? "horovodlite has been shut down; the collective did not complete"
              : "horovodlite: another rank shut down (process set " + std::to_string(id_) +
                    "); this collective cannot complete. Call hvd.shutdown() on this rank too";
  // Closing also refuses later enqueues, which would otherwise wait forever.
  for (auto& e : queue_.close(why)) e->handle->complete(Status::error(Status::ABORTED, why));
  try {
    devices_.clear();  // on this thread: the one whose current device they were set up on
  } catch (const std::exception& e) {
    HVDL_LOG(WARNING) << "process set " << id_ << ": releasing devices: " << e.what();
  }
}

// This rank's device for a group: its own tensors' (all on one device per process), or
// for a rank that has joined, the GPU it uses elsewhere (the response names rank 0's).
static int local_device(const Response& head, const std::vector<TensorEntry*>& entries,
                        int process_gpu) {
  for (auto* e : entries)
    if (e) return e->req.device;
  if (head.device < 0) return -1;
  return process_gpu >= 0 ? process_gpu : head.device;
}

void Worker::apply(const Tunables& t) {
  params_.fusion_threshold = t.fusion_threshold;
  params_.cycle_time_ms = t.cycle_time_ms;
  params_.segment_bytes = t.segment_bytes;
  {
    std::lock_guard<std::mutex> l(shown_mu_);
    shown_ = t;
  }
  if (tuner_) tuner_->applied(t, Clock::now());
  HVDL_LOG(DEBUG) << "process set " << id_ << ": fusion_threshold=" << t.fusion_threshold
                  << " cycle_time_ms=" << t.cycle_time_ms << " ring_segment_bytes=" << t.segment_bytes
                  << (t.final ? " (final)" : "");
}

// A host allreduce the pair exchange would run (ring_allreduce.h), unscaled before the
// reduction, whose input and output this rank holds.
Rider Worker::rider_for(const Response& r) {
  if (r.op != OpType::ALLREDUCE || !r.ok() || r.device >= 0 || r.prescale != 1.0 ||
      r.reduce_op == ReduceOp::ADASUM)
    return {};
  const TensorEntry* e = queue_.find(r.name);
  const size_t bytes = tensor_bytes(r.shape, r.dtype);
  if (!e || !e->input || !e->output || e->req.device >= 0 || bytes == 0) return {};
  // A path that reduces it where it lies (zero copy: a shared array) moves fewer bytes
  // than a rider's copy: it stays behind (and with it every rank's, since a rider goes
  // only when every rank sends one).
  if (allreduce_->reduces_where_they_lie(e->input, e->output, bytes)) return {};
  return {e->input, bytes, r.dtype, ops::effective_reduction(r, transport_->size()).op};
}

void Worker::run_split_rider(ExecContext& ctx, const void* in, const void* const* theirs, void* out,
                             size_t count, DataType dt, ReduceOp op, double postscale) {
  const int rank = transport_->rank(), n = transport_->size();
  const size_t es = dtype_size(dt);
  const ByteSpan own = block_span(count, n, rank, es);
  const char* in_block = static_cast<const char*>(in) + own.at;
  char* out_block = static_cast<char*>(out) + own.at;
  // In rank order, as a whole rider folds: the same bits whether a tensor rode whole
  // or split. In place the fold needs room of its own (it reads the input block).
  void* acc = in == out ? ctx.scratch.reserve(own.bytes) : out_block;
  combine_in_rank_order(ctx.reducer, rank, n, in_block, theirs, acc, out_block, own.bytes / es,
                        dt, op, postscale);
  // Every input block already went out with the vote, so `out` may be `in`.
  direct_allgather(*transport_, out, count, es);
}

// Each host's inputs folded in rank order, then the hosts' folds in host order
// (rider_hosts_), into `out`: the bits of HostsVote's fold on the way.
void Worker::fold_by_hosts(ExecContext& ctx, const void* in, const void* const* theirs, void* out,
                           size_t count, DataType dt, ReduceOp op) {
  const int rank = transport_->rank();
  const size_t bytes = count * dtype_size(dt);
  char* partials = ctx.scratch.reserve(rider_hosts_.size() * bytes);
  std::vector<const void*> host_in, folds;
  for (size_t h = 0; h < rider_hosts_.size(); ++h) {
    host_in.clear();
    for (int p : rider_hosts_[h]) host_in.push_back(p == rank ? in : theirs[p]);
    // A lone rank's input is its host's fold, read where it lies; but not this rank's
    // own in place after the first host's: the last fold writes `out` before it reads
    // that (fold_in_order: `out` may be in[0] only).
    if (host_in.size() == 1 && (host_in[0] != out || h == 0)) {
      folds.push_back(host_in[0]);
      continue;
    }
    void* fold = partials + h * bytes;
    fold_in_order(ctx.reducer, fold, host_in.data(), host_in.size(), count, dt, op);
    folds.push_back(fold);
  }
  // `out` may be `in`: every host's fold has read it by now, or it is folds[0].
  fold_in_order(ctx.reducer, out, folds.data(), folds.size(), count, dt, op);
}

uint64_t Worker::execute(const RoundResult& round, Timeline* tl, Clock::time_point agreed) {
  const std::vector<Response>& responses = round.responses;
  const void* const* peer_inputs = round.peer_inputs;
  uint64_t total_bytes = 0;
  std::vector<size_t> sizes;
  std::string abandoned;
  bool peer_failed = false;
  for (const FusionGroup& fused : plan_fusion(responses, params_.fusion_threshold, allreduce_.get())) {
    const std::vector<const Response*>& group = fused.members;
    std::vector<std::unique_ptr<TensorEntry>> owned;
    std::vector<TensorEntry*> entries;
    for (auto* r : group) {
      owned.push_back(r->name.empty() ? nullptr : queue_.take(r->name));
      entries.push_back(owned.back().get());
    }
    const Response& head = *group[0];
    const CollectiveOp* op = fused.op;
    sizes.clear();
    for (auto* r : group) sizes.push_back(payload_bytes(*r));
    Status st;
    GroupTrace trace;
    Clock::time_point begin;
    if (tl) {
      begin = Clock::now();
      for (auto* r : group)
        if (!r->name.empty()) tl->queued(r->name, agreed, begin);
    }
    if (!head.ok()) {
      st = Status::error(head.error_kind == Response::TYPE_ERROR    ? Status::INVALID_TYPE
                         : head.error_kind == Response::VALUE_ERROR ? Status::INVALID_VALUE
                                                                    : Status::MISMATCH,
                         head.error);
    } else if (!op) {
      st = Status::error(Status::INTERNAL, std::string("horovodlite: ") + op_type_name(head.op) +
                                               " is not supported by this build");
    } else {
      Device* dev = nullptr;
      try {
        dev = &devices_.get(local_device(head, entries, state_.process_gpu.load()));
        ExecContext ctx{dev->transport(), dev->reducer(), dev->fusion(), dev->scratch(),
                        params_.fusion_threshold, *dev};
        ctx.segment_bytes = params_.segment_bytes;
        ctx.broadcast = params_.broadcast;
        ctx.phases = tl ? &trace : nullptr;
        dev->begin(entries);
        if (peer_inputs && group.size() == 1 && entries[0]) {
          // The controller checked that every rank sent this tensor: the exchange is done.
          PhaseScope p(ctx.phases, "VOTE_RIDER_REDUCE");
          stats_.rider_groups++;
          const auto [rop, post] = ops::effective_reduction(head, transport_->size());
          const TensorEntry& e = *entries[0];
          const size_t count = ops::numel(head.shape), bytes = tensor_bytes(head.shape, head.dtype);
          const int rank = transport_->rank(), n = transport_->size();
          if (round.split_inputs) {
            stats_.split_riders++;
            run_split_rider(ctx, e.input, peer_inputs, e.output, count, head.dtype, rop, post);
          } else if (round.folded_inputs) {
            // Folded on the way, the same bits on every rank: only the scale is left.
            stats_.folded_riders++;
            if (e.output != round.folded_inputs) std::memcpy(e.output, round.folded_inputs, bytes);
            ctx.reducer.scale(e.output, count, head.dtype, post);
          } else if (rider_order_ == RiderOrder::HOSTS) {
            fold_by_hosts(ctx, e.input, peer_inputs, e.output, count, head.dtype, rop);
            ctx.reducer.scale(e.output, count, head.dtype, post);
          } else if (rider_order_ == RiderOrder::BLOCKS) {
            void* scratch = e.input == e.output ? ctx.scratch.reserve(bytes) : nullptr;
            combine_in_window_blocks(ctx.reducer, rank, n, e.input, peer_inputs, scratch,
                                     e.output, count, head.dtype, rop, post);
          } else {
            void* acc = e.input == e.output ? ctx.scratch.reserve(bytes) : e.output;
            combine_in_rank_order(ctx.reducer, rank, n, e.input, peer_inputs, acc, e.output,
                                  count, head.dtype, rop, post);
          }
        } else {
          op->execute(ctx, group, entries);
        }
        dev->end();
        stats_.groups++;
        stats_.tensors += group.size();
        for (size_t b : sizes) total_bytes += b;
      } catch (const std::exception& e) {
        // Work already queued on a GPU must not outlive the tensors the handles release.
        try {
          if (dev) dev->end();
        } catch (...) {
        }
        st = Status::error(Status::INTERNAL, std::string("horovodlite: ") + op_type_name(head.op) +
                                                 " '" + head.name + "' failed: " + e.what());
        // Given up half way on this rank only, it would leave the peers waiting for
        // data that never comes, and whatever they sent in step with the next
        // collective: tell them, and end this set on every rank (below).
        peer_failed = dynamic_cast<const PeerFailure*>(&e) != nullptr;
        if (!peer_failed) transport_->abandon(st.message());
        abandoned = st.message();
      }
    }
    if (tl) tl->executed(group, sizes, begin, Clock::now(), trace);
    for (size_t i = 0; i < group.size(); ++i) {
      controller_.executed(*group[i], entries[i] ? &entries[i]->req : nullptr);
      if (entries[i]) entries[i]->handle->settle(st);
    }
    for (auto* e : entries)
      if (e) e->handle->notify();
    if (!abandoned.empty()) {
      // The rest of this round's groups fail with the set (its queue is closed).
      if (peer_failed) throw PeerFailure(abandoned);
      throw SetAbandoned(abandoned + "; process set " + std::to_string(id_) +
                         " can run no more collectives (hvd.shutdown() and hvd.init() "
                         "start afresh)");
    }
  }
  stats_.bytes += total_bytes;
  return total_bytes;
}

}  // namespace hvdl
