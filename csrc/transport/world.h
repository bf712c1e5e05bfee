// How ranks find each other: the launcher's world (MPI today), its topology, and
// the groups (process sets) carved out of it. The engine asks a World for
// Transports and never sees what is underneath.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace hvdl {

struct Topology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this host
  int cross_rank = 0, cross_size = 1;  // ranks sharing my local_rank, one per host
  bool homogeneous = true;             // every host runs the same number of ranks
  std::vector<int> host_of_rank;       // host index of every world rank
};

class World {
 public:
  virtual ~World() = default;
  virtual const Topology& topology() const = 0;
  // Collective over the whole world: every rank calls it with the same sorted list.
  // Members get a transport whose ranks follow the list's order; others get nullptr.
  virtual std::unique_ptr<Transport> create_group(const std::vector<int>& world_ranks) = 0;
  virtual bool threads_supported() const = 0;
};

// The MPI world. `fortran_comm` < 0 means MPI_COMM_WORLD, else an mpi4py communicator's
// py2f() handle (duplicated, so the user's communicator is never used by us).
// `ranks` non-empty restricts the world to those ranks of that communicator; a rank
// outside it gets a std::invalid_argument.
std::unique_ptr<World> make_mpi_world(long long fortran_comm, const std::vector<int>& ranks);
bool mpi_built();
// True when the MPI library moves GPU memory itself (CUDA-aware); call after MPI_Init.
bool mpi_cuda_aware();

}  // namespace hvdl
