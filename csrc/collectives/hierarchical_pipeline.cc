#include "hierarchical_pipeline.h"

#include <algorithm>
#include <chrono>

#include "../transport/peer_health.h"
#include "../transport/watched_wait.h"
#include "hierarchical_allreduce.h"
#include "partition.h"

namespace hvdl {

HierarchicalPipeline::HierarchicalPipeline(ShmCollectives& local, Transport& cross)
    : local_(local), cross_(cross) {
  thread_ = std::thread([this] { helper(); });
}

HierarchicalPipeline::~HierarchicalPipeline() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

int HierarchicalPipeline::chunks_for(size_t bytes) {
  return static_cast<int>(std::max<size_t>(1, std::min<size_t>(kMaxChunks, bytes / kMinChunk)));
}

void HierarchicalPipeline::helper() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || done_ < given_; });
    if (stop_) return;
    const int i = done_;
    const bool skip = error_ != nullptr;  // the call has failed: only count the chunk
    lk.unlock();
    try {
      if (!skip) {
        const int nl = local_.size(), lr = local_.rank();
        const size_t es = dtype_size(dt_);
        const size_t cnt = chunk_cnt_[i];
        char* block = out_ + (chunk_off_[i] + block_offset(cnt, nl, lr)) * es;
        const size_t bc = block_count(cnt, nl, lr);
        ring_allreduce(cross_, *red_, scratch_, {block, block, bc, dt_, op_, 1.0, postscale_}, ring_);
      }
    } catch (...) {
      lk.lock();
      if (!error_) error_ = std::current_exception();
      lk.unlock();
    }
    lk.lock();
    ++done_;
    cv_.notify_all();
  }
}

void HierarchicalPipeline::run(const Reducer& red, const AllreduceArgs& a, bool stream,
                               const RingOptions& ring) {
  const size_t count = a.count;
  const DataType dt = a.dt;
  const ReduceOp op = a.op;
  const double prescale = a.prescale, postscale = a.postscale;
  const void* in = a.in;
  void* out = a.out;
  const size_t es = dtype_size(dt);
  const int k = chunks_for(count * es);
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  {
    std::lock_guard<std::mutex> g(mu_);
    red_ = &red, out_ = dst, dt_ = dt, op_ = op, postscale_ = postscale, ring_ = ring;
    ring_.phases = nullptr;  // the timeline's phases are the caller thread's
    chunk_off_.clear(), chunk_cnt_.clear();
    for (int i = 0; i < k; ++i) {
      chunk_off_.push_back(block_offset(count, k, i));
      chunk_cnt_.push_back(block_count(count, k, i));
    }
    given_ = done_ = 0;
    error_ = nullptr;
  }
  auto give = [&](int i) {
    std::lock_guard<std::mutex> g(mu_);
    given_ = i + 1;
    cv_.notify_all();
  };
  // The helper's waits end by themselves (every transport wait watches the set's
  // ranks and has a deadline, watched_wait.h), so this one only has to keep beating
  // for this engine thread meanwhile: a long cross-host chunk is no frozen engine.
  auto wait_done = [&](int i) {
    std::unique_lock<std::mutex> lk(mu_);
    while (!cv_.wait_for(lk, std::chrono::milliseconds(WaitWatch::kPollMs),
                         [&] { return done_ > i; }))
      PeerHealth::beat();
  };
  auto helper_error = [&] {
    std::lock_guard<std::mutex> g(mu_);
    return error_;
  };
  auto rs = [&](int i) {
    const size_t off = chunk_off_[i] * es;
    local_.reduce_scatter(red, src + off, dst + off, chunk_cnt_[i], dt, op, prescale, 1.0, stream);
  };
  auto ag = [&](int i) { local_.allgather(dst + chunk_off_[i] * es, chunk_cnt_[i], dt, stream); };
  // The order of shared-memory calls is the same on every rank of the host. A failure
  // on either side ends the call on every rank: the helper is first left with nothing
  // more to do (it touches our buffers and the cross transport), then the peers here
  // and across hosts are told (hierarchical_give_up), so none waits for a chunk this
  // rank will not bring.
  std::exception_ptr e;
  try {
    rs(0);
    give(0);
    for (int i = 1; i < k && !helper_error(); ++i) {
      rs(i);
      give(i);
      wait_done(i - 1);
      if (helper_error()) break;
      ag(i - 1);
    }
    if (!helper_error()) {
      wait_done(k - 1);
      if (!helper_error()) ag(k - 1);
    }
  } catch (...) {
    e = std::current_exception();
  }
  int given;
  {
    std::lock_guard<std::mutex> g(mu_);
    if (e && !error_) error_ = e;  // the helper skips the chunks not yet started
    given = given_;
  }
  if (given > 0) wait_done(given - 1);
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!e) e = error_;
  }
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    hierarchical_give_up(&local_, cross_, ex);
    throw;
  }
}

}  // namespace hvdl
