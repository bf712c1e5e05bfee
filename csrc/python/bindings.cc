// The only file that knows Python. Tensors arrive as raw pointers plus dtype and
// shape, so no framework is compiled in: the Python layer turns numpy arrays, torch
// tensors, tf tensors or jax arrays into pointers and keeps them alive until done.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>
#include <stdexcept>
#include <utility>

#include "../engine/engine.h"
#include "../engine/message.h"
#include "../collectives/shm_allreduce.h"
#include "../engine/output_pool.h"
#include "../transport/peer_health.h"
#include "../transport/shared_arena.h"
#include "../reduce/identity.h"
#include "../reduce/reduce.h"
#include "jax_ffi.h"
#include "gpu_bindings.h"

namespace py = pybind11;
using namespace hvdl;

namespace {

struct InternalError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }

// An array numpy cannot describe in a buffer (bfloat16): its address, and its shape
// if `shape` is given, from __array_interface__.
void* array_interface(py::handle h, std::vector<int64_t>* shape) {
  py::dict ai = h.attr("__array_interface__");
  if (shape) {
    if (!ai["strides"].is_none())
      throw std::invalid_argument("horovodlite: the array must be C-contiguous");
    *shape = ai["shape"].cast<std::vector<int64_t>>();
  }
  return as_ptr(ai["data"].cast<py::tuple>()[0].cast<uintptr_t>());
}

// A tensor's address: an int (torch data_ptr, DLPack, ...), or a contiguous numpy
// array itself, read through the buffer protocol (a tenth of `a.ctypes.data`'s
// microsecond).
void* address_of(py::handle h) {
  if (PyLong_Check(h.ptr())) return as_ptr(h.cast<uintptr_t>());
  Py_buffer view;
  if (PyObject_GetBuffer(h.ptr(), &view, PyBUF_SIMPLE) == 0) {
    void* p = view.buf;
    PyBuffer_Release(&view);
    return p;
  }
  PyErr_Clear();
  return array_interface(h, nullptr);
}

// Enqueues; a closed queue (shut down, or a lost peer) is a HorovodInternalError.
// submit_held: for a caller that waits at once (wait_held), no handle id.
std::shared_ptr<HandleState> submit_held(EnqueueArgs a) {
  try {
    return Engine::get().submit(std::move(a));
  } catch (const QueueClosed& e) {
    throw InternalError(e.what());
  }
}

int64_t submit(EnqueueArgs a) { return Engine::get().track(submit_held(std::move(a))); }

// The request fields every collective has. GPU tensors come with the producer's
// cudaStream_t as an int (0 = legacy default stream); None = the tensor is ready now.
EnqueueArgs request(OpType op, const std::string& name, int dtype, int reduce_op, double prescale,
                    double postscale, int device, const std::string& group, int group_size,
                    int process_set, py::handle stream) {
  EnqueueArgs a;
  a.process_set = process_set;
  a.req.name = name;
  a.req.op = op;
  if (!dtype_is_valid(dtype) || reduce_op < 0 || reduce_op >= kNumReduceOps)
    throw std::invalid_argument("horovodlite: " + name + ": unknown dtype code " +
                                std::to_string(dtype) + " or reduce op code " +
                                std::to_string(reduce_op));
  a.req.dtype = static_cast<DataType>(dtype);
  a.req.reduce_op = static_cast<ReduceOp>(reduce_op);
  a.req.prescale = prescale;
  a.req.postscale = postscale;
  a.req.device = device;
  a.req.group = group;
  a.req.group_size = group_size;
  if (!stream.is_none()) {
    a.has_stream = true;
    a.stream = as_ptr(stream.cast<uintptr_t>());
  }
  return a;
}

// The allreduce of every training step, with only its own arguments: pybind11's
// dispatch costs per argument, and a step submits a hundred or more of these. Without
// `shape`, `in` is a numpy array whose shape comes with its address through the buffer
// protocol; with it, `in` and `out` may be addresses (torch). `device`/`stream` as in
// enqueue.
EnqueueArgs allreduce_request(const std::string& name, py::handle in, py::handle out, int dtype,
                              int reduce_op, double prescale, double postscale,
                              const std::string& group, int group_size, int process_set,
                              py::handle shape, int device, py::handle stream, bool caller_waits) {
  EnqueueArgs a = request(OpType::ALLREDUCE, name, dtype, reduce_op, prescale, postscale, device,
                          group, group_size, process_set, stream);
  Py_buffer view;
  if (!shape.is_none()) {
    a.input = address_of(in);
    a.req.shape = shape.cast<std::vector<int64_t>>();
  } else if (PyObject_GetBuffer(in.ptr(), &view, PyBUF_ND) == 0) {
    a.input = view.buf;
    a.req.shape.assign(view.shape, view.shape + view.ndim);
    PyBuffer_Release(&view);
  } else {
    PyErr_Clear();
    a.input = array_interface(in, &a.req.shape);
  }
  a.output = in.is(out) ? const_cast<void*>(a.input) : address_of(out);
  a.caller_waits = caller_waits;
  return a;
}

int64_t enqueue_allreduce(const std::string& name, py::handle in, py::handle out, int dtype,
                          int reduce_op, double prescale, double postscale,
                          const std::string& group, int group_size, int process_set,
                          py::handle shape, int device, py::handle stream, bool caller_waits,
                          bool held) {
  EnqueueArgs a = allreduce_request(name, in, out, dtype, reduce_op, prescale, postscale, group,
                                    group_size, process_set, shape, device, stream, caller_waits);
  a.held = held;
  return submit(std::move(a));
}

// The handle a Python signal's exception (Ctrl-C, an alarm) left pending during this
// thread's last allreduce_now or allreduce_small, or -1: the peers still run it, so the
// caller keeps its arrays alive until it is done (handles.py). allreduce_small's output,
// made here, is held for the caller in t_interrupted_output (a new reference, taken
// with the handle by take_interrupted()).
thread_local int64_t t_interrupted = -1;
thread_local PyObject* t_interrupted_output = nullptr;
void wait_held(const std::shared_ptr<HandleState>& st);

// A blocking allreduce of host arrays in one call: submitted as a caller that waits
// (which may run the round itself: Worker::help), then waited for, holding the state
// without a handle id as allreduce_small does. The crossings it saves (a handle tracked,
// looked up and dropped in Python) were ~1.4 us of a 4 KiB call's ~6.
void allreduce_now(const std::string& name, py::handle in, py::handle out, int dtype,
                   int reduce_op, double prescale, double postscale, int process_set) {
  static const std::string no_group;
  wait_held(submit_held(allreduce_request(name, in, out, dtype, reduce_op, prescale, postscale,
                                          no_group, 0, process_set, py::none(), -1, py::none(),
                                          true)));
}

// ---- hvd.allreduce of a small plain array, whole in one call ----
//
// Unnamed collectives are numbered per (kind, process set) in call order, the same on
// every rank (handles.auto_name). The count lives here so that allreduce_small can name
// a call without going back to Python; every access holds the GIL.
std::map<std::pair<std::string, int>, int64_t> g_auto_counts;

std::string next_auto_name(const std::string& kind, int process_set) {
  return auto_name(kind, g_auto_counts[{kind, process_set}]++);
}

// numpy's dtype objects for the reducible dtypes and their codes (dtypes.py registers
// them, bfloat16 once ml_dtypes is loaded). An array of a builtin dtype points at the
// same object; one that does not (a byte-swapped dtype, ...) takes the general path.
// Raw references, kept for the life of the process (as g_value_error's below).
std::vector<std::pair<PyObject*, int>> g_plain_dtypes;

// Whether `bytes` at `p` lie in this process's shared arena (shared_arena.h).
bool lies_in_shared_arena(const void* p, size_t bytes) {
  const SharedArena* a = SharedArena::get_if_any();
  return a && a->offset_of(p, bytes) >= 0;
}

// A capsule that keeps `block` alive, as the base of an array over it.
py::capsule keep_alive(std::shared_ptr<void> block) {
  auto* keep = new std::shared_ptr<void>(std::move(block));
  return py::capsule(keep, [](void* p) { delete static_cast<std::shared_ptr<void>*>(p); });
}

// A blocking allreduce of a plain numpy array in one call (its entry point below has
// checked the other arguments: numbers, an op among Average..Product): check the array,
// name the call, make the output, submit as a caller that waits, and wait. Python's
// share of a 4 KiB call was ~1.5 of ~5.5 us. Returns None, having taken no name and done nothing, where
// the array is not a C-contiguous (and, in place, writeable) ndarray of a registered
// dtype, or, out of place, lies in the shared arena (its output is shared too, keeping
// the allreduce zero copy: ops._empty_like); the general path then runs the call. The
// output is made as ops._empty_like makes it: numpy's own up to kPooledFrom, else a
// block of the output pool (out of place 1 MiB on 2 ranks through the general path's
// Python took ~20 us more than in place, whose ~80-90 us call is all in here). A
// signal's exception while waiting leaves the output in t_interrupted_output (the
// caller keeps it and the input alive until the peers are done: handles.py).
// Both also rule ops._empty_like (exported as SHARED_FROM and POOLED_FROM).
constexpr size_t kSharedFrom = 64 << 10;  // the smallest zero-copy allreduce
constexpr size_t kPooledFrom = 1 << 20;

py::object allreduce_small(py::handle tensor, py::handle name, int reduce_op, double prescale,
                           double postscale, int process_set, bool in_place) {
  const auto& api = py::detail::npy_api::get();
  if (Py_TYPE(tensor.ptr()) != api.PyArray_Type_ || !Engine::get().initialized())
    return py::none();
  auto* proxy = py::detail::array_proxy(tensor.ptr());
  const int need = api.NPY_ARRAY_C_CONTIGUOUS_ | (in_place ? api.NPY_ARRAY_WRITEABLE_ : 0);
  if ((proxy->flags & need) != need) return py::none();
  int code = -1;
  for (auto& [descr, c] : g_plain_dtypes)
    if (descr == proxy->descr) { code = c; break; }
  if (code < 0) return py::none();
  const int nd = proxy->nd;
  size_t bytes = dtype_size(static_cast<DataType>(code));
  for (int i = 0; i < nd; ++i) bytes *= static_cast<size_t>(proxy->dimensions[i]);
  if (!in_place && bytes >= kSharedFrom && lies_in_shared_arena(proxy->data, bytes))
    return py::none();
  std::string n;
  if (name.is_none()) n = next_auto_name("allreduce", process_set);
  else if (PyUnicode_CheckExact(name.ptr())) n = name.cast<std::string>();
  else return py::none();
  // The output straight from numpy's constructor, and both addresses and the shape from
  // the arrays' own fields: py::array's constructor and the buffer protocol (what
  // allreduce_now takes) were ~0.3 us of a 4 KiB call.
  py::object out;
  if (in_place) {
    out = py::reinterpret_borrow<py::object>(tensor);
  } else {
    std::shared_ptr<void> block;
    if (bytes >= kPooledFrom) block = OutputPool::get().allocate(bytes);
    Py_INCREF(proxy->descr);  // stolen by the constructor
    out = py::reinterpret_steal<py::object>(api.PyArray_NewFromDescr_(
        api.PyArray_Type_, proxy->descr, nd, proxy->dimensions, nullptr, block.get(),
        block ? api.NPY_ARRAY_C_CONTIGUOUS_ | api.NPY_ARRAY_ALIGNED_ | api.NPY_ARRAY_WRITEABLE_ : 0,
        nullptr));
    if (!out) throw py::error_already_set();
    // The array's base keeps the block (stolen, also on failure).
    if (block && api.PyArray_SetBaseObject_(out.ptr(), keep_alive(std::move(block)).release().ptr()) < 0)
      throw py::error_already_set();
  }
  static const std::string no_group;
  EnqueueArgs a = request(OpType::ALLREDUCE, n, code, reduce_op, prescale, postscale, -1,
                          no_group, 0, process_set, py::none());
  a.req.shape.assign(proxy->dimensions, proxy->dimensions + nd);
  a.input = proxy->data;
  a.output = py::detail::array_proxy(out.ptr())->data;
  a.caller_waits = true;
  try {
    wait_held(submit_held(std::move(a)));
  } catch (...) {
    if (t_interrupted >= 0) {
      Py_XDECREF(t_interrupted_output);
      t_interrupted_output = out.inc_ref().ptr();
    }
    throw;
  }
  return out;
}

// ---- its entry point, without pybind11's dispatcher ----
//
// hvd.allreduce's plain case reaches the core through one Python frame
// (handles.allreduce_small), which passes the user's arguments as they came; the
// checks ops._plain_blocking made in Python (~0.25 us) and pybind11's argument loaders
// (~0.2 us) are done here on the raw objects, a vectorcall (METH_FASTCALL).
// Arguments: tensor, name, op (None: Average), prescale, postscale, process_set (an
// object with an int process_set_id), in_place. None, having done nothing, for
// anything not plain: an op other than None or an int among Average, Sum, Min, Max,
// Product; a scale factor that is not a float or int; a set without an int id.

bool plain_op(PyObject* op, int* code) {
  if (op == Py_None) {
    *code = static_cast<int>(ReduceOp::AVERAGE);
    return true;
  }
  if (!PyLong_CheckExact(op)) return false;
  const long v = PyLong_AsLong(op);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return false;
  }
  *code = static_cast<int>(v);
  return v >= 0 && v < kNumReduceOps && v != static_cast<long>(ReduceOp::ADASUM);
}

bool plain_number(PyObject* x, double* v) {
  if (PyFloat_CheckExact(x)) {
    *v = PyFloat_AS_DOUBLE(x);
    return true;
  }
  if (!PyLong_CheckExact(x)) return false;
  *v = PyLong_AsDouble(x);
  if (*v == -1.0 && PyErr_Occurred()) {  // too large for a double: the general path says so
    PyErr_Clear();
    return false;
  }
  return true;
}

bool plain_set(PyObject* process_set, int* id) {
  static PyObject* const attr = PyUnicode_InternFromString("process_set_id");
  PyObject* v = PyObject_GetAttr(process_set, attr);
  if (!v) {
    PyErr_Clear();
    return false;
  }
  const bool ok = PyLong_CheckExact(v);
  const long set = ok ? PyLong_AsLong(v) : -1;
  Py_DECREF(v);
  if (set == -1 && PyErr_Occurred()) PyErr_Clear();
  *id = static_cast<int>(set);
  return ok && set >= 0 && set <= INT32_MAX;
}

PyObject* allreduce_small_fast(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 7) {
    PyErr_SetString(PyExc_TypeError,
                    "allreduce_small(tensor, name, op, prescale, postscale, process_set, "
                    "in_place)");
    return nullptr;
  }
  int op = 0, set = 0;
  double prescale = 1.0, postscale = 1.0;
  if (!plain_op(args[2], &op) || !plain_number(args[3], &prescale) ||
      !plain_number(args[4], &postscale) || !plain_set(args[5], &set))
    Py_RETURN_NONE;
  try {
    return allreduce_small(args[0], args[1], op, prescale, postscale, set, args[6] == Py_True)
        .release()
        .ptr();
  } catch (...) {
    // As pybind11's dispatcher does (registered translators included); a detail
    // function of pybind11 3 (pyproject.toml asks for >= 3.0).
    py::detail::try_translate_exceptions();
    return nullptr;
  }
}

int64_t enqueue(int op, const std::string& name, py::handle in, py::handle out, int dtype,
                std::vector<int64_t> shape, int reduce_op, double prescale, double postscale,
                int root, int device, std::vector<int64_t> splits, const std::string& group,
                int group_size, int process_set, const std::string& error, py::object stream,
                bool caller_waits) {
  EnqueueArgs a = request(static_cast<OpType>(op), name, dtype, reduce_op, prescale, postscale,
                          device, group, group_size, process_set, stream);
  a.req.shape = std::move(shape);
  a.req.root = root;
  a.req.splits = std::move(splits);
  a.req.error = error;
  a.input = address_of(in);
  a.output = address_of(out);
  a.caller_waits = caller_waits;
  return submit(std::move(a));
}

// Python classes for errors in arguments wrong on their face: subclasses of both
// HorovodInternalError and ValueError / TypeError (set by horovodlite.basics).
// Raw references, kept for the life of the process (a py::object would be released
// after the interpreter is gone).
PyObject* g_value_error = nullptr;
PyObject* g_type_error = nullptr;

[[noreturn]] void raise_status(const Status& s) {
  PyObject* cls = s.code() == Status::INVALID_VALUE  ? g_value_error
                  : s.code() == Status::INVALID_TYPE ? g_type_error
                                                     : nullptr;
  if (!cls) throw InternalError(s.message());
  PyErr_SetString(cls, s.message().c_str());
  throw py::error_already_set();
}

// Waits for `st` without the GIL, taking it back every 100 ms to run Python's signal
// handlers: true once done; false where a signal's exception (a KeyboardInterrupt, an
// alarm's) is pending instead. That leaves the collective pending, so a later
// synchronize of the same handle can still complete it.
bool wait_or_signal(HandleState& st) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = Engine::get().wait(st, std::chrono::milliseconds(100));
    }
    if (done) return true;
    if (PyErr_CheckSignals() != 0) return false;
  }
}

// wait_or_signal for handle `h` (a signal's exception leaves it to its owner's next
// synchronize), then raises its error if it failed. `release` also drops the handle
// once it is done, whatever the outcome (one call for results that do not need the
// handle any more).
void wait(int64_t h, bool release) {
  auto st = Engine::get().handle(h);
  if (!wait_or_signal(*st)) throw py::error_already_set();
  if (release) Engine::get().release(h);
  if (!st->status.is_ok()) raise_status(st->status);
}

// wait() for a request without a handle id (submit_held): a signal's exception gives
// it one, noted in t_interrupted for the caller's orphan list (handles.py).
void wait_held(const std::shared_ptr<HandleState>& st) {
  if (!wait_or_signal(*st)) {
    t_interrupted = Engine::get().track(st);
    throw py::error_already_set();
  }
  if (!st->status.is_ok()) raise_status(st->status);
}

// A flat uint8 array over `block`, which it keeps alive.
py::object pooled_array(std::shared_ptr<void> block, size_t bytes) {
  auto* data = static_cast<uint8_t*>(block.get());
  return py::array_t<uint8_t>({static_cast<py::ssize_t>(bytes)}, {1}, data,
                              keep_alive(std::move(block)));
}

// Engine-owned output as a flat uint8 array that keeps the memory alive; the Python
// layer views it with the right dtype and shape (no copy).
py::object output(int64_t h) {
  auto st = Engine::get().handle(h);
  if (!st->out) return py::none();
  return pooled_array(st->out, tensor_bytes(st->out_shape, st->out_dtype));
}

}  // namespace

// The arena is made on first use, which may come before init(): then its size comes
// from the environment as init() would read it.
void size_arena_before_init() {
  if (!SharedArena::exists() && !Engine::get().initialized())
    SharedArena::reserve_bytes(
        static_cast<size_t>(Settings::from_env().integer(Setting::SHARED_ARENA_BYTES)));
}

PYBIND11_MODULE(_core, m) {
  m.doc() = "horovodlite core engine";
  static auto& internal = py::register_exception<InternalError>(m, "HorovodInternalError", PyExc_RuntimeError);
  // A lost peer is a HorovodInternalError wherever it surfaces, also outside a
  // collective (init or add_process_set meeting a rank that has left).
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const PeerFailure& e) {
      py::set_error(internal, e.what());
    }
  });

  // The one place the environment is read (common/settings.h); the Python layer reads
  // its own settings through read_settings() at init() too.
  m.def("init", [](long long comm, std::vector<int> ranks) {
    const Settings s = Settings::from_env();
    set_jax_ffi_async(s.flag(Setting::JAX_FFI_ASYNC));
    py::gil_scoped_release nogil;
    if (Engine::get().initialized()) return;  // making a world is collective: only once
    Engine::get().init(make_mpi_world(comm, ranks, s.str(Setting::HOSTNAME_OVERRIDE),
                                      s.real(Setting::START_TIMEOUT)),
                       s);
  }, py::arg("fortran_comm") = -1, py::arg("ranks") = std::vector<int>());
  m.def("engine_report", [](int ps) {
    py::gil_scoped_release nogil;
    return Engine::get().report(ps);
  }, py::arg("process_set") = 0);
  m.def("jax_ffi_async", [] { return jax_ffi_async(); });
  m.def("settings_table", [] {
    py::list out;
    for (const SettingSpec& s : setting_specs()) {
      py::dict d;
      d["name"] = s.name;
      d["type"] = setting_type_name(s.type);
      d["default"] = s.dflt;
      d["tunable"] = s.tunable;
      d["meaning"] = s.meaning;
      out.append(d);
    }
    return out;
  });
  // Every setting as the environment gives it now: name -> (value typed per the table,
  // whether it was set, the variable that set it).
  m.def("read_settings", [] {
    const Settings s = Settings::from_env();
    py::dict out;
    for (const SettingSpec& spec : setting_specs()) {
      py::object v;
      const bool numeric_default = spec.type != SettingType::STRING && std::string(spec.dflt) != "auto";
      if (spec.type == SettingType::STRING) v = py::str(s.str(spec.id));
      else if (!s.is_set(spec.id) && !numeric_default) v = py::none();
      else if (spec.type == SettingType::INT) v = py::int_(s.integer(spec.id));
      else if (spec.type == SettingType::BOOL) v = py::bool_(s.flag(spec.id));
      else v = py::float_(s.real(spec.id));
      out[spec.name] = py::make_tuple(v, s.is_set(spec.id), s.variable(spec.id));
    }
    return out;
  });
  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    Engine::get().shutdown();
  });
  m.def("is_initialized", [] { return Engine::get().initialized(); });
  // For elastic jobs, which start MPI from Python (transport/world.h).
  m.def("open_farewells", [] {
    const double limit_s = Settings::from_env().real(Setting::START_TIMEOUT);
    py::gil_scoped_release nogil;
    mpi_open_farewells(limit_s);
  });
  m.def("say_farewell", [] { mpi_say_farewell(); });
  m.def("may_finalize", [] { return mpi_may_finalize(); });
  m.def("topology", [] {
    const Topology& t = Engine::get().topology();
    py::dict d;
    d["rank"] = t.rank; d["size"] = t.size;
    d["local_rank"] = t.local_rank; d["local_size"] = t.local_size;
    d["cross_rank"] = t.cross_rank; d["cross_size"] = t.cross_size;
    d["homogeneous"] = t.homogeneous;
    return d;
  });
  m.def("mpi_threads_supported", [] { return Engine::get().threads_supported(); });
  m.def("mpi_built", [] { return hvdl::mpi_built(); });
  // The codes Python passes for dtypes, reduce ops and collectives, from the enums
  // themselves, so no frontend re-types a number.
  {
    py::dict dtypes, reducible, ops, kinds;
    for (int i = 0; i < kNumDataTypes; ++i) {
      const auto t = static_cast<DataType>(i);
      dtypes[dtype_name(t)] = i;
      if (dtype_is_reducible(t)) reducible[dtype_name(t)] = i;
    }
    for (int i = 0; i < kNumReduceOps; ++i) ops[reduce_op_name(static_cast<ReduceOp>(i))] = i;
    for (int i = 0; i < kNumOpTypes; ++i) kinds[op_type_name(static_cast<OpType>(i))] = i;
    m.attr("DTYPE_CODES") = dtypes;
    m.attr("REDUCIBLE_DTYPE_CODES") = reducible;
    m.attr("REDUCE_OP_CODES") = ops;
    m.attr("OP_TYPE_CODES") = kinds;
  }
#ifdef HOROVODLITE_HAVE_CUDA
  m.attr("CUDA_BUILT") = true;
#else
  m.attr("CUDA_BUILT") = false;
#endif

  m.def("enqueue", &enqueue, py::arg("op"), py::arg("name"), py::arg("input"), py::arg("output"),
        py::arg("dtype"), py::arg("shape"), py::arg("reduce_op") = 1, py::arg("prescale") = 1.0,
        py::arg("postscale") = 1.0, py::arg("root") = -1, py::arg("device") = -1,
        py::arg("splits") = std::vector<int64_t>(), py::arg("group") = "",
        py::arg("group_size") = 0, py::arg("process_set") = 0, py::arg("error") = "",
        py::arg("stream") = py::none(), py::arg("caller_waits") = false);
  m.def("enqueue_allreduce", &enqueue_allreduce, py::arg("name"), py::arg("input"),
        py::arg("output"), py::arg("dtype"), py::arg("reduce_op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("group"), py::arg("group_size"), py::arg("process_set"),
        py::arg("shape") = py::none(), py::arg("device") = -1, py::arg("stream") = py::none(),
        py::arg("caller_waits") = false, py::arg("held") = false);
  m.def("_set_error_classes", [](py::object value_error, py::object type_error) {
    Py_XDECREF(g_value_error);
    Py_XDECREF(g_type_error);
    g_value_error = value_error.inc_ref().ptr();
    g_type_error = type_error.inc_ref().ptr();
  });
  m.def("poll", [](int64_t h) { return Engine::get().handle(h)->poll(); });
  m.def("allreduce_now", &allreduce_now);
  {
    static PyMethodDef def = {"allreduce_small", reinterpret_cast<PyCFunction>(
                                  reinterpret_cast<void (*)()>(&allreduce_small_fast)),
                              METH_FASTCALL, "hvd.allreduce of a plain array (handles.py)"};
    PyObject* f = PyCFunction_New(&def, nullptr);
    if (!f) throw py::error_already_set();
    m.attr("allreduce_small") = py::reinterpret_steal<py::object>(f);
  }
  m.def("next_auto_name", &next_auto_name);
  m.def("reset_auto_counts", [] { g_auto_counts.clear(); });
  m.def("register_plain_dtype", [](py::object dtype, int code) {
    g_plain_dtypes.emplace_back(dtype.inc_ref().ptr(), code);
  });
  // (handle, allreduce_small's output or None), and both are forgotten here.
  m.def("take_interrupted", [] {
    py::object out = t_interrupted_output
                         ? py::reinterpret_steal<py::object>(std::exchange(t_interrupted_output, nullptr))
                         : py::none();
    return py::make_tuple(std::exchange(t_interrupted, int64_t(-1)), out);
  });
  m.def("wait", [](int64_t h) { wait(h, false); });
  m.def("wait_release", [](int64_t h) { wait(h, true); });
  m.def("release", [](int64_t h) { Engine::get().release(h); });
  m.def("output", &output);
  // Uninitialised bytes from the output pool: large results reuse warm pages.
  m.def("empty", [](size_t bytes) { return pooled_array(OutputPool::get().allocate(bytes), bytes); });
  m.def("output_shape", [](int64_t h) { return Engine::get().handle(h)->out_shape; });
  m.def("aux", [](int64_t h) { return Engine::get().handle(h)->aux; });
  m.attr("JOIN_NAME") = kJoinName;
  m.def("output_cache_bytes", [] { return OutputPool::get().cached_bytes(); });
  // Uninitialised bytes the other ranks of this host can map (shared_arena.h).
  m.def("shared_empty", [](size_t bytes) {
    size_arena_before_init();
    return pooled_array(SharedArena::get().allocate(bytes), bytes);
  });
  m.def("in_shared_arena", [](uintptr_t addr, size_t bytes) {
    size_arena_before_init();
    return lies_in_shared_arena(reinterpret_cast<const void*>(addr), bytes);
  });
  // The output sizes ops._empty_like goes by, which the plain entry's outputs follow.
  m.attr("SHARED_FROM") = kSharedFrom;
  m.attr("POOLED_FROM") = kPooledFrom;
  m.def("shared_arena_info", [] {
    py::dict d;
    size_arena_before_init();
    SharedArena* a = SharedArena::get_if_any();
    d["bytes_in_use"] = a ? a->bytes_in_use() : 0;
    d["capacity"] = a ? a->capacity() : 0;
    d["zero_copy_allreduces"] = ShmCollectives::zero_copy_count();
    return d;
  });

  m.def("add_process_set", [](std::vector<int> ranks) {
    py::gil_scoped_release nogil;
    return Engine::get().add_process_set(ranks);
  });
  m.def("remove_process_set", [](int id) {
    py::gil_scoped_release nogil;
    Engine::get().remove_process_set(id);
  });
  m.def("process_set_ranks", [](int id) { return Engine::get().process_set_ranks(id); });
  m.def("process_set_rank", [](int id) { return Engine::get().process_set_rank(id); });
  m.def("stats", [](int id) { return Engine::get().stats(id); }, py::arg("process_set") = 0);
  m.def("allreduce_algorithm", [](int id) { return Engine::get().allreduce_algorithm(id); },
        py::arg("process_set") = 0);

  // Operations: timeline and the knobs in effect (autotune changes them).
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    py::gil_scoped_release nogil;
    Engine::get().start_timeline(path, mark_cycles);
  }, py::arg("path"), py::arg("mark_cycles") = false);
  m.def("stop_timeline", [] {
    py::gil_scoped_release nogil;
    Engine::get().stop_timeline();
  });
  m.def("tunables", [](int id) {
    Tunables t = Engine::get().tunables(id);
    py::dict d;
    d["fusion_threshold"] = t.fusion_threshold;
    d["cycle_time_ms"] = t.cycle_time_ms;
    d["ring_segment_bytes"] = t.segment_bytes;
    d["autotune_final"] = static_cast<bool>(t.final);
    return d;
  }, py::arg("process_set") = 0);

  // Kernel entry points, exposed so tests can check them against numpy.
  m.def("reduce_into", [](uintptr_t dst, uintptr_t src, size_t n, int dt, int op) {
    reduce_into(as_ptr(dst), as_ptr(src), n, static_cast<DataType>(dt), static_cast<ReduceOp>(op));
  });
  m.def("scale_buffer", [](uintptr_t buf, size_t n, int dt, double f) {
    scale_buffer(as_ptr(buf), n, static_cast<DataType>(dt), f);
  });
  m.def("fill_identity", [](uintptr_t buf, size_t n, int dt, int op) {
    fill_identity(as_ptr(buf), n, static_cast<DataType>(dt), static_cast<ReduceOp>(op));
  });
  // XLA FFI handler for horovodlite.jax (registered from Python with jax.ffi).
  m.def("jax_ffi_handler", [] { return py::capsule(jax_ffi_handler(), static_cast<const char*>(nullptr)); });

  m.def("reduce_isa", [] { return std::string(reduce_isa()); });
  register_gpu_bindings(m);
}
