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

std::vector<size_t> HierarchicalPipeline::chunk_starts(size_t count, size_t es) {
  const int k = chunks_for(count * es);
  std::vector<size_t> starts;
  for (int i = 0; i < k; ++i) starts.push_back(block_offset(count, k, i));
  starts.push_back(count);
  if (k < 2) return starts;
  // The edge pieces end on a page boundary of the buffer where the chunk allows it, so
  // the next piece starts as aligned as the chunk did (memcpy is slow for some
  // misalignments, PERF_NOTES.md).
  const size_t page = std::max<size_t>(1, 4096 / es);
  auto piece = [&](size_t chunk) {
    size_t p = chunk / kEdgeDivisor;
    return p >= page ? p / page * page : p;
  };
  const size_t head = piece(starts[1] - starts[0]);
  const size_t tail = piece(starts[k] - starts[k - 1]);
  if (head > 0) starts.insert(starts.begin() + 1, starts[0] + head);
  if (tail > 0) starts.insert(starts.end() - 1, count - tail);
  return starts;
}

// Two hosts (the cross group is a pair): each chunk's ring is one exchange of halves
// (send the half the peer reduces, receive the peer's share of ours, reduce ours) and
// then an exchange of the reduced halves. Run chunk by chunk, the link would wait at
// every turn: our send queue runs dry when a half has gone out, until the peer's half
// has arrived, this rank has woken up and reduced it; on a loaded machine the wake-up
// alone takes milliseconds. So chunk i+1's first half is posted as soon as chunk i's
// is: the sends to the peer go out in the fixed order RS 0, RS 1, AG 0, RS 2, AG 1,
// ..., the same on both ranks, so the transport matches them (it matches in posting
// order) and the socket always holds the next bytes. Only wait() on single transfers
// is used: wait_all() would wait for the chunk posted ahead too.
void HierarchicalPipeline::pair_call(std::unique_lock<std::mutex>& lk) {
  const int k = static_cast<int>(chunk_off_.size());
  const int nl = local_.size(), lr = local_.rank();
  const int me = cross_.rank(), peer = 1 - me;
  const size_t es = dtype_size(dt_);
  size_t most = 0;
  for (int i = 0; i < k; ++i) most = std::max(most, block_count(chunk_cnt_[i], nl, lr));
  const size_t slot = (most / 2 + 1) * es;
  char* slots = scratch_.reserve(2 * slot);
  struct Posted {
    char* block = nullptr;
    size_t mine_off = 0, mine_cnt = 0, theirs_off = 0, theirs_cnt = 0;  // elements
    Transport::Op recv = 0, send = 0;
  };
  std::vector<Posted> posted(k);
  // Rank 0 of the pair reduces the first half of every block, rank 1 the second.
  auto post_rs = [&](int i) {
    Posted& p = posted[i];
    const size_t cnt = chunk_cnt_[i];
    p.block = out_ + (chunk_off_[i] + block_offset(cnt, nl, lr)) * es;
    const size_t bc = block_count(cnt, nl, lr);
    const size_t h0 = bc / 2;
    p.mine_off = me == 0 ? 0 : h0, p.mine_cnt = me == 0 ? h0 : bc - h0;
    p.theirs_off = me == 0 ? h0 : 0, p.theirs_cnt = me == 0 ? bc - h0 : h0;
    p.recv = cross_.irecv(peer, slots + (i % 2) * slot, p.mine_cnt * es);
    p.send = cross_.isend(peer, p.block + p.theirs_off * es, p.theirs_cnt * es);
  };
  // Waits (outside the transport) until the caller thread has handed out chunk i, or
  // the call has failed (false). Beating meanwhile, as the caller's wait_done does: the
  // caller is itself in watched waits (its local stages), which end by a failure that
  // it then sets here, so this wait ends with them.
  auto given = [&](int i) {
    lk.lock();
    while (!cv_.wait_for(lk, std::chrono::milliseconds(WaitWatch::kPollMs),
                         [&] { return given_ > i || error_ != nullptr; }))
      PeerHealth::beat();
    const bool ok = error_ == nullptr;
    lk.unlock();
    return ok;
  };
  lk.unlock();
  try {
    post_rs(0);
    bool failed = false;  // elsewhere: nothing in flight may be waited for now
    for (int i = 0; i < k; ++i) {
      if (i + 1 < k) {
        if (!given(i + 1)) {
          failed = true;
          break;
        }
        post_rs(i + 1);
      }
      Posted& p = posted[i];
      cross_.wait(p.recv);
      char* mine = p.block + p.mine_off * es;
      red_->reduce(mine, slots + (i % 2) * slot, p.mine_cnt, dt_, op_);
      red_->scale(mine, p.mine_cnt, dt_, postscale_);
      const Transport::Op got = cross_.irecv(peer, p.block + p.theirs_off * es, p.theirs_cnt * es);
      const Transport::Op sent = cross_.isend(peer, mine, p.mine_cnt * es);
      cross_.wait(p.send);
      cross_.wait(got);
      cross_.wait(sent);  // the caller's allgather of chunk i may rewrite our block next
      lk.lock();
      ++done_;
      cv_.notify_all();
      lk.unlock();
    }
    if (!failed) cross_.wait_all();
  } catch (...) {
    lk.lock();
    if (!error_) error_ = std::current_exception();
    lk.unlock();
  }
  lk.lock();
}

void HierarchicalPipeline::helper() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || done_ < given_; });
    if (stop_) return;
    const int i = done_;
    const bool skip = error_ != nullptr;  // the call has failed: only count the chunk
    if (i == 0 && !skip && cross_.size() == 2) {
      // Counts the chunks it finished; after a failure the loop here counts the rest.
      pair_call(lk);
      cv_.notify_all();
      continue;
    }
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
  const std::vector<size_t> starts = chunk_starts(count, es);
  const int k = static_cast<int>(starts.size()) - 1;
  const char* src = static_cast<const char*>(in);
  char* dst = static_cast<char*>(out);
  {
    std::lock_guard<std::mutex> g(mu_);
    red_ = &red, out_ = dst, dt_ = dt, op_ = op, postscale_ = postscale, ring_ = ring;
    ring_.phases = nullptr;  // the timeline's phases are the caller thread's
    chunk_off_.clear(), chunk_cnt_.clear();
    for (int i = 0; i < k; ++i) {
      chunk_off_.push_back(starts[i]);
      chunk_cnt_.push_back(starts[i + 1] - starts[i]);
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
  // The local reduce-scatter runs kLead chunks ahead of the allgather, so the helper
  // finds chunk i+1 handed out when it finishes chunk i-1 (pair_call posts chunk i+1's
  // first transfer before it completes chunk i).
  constexpr int kLead = 2;
  std::exception_ptr e;
  try {
    int gathered = 0;
    for (int i = 0; i < k && !helper_error(); ++i) {
      rs(i);
      give(i);
      if (i < kLead) continue;
      wait_done(gathered);
      if (helper_error()) break;
      ag(gathered++);
    }
    while (gathered < k && !helper_error()) {
      wait_done(gathered);
      if (helper_error()) break;
      ag(gathered++);
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
  // The helper may be waiting for a chunk this call will never hand out (pair_call's
  // given()): the failure must wake it, or both wait for each other forever.
  cv_.notify_all();
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
