// Outcome of a collective as seen by the handle that waits for it.
#pragma once
#include <string>
#include <utility>

namespace hvdl {

class Status {
 public:
  // INVALID_VALUE / INVALID_TYPE: arguments wrong on their face (Python raises an
  // error that is a ValueError / TypeError as well as a HorovodInternalError).
  enum Code { OK = 0, MISMATCH, ABORTED, INVALID, INTERNAL, INVALID_VALUE, INVALID_TYPE };
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(Code c, std::string msg) { return Status(c, std::move(msg)); }
  bool is_ok() const { return code_ == OK; }
  Code code() const { return code_; }
  const std::string& message() const { return msg_; }

 private:
  Status(Code c, std::string m) : code_(c), msg_(std::move(m)) {}
  Code code_ = OK;
  std::string msg_;
};

}  // namespace hvdl
