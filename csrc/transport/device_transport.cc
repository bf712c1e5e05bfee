// Staged and stream-synced transports for device memory (see device_transport.h).
#ifdef HOROVODLITE_HAVE_CUDA
#include "device_transport.h"

#include <algorithm>
#include <vector>

#include "../../cuda/gpu_kernels.h"

namespace hvdl {

namespace {

// Pinned host memory handed out by bumping a pointer and taken back all at once when
// no transfer or copy uses it any more. A cycle that needed several chunks leaves one
// chunk of the whole size behind, so steady state is a single persistent allocation.
class PinnedArena {
 public:
  PinnedArena() = default;
  PinnedArena(const PinnedArena&) = delete;
  PinnedArena& operator=(const PinnedArena&) = delete;
  ~PinnedArena() { release(); }

  char* take(size_t bytes) {
    bytes = (bytes + 255) & ~size_t(255);  // keep every piece 256-byte aligned
    while (cur_ < chunks_.size() && used_ + bytes > chunks_[cur_].cap) ++cur_, used_ = 0;
    if (cur_ == chunks_.size()) {
      const size_t cap = std::max(bytes, kMinChunk);
      chunks_.push_back({static_cast<char*>(gpu::malloc_host_pinned(cap)), cap});
      used_ = 0;
    }
    char* p = chunks_[cur_].p + used_;
    used_ += bytes;
    cycle_ += bytes;
    return p;
  }

  // Caller guarantees nothing reads or writes what was taken since the last reset.
  void reset() {
    if (chunks_.size() > 1) {
      const size_t want = cycle_;
      release();
      chunks_.push_back({static_cast<char*>(gpu::malloc_host_pinned(want)), want});
    }
    cur_ = used_ = cycle_ = 0;
  }

 private:
  static constexpr size_t kMinChunk = size_t(4) << 20;
  struct Chunk {
    char* p;
    size_t cap;
  };
  void release() {
    for (auto& c : chunks_) gpu::free_host_pinned(c.p);
    chunks_.clear();
  }
  std::vector<Chunk> chunks_;
  size_t cur_ = 0, used_ = 0, cycle_ = 0;
};

// Forwards everything but the data plane.
class ForwardingTransport : public Transport {
 public:
  explicit ForwardingTransport(Transport& inner) : in_(inner) {}
  int rank() const override { return in_.rank(); }
  int size() const override { return in_.size(); }
  void allreduce_and(uint64_t* words, size_t n) override { in_.allreduce_and(words, n); }
  std::vector<std::string> gather(const std::string& mine, int root) override {
    return in_.gather(mine, root);
  }
  void broadcast(std::string& bytes, int root) override { in_.broadcast(bytes, root); }
  void barrier() override { in_.barrier(); }
  void ring(uint64_t round) override { in_.ring(round); }
  uint64_t poll_ring() override { return in_.poll_ring(); }
  // Liveness is the host transport's: its waits (and the engine's, through these)
  // end on a lost peer or a collective a peer gave up (watched_wait.h).
  void check_alive() override { in_.check_alive(); }
  const std::vector<int>* world_ranks() const override { return in_.world_ranks(); }
  const std::vector<int>* watched_ranks() const override { return in_.watched_ranks(); }
  void abandon(const std::string& why) override { in_.abandon(why); }

 protected:
  Transport& in_;
};

class StagingTransport final : public ForwardingTransport {
 public:
  StagingTransport(Transport& host, void* stream, size_t segment_bytes)
      : ForwardingTransport(host), stream_(stream), seg_(std::max<size_t>(segment_bytes, 4096)) {}

  ~StagingTransport() override {
    for (void* ev : events_) gpu::event_destroy(ev);
  }

  // Copies out segment by segment and posts each send as soon as its copy is done, so
  // the copy of segment k+1 runs while segment k is on the wire.
  Op isend(int peer, const void* buf, size_t bytes) override {
    Pending p;
    p.bytes = bytes;
    char* host = arena_.take(bytes);
    const char* dev = static_cast<const char*>(buf);
    const size_t n = pieces(bytes);
    while (events_.size() < n) events_.push_back(gpu::event_create());
    for (size_t k = 0; k < n; ++k) {
      gpu::memcpy_async(host + k * seg_, dev + k * seg_, piece(bytes, k), stream_);
      gpu::event_record(events_[k], stream_);
    }
    for (size_t k = 0; k < n; ++k) {
      gpu::event_synchronize(events_[k]);
      p.inner.push_back(in_.isend(peer, host + k * seg_, piece(bytes, k)));
    }
    if (n == 0) p.inner.push_back(in_.isend(peer, host, 0));  // still matched by the peer
    return add(std::move(p));
  }

  Op irecv(int peer, void* buf, size_t bytes) override {
    Pending p;
    p.bytes = bytes;
    p.dev = static_cast<char*>(buf);
    p.host = arena_.take(bytes);
    const size_t n = pieces(bytes);
    for (size_t k = 0; k < n; ++k)
      p.inner.push_back(in_.irecv(peer, p.host + k * seg_, piece(bytes, k)));
    if (n == 0) p.inner.push_back(in_.irecv(peer, p.host, 0));
    return add(std::move(p));
  }

  // A receive is copied to the GPU piece by piece as the pieces arrive, so the copy of
  // piece k overlaps the arrival of piece k+1.
  void wait(Op op) override {
    Pending& p = pending_.at(op);
    for (size_t k = 0; k < p.inner.size(); ++k) {
      in_.wait(p.inner[k]);
      if (p.dev && !p.copied) gpu::memcpy_async(p.dev + k * seg_, p.host + k * seg_,
                                                piece(p.bytes, k), stream_);
    }
    p.copied = true;
  }

  void wait_all() override {
    in_.wait_all();
    for (auto& p : pending_)
      if (p.dev && !p.copied) {
        gpu::memcpy_async(p.dev, p.host, p.bytes, stream_);
        p.copied = true;
      }
    // The pinned pieces are handed out again from the next transfer on, so the copies
    // that read them must be over.
    gpu::stream_synchronize(stream_);
    pending_.clear();
    arena_.reset();
  }

 private:
  struct Pending {
    std::vector<Op> inner;  // the host transport's ops, one per piece
    size_t bytes = 0;
    char* dev = nullptr;    // receives only: destination in device memory
    char* host = nullptr;
    bool copied = false;
  };

  size_t pieces(size_t bytes) const { return (bytes + seg_ - 1) / seg_; }
  size_t piece(size_t bytes, size_t k) const { return std::min(seg_, bytes - k * seg_); }
  Op add(Pending p) {
    pending_.push_back(std::move(p));
    return static_cast<Op>(pending_.size() - 1);
  }

  void* stream_;
  const size_t seg_;
  PinnedArena arena_;
  std::vector<Pending> pending_;
  std::vector<void*> events_;  // reused: every isend waits for its own before returning
};

class StreamSyncedTransport final : public ForwardingTransport {
 public:
  StreamSyncedTransport(Transport& inner, void* stream) : ForwardingTransport(inner), stream_(stream) {}
  // Receives too: a kernel still reading the buffer must finish before MPI overwrites it.
  Op isend(int peer, const void* buf, size_t bytes) override {
    gpu::stream_synchronize(stream_);
    return in_.isend(peer, buf, bytes);
  }
  Op irecv(int peer, void* buf, size_t bytes) override {
    gpu::stream_synchronize(stream_);
    return in_.irecv(peer, buf, bytes);
  }
  void wait(Op op) override { in_.wait(op); }
  void wait_all() override { in_.wait_all(); }

 private:
  void* stream_;
};

}  // namespace

std::unique_ptr<Transport> make_staging_transport(Transport& host, void* stream,
                                                  size_t segment_bytes) {
  return std::make_unique<StagingTransport>(host, stream, segment_bytes);
}

std::unique_ptr<Transport> make_stream_synced_transport(Transport& cuda_aware, void* stream) {
  return std::make_unique<StreamSyncedTransport>(cuda_aware, stream);
}

}  // namespace hvdl
#endif  // HOROVODLITE_HAVE_CUDA
