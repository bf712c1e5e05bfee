// Broadcast: root's tensor everywhere. In place when the caller passes its own
// buffer as the output (broadcast_); otherwise the engine allocates the output and
// the root copies its input there. Small broadcasts from the same root (e.g. a
// model's parameters at start-up) share one transfer through the fusion buffer.
#include <algorithm>
#include <cstring>

#include "../../collectives/broadcast.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

class BroadcastOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::BROADCAST; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    if (!check_same(reqs, resp, "root rank", [](const Request& q) { return q.root; }))
      return;
    const Request* q = first_present(reqs);
    const int n = static_cast<int>(reqs.size());
    if (q->root < 0 || q->root >= n) {
      resp.error = op_prefix(*q) + "root_rank " + std::to_string(q->root) +
                   " is out of range for a process set of " + std::to_string(n) + " rank" +
                   (n > 1 ? "s (valid: 0.." + std::to_string(n - 1) + ")" : " (valid: 0)");
      resp.error_kind = Response::VALUE_ERROR;
      return;
    }
    if (!check_same(reqs, resp, "shape", shape_of))
      return;
    resp.shape = q->shape;
    resp.root = q->root;
  }

  size_t fusion_bytes(const Response& r) const override {
    size_t bytes = tensor_bytes(r.shape, r.dtype);
    // An empty tensor still joins its group (0 would mean "never fuses").
    return bytes <= kFuseUpToBytes ? std::max<size_t>(bytes, 1) : 0;
  }

  std::string fusion_key(const Response& r) const override {
    return std::to_string(r.root) + '/' + std::to_string(r.device);
  }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    Transport& t = ctx.transport;
    const int root = group[0]->root;
    const bool is_root = t.rank() == root;
    // Where each tensor's result goes: the caller's buffer, or a fresh engine output.
    std::vector<void*> dst(group.size());
    std::vector<std::shared_ptr<void>> owned(group.size());
    for (size_t k = 0; k < group.size(); ++k) {
      dst[k] = entries[k]->output;
      if (!dst[k]) {
        owned[k] = OutputPool::get().allocate(tensor_bytes(group[k]->shape, group[k]->dtype));
        dst[k] = owned[k].get();
      }
    }
    FusionLayout layout(group, [](const Response& r) { return tensor_bytes(r.shape, r.dtype); });
    auto root_copy = [&](size_t k) {
      if (is_root && dst[k] != entries[k]->input && layout.bytes(k))
        std::memcpy(dst[k], entries[k]->input, layout.bytes(k));
    };

    if (group.size() == 1) {
      root_copy(0);
      PhaseScope p(ctx.phases, "BROADCAST");
      broadcast_bytes(t, dst[0], layout.bytes(0), root, ctx.broadcast);
    } else {
      PhaseScope p(ctx.phases, "BROADCAST_FUSED");
      char* fb = ctx.fusion.reserve(layout.total_bytes());
      if (is_root)
        for (size_t k = 0; k < group.size(); ++k)
          if (layout.bytes(k)) std::memcpy(fb + layout.offset(k), entries[k]->input, layout.bytes(k));
      broadcast_bytes(t, fb, layout.total_bytes(), root, ctx.broadcast);
      for (size_t k = 0; k < group.size(); ++k) {
        if (is_root) root_copy(k);
        else if (layout.bytes(k)) std::memcpy(dst[k], fb + layout.offset(k), layout.bytes(k));
      }
    }
    for (size_t k = 0; k < group.size(); ++k)
      if (owned[k]) set_output(entries[k], std::move(owned[k]), group[k]->shape, group[k]->dtype);
  }
};

OpRegistrar reg(std::make_unique<BroadcastOp>());

}  // namespace
}  // namespace hvdl
