// Error reporting shared by the .cu files. Internal: only nvcc-compiled code includes it.
#pragma once
#include <cuda_runtime_api.h>
#include <cstring>
#include <stdexcept>
#include <string>

namespace hvdl::gpu::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t err, const std::string& call,
                                          const char* file, int line) {
  // Build trees put absolute paths in __FILE__; the file name is enough to find it.
  const char* slash = std::strrchr(file, '/');
  throw std::runtime_error(std::string("hvdl::gpu: ") + call + " failed at " +
                           (slash ? slash + 1 : file) + ":" + std::to_string(line) +
                           ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

}  // namespace hvdl::gpu::detail

#define HVDL_CUDA_CHECK(call)                                                     \
  do {                                                                            \
    const cudaError_t hvdl_err_ = (call);                                         \
    if (hvdl_err_ != cudaSuccess)                                                 \
      ::hvdl::gpu::detail::throw_cuda_error(hvdl_err_, #call, __FILE__, __LINE__); \
  } while (0)

// A bad launch configuration is only reported through cudaGetLastError; `what` names
// the public entry point so the message says which kernel failed to launch.
#define HVDL_CUDA_CHECK_LAUNCH(what)                                              \
  do {                                                                            \
    const cudaError_t hvdl_err_ = cudaGetLastError();                             \
    if (hvdl_err_ != cudaSuccess)                                                 \
      ::hvdl::gpu::detail::throw_cuda_error(                                      \
          hvdl_err_, std::string("kernel launch in ") + (what), __FILE__, __LINE__); \
  } while (0)
