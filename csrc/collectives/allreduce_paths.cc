#include "allreduce_paths.h"

#include <chrono>
#include <stdexcept>

#include "path_tuner.h"
#include "phase_observer.h"

namespace hvdl {

AllreducePaths& AllreducePaths::first(std::unique_ptr<AllreducePath> p) {
  first_.push_back(std::move(p));
  return *this;
}

AllreducePaths& AllreducePaths::contender(std::unique_ptr<AllreducePath> p) {
  contenders_.push_back(std::move(p));
  return *this;
}

AllreducePaths& AllreducePaths::chooser(std::unique_ptr<PathChooser> c) {
  chooser_ = std::move(c);
  return *this;
}

void AllreducePaths::report(std::map<std::string, std::string>& out) const {
  for (const auto* list : {&first_, &contenders_})
    for (const auto& p : *list) p->report(out);
}

bool AllreducePaths::takes_spans() const {
  for (auto* list : {&first_, &contenders_})
    for (auto& p : *list)
      if (p->takes_spans()) return true;
  return false;
}

bool AllreducePaths::reduces_where_they_lie(const void* in, const void* out, size_t bytes) const {
  for (auto& p : first_)
    if (p->reduces_where_they_lie(in, out, bytes)) return true;
  return false;
}

bool AllreducePaths::in_place_only() const {
  for (auto* list : {&first_, &contenders_})
    for (auto& p : *list)
      if (p->in_place_only()) return true;
  return false;
}

void AllreducePaths::run(AllreducePlan& plan) {
  // A phase is a string literal: only a named one is reported.
  PhaseScope scope(phase_ ? plan.ring.phases : nullptr, phase_);
  for (auto& p : first_) {
    if (!p->can_run(plan)) continue;
    plan.declined = false;
    p->run(plan);
    if (!plan.declined) return;
  }
  if (chooser_) {
    const int way = chooser_->choose(plan);
    AllreducePath& p = *contenders_.at(static_cast<size_t>(way));
    if (!p.can_run(plan))
      throw std::logic_error(std::string("allreduce: the chosen path '") + p.name() +
                             "' cannot run this plan");
    const auto t0 = std::chrono::steady_clock::now();
    p.run(plan);
    chooser_->record(way, plan, seconds_since(t0));
    return;
  }
  for (auto& p : contenders_) {
    if (!p->can_run(plan)) continue;
    p->run(plan);
    return;
  }
  throw std::logic_error("allreduce: no path of '" + name_ + "' can run this plan");
}

}  // namespace hvdl
