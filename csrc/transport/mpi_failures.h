// What the MPI transport does about failures (internal to csrc/transport): our
// communicators return errors instead of aborting, an error names the failed ranks
// where ULFM can tell, and at the first failure (found by anyone: heartbeat, pidfd,
// an error return) every communicator we own is revoked when the job runs under ULFM
// (`mpirun --with-ft ulfm`), so peers blocked in MPI on it wake up with an error too.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

namespace hvdl {
namespace mpi_failures {

// The world's communicator: failed ranks are reported as ranks of it.
void set_world(MPI_Comm world);
// Revoke our communicators at the first failure of this world (after PeerHealth::reset).
void arm_revoke();
// True when ULFM is on for this job (MPI_FT attribute of MPI_COMM_WORLD).
bool ulfm_enabled();
// Errors return on `c` (instead of aborting); revoked at the first failure.
void adopt(MPI_Comm c);
void forget(MPI_Comm c);
// Revokes `c` under ULFM where its errors return (nothing otherwise), so the peers still waiting in a
// collective on it wake with an error instead of waiting for a schedule we abandoned.
void revoke(MPI_Comm c);
// World ranks of the members of `c`, in `c`'s rank order.
std::vector<int> world_ranks_of(MPI_Comm c);
// `rc` (not MPI_SUCCESS) came back from `what` on `c`: declares the failed ranks
// ULFM knows of (or an unknown one) and throws PeerFailure; other errors throw
// std::runtime_error.
[[noreturn]] void raise(MPI_Comm c, int rc, const std::string& what);
std::string error_string(int rc);

}  // namespace mpi_failures
}  // namespace hvdl
