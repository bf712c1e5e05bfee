// One collective = one file implementing this interface: how the coordinator checks
// that all ranks asked for compatible things, which responses may share a fusion
// buffer, and how to run it with the algorithms in collectives/.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "../collectives/broadcast.h"
#include "../collectives/phase_observer.h"
#include "../collectives/reducer.h"
#include "../common/buffer.h"
#include "../transport/transport.h"
#include "device.h"
#include "message.h"
#include "tensor_queue.h"

namespace hvdl {

// Everything below lives where the group's tensors live (host memory or one GPU), so
// an op that moves data only through these serves both.
struct ExecContext {
  Transport& transport;
  const Reducer& reducer;
  Buffer& fusion;   // persistent fusion buffer of this process set
  Buffer& scratch;  // persistent receive buffer of the algorithms
  size_t fusion_threshold;
  Device& device;   // copies, identity fill, NCCL: use these instead of memcpy & co.
  size_t segment_bytes = 0;         // ring pipelining (RingOptions), same on every rank
  BroadcastOptions broadcast = {};  // same on every rank
  PhaseObserver* phases = nullptr;  // the timeline, when it records: report phases here
};

class CollectiveOp {
 public:
  virtual ~CollectiveOp() = default;
  virtual OpType type() const = 0;
  // reqs[r] is rank r's request, or null for a rank that has joined. The caller has
  // already checked op type, dtype and device. Fill `resp` (shape, sizes, ...) or set
  // resp.error naming the mismatch.
  virtual void validate(const std::vector<const Request*>& reqs, Response& resp) const = 0;
  // Byte size this response occupies in the fusion buffer, or 0 if it never fuses.
  virtual size_t fusion_bytes(const Response&) const { return 0; }
  // Whether this response fuses without copies into a fusion buffer, through
  // `host_allreduce` (the process set's paths on host memory, may be null): large
  // tensors then fuse too.
  virtual bool fuses_in_place(const Response&, const AllreducePaths* /*host_allreduce*/) const {
    return false;
  }
  // Responses that may share one fusion buffer return equal keys.
  virtual std::string fusion_key(const Response&) const { return {}; }
  // Whether execute() handles GPU tensors (it then uses ctx.device, not host calls).
  // The coordinator rejects GPU requests for the others with a clear error.
  virtual bool gpu_capable() const { return false; }
  // Run a group of responses. entries[i] is this rank's entry for group[i], or null
  // when this rank has joined. Throws on transport failure.
  virtual void execute(ExecContext& ctx, const std::vector<const Response*>& group,
                       const std::vector<TensorEntry*>& entries) const = 0;
};

const CollectiveOp* find_op(OpType t);

// Called at static-initialisation time by each op's file.
struct OpRegistrar {
  explicit OpRegistrar(std::unique_ptr<CollectiveOp> op);
};

// Helpers for error messages: "rank 0 has float32, rank 1 has float64".
template <class Fn>
std::string describe_by_rank(const std::vector<const Request*>& reqs, Fn value_of);
std::string mismatch_error(const Request& any, const std::string& what, const std::string& detail);

}  // namespace hvdl

#include <charconv>
#include <cstring>
#include <map>
#include <sstream>
#include <string_view>

namespace hvdl {

template <class Fn>
std::string describe_by_rank(const std::vector<const Request*>& reqs, Fn value_of) {
  std::map<std::string, std::vector<int>> by_value;
  std::vector<std::string> order;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r]) continue;
    std::string v = value_of(*reqs[r]);
    if (!by_value.count(v)) order.push_back(v);
    by_value[v].push_back(static_cast<int>(r));
  }
  std::ostringstream os;
  for (size_t i = 0; i < order.size(); ++i) {
    auto& ranks = by_value[order[i]];
    os << (i ? ", " : "") << (ranks.size() > 1 ? "ranks " : "rank ");
    for (size_t j = 0; j < ranks.size(); ++j) os << (j ? "," : "") << ranks[j];
    os << (ranks.size() > 1 ? " have " : " has ") << order[i];
  }
  return os.str();
}

// What check_same compares, as text for its error message. Values are compared as
// themselves and only put into words on a mismatch: formatting them for every new
// name's negotiation cost ~2 us per request (doubles through an ostringstream).
inline std::string as_text(std::string_view v) { return std::string(v); }
inline std::string as_text(int v) { return std::to_string(v); }
inline std::string as_text(const std::vector<int64_t>& shape) { return shape_str(shape); }
inline std::string as_text(double v) {  // shortest text that reads back as v
  char buf[32];
  auto end = std::to_chars(buf, buf + sizeof buf, v).ptr;
  return std::string(buf, end);
}
template <class T> bool same_value(const T& a, const T& b) { return a == b; }
// Scale factors must agree to the bit (a NaN agrees with itself): the results would
// differ otherwise.
inline bool same_value(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

inline const std::vector<int64_t>& shape_of(const Request& q) { return q.shape; }

// True if value_of(...) is the same for every present request; else sets resp.error.
// value_of returns a std::string_view, int, double or a shape (by reference is fine).
template <class Fn>
bool check_same(const std::vector<const Request*>& reqs, Response& resp, const char* what,
                Fn value_of) {
  const Request* first = nullptr;
  for (auto* q : reqs)
    if (q) { first = q; break; }
  if (!first) return true;
  decltype(auto) v0 = value_of(*first);
  for (auto* q : reqs) {
    if (q && !same_value(value_of(*q), v0)) {
      resp.error = mismatch_error(*first, what, describe_by_rank(reqs, [&](const Request& x) {
                                    return as_text(value_of(x));
                                  }));
      return false;
    }
  }
  return true;
}

}  // namespace hvdl
