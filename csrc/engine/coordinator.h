// Rank 0 of each process set keeps the table of which ranks have asked for which
// names. A name is released once every rank that has not joined asked for it; the
// request set is validated first, so a mismatch becomes an error response that fails
// the tensor on every rank instead of a hang or a wrong result.
#pragma once
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"
#include "tensor_queue.h"

namespace hvdl {

class Timeline;

class Coordinator {
 public:
  Coordinator(int size, double stall_warn_s, double stall_fail_s);

  void add(Request q, Clock::time_point now);
  // Released responses, in the order their names first arrived. A non-null timeline
  // is told when each rank became ready for each of them.
  std::vector<Response> take_ready(Timeline* timeline = nullptr);
  // Logs names that some ranks have been waiting on too long; returns error responses
  // for those past the shutdown limit (and forgets them).
  std::vector<Response> check_stalls(Clock::time_point now);
  // When the next stall check is due (time_point::max() when nothing waits).
  Clock::time_point next_deadline() const;
  const std::set<int>& joined() const { return joined_; }
  // Nothing waits here: no name asked for by some ranks only, no rank joined.
  bool idle() const { return order_.empty() && joined_.empty() && ready_join_.empty(); }
  // What an idle coordinator of `size` ranks answers when every rank asked for `q`
  // (alone: no group, no join): the check rank 0 runs, so any rank that knows every
  // rank asked for the same reaches the same response without asking it.
  static Response answer_same(int size, const Request& q);

 private:
  struct Pending {
    std::vector<Request> by_rank;  // indexed by rank; name empty = not yet asked
    std::vector<bool> present;
    int count = 0;
    Clock::time_point first_seen, last_warned;
  };
  Response validate(const Pending& p) const;
  Response validate(const std::vector<const Request*>& reqs) const;  // by rank, null: absent
  bool complete(const Pending& p) const;
  std::string missing_ranks(const Pending& p) const;

  int size_;
  double warn_s_, fail_s_;
  std::unordered_map<std::string, Pending> table_;
  std::vector<std::string> order_;
  std::set<int> joined_;
  int last_joined_ = -1;
  std::vector<Response> ready_join_;
};

}  // namespace hvdl
