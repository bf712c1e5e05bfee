// Small helpers shared by the op files: shapes, first present request, common
// validation messages, and handing an engine-allocated output to the caller.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "../collective_op.h"
#include "../fusion_layout.h"
#include "../output_pool.h"

namespace hvdl {
namespace ops {

// Tensors up to this size share the fusion buffer: for them one transfer instead of
// many saves more (a ring's per-step latency) than the copies in and out cost.
// Larger ones go alone and copy nothing extra.
constexpr size_t kFuseUpToBytes = 256 << 10;

inline size_t numel(const std::vector<int64_t>& shape, size_t from = 0) {
  size_t n = 1;
  for (size_t i = from; i < shape.size(); ++i) n *= static_cast<size_t>(shape[i]);
  return n;
}

// Bytes of one dim-0 row (the whole tensor for a 0-d one).
inline size_t row_bytes(const std::vector<int64_t>& shape, DataType dt) {
  return numel(shape, 1) * dtype_size(dt);
}

inline const Request* first_present(const std::vector<const Request*>& reqs) {
  for (auto* q : reqs)
    if (q) return q;
  return nullptr;
}

inline std::string ranks_str(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << (ranks.size() > 1 ? "ranks " : "rank ");
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  return os.str();
}

inline std::string op_prefix(const Request& q) {
  return std::string("horovodlite: ") + op_type_name(q.op) + " '" + q.name + "': ";
}

// Every present request has at least one dimension; else resp.error names the ranks.
inline bool check_not_scalar(const std::vector<const Request*>& reqs, Response& resp,
                             const char* why) {
  std::vector<int> bad;
  for (size_t r = 0; r < reqs.size(); ++r)
    if (reqs[r] && reqs[r]->shape.empty()) bad.push_back(static_cast<int>(r));
  if (bad.empty()) return true;
  resp.error = op_prefix(*first_present(reqs)) + "scalar (0-d) input on " + ranks_str(bad) +
               "; " + why;
  resp.error_kind = Response::VALUE_ERROR;
  return false;
}

// Same number of dimensions and same sizes beyond the first on every rank (allgather,
// alltoall: only dim 0 may differ).
inline bool check_trailing_dims(const std::vector<const Request*>& reqs, Response& resp) {
  const Request* first = first_present(reqs);
  for (auto* q : reqs) {
    if (!q) continue;
    bool same = q->shape.size() == first->shape.size() &&
                std::equal(q->shape.begin() + 1, q->shape.end(), first->shape.begin() + 1);
    if (!same) {
      resp.error = mismatch_error(*first, "shape beyond the first dimension (only dim 0 may differ)",
                                  describe_by_rank(reqs, [](const Request& x) { return shape_str(x.shape); }));
      return false;
    }
  }
  return true;
}

// What allreduce and reducescatter agree on: shape, reduce op and scale factors equal
// on every rank, a reducible dtype, no Adasum. Fills resp or sets resp.error.
inline bool check_reduction(const std::vector<const Request*>& reqs, Response& resp) {
  if (!check_same(reqs, resp, "shape", shape_of) ||
      !check_same(reqs, resp, "reduce op",
                  [](const Request& q) { return std::string_view(reduce_op_name(q.reduce_op)); }) ||
      !check_same(reqs, resp, "prescale_factor", [](const Request& q) { return q.prescale; }) ||
      !check_same(reqs, resp, "postscale_factor", [](const Request& q) { return q.postscale; }))
    return false;
  const Request* q = first_present(reqs);
  if (q->dtype == DataType::BOOL) {
    resp.error = op_prefix(*q) + "bool tensors cannot be reduced";
    resp.error_kind = Response::TYPE_ERROR;
    return false;
  }
  if (q->reduce_op == ReduceOp::ADASUM) {
    resp.error = op_prefix(*q) + "Adasum is not implemented";
    return false;
  }
  resp.shape = q->shape;
  resp.reduce_op = q->reduce_op;
  resp.prescale = q->prescale;
  resp.postscale = q->postscale;
  return true;
}

// Average is a sum scaled by 1/n (joined ranks still count in n, as in Horovod).
struct Reduction {
  ReduceOp op;
  double postscale;
};
inline Reduction effective_reduction(const Response& r, int n) {
  const bool avg = r.reduce_op == ReduceOp::AVERAGE;
  return {avg ? ReduceOp::SUM : r.reduce_op, r.postscale * (avg ? 1.0 / n : 1.0)};
}

// Reducing ops fuse when dtype, op, scale factors and device agree.
// The fields' bytes, not their text: keys are only compared, and formatting two
// doubles with snprintf cost a microsecond per tensor per step.
inline std::string reduction_fusion_key(const Response& r) {
  const int ints[3] = {static_cast<int>(r.dtype), static_cast<int>(r.reduce_op), r.device};
  const double scales[2] = {r.prescale, r.postscale};
  std::string key(sizeof ints + sizeof scales, '\0');
  std::memcpy(&key[0], ints, sizeof ints);
  std::memcpy(&key[sizeof ints], scales, sizeof scales);
  return key;
}

inline void set_output(TensorEntry* e, std::shared_ptr<void> out, std::vector<int64_t> shape,
                       DataType dt, std::vector<int64_t> aux = {}) {
  e->handle->out = std::move(out);
  e->handle->out_shape = std::move(shape);
  e->handle->out_dtype = dt;
  if (!aux.empty()) e->handle->aux = std::move(aux);
}

inline std::vector<int64_t> with_dim0(std::vector<int64_t> shape, int64_t d0) {
  if (shape.empty()) return {d0};
  shape[0] = d0;
  return shape;
}

}  // namespace ops
}  // namespace hvdl
