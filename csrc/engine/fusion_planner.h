// Cuts the ordered responses of a round into execution groups. Every rank plans the
// same list with the same threshold, so every rank runs the same groups in the same
// order. A fusable response joins the open group with its fusion key while it fits;
// others run alone. Grouped requests (grouped_allreduce) stay together when they fit.
#pragma once
#include <vector>

#include "message.h"

namespace hvdl {

class AllreduceAlgorithm;

// host_allreduce: the process set's allreduce on host memory (may be null).
std::vector<std::vector<const Response*>> plan_fusion(const std::vector<Response>& responses,
                                                      size_t threshold,
                                                      const AllreduceAlgorithm* host_allreduce = nullptr);

}  // namespace hvdl
