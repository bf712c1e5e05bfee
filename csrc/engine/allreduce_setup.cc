#include "allreduce_setup.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "../collectives/allreduce_path.h"
#include "../collectives/shm_allreduce.h"
#include "../common/logging.h"
#include "../common/settings.h"
#include "../transport/shm_window.h"
#include "../transport/tcp_transport.h"
#include "../transport/world.h"
#include "fault_injection.h"

namespace hvdl {
namespace {

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

namespace {

std::unique_ptr<AllreducePaths> flat_ring(Transport& set) {
  auto paths = std::make_unique<AllreducePaths>("ring", nullptr);
  paths->contender(make_ring_path(set));
  return paths;
}

TcpOptions tcp_options(const Settings& s) {
  TcpOptions o;
  o.one_machine = s.is_set(Setting::HOSTNAME_OVERRIDE);
  o.if_include = s.str(Setting::TCP_IF_INCLUDE);
  o.timeout_s = s.real(Setting::TCP_TIMEOUT_SECONDS);
  o.spin_us = static_cast<int>(std::max<long long>(0, s.integer(Setting::TCP_SPIN_US)));
  return o;
}

size_t tcp_min_bytes(const Settings& s) {
  return static_cast<size_t>(std::max<long long>(0, s.integer(Setting::TCP_MIN_BYTES)));
}

// The flat ring over a set that spans hosts: its large blocks over direct TCP
// (cross_host_ring_path.cc) when TCP_TRANSPORT allows it and every pair connects.
// Collective: every rank reads the same settings (the launcher forwards them) and
// the same host count, so all of them take part or none does.
std::unique_ptr<AllreducePaths> ring_across_hosts(Transport& set, const Settings& s) {
  if (!s.flag(Setting::TCP_TRANSPORT)) return flat_ring(set);
  std::unique_ptr<Transport> own;  // the TCP transport's control plane
  try {
    own = set.split(0, set.rank());
  } catch (const std::logic_error&) {  // before any communication: the same on all ranks
    return flat_ring(set);
  }
  auto tcp = make_tcp_transport(own, tcp_options(s));
  if (!tcp) return flat_ring(set);
  HVDL_LOG(DEBUG) << "allreduce: flat ring across hosts, large blocks over TCP";
  const TcpInfo* info = tcp_info(*tcp);  // read before the path takes tcp
  auto paths = std::make_unique<AllreducePaths>("ring", nullptr);
  if (info) paths->set_cross_tcp(*info);
  paths->contender(make_cross_host_ring_path(std::move(tcp), set, tcp_min_bytes(s)));
  return paths;
}

}  // namespace

std::unique_ptr<AllreducePaths> make_host_allreduce_paths(Transport& set,
                                                          const std::vector<int>& hosts,
                                                          const Settings& settings) {
  const int n = set.size(), me = set.rank();
  if (n <= 1 || hosts.size() != static_cast<size_t>(n)) return flat_ring(set);
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
    if (!w) return flat_ring(set);  // every rank alike: create() agrees over the whole set
    HVDL_LOG(DEBUG) << "allreduce: shared memory (" << w->mechanism() << ") over " << n << " ranks";
    auto shm = std::make_shared<ShmCollectives>(std::move(w), opts, PeerArenas::map(set));
    install_test_faults(*shm, settings);
    auto paths = std::make_unique<AllreducePaths>("shm", "SHARED_MEMORY_ALLREDUCE");
    paths->first(make_zero_copy_path(shm))
        .contender(make_shm_path(shm, false))  // the order shm_choice.cc numbers them in
        .contender(make_shm_path(shm, true))
        .contender(make_ring_path(set))
        .chooser(make_shm_choice(shm, opts));
    paths->set_shm_info({opts, shm->mechanism(), shm->has_step_hook()});
    return paths;
  }
  if (kind != "hierarchical") return topo.hosts > 1 ? ring_across_hosts(set, settings) : flat_ring(set);

  std::unique_ptr<Transport> local_t, cross_t;
  try {
    local_t = set.split(hosts[me], me);
    cross_t = set.split(topo.local_rank, topo.cross_rank);
  } catch (const std::logic_error& e) {  // before any communication: the same on all ranks
    HVDL_LOG(WARNING) << "hierarchical allreduce not used: " << e.what();
    return flat_ring(set);
  }
  // Every rank reads the same setting (it is forwarded by the launcher), so all of
  // them take part in the setup or none does.
  bool cross_is_tcp = false;
  Transport* cross_mpi = cross_t.get();  // still alive inside the TCP transport that wraps it
  if (cross_t->size() > 1 && settings.flag(Setting::TCP_TRANSPORT)) {
    if (auto tcp = make_tcp_transport(cross_t, tcp_options(settings))) {
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
  if (!all) return flat_ring(set);
  HVDL_LOG(DEBUG) << "allreduce: hierarchical, " << topo.hosts << " hosts x " << topo.local_size
                  << " ranks, across hosts over " << (cross_is_tcp ? "TCP" : "MPI");
  AllreducePaths::ShmInfo info{opts, local ? local->mechanism() : "", local && local->has_step_hook()};
  const TcpInfo* tcp = tcp_info(*cross_t);  // read before the path takes cross_t
  auto paths = std::make_unique<AllreducePaths>("hierarchical", "HIERARCHICAL_ALLREDUCE");
  paths->contender(make_hierarchical_path(std::move(local), std::move(cross_t), opts, cross_is_tcp,
                                          cross_is_tcp ? cross_mpi : nullptr, tcp_min_bytes(settings)));
  paths->set_shm_info(std::move(info));
  if (tcp) paths->set_cross_tcp(*tcp);
  return paths;
}

}  // namespace hvdl
