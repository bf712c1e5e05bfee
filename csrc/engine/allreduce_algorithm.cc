#include "allreduce_algorithm.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <sstream>
#include <stdexcept>

#include "../collectives/hierarchical_allreduce.h"
#include "../collectives/ring_allreduce.h"
#include "../collectives/shm_allreduce.h"
#include "../common/buffer.h"
#include "../common/env.h"
#include "../common/logging.h"
#include "../transport/shm_window.h"

namespace hvdl {
namespace {

// Every rank on this host. Staging through the window costs each byte a second copy,
// which the ring avoids when MPI moves its messages with a single copy straight
// from the peer's memory (CMA): on the 2-core VM this was measured on, the window
// wins up to 16 MiB (4 MiB: 0.7 ms against 7 ms under load, 0.7 against 2.2 idle),
// the ring from 64 MiB (idle 8 ms against 10-12; under load, when the peer's time
// slice is what a pipelined step waits for, 44 ms against 69, since a single-copy
// transfer needs no help from the peer). Above ring_threshold the ring runs.
class ShmAllreduce : public AllreduceAlgorithm {
 public:
  ShmAllreduce(std::unique_ptr<ShmWindow> w, const ShmOptions& o, Transport& set)
      : shm_(std::move(w), o), ring_threshold_(o.ring_threshold), set_(set) {}
  const char* name() const override { return "shm"; }
  void run(const Reducer& red, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
           double prescale, double postscale) override {
    const size_t bytes = count * dtype_size(dt);
    if (ring_threshold_ == 0 || bytes < ring_threshold_)
      return shm_.allreduce(red, in, out, count, dt, op, prescale, postscale);
    if (in != out) std::memcpy(out, in, bytes);
    red.scale(out, count, dt, prescale);
    ring_allreduce(set_, red, out, count, dt, op, postscale, scratch_);
  }

 private:
  ShmCollectives shm_;
  size_t ring_threshold_;
  Transport& set_;  // the worker's: it outlives this object
  HostBuffer scratch_;
};

class HierarchicalAllreduce : public AllreduceAlgorithm {
 public:
  HierarchicalAllreduce(std::unique_ptr<ShmCollectives> local, std::unique_ptr<Transport> cross)
      : local_(std::move(local)), cross_(std::move(cross)) {}
  const char* name() const override { return "hierarchical"; }
  void run(const Reducer& red, const void* in, void* out, size_t count, DataType dt, ReduceOp op,
           double prescale, double postscale) override {
    hierarchical_allreduce(local_.get(), *cross_, red, in, out, count, dt, op, prescale, postscale,
                           scratch_);
  }

 private:
  std::unique_ptr<ShmCollectives> local_;  // null when this rank is alone on its host
  std::unique_ptr<Transport> cross_;
  HostBuffer scratch_;
};

// Rank 0's decision, so that ranks with different environments still agree.
std::string choose(const std::vector<int>& hosts) {
  std::map<int, int> per_host;
  for (int h : hosts) per_host[h]++;
  const bool homogeneous = std::all_of(per_host.begin(), per_host.end(),
                                       [&](auto& kv) { return kv.second == per_host.begin()->second; });
  const bool shm = env_str("SHM", "1") != "0";
  const std::string hier = env_str("HIERARCHICAL_ALLREDUCE");  // "" = automatic
  if (per_host.size() == 1) {
    if (!shm) return "ring";
    return hier == "1" ? "hierarchical" : "shm";
  }
  const char* why_not = nullptr;
  if (hier == "0") why_not = "HOROVODLITE_HIERARCHICAL_ALLREDUCE=0";
  else if (!shm) why_not = "HOROVODLITE_SHM=0";
  else if (!homogeneous) why_not = "hosts run different numbers of ranks";
  else if (per_host.begin()->second == 1) why_not = "one rank per host";
  if (!why_not) return "hierarchical";
  if (hier == "1") {
    HVDL_LOG(WARNING) << "hierarchical allreduce not used: " << why_not;
  }
  return "ring";
}

}  // namespace

std::unique_ptr<AllreduceAlgorithm> make_allreduce_algorithm(Transport& set,
                                                             const std::vector<int>& hosts) {
  const int n = set.size(), me = set.rank();
  if (n <= 1 || hosts.size() != static_cast<size_t>(n)) return nullptr;
  ShmOptions opts = shm_options_from_env();
  std::string plan;
  if (me == 0) {
    std::ostringstream os;
    os << choose(hosts) << ' ' << opts.chunk_bytes << ' ' << opts.slots << ' '
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
    auto w = ShmWindow::create(set, ShmCollectives::window_bytes(opts, n));
    if (!w) return nullptr;  // every rank alike: create() agrees over the whole set
    HVDL_LOG(DEBUG) << "allreduce: shared memory (" << w->mechanism() << ") over " << n << " ranks";
    return std::make_unique<ShmAllreduce>(std::move(w), opts, set);
  }
  if (kind != "hierarchical") return nullptr;

  // My index among the set's ranks on my host, and my host's index among hosts.
  int local_index = 0;
  for (int i = 0; i < me; ++i) local_index += hosts[i] == hosts[me];
  std::vector<int> host_ids(hosts);
  std::sort(host_ids.begin(), host_ids.end());
  host_ids.erase(std::unique(host_ids.begin(), host_ids.end()), host_ids.end());
  const int host_index =
      static_cast<int>(std::lower_bound(host_ids.begin(), host_ids.end(), hosts[me]) - host_ids.begin());

  std::unique_ptr<Transport> local_t, cross_t;
  try {
    local_t = set.split(host_index, me);
    cross_t = set.split(local_index, host_index);
  } catch (const std::logic_error& e) {  // before any communication: the same on all ranks
    HVDL_LOG(WARNING) << "hierarchical allreduce not used: " << e.what();
    return nullptr;
  }
  std::unique_ptr<ShmCollectives> local;
  bool ok = true;
  if (local_t->size() > 1) {
    auto w = ShmWindow::create(*local_t, ShmCollectives::window_bytes(opts, local_t->size()));
    ok = w != nullptr;
    if (ok) local = std::make_unique<ShmCollectives>(std::move(w), opts);
  }
  local_t.reset();  // only needed to set the window up
  uint64_t all = ok ? 1 : 0;
  set.allreduce_and(&all, 1);  // some host may have failed where others succeeded
  if (!all) return nullptr;
  HVDL_LOG(DEBUG) << "allreduce: hierarchical, " << host_ids.size() << " hosts x "
                  << n / host_ids.size() << " ranks";
  return std::make_unique<HierarchicalAllreduce>(std::move(local), std::move(cross_t));
}

}  // namespace hvdl
