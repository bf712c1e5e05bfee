// XLA FFI handler through which jitted JAX code runs horovodlite collectives: XLA
// hands us its own input and output buffers and we enqueue them in the engine by
// pointer, so a jitted step reaches the core with no Python and no staging copy.
// Written against our own declaration of the stable FFI C ABI (xla_ffi_abi.h), so
// nothing here is compiled against jax or jaxlib.
//
// One target serves every collective. Attributes (set at trace time by
// horovodlite/jax/_primitive.py): op, name, reduce_op, prescale, postscale, root,
// process_set, grouped, splits. Operands and results pair up one to one; a
// call with several operands is one group, negotiated and fused together.
//
// Two completion modes. Blocking: the handler waits for the engine and returns.
// Asynchronous (FFI >= 0.3, the default where available): the handler returns an
// XLA future at once and a completion thread fulfils it, so XLA's threads are free to
// run independent work while the collective is on the wire. The order of collectives
// is not this file's business: horovodlite/jax threads an ordering token through
// them, so every rank issues them in the order they were traced.
#include "jax_ffi.h"

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <atomic>
#include "../engine/engine.h"
#include "xla_ffi_abi.h"

namespace hvdl {
namespace {

using namespace xffi;

// Function indices in XLA_FFI_Api from minor version 3 on (checked at run time).
constexpr int kMinorAsync = 3;
constexpr int kFnFutureCreate = 13, kFnFutureSetAvailable = 14, kFnFutureSetError = 15;

Error* make_error(const Api* api, ErrorCode code, const std::string& msg) {
  ErrorCreateArgs a{};
  a.struct_size = sizeof(ErrorCreateArgs);
  a.message = msg.c_str();
  a.errc = code;
  return api->error_create(&a);
}

bool to_dtype(xffi::DataType x, hvdl::DataType* out) {
  switch (x) {
    case kPred: *out = hvdl::DataType::BOOL; return true;
    case kS8: *out = hvdl::DataType::INT8; return true;
    case kU8: *out = hvdl::DataType::UINT8; return true;
    case kS16: *out = hvdl::DataType::INT16; return true;
    case kU16: *out = hvdl::DataType::UINT16; return true;
    case kS32: *out = hvdl::DataType::INT32; return true;
    case kS64: *out = hvdl::DataType::INT64; return true;
    case kF16: *out = hvdl::DataType::FLOAT16; return true;
    case kBF16: *out = hvdl::DataType::BFLOAT16; return true;
    case kF32: *out = hvdl::DataType::FLOAT32; return true;
    case kF64: *out = hvdl::DataType::FLOAT64; return true;
    default: return false;
  }
}

struct CallAttrs {
  int op = 0;
  std::string name;
  int reduce_op = 1;
  double prescale = 1.0, postscale = 1.0;
  int root = -1;
  int process_set = 0;
  bool grouped = false;
  std::vector<int64_t> splits;
};

bool scalar_int(const Scalar* s, int64_t* v) {
  switch (s->dtype) {
    case kS8: *v = *static_cast<int8_t*>(s->value); return true;
    case kS16: *v = *static_cast<int16_t*>(s->value); return true;
    case kS32: *v = *static_cast<int32_t*>(s->value); return true;
    case kS64: *v = *static_cast<int64_t*>(s->value); return true;
    case kU8: *v = *static_cast<uint8_t*>(s->value); return true;
    case kU32: *v = *static_cast<uint32_t*>(s->value); return true;
    case kPred: *v = *static_cast<bool*>(s->value); return true;
    default: return false;
  }
}

bool scalar_float(const Scalar* s, double* v) {
  if (s->dtype == kF64) { *v = *static_cast<double*>(s->value); return true; }
  if (s->dtype == kF32) { *v = *static_cast<float*>(s->value); return true; }
  int64_t i;
  if (scalar_int(s, &i)) { *v = static_cast<double>(i); return true; }
  return false;
}

// Returns an empty string on success, else what was wrong.
std::string parse_attrs(const Attrs& attrs, CallAttrs* out) {
  for (int64_t i = 0; i < attrs.size; ++i) {
    std::string key(attrs.names[i]->ptr, attrs.names[i]->len);
    AttrType t = attrs.types[i];
    void* v = attrs.attrs[i];
    if (t == kAttrString) {
      auto* s = static_cast<ByteSpan*>(v);
      if (key == "name") out->name.assign(s->ptr, s->len);
      continue;
    }
    if (t == kAttrArray) {
      auto* a = static_cast<Array*>(v);
      if (key != "splits") continue;
      if (a->dtype != kS64) return "attribute splits must be int64";
      auto* p = static_cast<int64_t*>(a->data);
      out->splits.assign(p, p + a->size);
      continue;
    }
    if (t != kAttrScalar) continue;
    auto* s = static_cast<Scalar*>(v);
    int64_t iv = 0;
    double fv = 0;
    if (key == "prescale" || key == "postscale") {
      if (!scalar_float(s, &fv)) return "attribute " + key + " must be a number";
      (key == "prescale" ? out->prescale : out->postscale) = fv;
      continue;
    }
    if (!scalar_int(s, &iv)) return "attribute " + key + " must be an integer";
    if (key == "op") out->op = static_cast<int>(iv);
    else if (key == "reduce_op") out->reduce_op = static_cast<int>(iv);
    else if (key == "root") out->root = static_cast<int>(iv);
    else if (key == "process_set") out->process_set = static_cast<int>(iv);
    else if (key == "grouped") out->grouped = iv != 0;
  }
  if (out->name.empty()) return "missing attribute name";
  return {};
}

size_t buffer_bytes(const xffi::Buffer* b, hvdl::DataType dt) {
  size_t n = dtype_size(dt);
  for (int64_t d = 0; d < b->rank; ++d) n *= static_cast<size_t>(b->dims[d]);
  return n;
}

// One FFI call in flight: its engine handles and where engine-owned outputs go.
struct Pending {
  std::vector<int64_t> handles;
  std::vector<xffi::Buffer*> rets;  // parallel to handles
  std::vector<hvdl::DataType> dtypes;
  std::string name;
  const Api* api = nullptr;
  Future* future = nullptr;
};

// Waits for every member, copies engine-allocated outputs into XLA's buffers and
// releases the handles. Returns an empty string or the first failure's message.
std::string finish(Pending& p) {
  Engine& eng = Engine::get();
  std::string err;
  for (size_t i = 0; i < p.handles.size(); ++i) {
    int64_t h = p.handles[i];
    std::shared_ptr<HandleState> st;
    try {
      st = eng.handle(h);
      eng.wait(*st);
    } catch (const std::exception& e) {
      if (err.empty()) err = e.what();
      continue;
    }
    if (!st->status.is_ok()) {
      if (err.empty()) err = st->status.message();
    } else if (st->out) {
      size_t have = tensor_bytes(st->out_shape, st->out_dtype);
      size_t want = buffer_bytes(p.rets[i], p.dtypes[i]);
      if (have != want) {
        if (err.empty())
          err = "horovodlite: collective '" + p.name + "' produced " + std::to_string(have) +
                " bytes (shape " + shape_str(st->out_shape) + ") but the jitted program expected " +
                std::to_string(want) +
                "; under jax.jit output shapes are fixed at trace time (allgather needs equal "
                "first dimensions on every rank, alltoall equal splits)";
      } else if (have) {
        std::memcpy(p.rets[i]->data, st->out.get(), have);
      }
    }
    eng.release(h);
  }
  return err;
}

// Fulfils XLA futures in the order their calls were made.
class Completer {
 public:
  // Process-wide: XLA calls the handlers from its threads with no engine handle.
  static Completer& get() {
    static Completer* c = new Completer();  // never destroyed: XLA may call late
    return *c;
  }
  void push(Pending p) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!started_) {
        std::thread([this] { loop(); }).detach();
        started_ = true;
      }
      q_.push_back(std::move(p));
    }
    cv_.notify_one();
  }

 private:
  void loop() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return !q_.empty(); });
        p = std::move(q_.front());
        q_.pop_front();
      }
      std::string err = finish(p);
      auto set_available = reinterpret_cast<FutureSetAvailableFn>(api_fn(p.api, kFnFutureSetAvailable));
      auto set_error = reinterpret_cast<FutureSetErrorFn>(api_fn(p.api, kFnFutureSetError));
      if (err.empty()) {
        FutureSetAvailableArgs a{sizeof(FutureSetAvailableArgs), nullptr, p.future};
        set_available(&a);
      } else {
        FutureSetErrorArgs a{sizeof(FutureSetErrorArgs), nullptr, p.future,
                             make_error(p.api, kAborted, err)};
        set_error(&a);
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> q_;
  bool started_ = false;
};

// Process-wide: XLA calls the handler from its own threads, with no engine handle.
std::atomic<bool> g_async{true};

bool async_enabled(const Api* api) {
  return g_async.load(std::memory_order_relaxed) && api->api_version.major_version == kApiMajor &&
         api->api_version.minor_version >= kMinorAsync;
}

Error* answer_metadata(CallFrame* f) {
  auto* ext = reinterpret_cast<MetadataExtension*>(f->extension_start);
  if (!ext->metadata) return nullptr;
  Metadata* m = ext->metadata;
  m->api_version.struct_size = sizeof(ApiVersion);
  m->api_version.extension_start = nullptr;
  m->api_version.major_version = kApiMajor;
  m->api_version.minor_version = kApiMinorBlocking;
  m->traits = 0;  // not safe to capture into command buffers: it talks to other ranks
  return nullptr;
}

Error* handle_call(CallFrame* f) {
  const Api* api = f->api;
  if (f->extension_start && f->extension_start->type == kExtensionMetadata) return answer_metadata(f);
  if (f->stage != kExecute) return nullptr;

  CallAttrs at;
  std::string bad = parse_attrs(f->attrs, &at);
  if (!bad.empty()) return make_error(api, kInvalidArgument, "horovodlite jax collective: " + bad);

  // Tokens (ordering operands XLA may thread through) carry no data: skip them.
  std::vector<xffi::Buffer*> ins, outs;
  for (int64_t i = 0; i < f->args.size; ++i) {
    auto* b = static_cast<xffi::Buffer*>(f->args.args[i]);
    if (b->dtype != kToken) ins.push_back(b);
  }
  for (int64_t i = 0; i < f->rets.size; ++i) {
    auto* b = static_cast<xffi::Buffer*>(f->rets.rets[i]);
    if (b->dtype != kToken) outs.push_back(b);
  }
  if (ins.size() != outs.size())
    return make_error(api, kInvalidArgument, "horovodlite jax collective '" + at.name +
                      "': operands and results do not pair up");

  const OpType op = static_cast<OpType>(at.op);
  // These ops size their output after negotiation and allocate it themselves; we copy
  // it into XLA's buffer (whose size was fixed at trace time) when it is done.
  const bool engine_out =
      op == OpType::ALLGATHER || op == OpType::ALLTOALL || op == OpType::REDUCESCATTER;
  Pending p;
  p.name = at.name;
  p.api = api;
  Engine& eng = Engine::get();
  for (size_t i = 0; i < ins.size(); ++i) {
    EnqueueArgs a;
    a.process_set = at.process_set;
    if (!to_dtype(ins[i]->dtype, &a.req.dtype))
      return make_error(api, kInvalidArgument, "horovodlite: unsupported XLA element type " +
                        std::to_string(ins[i]->dtype) + " for collective '" + at.name + "'");
    a.req.name = at.grouped ? at.name + "." + std::to_string(i) : at.name;
    a.req.op = op;
    a.req.shape.assign(ins[i]->dims, ins[i]->dims + ins[i]->rank);
    a.req.reduce_op = static_cast<ReduceOp>(at.reduce_op);
    a.req.prescale = at.prescale;
    a.req.postscale = at.postscale;
    a.req.root = at.root;
    a.req.splits = at.splits;
    if (at.grouped) {
      a.req.group = at.name;
      a.req.group_size = static_cast<int32_t>(ins.size());
    }
    a.input = ins[i]->data;
    a.output = engine_out ? nullptr : outs[i]->data;
    const hvdl::DataType dt = a.req.dtype;
    try {
      p.handles.push_back(eng.enqueue(std::move(a)));
    } catch (const std::exception& e) {
      // Members already enqueued stay with the engine, which owns their failure.
      return make_error(api, kInvalidArgument, e.what());
    }
    p.rets.push_back(outs[i]);
    p.dtypes.push_back(dt);
  }

  if (async_enabled(api)) {
    auto create = reinterpret_cast<FutureCreateFn>(api_fn(api, kFnFutureCreate));
    FutureCreateArgs ca{sizeof(FutureCreateArgs), nullptr, nullptr};
    if (Error* e = create(&ca)) return e;
    p.future = ca.future;
    f->future = ca.future;
    Completer::get().push(std::move(p));
    return nullptr;
  }
  std::string err = finish(p);
  if (!err.empty()) return make_error(api, kAborted, err);
  return nullptr;
}

Error* handler_entry(CallFrame* f) {
  try {
    return handle_call(f);
  } catch (const std::exception& e) {  // never let an exception cross into XLA
    return make_error(f->api, kInternal, std::string("horovodlite jax collective: ") + e.what());
  }
}

}  // namespace

void* jax_ffi_handler() { return reinterpret_cast<void*>(&handler_entry); }

void set_jax_ffi_async(bool on) { g_async = on; }
bool jax_ffi_async() { return g_async.load(); }

}  // namespace hvdl
