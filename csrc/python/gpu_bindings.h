// GPU and NCCL entry points of the extension (gpu_bindings.cc).
#pragma once
#include <pybind11/pybind11.h>

namespace hvdl {
void register_gpu_bindings(pybind11::module_& m);
}  // namespace hvdl
