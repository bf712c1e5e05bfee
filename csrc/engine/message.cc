#include "message.h"

#include <cstring>
#include <sstream>
#include <stdexcept>

namespace hvdl {

const char* op_type_name(OpType t) {
  static const char* names[] = {"allreduce", "allgather", "broadcast", "alltoall",
                                "reducescatter", "barrier", "join"};
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumOpTypes) ? names[i] : "unknown";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  if (shape.size() == 1) os << ",";
  os << ")";
  return os.str();
}

namespace {

// Fixed-width little-endian fields: every rank runs the same binary on the same
// architecture, so a plain byte copy is the whole wire format.
class Writer {
 public:
  template <class T> void pod(T v) { out.append(reinterpret_cast<const char*>(&v), sizeof(T)); }
  void str(const std::string& s) { pod<uint32_t>(static_cast<uint32_t>(s.size())); out += s; }
  template <class T> void vec(const std::vector<T>& v) {
    pod<uint32_t>(static_cast<uint32_t>(v.size()));
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  std::string out;
};

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <class T> T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str() {
    uint32_t n = pod<uint32_t>();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  template <class T> std::vector<T> vec() {
    uint32_t n = pod<uint32_t>();
    need(size_t(n) * sizeof(T));
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), s_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  bool done() const { return pos_ >= s_.size(); }

 private:
  void need(size_t n) {
    if (pos_ + n > s_.size()) throw std::runtime_error("horovodlite: truncated control message");
  }
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

using SteadyClock = std::chrono::steady_clock;

std::string encode_requests(const std::vector<Request>& v) {
  Writer w;
  const auto now = SteadyClock::now();
  for (auto& q : v) {
    w.pod(q.rank); w.str(q.name); w.pod(q.op); w.pod(q.dtype); w.vec(q.shape);
    w.pod(q.reduce_op); w.pod(q.prescale); w.pod(q.postscale); w.pod(q.root); w.pod(q.device);
    w.vec(q.splits); w.str(q.group); w.pod(q.group_size); w.str(q.error);
    int64_t age = q.ready_at == SteadyClock::time_point{} ? -1
        : std::chrono::duration_cast<std::chrono::nanoseconds>(now - q.ready_at).count();
    w.pod(age);
  }
  return w.out;
}

namespace {
constexpr char kAutoNameMark[] = ".noname.";
}

std::string auto_name(const std::string& kind, int64_t count) {
  return kind + kAutoNameMark + std::to_string(count);
}

bool is_auto_name(const std::string& name) { return name.find(kAutoNameMark) != std::string::npos; }

std::string_view request_identity(std::string_view one) {
  // [int32 rank] ... [int64 age]
  constexpr size_t lead = sizeof(int32_t), tail = sizeof(int64_t);
  return one.size() > lead + tail ? one.substr(lead, one.size() - lead - tail) : std::string_view();
}

std::vector<Request> decode_requests(const std::string& bytes) {
  Reader r(bytes);
  const auto now = SteadyClock::now();
  std::vector<Request> v;
  while (!r.done()) {
    Request q;
    q.rank = r.pod<int32_t>(); q.name = r.str(); q.op = r.pod<OpType>();
    q.dtype = r.pod<DataType>(); q.shape = r.vec<int64_t>(); q.reduce_op = r.pod<ReduceOp>();
    q.prescale = r.pod<double>(); q.postscale = r.pod<double>(); q.root = r.pod<int32_t>();
    q.device = r.pod<int32_t>(); q.splits = r.vec<int64_t>(); q.group = r.str();
    q.group_size = r.pod<int32_t>();
    q.error = r.str();
    int64_t age = r.pod<int64_t>();
    if (age >= 0) q.ready_at = now - std::chrono::nanoseconds(age);
    v.push_back(std::move(q));
  }
  return v;
}

std::string encode_responses(const std::vector<Response>& v) {
  Writer w;
  for (auto& p : v) {
    w.str(p.name); w.pod(p.op); w.pod(p.dtype); w.vec(p.shape); w.pod(p.reduce_op);
    w.pod(p.prescale); w.pod(p.postscale); w.pod(p.root); w.pod(p.device); w.vec(p.sizes);
    w.vec(p.joined); w.str(p.group); w.str(p.error); w.pod(p.last_joined);
    w.pod(p.error_kind);
  }
  return w.out;
}

std::vector<Response> decode_responses(const std::string& bytes) {
  Reader r(bytes);
  std::vector<Response> v;
  while (!r.done()) {
    Response p;
    p.name = r.str(); p.op = r.pod<OpType>(); p.dtype = r.pod<DataType>();
    p.shape = r.vec<int64_t>(); p.reduce_op = r.pod<ReduceOp>(); p.prescale = r.pod<double>();
    p.postscale = r.pod<double>(); p.root = r.pod<int32_t>(); p.device = r.pod<int32_t>();
    p.sizes = r.vec<int64_t>(); p.joined = r.vec<int32_t>(); p.group = r.str();
    p.error = r.str(); p.last_joined = r.pod<int32_t>();
    p.error_kind = r.pod<int32_t>();
    v.push_back(std::move(p));
  }
  return v;
}

}  // namespace hvdl
