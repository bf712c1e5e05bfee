// The coordinator validates through the op registry; this allreduce stands in for the
// real one (which would bring the whole engine along) in the tests of the negotiation
// round: it runs nothing, and fails a request set only where the shapes differ.
#pragma once
#include <memory>
#include <vector>

#include "engine/collective_op.h"

namespace hvdl::test {

class StandInAllreduce : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLREDUCE; }
  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    for (auto* q : reqs)
      if (q && q->shape != reqs[0]->shape) resp.error = "shapes differ";
    resp.shape = reqs[0]->shape;
  }
  void execute(ExecContext&, const std::vector<const Response*>&,
               const std::vector<TensorEntry*>&) const override {}
};
inline OpRegistrar stand_in_allreduce(std::make_unique<StandInAllreduce>());

}  // namespace hvdl::test
