// Join: the coordinator releases it once every rank has joined; each rank's handle
// then reports the last rank to join (the same number everywhere).
#include "../collective_op.h"

namespace hvdl {
namespace {

class JoinOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::JOIN; }
  void validate(const std::vector<const Request*>&, Response&) const override {}
  void execute(ExecContext&, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    for (size_t i = 0; i < group.size(); ++i)
      if (entries[i]) entries[i]->handle->aux = {group[i]->last_joined};
  }
};

OpRegistrar reg(std::make_unique<JoinOp>());

}  // namespace
}  // namespace hvdl
