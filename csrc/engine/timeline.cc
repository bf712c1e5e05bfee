#include "timeline.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace hvdl {

namespace {

const char* op_upper(OpType t) {
  static const char* names[] = {"ALLREDUCE", "ALLGATHER", "BROADCAST", "ALLTOALL",
                                "REDUCESCATTER", "BARRIER", "JOIN"};
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumOpTypes) ? names[i] : "COLLECTIVE";
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

void append_us(std::string& out, int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(ns / 1000),
                static_cast<long long>(ns % 1000));
  out += buf;
}

constexpr size_t kWakeWriterAt = 8192;  // events; otherwise the writer wakes on its timer
constexpr auto kWriterPeriod = std::chrono::milliseconds(20);

}  // namespace

void Timeline::start(const std::string& path, bool mark_cycles) {
  std::lock_guard<std::mutex> life(life_mu_);
  stop_locked();
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f)
    throw std::runtime_error("horovodlite: cannot open timeline file '" + path +
                             "': " + std::strerror(errno));
  std::fputs("[\n", f);
  {
    std::lock_guard<std::mutex> l(mu_);
    file_ = f;
    events_.clear();
    stopping_ = false;
    first_event_ = true;
    tracks_.clear();
    next_track_ = 1;
    start_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  mark_cycles_.store(mark_cycles, std::memory_order_relaxed);
  writer_ = std::thread([this] { writer_loop(); });
  active_.store(true, std::memory_order_release);
}

void Timeline::stop() {
  std::lock_guard<std::mutex> life(life_mu_);
  stop_locked();
}

void Timeline::stop_locked() {
  if (!writer_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    active_.store(false, std::memory_order_release);
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
  std::fputs("\n]\n", file_);
  std::fclose(file_);
  file_ = nullptr;
}

int64_t Timeline::since_start(Clock::time_point t) const {
  const Clock::duration since = t.time_since_epoch() - Clock::duration(start_.load(std::memory_order_relaxed));
  return std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(since).count());
}

void Timeline::push(Event e) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!active_.load(std::memory_order_relaxed)) return;
    events_.push_back(std::move(e));
    wake = events_.size() == kWakeWriterAt;
  }
  if (wake) cv_.notify_one();
}

void Timeline::push_all(std::vector<Event>& events) {
  bool wake;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!active_.load(std::memory_order_relaxed)) return;
    size_t before = events_.size();
    for (auto& e : events) events_.push_back(std::move(e));
    wake = before < kWakeWriterAt && events_.size() >= kWakeWriterAt;
  }
  if (wake) cv_.notify_one();
}

void Timeline::cycle_start(Clock::time_point t) {
  Event e;
  e.ph = 'i';
  e.name = "CYCLE_START";
  e.ts_ns = since_start(t);
  push(std::move(e));
}

void Timeline::negotiated(const std::string& name, const std::vector<Clock::time_point>& ready,
                          Clock::time_point agreed) {
  std::vector<Event> ev;
  Clock::time_point first = agreed;
  for (auto t : ready)
    if (t != Clock::time_point{} && t < first) first = t;
  Event n;
  n.ph = 'X';
  n.name = "NEGOTIATE";
  n.tensor = name;
  n.ts_ns = since_start(first);
  n.dur_ns = since_start(agreed) - n.ts_ns;
  ev.push_back(std::move(n));
  for (size_t r = 0; r < ready.size(); ++r) {
    if (ready[r] == Clock::time_point{}) continue;
    Event m;
    m.ph = 'i';
    m.name = "READY";
    m.tensor = name;
    m.ts_ns = since_start(std::min(ready[r], agreed));
    m.rank = static_cast<int32_t>(r);
    ev.push_back(std::move(m));
  }
  push_all(ev);
}

void Timeline::queued(const std::string& name, Clock::time_point agreed, Clock::time_point started) {
  Event e;
  e.ph = 'X';
  e.name = "QUEUE";
  e.tensor = name;
  e.ts_ns = since_start(agreed);
  e.dur_ns = std::max<int64_t>(0, since_start(started) - e.ts_ns);
  push(std::move(e));
}

void Timeline::executed(const std::vector<const Response*>& group, const std::vector<size_t>& bytes,
                        Clock::time_point begin, Clock::time_point end, const GroupTrace& trace) {
  const int64_t id = static_cast<int64_t>(next_group_++);
  std::vector<Event> ev;
  ev.reserve(group.size() * (1 + trace.spans().size()));
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i]->name.empty()) continue;
    Event op;
    op.ph = 'X';
    op.name = op_upper(group[i]->op);
    op.tensor = group[i]->name;
    op.ts_ns = since_start(begin);
    op.dur_ns = since_start(end) - op.ts_ns;
    op.bytes = static_cast<int64_t>(bytes[i]);
    op.group = id;
    op.group_size = static_cast<int32_t>(group.size());
    ev.push_back(op);
    for (auto& s : trace.spans()) {
      Event p;
      p.ph = 'X';
      p.name = s.phase;
      p.tensor = group[i]->name;
      p.ts_ns = since_start(s.begin);
      p.dur_ns = since_start(s.end == Clock::time_point{} ? end : s.end) - p.ts_ns;
      p.group = id;
      ev.push_back(std::move(p));
    }
  }
  push_all(ev);
}

int Timeline::track_of(const std::string& tensor, std::string& out) {
  auto it = tracks_.find(tensor);
  if (it != tracks_.end()) return it->second;
  // Track 0 holds the cycle marks; tensors follow in order of first appearance.
  int pid = tensor.empty() ? 0 : next_track_++;
  tracks_.emplace(tensor, pid);
  for (int k = 0; k < 2; ++k) {
    out += first_event_ ? "" : ",\n";
    first_event_ = false;
    out += k == 0 ? "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":"
                  : "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":";
    out += std::to_string(pid);
    out += ",\"args\":{";
    if (k == 0) {
      out += "\"name\":";
      append_json_string(out, tensor.empty() ? std::string("negotiation cycles") : tensor);
    } else {
      out += "\"sort_index\":" + std::to_string(pid);
    }
    out += "}}";
  }
  return pid;
}

void Timeline::write_event(const Event& e, std::string& out) {
  int pid = track_of(e.tensor, out);
  out += first_event_ ? "" : ",\n";
  first_event_ = false;
  out += "{\"name\":\"";
  out += e.name;
  out += "\",\"ph\":\"";
  out += e.ph;
  out += "\",\"ts\":";
  append_us(out, e.ts_ns);
  if (e.ph == 'X') {
    out += ",\"dur\":";
    append_us(out, e.dur_ns);
  } else {
    out += e.tensor.empty() ? ",\"s\":\"g\"" : ",\"s\":\"t\"";
  }
  out += ",\"pid\":" + std::to_string(pid) + ",\"tid\":0";
  std::string args;
  auto arg = [&](const char* k, int64_t v) {
    if (v < 0) return;
    args += args.empty() ? "" : ",";
    args += '"';
    args += k;
    args += "\":" + std::to_string(v);
  };
  arg("rank", e.rank);
  arg("bytes", e.bytes);
  arg("group", e.group);
  arg("group_size", e.group_size);
  if (!args.empty()) out += ",\"args\":{" + args + "}";
  out += "}";
}

void Timeline::writer_loop() {
  std::vector<Event> batch;
  std::string out;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    cv_.wait_for(l, kWriterPeriod, [&] { return stopping_ || events_.size() >= kWakeWriterAt; });
    batch.swap(events_);
    bool stop = stopping_;
    std::FILE* f = file_;
    l.unlock();
    out.clear();
    for (auto& e : batch) write_event(e, out);
    batch.clear();
    if (!out.empty()) {
      std::fwrite(out.data(), 1, out.size(), f);
      std::fflush(f);
    }
    l.lock();
    if (stop && events_.empty()) return;
  }
}

}  // namespace hvdl
