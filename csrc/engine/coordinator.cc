#include "coordinator.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "../common/logging.h"
#include "collective_op.h"
#include "timeline.h"

namespace hvdl {

Coordinator::Coordinator(int size, double warn_s, double fail_s)
    : size_(size), warn_s_(warn_s), fail_s_(fail_s) {}

void Coordinator::add(Request q, Clock::time_point now) {
  if (q.op == OpType::JOIN) {
    joined_.insert(q.rank);
    last_joined_ = q.rank;
    if (static_cast<int>(joined_.size()) == size_) {
      Response r;
      r.name = kJoinName;
      r.op = OpType::JOIN;
      r.last_joined = last_joined_;
      ready_join_.push_back(r);
      joined_.clear();
    }
    return;
  }
  auto it = table_.find(q.name);
  if (it == table_.end()) {
    Pending p;
    p.by_rank.resize(size_);
    p.present.assign(size_, false);
    p.first_seen = p.last_warned = now;
    it = table_.emplace(q.name, std::move(p)).first;
    order_.push_back(q.name);
  }
  Pending& p = it->second;
  if (!p.present[q.rank]) p.count++;
  p.present[q.rank] = true;
  p.by_rank[q.rank] = std::move(q);
}

bool Coordinator::complete(const Pending& p) const {
  for (int r = 0; r < size_; ++r)
    if (!p.present[r] && !joined_.count(r)) return false;
  return p.count > 0;
}

Response Coordinator::validate(const Pending& p) const {
  std::vector<const Request*> reqs(size_, nullptr);
  for (int r = 0; r < size_; ++r)
    if (p.present[r]) reqs[r] = &p.by_rank[r];
  return validate(reqs);
}

Response Coordinator::answer_same(int size, const Request& q) {
  return Coordinator(size, 0, 0).validate(std::vector<const Request*>(size, &q));
}

Response Coordinator::validate(const std::vector<const Request*>& reqs) const {
  const Request* first = nullptr;
  for (auto* q : reqs)
    if (q) { first = q; break; }
  Response resp;
  resp.name = first->name;
  resp.op = first->op;
  resp.dtype = first->dtype;
  resp.device = first->device;
  resp.group = first->group;
  for (int r : joined_) resp.joined.push_back(r);

  // Arguments a rank found invalid before enqueueing fail the collective everywhere.
  // Ranks say which Python class their error is ("TypeError: ..."); the others raise
  // the first failing rank's class too.
  std::string arg_errors;
  for (size_t r = 0; r < reqs.size(); ++r) {
    if (!reqs[r] || reqs[r]->error.empty()) continue;
    std::string e = reqs[r]->error;
    int kind = Response::INTERNAL_ERROR;
    for (auto [prefix, k] : {std::pair<const char*, int>{"TypeError: ", Response::TYPE_ERROR},
                             {"ValueError: ", Response::VALUE_ERROR}})
      if (e.rfind(prefix, 0) == 0) {
        kind = k;
        e.erase(0, std::strlen(prefix));  // the class is in the exception, not the text
      }
    if (arg_errors.empty()) resp.error_kind = kind;
    arg_errors += (arg_errors.empty() ? "" : "; ") + ("rank " + std::to_string(r) + ": " + e);
  }
  if (!arg_errors.empty()) {
    resp.error = std::string("horovodlite: ") + op_type_name(first->op) + " '" + first->name +
                 "': invalid arguments: " + arg_errors;
    return resp;
  }
  if (!check_same(reqs, resp, "operation", [](const Request& q) { return std::string_view(op_type_name(q.op)); }))
    return resp;
  if (!check_same(reqs, resp, "dtype", [](const Request& q) { return std::string_view(dtype_name(q.dtype)); }))
    return resp;
  // Each rank drives its own GPU, so only host memory vs GPU has to agree.
  if (!check_same(reqs, resp, "device", [](const Request& q) {
        return std::string_view(q.device < 0 ? "cpu" : "gpu");
      }))
    return resp;
  if (!resp.joined.empty() && first->op != OpType::ALLREDUCE) {
    std::ostringstream os;
    os << "horovodlite: " << op_type_name(first->op) << " '" << first->name
       << "' cannot run while ranks have joined (joined: ";
    for (size_t i = 0; i < resp.joined.size(); ++i) os << (i ? "," : "") << resp.joined[i];
    os << "); only allreduce continues with joined ranks contributing the identity";
    resp.error = os.str();
    return resp;
  }
  const CollectiveOp* op = find_op(first->op);
  if (!op) {
    resp.error = std::string("horovodlite: ") + op_type_name(first->op) + " '" + first->name +
                 "' is not supported by this build";
    return resp;
  }
  if (first->device >= 0 && !op->gpu_capable()) {
    resp.error = std::string("horovodlite: ") + op_type_name(first->op) + " '" + first->name +
                 "': GPU tensors are not supported by this operation yet; pass host memory";
    return resp;
  }
  op->validate(reqs, resp);
  return resp;
}

std::vector<Response> Coordinator::take_ready(Timeline* timeline) {
  std::vector<Response> out;
  // Group members are held until the whole group is complete, then released together.
  std::unordered_map<std::string, int> group_ready, group_size;
  for (auto& name : order_) {
    const Pending& p = table_.at(name);
    const Request* any = nullptr;
    for (int r = 0; r < size_; ++r)
      if (p.present[r]) { any = &p.by_rank[r]; break; }
    if (!any->group.empty()) {
      group_size[any->group] = any->group_size;
      if (complete(p)) group_ready[any->group]++;
    }
  }
  std::vector<std::string> keep;
  for (auto& name : order_) {
    Pending& p = table_.at(name);
    const Request* any = nullptr;
    for (int r = 0; r < size_; ++r)
      if (p.present[r]) { any = &p.by_rank[r]; break; }
    bool ready = complete(p) &&
                 (any->group.empty() || group_ready[any->group] >= group_size[any->group]);
    if (!ready) {
      keep.push_back(name);
      continue;
    }
    out.push_back(validate(p));
    if (timeline) {
      std::vector<Clock::time_point> ready(size_);
      for (int r = 0; r < size_; ++r)
        if (p.present[r]) ready[r] = p.by_rank[r].ready_at;
      timeline->negotiated(name, ready, Clock::now());
    }
    table_.erase(name);
  }
  order_.swap(keep);
  for (auto& j : ready_join_) out.push_back(j);
  ready_join_.clear();
  return out;
}

std::string Coordinator::missing_ranks(const Pending& p) const {
  std::ostringstream ready, missing;
  int nr = 0, nm = 0;
  for (int r = 0; r < size_; ++r) {
    if (p.present[r]) ready << (nr++ ? "," : "") << r;
    else if (!joined_.count(r)) missing << (nm++ ? "," : "") << r;
  }
  return "ready on ranks [" + ready.str() + "], missing on ranks [" + missing.str() + "]";
}

std::vector<Response> Coordinator::check_stalls(Clock::time_point now) {
  std::vector<Response> errors;
  std::vector<std::string> keep;
  for (auto& name : order_) {
    Pending& p = table_.at(name);
    double waited = std::chrono::duration<double>(now - p.first_seen).count();
    const Request* any = nullptr;
    for (int r = 0; r < size_; ++r)
      if (p.present[r]) { any = &p.by_rank[r]; break; }
    if (fail_s_ > 0 && waited >= fail_s_) {
      Response r;
      r.name = name;
      r.op = any->op;
      r.error = "horovodlite: " + std::string(op_type_name(any->op)) + " '" + name +
                "' stalled for " + std::to_string(static_cast<int>(waited)) + " s and was cancelled (" +
                missing_ranks(p) + "); HOROVODLITE_STALL_SHUTDOWN_TIME_SECONDS=" +
                std::to_string(static_cast<int>(fail_s_));
      errors.push_back(r);
      table_.erase(name);
      continue;
    }
    keep.push_back(name);
    if (warn_s_ > 0 && std::chrono::duration<double>(now - p.last_warned).count() >= warn_s_) {
      p.last_warned = now;
      HVDL_LOG(WARNING) << "stall: " << op_type_name(any->op) << " '" << name << "' has waited "
                        << static_cast<int>(waited) << " s: " << missing_ranks(p)
                        << ". One or more ranks did not submit this tensor; check that every "
                           "rank runs the same collectives.";
    }
  }
  order_.swap(keep);
  return errors;
}

Clock::time_point Coordinator::next_deadline() const {
  Clock::time_point best = Clock::time_point::max();
  for (auto& name : order_) {
    const Pending& p = table_.at(name);
    if (warn_s_ > 0)
      best = std::min(best, p.last_warned + std::chrono::duration_cast<Clock::duration>(
                                                std::chrono::duration<double>(warn_s_)));
    if (fail_s_ > 0)
      best = std::min(best, p.first_seen + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(fail_s_)));
  }
  return best;
}

}  // namespace hvdl
