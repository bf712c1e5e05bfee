// Minimal leveled logging to stderr, prefixed with the world rank, so a message from
// a multi-rank job says where it came from. Level: HOROVODLITE_LOG_LEVEL
// (trace, debug, info, warning, error, fatal; default warning), set at init().
#pragma once
#include <sstream>
#include <string>

namespace hvdl {

enum class LogLevel { TRACE = 0, DEBUG, INFO, WARNING, ERROR, FATAL };

LogLevel log_threshold();
// From the LOG_LEVEL setting's value (case-insensitive; unknown words mean warning).
void set_log_level(const std::string& name);
void set_log_rank(int rank);
void log_write(LogLevel level, const std::string& msg);

class LogLine {
 public:
  explicit LogLine(LogLevel l) : level_(l) {}
  ~LogLine() { log_write(level_, os_.str()); }
  template <class T> LogLine& operator<<(const T& v) { os_ << v; return *this; }

 private:
  LogLevel level_;
  std::ostringstream os_;
};

// Turns a whole `HVDL_LOG(...) << a << b` into void, so the macro can be an expression:
// `&` binds looser than `<<`, so it takes the line after every `<<` has run.
struct LogVoidify {
  void operator&(const LogLine&) {}
};

}  // namespace hvdl

// An expression, not an if/else, so an unbraced `if (x) HVDL_LOG(...) << ...;` is plain
// to the compiler too (the if/else form drew -Wdangling-else at each of those). Below
// the threshold nothing after the macro is evaluated.
#define HVDL_LOG(LEVEL)                                                    \
  (::hvdl::LogLevel::LEVEL < ::hvdl::log_threshold())                      \
      ? (void)0                                                            \
      : ::hvdl::LogVoidify() & ::hvdl::LogLine(::hvdl::LogLevel::LEVEL)
