// Cuts the ordered responses of a round into execution groups. Every rank plans the
// same list with the same threshold, so every rank runs the same groups in the same
// order. A fusable response joins the open group with its fusion key while it fits;
// others run alone. Grouped requests (grouped_allreduce) stay together when they fit.
#pragma once
#include <vector>

#include "message.h"

namespace hvdl {

class AllreducePaths;
class CollectiveOp;

// Responses run together, with their op (looked up once per response, here; null for
// an error response or an op this build lacks).
struct FusionGroup {
  const CollectiveOp* op = nullptr;
  std::vector<const Response*> members;
};

// host_allreduce: the process set's allreduce paths on host memory (may be null).
std::vector<FusionGroup> plan_fusion(const std::vector<Response>& responses, size_t threshold,
                                     const AllreducePaths* host_allreduce = nullptr);

}  // namespace hvdl
