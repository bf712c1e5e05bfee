// NCCL, loaded with dlopen the first time it is needed, so neither building nor importing
// horovodlite requires it (pip's nvidia-nccl-cu12/-cu13 wheels provide libnccl.so.2).
// Only the handful of entry points we call are declared, with the C ABI NCCL documents:
// enums are ints, the unique id is a 128-byte struct passed by value, a stream is a
// cudaStream_t (void* here).
#pragma once
#include <cstddef>
#include <string>

namespace hvdl {

struct NcclUniqueId {
  char internal[128];
};
using NcclComm = void*;
using NcclResult = int;  // 0 = ncclSuccess

// NCCL's ncclDataType_t and ncclRedOp_t values.
enum NcclType : int { kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclInt64 = 4,
                      kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9 };
enum NcclOp : int { kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3 };

struct NcclApi {
  int version = 0;  // e.g. 22304 for 2.23.4
  std::string path;
  NcclResult (*get_version)(int*);
  const char* (*get_error_string)(NcclResult);
  NcclResult (*get_unique_id)(NcclUniqueId*);
  NcclResult (*comm_init_rank)(NcclComm*, int nranks, NcclUniqueId id, int rank);
  NcclResult (*comm_destroy)(NcclComm);
  // Ends the communicator's kernels and calls at once (a peer was lost); no call may
  // use the communicator afterwards, not even comm_destroy.
  NcclResult (*comm_abort)(NcclComm);
  NcclResult (*all_reduce)(const void*, void*, size_t, int type, int op, NcclComm, void* stream);
  NcclResult (*broadcast)(const void*, void*, size_t, int type, int root, NcclComm, void* stream);
  NcclResult (*reduce_scatter)(const void*, void*, size_t recvcount, int type, int op, NcclComm,
                               void* stream);
  NcclResult (*all_gather)(const void*, void*, size_t sendcount, int type, NcclComm, void* stream);
  NcclResult (*send)(const void*, size_t, int type, int peer, NcclComm, void* stream);
  NcclResult (*recv)(void*, size_t, int type, int peer, NcclComm, void* stream);
  NcclResult (*group_start)();
  NcclResult (*group_end)();
};

// Where to find the library, tried before HOROVODLITE_NCCL_LIBRARY and the dynamic
// linker's search for libnccl.so.2. The Python layer passes the pip wheel's copy.
// Has no effect once NCCL was loaded.
void set_nccl_library_path(const std::string& path);

// The loaded library, or nullptr with *why saying what failed. Loads at most once per
// process (thread-safe); the answer never changes afterwards.
const NcclApi* nccl_api(std::string* why = nullptr);

}  // namespace hvdl
