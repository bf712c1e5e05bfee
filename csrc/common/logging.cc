#include "logging.h"

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>


namespace hvdl {

// Process-wide because every layer logs, also before init() and after shutdown().
static std::atomic<int> g_rank{-1};
static std::atomic<int> g_level{static_cast<int>(LogLevel::WARNING)};

static LogLevel parse_level(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(c));
  if (s == "trace") return LogLevel::TRACE;
  if (s == "debug") return LogLevel::DEBUG;
  if (s == "info") return LogLevel::INFO;
  if (s == "error") return LogLevel::ERROR;
  if (s == "fatal") return LogLevel::FATAL;
  return LogLevel::WARNING;
}

LogLevel log_threshold() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

void set_log_level(const std::string& name) { g_level = static_cast<int>(parse_level(name)); }

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
