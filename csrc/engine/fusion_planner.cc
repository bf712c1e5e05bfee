#include "fusion_planner.h"

#include <map>

#include "collective_op.h"
#include "fusion_layout.h"

namespace hvdl {

// A tensor this large runs alone, where it lies: its per-collective overhead (tens of
// microseconds) is small next to its transfer time, while packing it would add a copy
// in and a copy out of the fusion buffer, which cost more than they save. Where an op
// fuses without copies (fuses_in_place), size no longer argues for running alone.
constexpr size_t kRunAloneBytes = 256 << 10;

std::vector<FusionGroup> plan_fusion(const std::vector<Response>& responses, size_t threshold,
                                     const AllreducePaths* host_allreduce) {
  // One response is one group: nothing to fuse it with (a loop of blocking calls: its
  // key and map cost ~0.15 us of a 4 KiB call).
  if (responses.size() == 1) {
    const Response& r = responses[0];
    return {{r.ok() ? find_op(r.op) : nullptr, {&r}}};
  }
  std::vector<FusionGroup> groups;
  std::map<std::string, std::pair<size_t, size_t>> open;  // key -> (group index, bytes)
  for (const Response& r : responses) {
    const CollectiveOp* op = r.ok() ? find_op(r.op) : nullptr;
    size_t bytes = op ? op->fusion_bytes(r) : 0;
    if (!op || bytes == 0 || threshold == 0 || FusionLayout::align(bytes) > threshold ||
        (bytes >= kRunAloneBytes && !op->fuses_in_place(r, host_allreduce))) {
      groups.push_back({op, {&r}});
      continue;
    }
    std::string key = op->fusion_key(r);
    key += static_cast<char>(r.op);
    auto it = open.find(key);
    if (it != open.end() && it->second.second + FusionLayout::align(bytes) <= threshold) {
      groups[it->second.first].members.push_back(&r);
      it->second.second += FusionLayout::align(bytes);
      continue;
    }
    open[key] = {groups.size(), FusionLayout::align(bytes)};
    groups.push_back({op, {&r}});
  }
  return groups;
}

}  // namespace hvdl
