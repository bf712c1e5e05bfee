// Allgather: concatenation along dim 0, which may differ per rank. The first dims
// of every rank travel in Response.sizes, so each rank can size the output (which
// the engine allocates) and the ring's variable blocks before any data moves.
// A lone tensor is gathered straight into its output (its rank-major layout is the
// ring's block layout), sending this rank's part from the input itself so the copy
// into the output overlaps the transfer; many small ones share one ring through the
// fusion buffer.
#include <cstring>

#include "../../collectives/ring.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

class AllgatherOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLGATHER; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    if (!check_not_scalar(reqs, resp, "allgather concatenates along dim 0") ||
        !check_trailing_dims(reqs, resp))
      return;
    const Request* q = first_present(reqs);
    resp.shape = q->shape;
    resp.sizes.assign(reqs.size(), 0);
    for (size_t r = 0; r < reqs.size(); ++r)
      if (reqs[r]) resp.sizes[r] = reqs[r]->shape[0];
  }

  size_t fusion_bytes(const Response& r) const override {
    size_t rows = 0;
    for (auto s : r.sizes) rows += static_cast<size_t>(s);
    size_t bytes = rows * row_bytes(r.shape, r.dtype);
    // Room for aligning every rank's piece of it.
    return bytes <= kFuseUpToBytes ? bytes + FusionLayout::kAlign * r.sizes.size() : 0;
  }

  std::string fusion_key(const Response& r) const override { return std::to_string(r.device); }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    Transport& t = ctx.transport;
    const int n = t.size(), me = t.rank();
    const size_t k_count = group.size();
    // piece[k][j]: bytes of tensor k that rank j contributes.
    std::vector<std::vector<size_t>> piece(k_count, std::vector<size_t>(n));
    std::vector<size_t> total(k_count, 0);
    for (size_t k = 0; k < k_count; ++k) {
      size_t rb = row_bytes(group[k]->shape, group[k]->dtype);
      for (int j = 0; j < n; ++j) {
        piece[k][j] = static_cast<size_t>(group[k]->sizes[j]) * rb;
        total[k] += piece[k][j];
      }
    }
    auto finish = [&](size_t k, std::shared_ptr<void> out) {
      int64_t rows = 0;
      for (auto s : group[k]->sizes) rows += s;
      set_output(entries[k], std::move(out), with_dim0(group[k]->shape, rows), group[k]->dtype);
    };

    if (k_count == 1) {
      auto out = OutputPool::get().allocate(total[0]);
      RingBlocks blocks = RingBlocks::of_sizes(piece[0]);
      PhaseScope p(ctx.phases, "RING_ALLGATHER");
      ring_allgather(t, out.get(), blocks, 0, entries[0]->input);
      finish(0, std::move(out));
      return;
    }

    // Fused: rank j's block holds its piece of every tensor, each 64-byte aligned.
    std::vector<size_t> block(n, 0);
    std::vector<std::vector<size_t>> at(k_count, std::vector<size_t>(n));
    for (int j = 0; j < n; ++j)
      for (size_t k = 0; k < k_count; ++k) {
        at[k][j] = block[j];
        block[j] += FusionLayout::align(piece[k][j]);
      }
    RingBlocks blocks = RingBlocks::of_sizes(block);
    char* fb = ctx.fusion.reserve(blocks.offset[n - 1] + blocks.count[n - 1]);
    {
      PhaseScope p(ctx.phases, "MEMCPY_IN_FUSION_BUFFER");
      for (size_t k = 0; k < k_count; ++k)
        if (piece[k][me]) std::memcpy(fb + blocks.offset[me] + at[k][me], entries[k]->input, piece[k][me]);
    }
    {
      PhaseScope p(ctx.phases, "RING_ALLGATHER");
      ring_allgather(t, fb, blocks, 0);
    }
    PhaseScope p(ctx.phases, "MEMCPY_OUT_FUSION_BUFFER");
    for (size_t k = 0; k < k_count; ++k) {
      auto out = OutputPool::get().allocate(total[k]);
      char* dst = static_cast<char*>(out.get());
      for (int j = 0; j < n; ++j) {
        if (piece[k][j]) std::memcpy(dst, fb + blocks.offset[j] + at[k][j], piece[k][j]);
        dst += piece[k][j];
      }
      finish(k, std::move(out));
    }
  }
};

OpRegistrar reg(std::make_unique<AllgatherOp>());

}  // namespace
}  // namespace hvdl
