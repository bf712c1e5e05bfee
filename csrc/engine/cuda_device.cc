// GPU memory behind the Device interface. Everything a group does on one GPU is queued
// on one engine stream: copies, our kernels (reducer, identity, packing), the staging
// transport's copies and NCCL. So the algorithms need no synchronisation of their own;
// `begin` orders the stream after the producers' events and `end` waits for it once.
#include "device.h"

#ifdef HOROVODLITE_HAVE_CUDA
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <stdexcept>

#include "../../cuda/gpu_kernels.h"
#include "../collectives/allreduce_path.h"
#include "../common/logging.h"
#include "../reduce/identity.h"
#include "../transport/device_transport.h"
#include "../transport/nccl_library.h"
#include "../transport/peer_health.h"
#include "../transport/watched_wait.h"
#include "../transport/world.h"

namespace hvdl {
namespace {

// Sets the calling thread's current device for a scope. A caller's thread belongs to a
// framework that has its own idea of the current device, so it is put back; and only
// when changed, since selecting a device creates its context.
class DeviceScope {
 public:
  explicit DeviceScope(int device) : saved_(gpu::current_device()) {
    if (device != saved_) gpu::set_device(device), changed_ = true;
  }
  ~DeviceScope() {
    if (changed_) {
      try {
        gpu::set_device(saved_);
      } catch (...) {
      }
    }
  }

 private:
  int saved_;
  bool changed_ = false;
};

// Grow-only device memory (see HostBuffer). cudaFree would wait for the whole GPU, the
// user's work included; waiting for our own stream is enough to free safely.
class DeviceBuffer final : public Buffer {
 public:
  explicit DeviceBuffer(void* stream) : stream_(stream) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() override { gpu::free_device(p_); }
  char* reserve(size_t bytes) override {
    if (bytes <= cap_) return p_;
    gpu::stream_synchronize(stream_);
    gpu::free_device(p_);
    p_ = nullptr, cap_ = 0;
    const size_t want = (bytes + kGranule - 1) & ~(kGranule - 1);
    p_ = static_cast<char*>(gpu::malloc_device(want));
    cap_ = want;
    return p_;
  }

 private:
  static constexpr size_t kGranule = size_t(2) << 20;
  void* stream_;
  char* p_ = nullptr;
  size_t cap_ = 0;
};

class KernelReducer final : public Reducer {
 public:
  explicit KernelReducer(void* stream) : stream_(stream) {}
  void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) const override {
    gpu::reduce_into(dst, src, count, dt, op, stream_);
  }
  void scale(void* buf, size_t count, DataType dt, double factor) const override {
    gpu::scale(buf, count, dt, factor, stream_);
  }

 private:
  void* stream_;
};

class CudaDevice final : public Device {
  // How end() waits for the stream: short kernels end within microseconds, so it
  // yields between tests at first (no back-to-back spin), then sleeps a little longer
  // each time, at most 50 us of added latency, so a long kernel costs no CPU.
  static constexpr WaitPace kStreamPace{std::chrono::microseconds(0), std::chrono::microseconds(200),
                                        std::chrono::microseconds(50)};

 public:
  CudaDevice(int ordinal, Transport& host, size_t staging_segment_bytes)
      : ordinal_(ordinal), host_(host), staging_segment_bytes_(staging_segment_bytes), stream_(create_stream(ordinal)), reducer_(stream_),
        fusion_(stream_), scratch_(stream_), descs_(stream_), done_(gpu::event_create()) {}

  ~CudaDevice() override {
    // After a lost peer, NCCL kernels still queued would wait for it forever.
    if (nccl_ && PeerHealth::get().any_failed()) nccl_->abort();
    try {
      gpu::stream_synchronize(stream_);
    } catch (...) {
    }
    gpu::event_destroy(done_);
    paths_.reset();
    nccl_.reset();
    gpu::stream_destroy(stream_);
  }

  // The engine's data plane for this GPU; always there, also when NCCL is used, so an
  // op that NCCL cannot run falls back to the algorithms over MPI.
  void use_mpi() {
    staged_ = !mpi_cuda_aware();
    transport_ = staged_ ? make_staging_transport(host_, stream_, staging_segment_bytes_)
                         : make_stream_synced_transport(host_, stream_);
  }
  void use_nccl(Transport& ctrl) { nccl_ = make_nccl_collectives(ctrl, ordinal_, stream_); }
  // After use_mpi() (and use_nccl()): NCCL when it can run a plan, else the ring over
  // the MPI data plane. Neither is timed: NCCL is the faster wherever it runs.
  void make_allreduce_paths() {
    paths_ = std::make_unique<AllreducePaths>(nccl_ ? "nccl" : "device ring", nullptr);
    if (nccl_) paths_->first(make_nccl_path(*nccl_));
    paths_->contender(make_device_ring_path(*transport_, scratch_));
  }

  int ordinal() const override { return ordinal_; }
  std::string describe() const override {
    std::string how = nccl_ ? nccl_->name()
                            : std::string("MPI ") + (staged_ ? "staged through pinned host memory"
                                                             : "(CUDA-aware)");
    return "GPU " + std::to_string(ordinal_) + " via " + how;
  }
  Transport& transport() override { return *transport_; }
  const Reducer& reducer() const override { return reducer_; }
  Buffer& fusion() override { return fusion_; }
  Buffer& scratch() override { return scratch_; }
  DeviceCollectives* collectives() override { return nccl_.get(); }
  AllreducePaths& allreduce() override { return *paths_; }

  void copy(void* dst, const void* src, size_t bytes) override {
    gpu::memcpy_async(dst, src, bytes, stream_);
  }

  void copy_many(const std::vector<CopyRegion>& regions, DataType dt, double factor) override {
    if (regions.empty()) return;
    descs_host_.resize(regions.size());
    for (size_t i = 0; i < regions.size(); ++i)
      descs_host_[i] = {regions[i].dst, regions[i].src, regions[i].bytes};
    const int n = static_cast<int>(regions.size());
    const size_t need = gpu::batched_copy_scratch_bytes(n);
    gpu::batched_copy(descs_host_.data(), n, dt, factor, stream_, descs_.reserve(need), need);
  }

  // Joined ranks only (rare): built on the host, so no kernel per dtype and op is needed.
  void fill_identity(void* buf, size_t count, DataType dt, ReduceOp op) override {
    std::vector<char> host(count * dtype_size(dt));
    hvdl::fill_identity(host.data(), count, dt, op);
    gpu::memcpy_async(buf, host.data(), host.size(), stream_);
    gpu::stream_synchronize(stream_);  // before `host` goes away
  }

  void begin(const std::vector<TensorEntry*>& entries) override {
    gpu::set_device(ordinal_);  // this worker thread's device; NCCL needs it current
    for (auto* e : entries)
      if (e && e->ready_event) gpu::stream_wait_event(stream_, e->ready_event.get());
  }

  // Completing the handles only once the GPU is done keeps the framework's tensors
  // alive for as long as we read or write them, and makes the results visible to any
  // stream the consumer uses afterwards without it waiting on an event of ours.
  //
  // The wait watches as every wait does (watched_wait.h): NCCL's kernels wait for their
  // peers on the GPU, so after a lost peer cudaStreamSynchronize would never return.
  // Then NCCL's communicator is aborted, which ends those kernels, and the wait fails.
  void end() override {
    gpu::event_record(done_, stream_);
    WaitWatch watch(host_.watched_ranks(), 0, "waiting for the GPU stream");
    bool querying = false;  // a CUDA error is not a lost peer: NCCL is left as it is
    try {
      wait_until(
          [&] {
            querying = true;
            const bool done = gpu::event_query(done_);
            querying = false;
            return done;
          },
          watch, [this] { host_.check_alive(); }, kStreamPace);
    } catch (...) {
      if (nccl_ && !querying) nccl_->abort();  // the paths still refer to it: aborted, not freed
      throw;
    }
  }

 private:
  static void* create_stream(int ordinal) {
    gpu::set_device(ordinal);  // the worker thread stays on this GPU from here on
    return gpu::stream_create(ordinal);
  }

  const int ordinal_;
  Transport& host_;
  size_t staging_segment_bytes_;
  void* stream_;
  KernelReducer reducer_;
  DeviceBuffer fusion_, scratch_, descs_;
  void* done_;  // recorded at end(): the batch's work on the stream is over
  std::vector<gpu::CopyDesc> descs_host_;
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<DeviceCollectives> nccl_;
  std::unique_ptr<AllreducePaths> paths_;  // over transport_ and nccl_
  bool staged_ = true;
};

// ---- agreeing on NCCL or MPI ----

constexpr char kSep = '\x1f';  // field separator: cannot occur in host names or messages

std::vector<std::string> split(const std::string& s, size_t fields) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (out.size() + 1 < fields) {
    size_t next = s.find(kSep, pos);
    if (next == std::string::npos) break;
    out.push_back(s.substr(pos, next - pos));
    pos = next + 1;
  }
  out.push_back(s.substr(pos));
  out.resize(fields);
  return out;
}

std::string host_name() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string upper(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::toupper(c); });
  return v;
}

// Rank 0 of the set decides from every rank's facts. The answer: 'E' + error, 'N' for
// NCCL, or MPI with the reason, 'M' (expected, logged as info) or 'W' (a fallback the
// user should hear about). Everyone gets the same answer, so no rank is left waiting
// in a collective the others skipped.
std::string decide(const std::vector<std::string>& facts, const std::string& want) {
  std::vector<std::vector<std::string>> f;
  for (auto& s : facts) f.push_back(split(s, 4));  // error, host, bus id, NCCL problem
  for (size_t r = 0; r < f.size(); ++r)
    if (!f[r][0].empty())
      return "Ehorovodlite: rank " + std::to_string(r) + " of the process set cannot use its " +
             f[r][0];
  if (want == "MPI") return "MHOROVODLITE_GPU_OPERATIONS=MPI";
  if (!want.empty() && want != "NCCL") {
    HVDL_LOG(WARNING) << "HOROVODLITE_GPU_OPERATIONS=" << want << " is neither NCCL nor MPI; trying NCCL";
  }
  const char quiet = want.empty() ? 'M' : 'W';  // NCCL was not asked for by name
  for (size_t r = 0; r < f.size(); ++r)
    if (!f[r][3].empty())
      return quiet + ("NCCL is not available on rank " + std::to_string(r) + ": " + f[r][3]);
  for (size_t a = 0; a < f.size(); ++a)
    for (size_t b = a + 1; b < f.size(); ++b)
      if (f[a][1] == f[b][1] && f[a][2] == f[b][2])
        return "Wranks " + std::to_string(a) + " and " + std::to_string(b) + " share GPU " +
               f[a][2] + " on host " + f[a][1] + " and NCCL needs one GPU per rank";
  return "N";
}

}  // namespace

std::unique_ptr<Device> make_cuda_device(int ordinal, Transport& t, const GpuOptions& opts) {
  // Everything that can fail on one rank alone happens before the agreement.
  std::unique_ptr<CudaDevice> dev;
  std::string error, bus, nccl_why;
  try {
    if (!gpu::runtime_available()) throw std::runtime_error("no usable CUDA driver or GPU");
    dev = std::make_unique<CudaDevice>(ordinal, t, opts.staging_segment_bytes);
    dev->use_mpi();
    bus = gpu::pci_bus_id(ordinal);
  } catch (const std::exception& e) {
    error = std::string("GPU ") + std::to_string(ordinal) + ": " + e.what();
    dev.reset();
  }
  // Loaded only when it may be used (it is a large library).
  const std::string want = upper(opts.operations);
  if (want != "MPI" && !nccl_api(&nccl_why) && nccl_why.empty())
    nccl_why = "not loadable";
  std::string mine = error + kSep + host_name() + kSep + bus + kSep + nccl_why;
  std::vector<std::string> facts = t.gather(mine, 0);
  std::string plan = t.rank() == 0 ? decide(facts, want) : std::string();
  t.broadcast(plan, 0);
  if (plan.empty() || plan[0] == 'E')
    throw std::runtime_error(plan.empty() ? "no GPU plan from rank 0" : plan.substr(1));

  if (plan[0] == 'N') dev->use_nccl(t);
  dev->make_allreduce_paths();
  if (t.rank() == 0) {
    const std::string why = plan[0] == 'N' ? std::string() : " (" + plan.substr(1) + ")";
    if (plan[0] == 'W') {
      HVDL_LOG(WARNING) << "GPU collectives fall back to MPI" << why;
    }
    HVDL_LOG(INFO) << "GPU collectives: " << dev->describe() << why;
  }
  return dev;
}

bool cuda_built() { return true; }
bool gpu_runtime_available() { return gpu::runtime_available(); }

std::shared_ptr<void> record_ready_event(int device, void* stream) {
  DeviceScope scope(device);
  void* ev = gpu::event_create();
  try {
    gpu::event_record(ev, stream);
  } catch (...) {
    gpu::event_destroy(ev);
    throw;
  }
  return std::shared_ptr<void>(ev, [](void* e) { gpu::event_destroy(e); });
}

}  // namespace hvdl

#else  // no CUDA in this build

#include <stdexcept>

namespace hvdl {

static const char* kNoCuda =
    "horovodlite was built without CUDA (cuda_built() is False), so GPU tensors cannot be used; "
    "reinstall with nvcc on the PATH, or pass host memory";

std::unique_ptr<Device> make_cuda_device(int, Transport&, const GpuOptions&) { throw std::runtime_error(kNoCuda); }
bool cuda_built() { return false; }
bool gpu_runtime_available() { return false; }
std::shared_ptr<void> record_ready_event(int, void*) { throw std::runtime_error(kNoCuda); }

}  // namespace hvdl
#endif
