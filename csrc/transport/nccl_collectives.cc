// DeviceCollectives over NCCL. Needs no CUDA headers: NCCL takes the stream as an
// opaque handle, and the engine sets the current device before calling.
#include <cstring>
#include <stdexcept>

#include "device_collectives.h"
#include "nccl_library.h"

namespace hvdl {
namespace {

int nccl_type(DataType dt) {
  switch (dt) {
    case DataType::UINT8: case DataType::BOOL: return kNcclUint8;
    case DataType::INT8: return kNcclInt8;
    case DataType::INT32: return kNcclInt32;
    case DataType::INT64: return kNcclInt64;
    case DataType::FLOAT16: return kNcclFloat16;
    case DataType::BFLOAT16: return kNcclBfloat16;
    case DataType::FLOAT32: return kNcclFloat32;
    case DataType::FLOAT64: return kNcclFloat64;
    default: break;  // INT16, UINT16: NCCL has no 16-bit integer type
  }
  throw std::invalid_argument(std::string("NCCL: unsupported dtype ") + dtype_name(dt));
}

int nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::SUM: return kNcclSum;
    case ReduceOp::PRODUCT: return kNcclProd;
    case ReduceOp::MIN: return kNcclMin;
    case ReduceOp::MAX: return kNcclMax;
    default: break;
  }
  throw std::invalid_argument(std::string("NCCL: unsupported reduce op ") + reduce_op_name(op));
}

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(const NcclApi& api, NcclComm comm, int rank, int size, void* stream)
      : api_(api), comm_(comm), rank_(rank), size_(size), stream_(stream) {}
  ~NcclCollectives() override {
    if (comm_) api_.comm_destroy(comm_);  // local: frees this rank's resources only
  }
  void abort() override {
    if (!comm_) return;
    api_.comm_abort(comm_);  // ends kernels waiting for the lost peer; frees the comm
    comm_ = nullptr;
  }

  std::string name() const override {
    return "NCCL " + std::to_string(api_.version / 10000) + "." +
           std::to_string(api_.version / 100 % 100) + "." + std::to_string(api_.version % 100);
  }
  bool reduces(DataType dt) const override {
    return dt != DataType::INT16 && dt != DataType::UINT16 && dtype_is_reducible(dt);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void allreduce(const void* src, void* dst, size_t count, DataType dt, ReduceOp op) override {
    check(api_.all_reduce(src, dst, count, nccl_type(dt), nccl_op(op), comm_, stream_),
          "ncclAllReduce");
  }
  void allgather(const void* src, void* dst, size_t bytes) override {
    check(api_.all_gather(src, dst, bytes, kNcclUint8, comm_, stream_), "ncclAllGather");
  }
  void broadcast(void* buf, size_t bytes, int root) override {
    check(api_.broadcast(buf, buf, bytes, kNcclUint8, root, comm_, stream_), "ncclBroadcast");
  }
  void reducescatter(const void* src, void* dst, size_t count, DataType dt,
                     ReduceOp op) override {
    check(api_.reduce_scatter(src, dst, count, nccl_type(dt), nccl_op(op), comm_, stream_),
          "ncclReduceScatter");
  }
  void exchange(const std::vector<Transfer>& transfers) override {
    check(api_.group_start(), "ncclGroupStart");
    NcclResult first = 0;
    const char* what = nullptr;
    for (const auto& t : transfers) {
      NcclResult r = t.send ? api_.send(t.buf, t.bytes, kNcclUint8, t.peer, comm_, stream_)
                            : api_.recv(t.buf, t.bytes, kNcclUint8, t.peer, comm_, stream_);
      if (r != 0 && first == 0) first = r, what = t.send ? "ncclSend" : "ncclRecv";
    }
    // The group must be closed even after a failure, or NCCL stays in group mode.
    NcclResult end = api_.group_end();
    check(first, what);
    check(end, "ncclGroupEnd");
  }

 private:
  void check(NcclResult r, const char* what) const {
    if (r != 0)
      throw std::runtime_error(std::string(what) + " failed: " + api_.get_error_string(r));
  }
  const NcclApi& api_;
  NcclComm comm_;
  int rank_, size_;
  void* stream_;
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(Transport& ctrl, int device,
                                                         void* stream) {
  std::string why;
  const NcclApi* api = nccl_api(&why);
  // Rank 0 makes the id and broadcasts it; an empty id tells the others it failed, so
  // nobody waits in ncclCommInitRank for a rank that will never arrive.
  std::string id_bytes;
  if (api && ctrl.rank() == 0) {
    NcclUniqueId id;
    NcclResult r = api->get_unique_id(&id);
    if (r == 0) id_bytes.assign(id.internal, sizeof(id.internal));
    else why = std::string("ncclGetUniqueId failed: ") + api->get_error_string(r);
  }
  ctrl.broadcast(id_bytes, 0);
  if (!api) throw std::runtime_error(why);
  if (id_bytes.size() != sizeof(NcclUniqueId))
    throw std::runtime_error(ctrl.rank() == 0 ? why : "NCCL bootstrap failed on rank 0");
  NcclUniqueId id;
  std::memcpy(id.internal, id_bytes.data(), sizeof(id.internal));
  NcclComm comm = nullptr;
  NcclResult r = api->comm_init_rank(&comm, ctrl.size(), id, ctrl.rank());
  if (r != 0)
    throw std::runtime_error("ncclCommInitRank on GPU " + std::to_string(device) +
                             " failed: " + api->get_error_string(r));
  return std::make_unique<NcclCollectives>(*api, comm, ctrl.rank(), ctrl.size(), stream);
}

}  // namespace hvdl
