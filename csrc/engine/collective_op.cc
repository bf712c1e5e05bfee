#include "collective_op.h"

#include <array>

namespace hvdl {

// Process-wide: the ops are stateless and register from their files' static
// initialisers (one file per op, no list to keep).
static std::array<std::unique_ptr<CollectiveOp>, kNumOpTypes>& registry() {
  static std::array<std::unique_ptr<CollectiveOp>, kNumOpTypes> ops;
  return ops;
}

OpRegistrar::OpRegistrar(std::unique_ptr<CollectiveOp> op) {
  registry()[static_cast<int>(op->type())] = std::move(op);
}

const CollectiveOp* find_op(OpType t) {
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumOpTypes) ? registry()[i].get() : nullptr;
}

std::string mismatch_error(const Request& any, const std::string& what,
                           const std::string& detail) {
  return std::string("horovodlite: ") + op_type_name(any.op) + " '" + any.name +
         "': mismatched " + what + " across ranks: " + detail;
}

}  // namespace hvdl
