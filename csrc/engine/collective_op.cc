#include "collective_op.h"

#include <array>
#include <cstdio>

namespace hvdl {

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

std::string reduction_fusion_key(const Response& r) {
  char buf[96];  // %a: the exact bits of each factor
  int n = std::snprintf(buf, sizeof buf, "%d/%d/%a/%a/%d", static_cast<int>(r.dtype),
                        static_cast<int>(r.reduce_op), r.prescale, r.postscale, r.device);
  return std::string(buf, n > 0 ? static_cast<size_t>(n) : 0);
}

}  // namespace hvdl
