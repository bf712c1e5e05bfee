// Reducescatter: the tensors (same shape everywhere) are reduced and rank r keeps
// rows block r of dim 0, cut by the partition.h rule (the first dim0 % N ranks get
// one extra row). It is the first phase of the ring allreduce alone, with the blocks
// shifted so that rank r finishes block r. A lone tensor is read straight from the
// caller's input (partial sums are built in the persistent fusion buffer, the input
// is never copied first) and its finished block is reduced straight into the output;
// small ones share one ring through the fusion buffer, laid out rank-major so that
// each rank's rows of every tensor form one ring block.
#include <cstring>

#include "../../collectives/partition.h"
#include "../../collectives/ring.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

class ReducescatterOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::REDUCESCATTER; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    if (!check_not_scalar(reqs, resp, "reducescatter splits the result along dim 0")) return;
    check_reduction(reqs, resp);
  }

  size_t fusion_bytes(const Response& r) const override {
    size_t bytes = tensor_bytes(r.shape, r.dtype);
    // Padding: every rank's piece is aligned separately (at most 64 B each, and
    // there are at most dim0 non-empty pieces plus one per rank).
    return bytes <= kFuseUpToBytes ? bytes + FusionLayout::kAlign * (r.shape[0] + 1) : 0;
  }

  std::string fusion_key(const Response& r) const override { return reduction_fusion_key(r); }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    Transport& t = ctx.transport;
    const int n = t.size(), me = t.rank();
    const Response& head = *group[0];
    const DataType dt = head.dtype;
    const size_t es = dtype_size(dt);
    const auto [op, post] = effective_reduction(head, n);
    const size_t k_count = group.size();

    // rows[k][j]: dim-0 rows of tensor k that rank j ends up with; elems per row.
    std::vector<std::vector<size_t>> rows(k_count, std::vector<size_t>(n));
    std::vector<size_t> row_elems(k_count);
    for (size_t k = 0; k < k_count; ++k) {
      row_elems[k] = numel(group[k]->shape, 1);
      for (int j = 0; j < n; ++j) rows[k][j] = block_count(group[k]->shape[0], n, j);
    }
    auto output = [&](size_t k) {
      return OutputPool::get().allocate(rows[k][me] * row_elems[k] * es);
    };
    auto finish = [&](size_t k, std::shared_ptr<void> out, const char* reduced) {
      const size_t count = rows[k][me] * row_elems[k];
      if (reduced && count) std::memcpy(out.get(), reduced, count * es);
      ctx.reducer.scale(out.get(), count, dt, post);
      set_output(entries[k], std::move(out), with_dim0(group[k]->shape, rows[k][me]), dt);
    };

    if (k_count == 1) {
      const size_t total = numel(head.shape);
      RingBlocks blocks = RingBlocks::even(head.shape[0], n);
      for (int j = 0; j < n; ++j) blocks.offset[j] *= row_elems[0], blocks.count[j] *= row_elems[0];
      char* work = ctx.fusion.reserve(total * es);
      const void* src = entries[0]->input;
      if (head.prescale != 1.0) {  // scaling must not touch the caller's input
        if (total) std::memcpy(work, src, total * es);
        ctx.reducer.scale(work, total, dt, head.prescale);
        src = work;
      }
      auto out = output(0);
      PhaseScope p(ctx.phases, "RING_REDUCE_SCATTER");
      if (src == work) {
        ring_reduce_scatter(t, ctx.reducer, work, work, blocks, dt, op, 0, ctx.scratch,
                            ctx.segment_bytes);
        finish(0, std::move(out), work + blocks.offset[me] * es);
      } else {  // the finished block lands in the output directly
        ring_reduce_scatter(t, ctx.reducer, src, work, blocks, dt, op, 0, ctx.scratch,
                            ctx.segment_bytes, out.get());
        finish(0, std::move(out), nullptr);
      }
      return;
    }

    // Fused: ring block j = rank j's rows of every tensor, each piece 64-byte aligned.
    const size_t align_elems = FusionLayout::kAlign / es;
    auto aligned = [&](size_t elems) { return (elems + align_elems - 1) / align_elems * align_elems; };
    std::vector<size_t> block(n, 0);
    std::vector<std::vector<size_t>> at(k_count, std::vector<size_t>(n));
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < k_count; ++k) {
        at[k][j] = block[j];
        block[j] += aligned(rows[k][j] * row_elems[k]);
      }
    RingBlocks blocks = RingBlocks::of_sizes(block);
    const size_t total = blocks.offset[n - 1] + blocks.count[n - 1];
    char* fb = ctx.fusion.reserve(total * es);
    {
      PhaseScope p(ctx.phases, "MEMCPY_IN_FUSION_BUFFER");
      for (size_t k = 0; k < k_count; ++k) {
        const char* in = static_cast<const char*>(entries[k]->input);
        for (int j = 0; j < n; ++j) {
          size_t bytes = rows[k][j] * row_elems[k] * es;
          size_t from = block_offset(group[k]->shape[0], n, j) * row_elems[k] * es;
          if (bytes) std::memcpy(fb + (blocks.offset[j] + at[k][j]) * es, in + from, bytes);
        }
      }
    }
    ctx.reducer.scale(fb, total, dt, head.prescale);
    {
      PhaseScope p(ctx.phases, "RING_REDUCE_SCATTER");
      ring_reduce_scatter(t, ctx.reducer, fb, fb, blocks, dt, op, 0, ctx.scratch, ctx.segment_bytes);
    }
    PhaseScope p(ctx.phases, "MEMCPY_OUT_FUSION_BUFFER");
    for (size_t k = 0; k < k_count; ++k) finish(k, output(k), fb + (blocks.offset[me] + at[k][me]) * es);
  }
};

OpRegistrar reg(std::make_unique<ReducescatterOp>());

}  // namespace
}  // namespace hvdl
