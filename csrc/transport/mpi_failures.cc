#include "mpi_failures.h"

#include <mpi-ext.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <mutex>
#include <stdexcept>

#include "../common/logging.h"
#include "peer_health.h"

namespace hvdl {
namespace mpi_failures {

namespace {
std::mutex mu;
MPI_Group world_group = MPI_GROUP_NULL;
MPI_Comm world_comm = MPI_COMM_NULL;
std::vector<MPI_Comm> owned;  // revoked at the first failure (under ULFM)
}  // namespace

void set_world(MPI_Comm world) {
  std::lock_guard<std::mutex> l(mu);
  if (world_group != MPI_GROUP_NULL) MPI_Group_free(&world_group);
  MPI_Comm_group(world, &world_group);
  world_comm = world;
}

bool ulfm_enabled() {
#ifdef OMPI_HAVE_MPI_EXT_FTMPI
  static int cached = -1;
  if (cached < 0) {
    int* val = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_FT, &val, &flag);
    cached = (flag && val && *val) ? 1 : 0;
  }
  return cached == 1;
#else
  return false;
#endif
}

void adopt(MPI_Comm c) {
  MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  std::lock_guard<std::mutex> l(mu);
  owned.push_back(c);
}

void forget(MPI_Comm c) {
  std::lock_guard<std::mutex> l(mu);
  owned.erase(std::remove(owned.begin(), owned.end(), c), owned.end());
}

void revoke(MPI_Comm c) {
  if (!ulfm_enabled() || c == MPI_COMM_NULL) return;
#ifdef OMPI_HAVE_MPI_EXT_FTMPI
  // Only where errors return: on a communicator with MPI's default handler the revoke
  // would abort the peers that meet it, where they should end with an error.
  MPI_Errhandler h;
  MPI_Comm_get_errhandler(c, &h);
  const bool returns = h == MPI_ERRORS_RETURN;
  MPI_Errhandler_free(&h);
  if (returns) MPIX_Comm_revoke(c);
#endif
}

void arm_revoke() {
  PeerHealth::get().on_failure([] {
    if (!ulfm_enabled()) return;
    std::lock_guard<std::mutex> l(mu);
    for (MPI_Comm c : owned) revoke(c);
    HVDL_LOG(DEBUG) << "revoked " << owned.size() << " communicators after a failure";
  });
}

std::vector<int> world_ranks_of(MPI_Comm c) {
  MPI_Group g;
  MPI_Comm_group(c, &g);
  int n = 0;
  MPI_Group_size(g, &n);
  std::vector<int> mine(n), world(n, -1);
  for (int i = 0; i < n; ++i) mine[i] = i;
  {
    std::lock_guard<std::mutex> l(mu);
    if (world_group != MPI_GROUP_NULL)
      MPI_Group_translate_ranks(g, n, mine.data(), world_group, world.data());
  }
  MPI_Group_free(&g);
  return world;
}

std::string error_string(int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(msg, len);
}

void raise(MPI_Comm c, int rc, const std::string& what) {
  int cls = rc;
  MPI_Error_class(rc, &cls);
  PeerHealth& health = PeerHealth::get();
  const bool failure_class = cls == MPI_ERR_PROC_FAILED || cls == MPI_ERR_PROC_FAILED_PENDING ||
                             cls == MPI_ERR_REVOKED;
  bool named = false;
#ifdef OMPI_HAVE_MPI_EXT_FTMPI
  // Under ULFM a failed request of a batch comes back as MPI_ERR_IN_STATUS: ask the
  // communicator which members it has seen fail, whatever the code says. A rank that
  // only saw a peer's revoke may learn who failed a moment later: look for a while
  // (this is the failure path, once).
  auto name_failed = [&](MPI_Comm comm) {
    MPI_Group failed;
    if (comm == MPI_COMM_NULL || MPIX_Comm_get_failed(comm, &failed) != MPI_SUCCESS) return;
    int n = 0;
    MPI_Group_size(failed, &n);
    if (n > 0) {
      std::vector<int> in(n), out(n, -1);
      for (int i = 0; i < n; ++i) in[i] = i;
      {
        std::lock_guard<std::mutex> l(mu);
        if (world_group != MPI_GROUP_NULL)
          MPI_Group_translate_ranks(failed, n, in.data(), world_group, out.data());
      }
      for (int r : out) {
        health.declare(r, "MPI reported it failed (in " + what + ")");
        named = true;
      }
    }
    MPI_Group_free(&failed);
  };
  if (ulfm_enabled() && (failure_class || cls == MPI_ERR_IN_STATUS)) {
    // Up to half the peer timeout (at most 2 s): the runtime's notice of which
    // process died can trail the revoke that woke us.
    const int tries = static_cast<int>(std::min(2.0, health.timeout_s() / 2) * 100);
    for (int i = 0; i < tries && !named && !health.any_failed(); ++i) {
      name_failed(c);
      if (!named) name_failed(world_comm);
      if (!named) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
#endif
  if (named || failure_class || (cls == MPI_ERR_IN_STATUS && ulfm_enabled())) {
    if (!named && !health.any_failed())
      health.declare(-1, error_string(rc) + " in " + what + " (a peer failed; MPI did not say which)");
    std::string first = health.first_failure();
    throw PeerFailure(first.empty() ? what + ": " + error_string(rc) : first);
  }
  throw std::runtime_error(what + ": " + error_string(rc));
}

}  // namespace mpi_failures
}  // namespace hvdl
