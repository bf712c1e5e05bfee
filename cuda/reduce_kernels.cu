// reduce_into / reduce_scale_into: dst = dst op src, optionally scaled in the same pass
// so the last step of an averaging allreduce costs no extra trip through memory.
#include <stdexcept>
#include <string>
#include "gpu_kernels.h"
#include "internal/element_types.cuh"
#include "internal/elementwise.cuh"

namespace hvdl::gpu {
namespace {

using detail::Factor;

// `scaled` is a kernel argument rather than a template parameter: the branch is
// uniform and free next to the memory traffic, and it halves the instantiations.
template <typename T, typename Op> struct ReduceFn {
  Factor k;
  bool scaled;
  __device__ T operator()(T a, T b) const {
    // Rounded to T before scaling: the fused result must equal reduce-then-scale.
    const T r = detail::combine<Op>(a, b);
    return scaled ? detail::scale_elem(r, k) : r;
  }
};

void reduce_impl(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op,
                 bool scaled, double factor, void* stream, const char* who) {
  if (count == 0) return;
  if (dst == nullptr || src == nullptr)
    throw std::invalid_argument(std::string("hvdl::gpu::") + who + ": null pointer");
  const Factor k{static_cast<float>(factor), factor};
  detail::dispatch_dtype(dtype, who, [&](auto tag) {
    using T = decltype(tag);
    auto run = [&](auto op_tag) {
      using Op = decltype(op_tag);
      detail::launch_elementwise<T, true, true>(dst, src, count, ReduceFn<T, Op>{k, scaled},
                                                stream, who);
    };
    switch (op) {
      case ReduceOp::SUM:
      case ReduceOp::AVERAGE: run(detail::OpSum{}); return;
      case ReduceOp::PRODUCT: run(detail::OpProd{}); return;
      case ReduceOp::MIN: run(detail::OpMin{}); return;
      case ReduceOp::MAX: run(detail::OpMax{}); return;
      default: break;
    }
    throw std::invalid_argument(std::string("hvdl::gpu::") + who + ": unsupported op " +
                                reduce_op_name(op));
  });
}

}  // namespace

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op,
                 void* stream) {
  reduce_impl(dst, src, count, dtype, op, false, 1.0, stream, "reduce_into");
}

void reduce_scale_into(void* dst, const void* src, size_t count, DataType dtype,
                       ReduceOp op, double factor, void* stream) {
  // scale() treats factor == 1 as a no-op, so the fused form must too: the int64 round
  // trip through double would not be exact.
  reduce_impl(dst, src, count, dtype, op, factor != 1.0, factor, stream,
              "reduce_scale_into");
}

}  // namespace hvdl::gpu
