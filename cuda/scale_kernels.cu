// scale: in-place multiply by a host factor (prescale / postscale of averaging).
#include <stdexcept>
#include "gpu_kernels.h"
#include "internal/element_types.cuh"
#include "internal/elementwise.cuh"

namespace hvdl::gpu {
namespace {

template <typename T> struct ScaleFn {
  detail::Factor k;
  __device__ T operator()(T a, T) const { return detail::scale_elem(a, k); }
};

}  // namespace

void scale(void* buf, size_t count, DataType dtype, double factor, void* stream) {
  if (count == 0 || factor == 1.0) return;
  if (buf == nullptr) throw std::invalid_argument("hvdl::gpu::scale: null pointer");
  const detail::Factor k{static_cast<float>(factor), factor};
  detail::dispatch_dtype(dtype, "scale", [&](auto tag) {
    using T = decltype(tag);
    detail::launch_elementwise<T, true, false>(buf, nullptr, count, ScaleFn<T>{k}, stream,
                                               "scale");
  });
}

}  // namespace hvdl::gpu
