// Lets whoever runs an algorithm see its phases (the timeline does) without the
// algorithm knowing who listens. Algorithms take a possibly-null observer; with
// nobody listening a phase costs one pointer test.
#pragma once

namespace hvdl {

class PhaseObserver {
 public:
  virtual ~PhaseObserver() = default;
  virtual void begin(const char* phase) = 0;  // `phase` is a string literal
  virtual void end(const char* phase) = 0;
};

class PhaseScope {
 public:
  PhaseScope(PhaseObserver* o, const char* phase) : o_(o), phase_(phase) {
    if (o_) o_->begin(phase_);
  }
  ~PhaseScope() {
    if (o_) o_->end(phase_);
  }
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  PhaseObserver* o_;
  const char* phase_;
};

}  // namespace hvdl
