#include "logging.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>

#include "env.h"

namespace hvdl {

static std::atomic<int> g_rank{-1};

static LogLevel parse_level() {
  std::string s = env_str("LOG_LEVEL", "warning");
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  if (s == "trace") return LogLevel::TRACE;
  if (s == "debug") return LogLevel::DEBUG;
  if (s == "info") return LogLevel::INFO;
  if (s == "error") return LogLevel::ERROR;
  if (s == "fatal") return LogLevel::FATAL;
  return LogLevel::WARNING;
}

LogLevel log_threshold() {
  static const LogLevel level = parse_level();
  return level;
}

void set_log_rank(int rank) { g_rank = rank; }

void log_write(LogLevel level, const std::string& msg) {
  static const char* names[] = {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fprintf(stderr, "[horovodlite %s rank %d] %s\n", names[static_cast<int>(level)],
               g_rank.load(), msg.c_str());
  std::fflush(stderr);
}

}  // namespace hvdl
