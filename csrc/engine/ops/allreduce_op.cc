// Allreduce: every rank contributes a tensor of the same shape; all get the reduction.
// Small tensors share the fusion buffer (one ring for many tensors); a lone tensor is
// reduced where it lies, so a large in-place allreduce copies nothing.
#include <cstring>
#include <sstream>

#include "../../collectives/ring_allreduce.h"
#include "../../reduce/identity.h"
#include "../collective_op.h"
#include "../fusion_layout.h"

namespace hvdl {
namespace {

size_t numel(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

class AllreduceOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLREDUCE; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    if (!check_same(reqs, resp, "shape", [](const Request& q) { return shape_str(q.shape); }) ||
        !check_same(reqs, resp, "reduce op",
                    [](const Request& q) { return std::string(reduce_op_name(q.reduce_op)); }) ||
        !check_same(reqs, resp, "prescale_factor", [](const Request& q) { return fmt(q.prescale); }) ||
        !check_same(reqs, resp, "postscale_factor", [](const Request& q) { return fmt(q.postscale); }))
      return;
    const Request* q = nullptr;
    for (auto* r : reqs)
      if (r) { q = r; break; }
    if (q->dtype == DataType::BOOL) {
      resp.error = "horovodlite: allreduce '" + q->name + "': bool tensors cannot be reduced";
      return;
    }
    if (q->reduce_op == ReduceOp::ADASUM) {
      resp.error = "horovodlite: allreduce '" + q->name + "': Adasum is not implemented";
      return;
    }
    resp.shape = q->shape;
    resp.reduce_op = q->reduce_op;
    resp.prescale = q->prescale;
    resp.postscale = q->postscale;
  }

  size_t fusion_bytes(const Response& r) const override { return numel(r.shape) * dtype_size(r.dtype); }

  std::string fusion_key(const Response& r) const override {
    std::ostringstream os;
    os << static_cast<int>(r.dtype) << '/' << static_cast<int>(r.reduce_op) << '/' << r.prescale
       << '/' << r.postscale << '/' << r.device;
    return os.str();
  }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    const Response& head = *group[0];
    const int n = ctx.transport.size();
    const DataType dt = head.dtype;
    const size_t es = dtype_size(dt);
    // Average is a sum scaled by 1/N; joined ranks still count in N, as in Horovod.
    ReduceOp op = head.reduce_op == ReduceOp::AVERAGE ? ReduceOp::SUM : head.reduce_op;
    double post = head.postscale * (head.reduce_op == ReduceOp::AVERAGE ? 1.0 / n : 1.0);
    RingOptions ring;
    ring.segment_bytes = ctx.segment_bytes;
    ring.phases = ctx.phases;

    if (group.size() == 1) {
      const size_t count = numel(head.shape);
      void* buf;
      if (entries[0]) {
        buf = entries[0]->output;
        if (buf != entries[0]->input && count) {
          if (head.prescale == 1.0) {
            ring.input = entries[0]->input;  // the ring reads it; no copy into the output
          } else {
            PhaseScope p(ctx.phases, "MEMCPY_IN_OUTPUT");
            std::memcpy(buf, entries[0]->input, count * es);
          }
        }
      } else {
        buf = ctx.fusion.reserve(count * es);
        fill_identity(buf, count, dt, op);
      }
      ctx.reducer.scale(buf, count, dt, head.prescale);
      ring_allreduce(ctx.transport, ctx.reducer, buf, count, dt, op, post, ctx.scratch, ring);
      return;
    }

    FusionLayout layout(group, [&](const Response& r) { return fusion_bytes(r); });
    char* fb = ctx.fusion.reserve(layout.total_bytes());
    {
      PhaseScope p(ctx.phases, "MEMCPY_IN_FUSION_BUFFER");
      for (size_t i = 0; i < group.size(); ++i) {
        size_t bytes = layout.bytes(i);
        char* dst = fb + layout.offset(i);
        if (entries[i]) std::memcpy(dst, entries[i]->input, bytes);
        else fill_identity(dst, bytes / es, dt, op);
      }
    }
    const size_t total = layout.total_bytes() / es;
    ctx.reducer.scale(fb, total, dt, head.prescale);
    ring_allreduce(ctx.transport, ctx.reducer, fb, total, dt, op, post, ctx.scratch, ring);
    PhaseScope p(ctx.phases, "MEMCPY_OUT_FUSION_BUFFER");
    for (size_t i = 0; i < group.size(); ++i)
      if (entries[i]) std::memcpy(entries[i]->output, fb + layout.offset(i), layout.bytes(i));
  }
};

OpRegistrar reg(std::make_unique<AllreduceOp>());

}  // namespace
}  // namespace hvdl
