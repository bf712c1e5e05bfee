#include "engine.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

#include "../common/settings.h"
#include "../reduce/reduce.h"
#include "../transport/shared_arena.h"
#include "output_pool.h"
#include "../common/logging.h"
#include "../transport/peer_health.h"
#include "timeline.h"
#include "device.h"

namespace hvdl {

Engine& Engine::get() {
  static Engine* e = new Engine();  // never destroyed: workers may outlive static teardown
  return *e;
}

// Host index of each rank of a set (chooses its allreduce path).
static std::vector<int> hosts_of(const Topology& t, const std::vector<int>& ranks) {
  std::vector<int> h;
  for (int r : ranks) h.push_back(t.host_of_rank[r]);
  return h;
}

// The settings each layer below needs, as its options.
static EngineParams params_from(const Settings& s) {
  using S = Setting;
  EngineParams p;
  p.fusion_threshold = static_cast<size_t>(s.integer(S::FUSION_THRESHOLD));
  p.cycle_time_ms = s.real(S::CYCLE_TIME);
  p.cache_capacity = static_cast<size_t>(s.integer(S::CACHE_CAPACITY));
  p.stall_warn_s = s.real(S::STALL_CHECK_TIME_SECONDS);
  if (s.flag(S::STALL_CHECK_DISABLE)) p.stall_warn_s = 0;
  p.stall_fail_s = s.real(S::STALL_SHUTDOWN_TIME_SECONDS);
  p.segment_bytes = static_cast<size_t>(std::max<long long>(64, s.integer(S::RING_SEGMENT_BYTES)));
  p.autotune = s.flag(S::AUTOTUNE);
  AutotuneOptions& a = p.autotune_options;
  a.warmup_samples = static_cast<int>(s.integer(S::AUTOTUNE_WARMUP_SAMPLES));
  a.steps_per_sample = static_cast<int>(s.integer(S::AUTOTUNE_STEPS_PER_SAMPLE));
  a.samples_per_setting = static_cast<int>(s.integer(S::AUTOTUNE_SAMPLES_PER_SETTING));
  a.confirm_rounds = static_cast<int>(s.integer(S::AUTOTUNE_CONFIRM_ROUNDS));
  a.min_sample_ms = s.real(S::AUTOTUNE_MIN_SAMPLE_MS);
  a.log_path = s.str(S::AUTOTUNE_LOG);
  // What the user set is never tuned.
  a.fusion_fixed = s.is_set(S::FUSION_THRESHOLD);
  a.cycle_fixed = s.is_set(S::CYCLE_TIME);
  a.segment_fixed = s.is_set(S::RING_SEGMENT_BYTES);
  p.broadcast.chain_from_bytes = static_cast<size_t>(s.integer(S::BROADCAST_CHAIN_BYTES));
  p.broadcast.chain_segment_bytes = static_cast<size_t>(s.integer(S::BROADCAST_SEGMENT_BYTES));
  // Unset means "NCCL where it works, quietly": only an explicit NCCL warns on fallback.
  p.gpu.operations = s.is_set(S::GPU_OPERATIONS) ? s.str(S::GPU_OPERATIONS) : "";
  p.gpu.staging_segment_bytes = static_cast<size_t>(s.integer(S::GPU_STAGING_SEGMENT_BYTES));
  p.peer_timeout_s = s.real(S::PEER_TIMEOUT_SECONDS);
  // Set by horovodlite-run: where ranks note failures for its first-failure report.
  p.failure_report_dir = s.str(S::FAILURE_REPORT_DIR);
  p.settings = s;
  return p;
}

Engine::~Engine() { shutdown(); }

void Engine::init(std::unique_ptr<World> world, const Settings& settings) {
  std::lock_guard<std::mutex> l(mu_);
  if (world_ || !world) return;
  settings_ = settings;
  // Process-wide parts first: logging, kernels and pools serve every layer.
  set_log_level(settings.str(Setting::LOG_LEVEL));
  select_reduce_isa(settings.str(Setting::REDUCE_ISA));
  OutputPool::get().set_limit(static_cast<size_t>(settings.integer(Setting::OUTPUT_CACHE_BYTES)));
  SharedArena::reserve_bytes(static_cast<size_t>(settings.integer(Setting::SHARED_ARENA_BYTES)));
  params_ = params_from(settings);
  world_ = std::move(world);
  PeerHealth::get().set_report_dir(params_.failure_report_dir);
  world_->watch_peers(params_.peer_timeout_s);
  const Topology& t = world_->topology();
  set_log_rank(t.rank);
  std::vector<int> all(t.size);
  std::iota(all.begin(), all.end(), 0);
  set_ranks_[0] = all;
  if (t.rank == 0 && settings.is_set(Setting::TIMELINE)) {
    try {
      state_.timeline.start(settings.str(Setting::TIMELINE), settings.flag(Setting::TIMELINE_MARK_CYCLES));
    } catch (const std::exception& e) {
      HVDL_LOG(ERROR) << e.what() << "; running without a timeline";
    }
  }
  workers_[0] = std::make_shared<Worker>(world_->create_group(all), params_, 0, state_, hosts_of(t, all));

  next_set_id_ = 1;
  HVDL_LOG(DEBUG) << "initialised: size " << t.size << ", local " << t.local_rank << "/"
                  << t.local_size << ", fusion " << params_.fusion_threshold << " B, cycle "
                  << params_.cycle_time_ms << " ms";
}

void Engine::shutdown() {
  std::lock_guard<std::mutex> l(mu_);
  if (!world_) return;
  // Stop every worker first (each ends in a round its peers join), then free the world.
  for (auto& kv : workers_) kv.second->stop();
  workers_.clear();
  state_.timeline.stop();
  set_ranks_.clear();
  world_.reset();
}

bool Engine::initialized() {
  std::lock_guard<std::mutex> l(mu_);
  return world_ != nullptr;
}

const Topology& Engine::topology() {
  std::lock_guard<std::mutex> l(mu_);
  if (!world_) throw std::runtime_error("horovodlite has not been initialized; call hvd.init() first");
  return world_->topology();
}

bool Engine::threads_supported() {
  std::lock_guard<std::mutex> l(mu_);
  return world_ && world_->threads_supported();
}

Worker* Engine::worker_for(int id) {
  if (!world_)
    throw std::runtime_error("horovodlite has not been initialized; call hvd.init() first");
  auto it = workers_.find(id);
  if (it != workers_.end()) return it->second.get();
  auto members = set_ranks_.find(id);
  if (members != set_ranks_.end()) {
    std::string list;
    for (int r : members->second) list += (list.empty() ? "" : ", ") + std::to_string(r);
    throw std::runtime_error("horovodlite: rank " + std::to_string(world_->topology().rank) +
                             " is not a member of process set " + std::to_string(id) + " (ranks [" +
                             list + "]); only its members may run collectives on it");
  }
  throw std::runtime_error("horovodlite: unknown process set " + std::to_string(id) +
                           " (removed, or never added on this rank)");
}

std::shared_ptr<HandleState> Engine::submit(EnqueueArgs a) {
  std::lock_guard<std::mutex> l(mu_);
  Worker* w = worker_for(a.process_set);
  auto e = std::make_unique<TensorEntry>();
  if (a.req.device >= 0) {
    if (!cuda_built() || !gpu_runtime_available())
      throw std::runtime_error("horovodlite: '" + a.req.name + "' is a GPU tensor, but " +
                               (cuda_built() ? std::string("no usable CUDA driver or GPU was found")
                                             : std::string("this build of horovodlite has no CUDA "
                                                           "support (cuda_built() is False)")));
    claim_process_gpu(state_.process_gpu, a.req.device, a.req.name);
    if (a.has_stream) e->ready_event = record_ready_event(a.req.device, a.stream);
  }
  e->req = std::move(a.req);
  e->input = a.input;
  e->output = a.output;
  e->held = a.held && a.req.device < 0;  // a GPU's work overlaps backward on the GPU
  e->handle = std::make_shared<HandleState>();
  e->handle->process_set = a.process_set;
  e->req.ready_at = Clock::now();
  auto h = e->handle;
  // A blocking call whose caller will run the round itself need not wake the set's
  // thread; otherwise the wake-up now overlaps the rest of the caller's submission.
  const bool quiet = a.caller_waits && w->may_help(tensor_bytes(e->req.shape, e->req.dtype), e->req.device);
  const Clock::time_point ready_at = e->req.ready_at;
  w->queue().push(std::move(e), !quiet, ready_at);
  return h;
}

std::shared_ptr<HandleState> Engine::handle(int64_t id) {
  auto h = handles_.get(id);
  if (!h) throw std::invalid_argument("horovodlite: unknown handle " + std::to_string(id));
  return h;
}

bool Engine::wait(HandleState& h, std::chrono::nanoseconds limit) {
  if (h.poll()) return true;
  // Every set's thread is told not to hold work back for batching: a blocked caller
  // may be waiting on another set's work too (a join, a barrier after async calls).
  // The handle's own set first lets the caller run the round itself where it can
  // (Worker::help), and is flushed only if it cannot.
  std::shared_ptr<Worker> owner;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& kv : workers_) {
      if (kv.first == h.process_set) owner = kv.second;
      else kv.second->queue().request_flush();
    }
  }
  if (owner && !owner->help()) owner->queue().request_flush();
  return h.wait(limit);
}

int Engine::add_process_set(const std::vector<int>& ranks) {
  std::lock_guard<std::mutex> l(mu_);
  if (!world_) throw std::runtime_error("horovodlite has not been initialized; call hvd.init() first");
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (int r : sorted)
    if (r < 0 || r >= world_->topology().size)
      throw std::invalid_argument("horovodlite: process set rank " + std::to_string(r) +
                                  " is out of range for size " +
                                  std::to_string(world_->topology().size));
  for (auto& kv : set_ranks_)
    if (kv.second == sorted) return kv.first;
  int id = next_set_id_++;
  auto t = world_->create_group(sorted);
  set_ranks_[id] = sorted;
  if (t)
    workers_[id] = std::make_shared<Worker>(std::move(t), params_, id, state_,
                                            hosts_of(world_->topology(), sorted));
  return id;
}

void Engine::remove_process_set(int id) {
  std::shared_ptr<Worker> w;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (id == 0) throw std::invalid_argument("horovodlite: the global process set cannot be removed");
    auto it = workers_.find(id);
    if (it != workers_.end()) {
      w = std::move(it->second);
      workers_.erase(it);
    }
    set_ranks_.erase(id);
  }
  // Joins the worker outside the lock (its peers must do the same), or leaves that to
  // a caller still inside its help(), which holds the last reference.
  w.reset();
}

std::vector<int> Engine::process_set_ranks(int id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = set_ranks_.find(id);
  return it == set_ranks_.end() ? std::vector<int>() : it->second;
}

int Engine::process_set_rank(int id) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = workers_.find(id);
  return it == workers_.end() ? -1 : it->second->transport().rank();
}

std::map<std::string, uint64_t> Engine::stats(int id) {
  std::lock_guard<std::mutex> l(mu_);
  Worker* w = worker_for(id);
  const auto& s = w->stats();
  const Transport::RingCounts rings = w->transport().ring_counts();
  return {{"rounds", s.rounds}, {"full_rounds", s.full_rounds},
          {"full_rounds_in_vote", s.full_rounds_in_vote}, {"groups", s.groups},
          {"tensors", s.tensors}, {"bytes", s.bytes}, {"fresh_rounds", s.fresh_rounds},
          {"submit_to_round_ns", s.submit_to_round_ns}, {"negotiate_ns", s.negotiate_ns},
          {"execute_ns", s.execute_ns}, {"ring_wakes", s.ring_wakes},
          {"ring_to_round_ns", s.ring_to_round_ns}, {"rider_groups", s.rider_groups},
          {"folded_riders", s.folded_riders},
          {"split_riders", s.split_riders},
          {"caller_rounds", s.caller_rounds}, {"turn_wait_ns", s.turn_wait_ns},
          {"rings_sent", rings.sent}, {"rings_saved", rings.saved}};
}


Tunables Engine::tunables(int id) {
  std::lock_guard<std::mutex> l(mu_);
  return worker_for(id)->tunables();
}

void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> l(mu_);
  if (!world_) throw std::runtime_error("horovodlite has not been initialized; call hvd.init() first");
  if (world_->topology().rank == 0) state_.timeline.start(path, mark_cycles);
}

void Engine::stop_timeline() {
  std::lock_guard<std::mutex> l(mu_);
  if (!world_) throw std::runtime_error("horovodlite has not been initialized; call hvd.init() first");
  state_.timeline.stop();
}

std::map<std::string, std::string> Engine::report(int id) {
  std::lock_guard<std::mutex> l(mu_);
  auto r = worker_for(id)->report();
  static const char* levels[] = {"trace", "debug", "info", "warning", "error", "fatal"};
  r["log_level"] = levels[static_cast<int>(log_threshold())];
  r["reduce_isa"] = reduce_isa();
  r["output_cache_limit"] = std::to_string(OutputPool::get().limit());
  return r;
}

std::string Engine::allreduce_algorithm(int id) {
  std::lock_guard<std::mutex> l(mu_);
  return worker_for(id)->allreduce_algorithm();
}

}  // namespace hvdl
