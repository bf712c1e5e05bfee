// What ranks tell the coordinator (Request: "tensor `name` is ready here, with these
// properties") and what it answers (Response: "execute `name` now", or an error).
// Both travel as bytes through Transport::gather / broadcast.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "../common/dtype.h"

namespace hvdl {

enum class OpType : int32_t {
  ALLREDUCE = 0, ALLGATHER = 1, BROADCAST = 2, ALLTOALL = 3, REDUCESCATTER = 4,
  BARRIER = 5, JOIN = 6,
};
constexpr int kNumOpTypes = 7;
// join() is one collective per process set, always under this name.
constexpr const char* kJoinName = "__horovodlite_join__";
const char* op_type_name(OpType t);

struct Request {
  int32_t rank = 0;  // rank within the process set
  std::string name;
  OpType op = OpType::ALLREDUCE;
  DataType dtype = DataType::FLOAT32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::SUM;
  double prescale = 1.0, postscale = 1.0;
  int32_t root = -1;
  int32_t device = -1;          // -1 = host memory, else GPU ordinal
  std::vector<int64_t> splits;  // alltoall
  std::string group;            // grouped ops: negotiated and released together
  int32_t group_size = 0;
  // Non-empty: this rank's arguments were invalid (found before enqueue, e.g. alltoall
  // splits of a non-integer dtype). The coordinator fails the collective on every
  // rank with this text instead of leaving the other ranks waiting.
  std::string error;
  // When the tensor was enqueued, on the steady clock of the process holding this
  // Request. It travels as an age (hosts' clocks are unrelated), so after decoding it
  // is on the receiver's clock; the timeline shows it as the moment a rank was ready.
  std::chrono::steady_clock::time_point ready_at{};
};

struct Response {
  std::string name;
  OpType op = OpType::ALLREDUCE;
  DataType dtype = DataType::FLOAT32;
  std::vector<int64_t> shape;  // the agreed shape (allgather: with rank 0's first dim)
  ReduceOp reduce_op = ReduceOp::SUM;
  double prescale = 1.0, postscale = 1.0;
  int32_t root = -1;
  int32_t device = -1;
  std::vector<int64_t> sizes;  // op-specific: allgather first dims per rank; alltoall N*N splits
  std::vector<int32_t> joined;  // ranks that had joined when this was agreed
  std::string group;
  std::string error;  // non-empty: fail the tensor on every rank with this message
  int32_t last_joined = -1;  // JOIN: the last rank to join
  // What kind of error `error` is, so every rank raises the same class: a rank's
  // arguments wrong on their face (Python ValueError / TypeError) or anything else.
  enum ErrorKind : int32_t { INTERNAL_ERROR = 0, VALUE_ERROR = 1, TYPE_ERROR = 2 };
  int32_t error_kind = INTERNAL_ERROR;
  // Local only (never encoded): this rank took it from its response cache this round,
  // so the cache already holds it and executing it need not store it again.
  bool from_cache = false;
  bool ok() const { return error.empty(); }
};

std::string encode_requests(const std::vector<Request>& v);
std::vector<Request> decode_requests(const std::string& bytes);
// What in encode_requests({q}) names the collective asked for, without who asked and
// when (q.rank, q.ready_at): equal for every rank that asks for the same. Empty for
// fewer bytes than a request's.
std::string_view request_identity(std::string_view one_encoded);
// The name of the `count`th unnamed call of `kind` ("allreduce.noname.17", as Horovod
// names them), and whether a name is one: made up for one call, never asked for again.
std::string auto_name(const std::string& kind, int64_t count);
bool is_auto_name(const std::string& name);
std::string encode_responses(const std::vector<Response>& v);
std::vector<Response> decode_responses(const std::string& bytes);

std::string shape_str(const std::vector<int64_t>& shape);

// Bytes of a dense tensor of this shape (empty: a scalar) and dtype.
inline size_t tensor_bytes(const std::vector<int64_t>& shape, DataType dt) {
  size_t n = dtype_size(dt);
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

}  // namespace hvdl
