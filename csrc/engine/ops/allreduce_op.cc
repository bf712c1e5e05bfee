// Allreduce: every rank contributes a tensor of the same shape; all get the reduction.
// Small tensors share the fusion buffer (one ring for many tensors); a lone tensor is
// reduced where it lies, so a large allreduce copies nothing (out of place, the host
// ring reads the input and writes only the output). Data moves only
// through ctx.device, so the same code runs on host memory and on a GPU (where NCCL,
// when the device has it, replaces the ring).
#include "../../collectives/ring_allreduce.h"
#include "../allreduce_algorithm.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

RingOptions ring_options(const ExecContext& ctx) {
  RingOptions ring;
  ring.segment_bytes = ctx.segment_bytes;
  ring.phases = ctx.phases;
  return ring;
}

void reduce_in_place(ExecContext& ctx, void* buf, size_t count, DataType dt, ReduceOp op,
                     double postscale) {
  DeviceCollectives* lib = ctx.device.collectives();
  if (lib && lib->reduces(dt)) {
    lib->allreduce(buf, buf, count, dt, op);
    ctx.reducer.scale(buf, count, dt, postscale);
    return;
  }
  if (ctx.allreduce) {
    PhaseScope p(ctx.phases, ctx.allreduce->phase());
    return ctx.allreduce->run(ctx.reducer, buf, buf, count, dt, op, 1.0, postscale,
                              ring_options(ctx));
  }
  ring_allreduce(ctx.transport, ctx.reducer, buf, count, dt, op, postscale, ctx.scratch,
                 ring_options(ctx));
}

class AllreduceOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLREDUCE; }
  bool gpu_capable() const override { return true; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    check_reduction(reqs, resp);
  }

  size_t fusion_bytes(const Response& r) const override { return tensor_bytes(r.shape, r.dtype); }

  bool fuses_in_place(const Response& r, const AllreduceAlgorithm* host) const override {
    return host && host->takes_spans() && r.device < 0;
  }

  std::string fusion_key(const Response& r) const override { return reduction_fusion_key(r); }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    const Response& head = *group[0];
    const int n = ctx.transport.size();
    const DataType dt = head.dtype;
    const size_t es = dtype_size(dt);
    const auto [op, post] = effective_reduction(head, n);
    if (group.size() == 1) {
      const size_t count = numel(head.shape);
      void* buf;
      if (entries[0]) {
        buf = entries[0]->output;
        if (ctx.allreduce) {  // reads the input where it lies: no copy into the output first
          PhaseScope p(ctx.phases, ctx.allreduce->phase());
          return ctx.allreduce->run(ctx.reducer, entries[0]->input, buf, count, dt, op,
                                    head.prescale, post, ring_options(ctx));
        }
        if (ctx.device.ordinal() < 0)  // the host ring reads the input where it lies
          return ring_allreduce_host(ctx.transport, ctx.reducer, entries[0]->input, buf, count,
                                     dt, op, head.prescale, post, ctx.scratch, ring_options(ctx));
        if (buf != entries[0]->input && count) {
          PhaseScope p(ctx.phases, "MEMCPY_IN_OUTPUT");
          ctx.device.copy(buf, entries[0]->input, count * es);
        }
      } else {
        buf = ctx.fusion.reserve(count * es);
        ctx.device.fill_identity(buf, count, dt, op);
      }
      ctx.reducer.scale(buf, count, dt, head.prescale);
      reduce_in_place(ctx, buf, count, dt, op, post);
      return;
    }

    FusionLayout layout(group, [&](const Response& r) { return fusion_bytes(r); });
    if (ctx.allreduce && ctx.allreduce->takes_spans()) {  // the tensors stay where they are
      std::vector<Span> spans;
      char* fb = nullptr;
      for (size_t i = 0; i < group.size(); ++i) {
        const size_t count = layout.bytes(i) / es;
        if (entries[i]) {
          spans.push_back({entries[i]->input, entries[i]->output, count});
        } else {  // a joined rank contributes identities from the (unused) fusion buffer
          if (!fb) fb = ctx.fusion.reserve(layout.total_bytes());
          ctx.device.fill_identity(fb + layout.offset(i), count, dt, op);
          spans.push_back({fb + layout.offset(i), fb + layout.offset(i), count});
        }
      }
      PhaseScope p(ctx.phases, ctx.allreduce->phase());
      return ctx.allreduce->run_spans(ctx.reducer, spans, dt, op, head.prescale, post,
                                      ring_options(ctx));
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
    const size_t total = layout.total_bytes() / es;
    ctx.reducer.scale(fb, total, dt, head.prescale);
    reduce_in_place(ctx, fb, total, dt, op, post);
    PhaseScope p(ctx.phases, "MEMCPY_OUT_FUSION_BUFFER");
    ctx.device.copy_many(out, dt, 1.0);
  }
};

OpRegistrar reg(std::make_unique<AllreduceOp>());

}  // namespace
}  // namespace hvdl
