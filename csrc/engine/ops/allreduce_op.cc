// Allreduce: every rank contributes a tensor of the same shape; all get the reduction.
// The op only makes the plan: the tensors' spans where they lie (a lone tensor, or a
// group when the paths take spans), or one fusion buffer packed from the group; then
// the device's allreduce paths (collectives/allreduce_paths.h) choose how it runs:
// on host memory the flat ring, shared memory or hierarchical; on a GPU NCCL or the
// ring over MPI. Data moves only through ctx.device, so the same code serves both.
#include "../../collectives/allreduce_paths.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

class AllreduceOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLREDUCE; }
  bool gpu_capable() const override { return true; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    check_reduction(reqs, resp);
  }

  size_t fusion_bytes(const Response& r) const override { return tensor_bytes(r.shape, r.dtype); }

  // The GPU paths never take spans.
  bool fuses_in_place(const Response& r, const AllreducePaths* host) const override {
    return host && host->takes_spans() && r.device < 0;
  }

  std::string fusion_key(const Response& r) const override { return reduction_fusion_key(r); }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    const Response& head = *group[0];
    AllreducePaths& paths = ctx.device.allreduce();
    const DataType dt = head.dtype;
    const size_t es = dtype_size(dt);
    const auto [op, post] = effective_reduction(head, ctx.transport.size());
    AllreducePlan plan;
    plan.dt = dt;
    plan.op = op;
    plan.prescale = head.prescale;
    plan.postscale = post;
    plan.red = &ctx.reducer;
    plan.ring.segment_bytes = ctx.segment_bytes;
    plan.ring.phases = ctx.phases;

    if (group.size() == 1) {
      const size_t count = numel(head.shape);
      if (entries[0]) {
        const void* in = entries[0]->input;
        void* out = entries[0]->output;
        if (paths.in_place_only()) {
          if (out != in && count) {
            PhaseScope p(ctx.phases, "MEMCPY_IN_OUTPUT");
            ctx.device.copy(out, in, count * es);
          }
          in = out;
        }
        plan.spans.push_back({in, out, count});
      } else {  // a joined rank contributes identities
        char* buf = ctx.fusion.reserve(count * es);
        ctx.device.fill_identity(buf, count, dt, op);
        plan.spans.push_back({buf, buf, count});
      }
      return paths.run(plan);
    }

    FusionLayout layout(group, [&](const Response& r) { return fusion_bytes(r); });
    if (paths.takes_spans()) {  // the tensors stay where they are
      char* fb = nullptr;
      for (size_t i = 0; i < group.size(); ++i) {
        const size_t count = layout.bytes(i) / es;
        if (entries[i]) {
          plan.spans.push_back({entries[i]->input, entries[i]->output, count});
        } else {  // a joined rank contributes identities from the (unused) fusion buffer
          if (!fb) fb = ctx.fusion.reserve(layout.total_bytes());
          ctx.device.fill_identity(fb + layout.offset(i), count, dt, op);
          plan.spans.push_back({fb + layout.offset(i), fb + layout.offset(i), count});
        }
      }
      return paths.run(plan);
    }
    char* fb = ctx.fusion.reserve(layout.total_bytes());
    std::vector<CopyRegion> in, out;  // one batched copy each way (one kernel on a GPU)
    for (size_t i = 0; i < group.size(); ++i) {
      size_t bytes = layout.bytes(i);
      char* dst = fb + layout.offset(i);
      if (entries[i]) {
        in.push_back({dst, entries[i]->input, bytes});
        out.push_back({entries[i]->output, dst, bytes});
      } else {
        ctx.device.fill_identity(dst, bytes / es, dt, op);
      }
    }
    {
      PhaseScope p(ctx.phases, "MEMCPY_IN_FUSION_BUFFER");
      ctx.device.copy_many(in, dt, 1.0);
    }
    plan.spans.push_back({fb, fb, layout.total_bytes() / es});
    paths.run(plan);
    PhaseScope p(ctx.phases, "MEMCPY_OUT_FUSION_BUFFER");
    ctx.device.copy_many(out, dt, 1.0);
  }
};

OpRegistrar reg(std::make_unique<AllreduceOp>());

}  // namespace
}  // namespace hvdl
