#include "nccl_library.h"

#include <dlfcn.h>

#include <mutex>


namespace hvdl {
namespace {

// Process-wide, not the engine's: so is what it holds. dlopen maps a library once per
// process, and a usable one is never closed (NCCL's own threads may still run when an
// engine shuts down), so a loader per engine could only give the same answer; and
// hvd.nccl_built() asks it with no engine (before hvd.init(), after shutdown()).
std::mutex g_mu;
std::string g_path;       // set_nccl_library_path
bool g_loaded = false;    // attempted
const NcclApi* g_api = nullptr;
std::string g_why;

template <class Fn>
bool bind(void* lib, const char* symbol, Fn& fn, std::string& why) {
  fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (!fn) why = std::string("symbol ") + symbol + " not found";
  return fn != nullptr;
}

const NcclApi* load(std::string& why) {
  std::string path = g_path.empty() ? std::string("libnccl.so.2") : g_path;
  // RTLD_LOCAL: NCCL's symbols must not interpose on a framework's own NCCL copy.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* e = dlerror();
    why = "cannot load " + path + ": " + (e ? e : "unknown error") +
          " (pip install nvidia-nccl-cu13, or nvidia-nccl-cu12 for CUDA 12)";
    return nullptr;
  }
  auto* api = new NcclApi();  // lives as long as the process, like the library
  api->path = path;
  bool ok = bind(lib, "ncclGetVersion", api->get_version, why) &&
            bind(lib, "ncclGetErrorString", api->get_error_string, why) &&
            bind(lib, "ncclGetUniqueId", api->get_unique_id, why) &&
            bind(lib, "ncclCommInitRank", api->comm_init_rank, why) &&
            bind(lib, "ncclCommDestroy", api->comm_destroy, why) &&
            bind(lib, "ncclCommAbort", api->comm_abort, why) &&
            bind(lib, "ncclAllReduce", api->all_reduce, why) &&
            bind(lib, "ncclBroadcast", api->broadcast, why) &&
            bind(lib, "ncclReduceScatter", api->reduce_scatter, why) &&
            bind(lib, "ncclAllGather", api->all_gather, why) &&
            bind(lib, "ncclSend", api->send, why) &&
            bind(lib, "ncclRecv", api->recv, why) &&
            bind(lib, "ncclGroupStart", api->group_start, why) &&
            bind(lib, "ncclGroupEnd", api->group_end, why);
  // ncclSend/Recv and bfloat16 arrived in 2.7 and 2.10; older builds are not worth a
  // second code path.
  if (ok && (api->get_version(&api->version) != 0 || api->version < 21000)) {
    why = path + " is NCCL " + std::to_string(api->version) + "; horovodlite needs 2.10 or newer";
    ok = false;
  }
  if (!ok) {
    why = "NCCL at " + path + ": " + why;
    delete api;
    dlclose(lib);
    return nullptr;
  }
  return api;
}

}  // namespace

void set_nccl_library_path(const std::string& path) {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_loaded) g_path = path;
}

const NcclApi* nccl_api(std::string* why) {
  std::lock_guard<std::mutex> l(g_mu);
  if (!g_loaded) {
    g_loaded = true;
    g_api = load(g_why);
  }
  if (why) *why = g_why;
  return g_api;
}

}  // namespace hvdl
