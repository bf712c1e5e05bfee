#include "allreduce_algorithm.h"

#include <algorithm>
#include <chrono>
#include <sstream>
#include <stdexcept>

#include "../collectives/hierarchical_allreduce.h"
#include "../collectives/hierarchical_pipeline.h"
#include "../collectives/path_tuner.h"
#include "../collectives/ring_allreduce.h"
#include "../collectives/shm_allreduce.h"
#include "../common/buffer.h"
#include "../common/settings.h"
#include "../common/logging.h"
#include "../transport/shm_window.h"
#include "../transport/tcp_transport.h"
#include "../transport/world.h"
#include "fault_injection.h"

namespace hvdl {
namespace {

// Every rank on this host. Three ways, all bitwise identical: the shared-memory
// pipeline writing its slots with ordinary or with non-temporal stores, and the ring,
// whose messages MPI moves with a single copy straight from the peer's memory (CMA)
// where the pipeline copies each byte twice. Which is fastest depends on where the
// vCPUs sit (path_tuner.h has the numbers), so allreduces of 1 MiB or more are timed
// and the fastest kept; rank 0 decides and announces each such call's way through
// the window, since all ranks must run the same algorithm. Smaller calls run the
// pipeline with the last store mode announced: the ring's per-step latency loses there.
class ShmAllreduce : public AllreduceAlgorithm {
 public:
  ShmAllreduce(std::unique_ptr<ShmWindow> w, const ShmOptions& o, Transport& set)
      : shm_(std::move(w), o, PeerArenas::map(set)), opts_(o), set_(set) {}
  const char* name() const override { return "shm"; }
  const char* phase() const override { return "SHARED_MEMORY_ALLREDUCE"; }
  bool takes_spans() const override { return true; }
  const ShmOptions* shm_options() const override { return &opts_; }
  std::string window_mechanism() const override { return shm_.mechanism(); }
  ShmCollectives& collectives() { return shm_; }
  bool fault_hooked() const override { return shm_.has_step_hook(); }

  void run(const Reducer& red, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
           double prescale, double postscale, const RingOptions& ring) override {
    run_spans(red, {{in, out, count}}, dt, op, prescale, postscale, ring);
  }

  void run_spans(const Reducer& red, const std::vector<Span>& spans, DataType dt, ReduceOp op,
                 double prescale, double postscale, const RingOptions& ring) override {
    size_t bytes = 0;
    for (const Span& s : spans) bytes += s.count * dtype_size(dt);
    // Tensors in the ranks' shared arenas need no way chosen: none moves fewer bytes.
    // Below the size, asking (one exchange of offsets) would cost more than it saves.
    if (bytes >= kZeroCopyFrom &&
        shm_.zero_copy_allreduce(red, spans, dt, op, prescale, postscale))
      return;
    const int kind = spans.size() > 1;  // a batch: the ring runs once per tensor
    const Way way = choose(bytes, kind);
    const auto t0 = std::chrono::steady_clock::now();
    if (way == kRing) {
      for (const Span& s : spans)
        ring_allreduce_host(set_, red, s.in, s.out, s.count, dt, op, prescale, postscale, scratch_,
                            ring);
    } else {
      shm_.allreduce(red, spans, dt, op, prescale, postscale, way == kShmStreamed);
    }
    if (shm_.rank() == 0 && opts_.tuned()) tuner_.record(way, bytes, seconds_since(t0), kind);
  }

 private:
  enum Way { kShm = 0, kShmStreamed = 1, kRing = 2 };
  static constexpr size_t kZeroCopyFrom = 64u << 10;

  Way choose(size_t bytes, int kind) {
    if (!opts_.tuned()) {
      if (opts_.ring_threshold != ShmOptions::kAuto && opts_.ring_threshold != 0 &&
          bytes >= opts_.ring_threshold)
        return kRing;
      return opts_.fixed_stream(bytes) ? kShmStreamed : kShm;
    }
    if (!tuner_.timed(bytes)) return small_;
    ++calls_;
    Way way;
    if (shm_.rank() == 0) {
      way = static_cast<Way>(tuner_.choose(bytes, kind));
      shm_.announce(calls_, way);
    } else {
      way = static_cast<Way>(shm_.await_announcement(calls_));
    }
    if (way != kRing) small_ = way;
    return way;
  }

  ShmCollectives shm_;
  ShmOptions opts_;
  Transport& set_;  // the worker's: it outlives this object
  HostBuffer scratch_;
  PathTuner tuner_{3};  // rank 0's
  uint64_t calls_ = 0;  // timed calls, numbered alike on every rank
  Way small_ = kShm;
};

class HierarchicalAllreduce : public AllreduceAlgorithm {
 public:
  HierarchicalAllreduce(std::unique_ptr<ShmCollectives> local, std::unique_ptr<Transport> cross,
                        const ShmOptions& o, bool cross_is_tcp)
      : local_(std::move(local)), cross_(std::move(cross)), opts_(o), cross_is_tcp_(cross_is_tcp) {}
  const char* name() const override { return "hierarchical"; }
  const char* phase() const override { return "HIERARCHICAL_ALLREDUCE"; }
  const ShmOptions* shm_options() const override { return &opts_; }
  std::string window_mechanism() const override { return local_ ? local_->mechanism() : ""; }
  bool fault_hooked() const override { return local_ && local_->has_step_hook(); }
  void run(const Reducer& red, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
           double prescale, double postscale, const RingOptions& ring) override {
    // Each rank picks its own store mode (no result depends on it), by timing, and
    // like ShmAllreduce keeps the last timed choice for calls too short to time.
    const size_t bytes = count * dtype_size(dt);
    const bool tuned = opts_.stream_in_threshold == ShmOptions::kAuto;
    const bool timed = tuned && stream_.timed(bytes);
    bool stream = tuned ? small_stream_ : opts_.fixed_stream(bytes);
    if (timed) small_stream_ = stream = stream_.choose(bytes) == 1;
    const auto t0 = std::chrono::steady_clock::now();
    // Over direct TCP the cross-host ring takes segments of at least 4 MiB: two in
    // flight then hold ~64 ms of a 1 Gbit/s link, so a rank that misses its turn on
    // the cores for a while does not leave the link idle.
    RingOptions cross_ring = ring;
    if (cross_is_tcp_)
      cross_ring.segment_bytes = std::max<size_t>(
          ring.segment_bytes ? ring.segment_bytes : kDefaultRingSegmentBytes, size_t(4) << 20);
    if (local_ && HierarchicalPipeline::chunks_for(bytes) > 1) {
      if (!pipeline_) pipeline_ = std::make_unique<HierarchicalPipeline>(*local_, *cross_);
      PhaseScope p(ring.phases, "HIERARCHICAL_PIPELINE");
      pipeline_->run(red, in, out, count, dt, op, prescale, postscale, stream, cross_ring);
    } else {
      hierarchical_allreduce(local_.get(), *cross_, red, in, out, count, dt, op, prescale,
                             postscale, scratch_, stream, cross_ring);
    }
    if (timed) stream_.record(stream, bytes, seconds_since(t0));
  }

 private:
  std::unique_ptr<ShmCollectives> local_;  // null when this rank is alone on its host
  std::unique_ptr<Transport> cross_;
  std::unique_ptr<HierarchicalPipeline> pipeline_;  // after local_, cross_: stopped before them
  HostBuffer scratch_;
  ShmOptions opts_;
  PathTuner stream_{2};  // [ordinary, non-temporal] stores in the local passes
  bool small_stream_ = false;
  bool cross_is_tcp_ = false;
};

// Rank 0's decision, so that ranks with different environments still agree.
std::string choose(const Topology& topo, const Settings& s) {
  const bool shm = s.flag(Setting::SHM);
  const std::string hier = s.str(Setting::HIERARCHICAL_ALLREDUCE);  // "auto" = automatic
  if (topo.hosts == 1) {
    if (!shm) return "ring";
    return hier == "1" ? "hierarchical" : "shm";
  }
  const char* why_not = nullptr;
  const std::string hier_var = s.variable(Setting::HIERARCHICAL_ALLREDUCE) + "=0";
  const std::string shm_var = s.variable(Setting::SHM) + "=0";
  if (hier == "0") why_not = hier_var.c_str();
  else if (!shm) why_not = shm_var.c_str();
  else if (!topo.homogeneous) why_not = "hosts run different numbers of ranks";
  // Several hosts: the hierarchical path. With L ranks per host its L rings across
  // hosts move S/H per host link per step in 2(H-1) steps; the flat ring moves S/(HL)
  // per step in 2(HL-1) steps, L times slower on the link (horovodlite/sim.py). With
  // one rank per host both are the same ring, and the hierarchical one runs it over
  // direct TCP connections (tcp_transport.h), which keep the link busy where MPI's
  // TCP path idles while a rank sleeps.
  if (!why_not) return "hierarchical";
  if (hier == "1") {
    HVDL_LOG(WARNING) << "hierarchical allreduce not used: " << why_not;
  }
  return "ring";
}

}  // namespace

ShmOptions shm_options(const Settings& s) {
  ShmOptions o;
  o.chunk_bytes = static_cast<size_t>(s.integer(Setting::SHM_CHUNK_BYTES));
  o.slots = static_cast<int>(s.integer(Setting::SHM_SLOTS));
  o.stream_in_threshold = static_cast<size_t>(
      s.integer_or(Setting::SHM_STREAM_IN_THRESHOLD, static_cast<long long>(ShmOptions::kAuto)));
  o.stream_out_threshold = static_cast<size_t>(s.integer(Setting::SHM_STREAM_OUT_THRESHOLD));
  o.ring_threshold = static_cast<size_t>(
      s.integer_or(Setting::SHM_RING_THRESHOLD, static_cast<long long>(ShmOptions::kAuto)));
  o.clamp();
  return o;
}

std::unique_ptr<AllreduceAlgorithm> make_allreduce_algorithm(Transport& set,
                                                             const std::vector<int>& hosts,
                                                             const Settings& settings) {
  const int n = set.size(), me = set.rank();
  if (n <= 1 || hosts.size() != static_cast<size_t>(n)) return nullptr;
  const Topology topo = topology_of(hosts, me);
  ShmOptions opts = shm_options(settings);
  const bool named = settings.str(Setting::SHM_MECHANISM) == "shm_open";
  std::string plan;
  if (me == 0) {
    std::ostringstream os;
    os << choose(topo, settings) << ' ' << opts.chunk_bytes << ' ' << opts.slots << ' '
       << opts.stream_in_threshold << ' ' << opts.stream_out_threshold << ' '
       << opts.ring_threshold;
    plan = os.str();
  }
  set.broadcast(plan, 0);
  std::istringstream is(plan);
  std::string kind;
  is >> kind >> opts.chunk_bytes >> opts.slots >> opts.stream_in_threshold >>
      opts.stream_out_threshold >> opts.ring_threshold;

  if (kind == "shm") {
    auto w = ShmWindow::create(set, ShmCollectives::window_bytes(opts, n), named);
    if (!w) return nullptr;  // every rank alike: create() agrees over the whole set
    HVDL_LOG(DEBUG) << "allreduce: shared memory (" << w->mechanism() << ") over " << n << " ranks";
    auto a = std::make_unique<ShmAllreduce>(std::move(w), opts, set);
    install_test_faults(a->collectives(), settings);
    return a;
  }
  if (kind != "hierarchical") return nullptr;

  std::unique_ptr<Transport> local_t, cross_t;
  try {
    local_t = set.split(hosts[me], me);
    cross_t = set.split(topo.local_rank, topo.cross_rank);
  } catch (const std::logic_error& e) {  // before any communication: the same on all ranks
    HVDL_LOG(WARNING) << "hierarchical allreduce not used: " << e.what();
    return nullptr;
  }
  // Every rank reads the same setting (it is forwarded by the launcher), so all of
  // them take part in the setup or none does.
  bool cross_is_tcp = false;
  if (cross_t->size() > 1 && settings.flag(Setting::TCP_TRANSPORT)) {
    TcpOptions tcp_opts;
    tcp_opts.one_machine = settings.is_set(Setting::HOSTNAME_OVERRIDE);
    tcp_opts.if_include = settings.str(Setting::TCP_IF_INCLUDE);
    tcp_opts.timeout_s = settings.real(Setting::TCP_TIMEOUT_SECONDS);
    if (auto tcp = make_tcp_transport(cross_t, tcp_opts)) {
      cross_t = std::move(tcp);
      cross_is_tcp = true;
    }
  }
  std::unique_ptr<ShmCollectives> local;
  bool ok = true;
  if (local_t->size() > 1) {
    auto w = ShmWindow::create(*local_t, ShmCollectives::window_bytes(opts, local_t->size()),
                               named);
    ok = w != nullptr;
    if (ok) {
      local = std::make_unique<ShmCollectives>(std::move(w), opts);
      install_test_faults(*local, settings);
    }
  }
  local_t.reset();  // only needed to set the window up
  uint64_t all = ok ? 1 : 0;
  set.allreduce_and(&all, 1);  // some host may have failed where others succeeded
  if (!all) return nullptr;
  HVDL_LOG(DEBUG) << "allreduce: hierarchical, " << topo.hosts << " hosts x " << topo.local_size
                  << " ranks, across hosts over " << (cross_is_tcp ? "TCP" : "MPI");
  return std::make_unique<HierarchicalAllreduce>(std::move(local), std::move(cross_t), opts,
                                                 cross_is_tcp);
}

}  // namespace hvdl
