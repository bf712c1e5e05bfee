#include "../reduce/reduce.h"
#include "reducer.h"

namespace hvdl {
namespace {
class CpuReducer : public Reducer {
 public:
  void reduce(void* dst, const void* src, size_t count, DataType dt, ReduceOp op) const override {
    reduce_into(dst, src, count, dt, op);
  }
  void reduce_pair(void* dst, const void* a, const void* src, size_t count, DataType dt,
                   ReduceOp op) const override {
    hvdl::reduce_pair(dst, a, src, count, dt, op);
  }
  void scale(void* buf, size_t count, DataType dt, double factor) const override {
    if (factor != 1.0) scale_buffer(buf, count, dt, factor);
  }
};
}  // namespace

const Reducer& cpu_reducer() {
  static CpuReducer r;  // process-wide: stateless (the kernels are chosen once per process)
  return r;
}

}  // namespace hvdl
