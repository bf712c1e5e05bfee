// What the Python layer needs to hand GPU tensors over and to report capabilities
// truthfully; the kernels are exposed for tests and benchmarks. Works in every build:
// without CUDA the queries say no and the kernel entry points raise.
#include "gpu_bindings.h"

#include <stdexcept>
#include <utility>

#include "../engine/device.h"
#include "../transport/nccl_library.h"
#ifdef HOROVODLITE_HAVE_CUDA
#include "../../cuda/gpu_kernels.h"
#endif

namespace py = pybind11;

namespace hvdl {
namespace {

#ifdef HOROVODLITE_HAVE_CUDA
void* as_ptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
#else
[[noreturn]] void no_cuda() {
  throw std::runtime_error("horovodlite was built without CUDA (cuda_built() is False)");
}
#endif

}  // namespace

void register_gpu_bindings(py::module_& m) {
  m.def("gpu_available", [] { return gpu_runtime_available(); },
        "True when this build has CUDA and a driver and GPU are present.");
  m.def("set_nccl_library", [](const std::string& path) { set_nccl_library_path(path); });
  // (loadable, "NCCL 2.x.y at path" or why not); loads NCCL on first call.
  m.def("nccl_status", [] {
    std::string why;
    const NcclApi* api = nccl_api(&why);
    if (!api) return std::make_pair(false, why);
    const int v = api->version;
    return std::make_pair(true, "NCCL " + std::to_string(v / 10000) + "." +
                                    std::to_string(v / 100 % 100) + "." + std::to_string(v % 100) +
                                    " at " + api->path);
  });
  m.def("pointer_device", [](uintptr_t p) {
#ifdef HOROVODLITE_HAVE_CUDA
    return gpu_runtime_available() ? gpu::pointer_device(as_ptr(p)) : -1;
#else
    (void)p;
    return -1;
#endif
  }, "CUDA device owning the address, -1 for host memory.");
  m.def("gpu_reduce_into", [](uintptr_t dst, uintptr_t src, size_t n, int dt, int op,
                              uintptr_t stream, double factor) {
#ifdef HOROVODLITE_HAVE_CUDA
    gpu::reduce_scale_into(as_ptr(dst), as_ptr(src), n, static_cast<DataType>(dt),
                           static_cast<ReduceOp>(op), factor, as_ptr(stream));
#else
    (void)dst, (void)src, (void)n, (void)dt, (void)op, (void)stream, (void)factor;
    no_cuda();
#endif
  }, py::arg("dst"), py::arg("src"), py::arg("count"), py::arg("dtype"), py::arg("op"),
     py::arg("stream") = 0, py::arg("factor") = 1.0,
     "dst = (dst op src) * factor on the GPU, queued on `stream` (the engine's kernel).");
}

}  // namespace hvdl
