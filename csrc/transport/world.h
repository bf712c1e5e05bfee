// How ranks find each other: the launcher's world (MPI today), its topology, and
// the groups (process sets) carved out of it. The engine asks a World for
// Transports and never sees what is underneath.
#pragma once
#include <algorithm>
#include <map>
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
  int hosts = 1;
  std::vector<int> host_of_rank;       // host id (>= 0) of every rank
};

// Where `rank` sits when rank i runs on host host_of_rank[i]: ranks of one host are
// numbered in rank order, and so are the ranks sharing a local rank across hosts.
inline Topology topology_of(const std::vector<int>& host_of_rank, int rank) {
  Topology t;
  t.rank = rank;
  t.size = static_cast<int>(host_of_rank.size());
  t.host_of_rank = host_of_rank;
  std::map<int, int> per_host;  // host id -> its ranks so far
  std::vector<int> local(host_of_rank.size());
  for (size_t i = 0; i < host_of_rank.size(); ++i) local[i] = per_host[host_of_rank[i]]++;
  t.local_rank = local[rank];
  t.local_size = per_host[host_of_rank[rank]];
  t.cross_size = 0;
  for (int i = 0; i < t.size; ++i) {
    if (local[i] != t.local_rank) continue;
    if (i == rank) t.cross_rank = t.cross_size;
    ++t.cross_size;
  }
  t.hosts = static_cast<int>(per_host.size());
  t.homogeneous = std::all_of(per_host.begin(), per_host.end(),
                              [&](const auto& kv) { return kv.second == t.local_size; });
  return t;
}

class World {
 public:
  virtual ~World() = default;
  virtual const Topology& topology() const = 0;
  // Collective over the whole world: every rank calls it with the same sorted list.
  // Members get a transport whose ranks follow the list's order; others get nullptr.
  virtual std::unique_ptr<Transport> create_group(const std::vector<int>& world_ranks) = 0;
  virtual bool threads_supported() const = 0;
  // Collective: start watching the peers' liveness (peer_health.h); a peer silent
  // for `timeout_s` is declared dead. Worlds that cannot watch do nothing.
  virtual void watch_peers(double timeout_s) { (void)timeout_s; }
};

// The MPI world. `fortran_comm` < 0 means MPI_COMM_WORLD, else an mpi4py communicator's
// py2f() handle (duplicated, so the user's communicator is never used by us).
// `ranks` non-empty restricts the world to those ranks of that communicator; a rank
// outside it gets a std::invalid_argument.
// `hostname`: the host name this rank reports (empty: gethostname); tests pretend ranks
// are on several hosts with it. `start_timeout_s` (> 0): making the world fails, instead
// of waiting on, when a rank has not reached it (or stops answering while it is made)
// within this long; no heartbeat can watch a world that does not exist yet.
// Throws std::runtime_error, before any MPI call, once a world of this process lost a
// member (MPI's rules: MPI_COMM_WORLD is unusable then), unless `fortran_comm` is a
// communicator of the survivors.
std::unique_ptr<World> make_mpi_world(long long fortran_comm, const std::vector<int>& ranks,
                                      const std::string& hostname = "",
                                      double start_timeout_s = 0);
bool mpi_built();
// Every process says farewell to the others as its script ends (mpi_transport.cc,
// "leaving and arriving"), so none waits for it in a communicator's creation. Where
// MPI was started by someone else (mpi4py: elastic jobs), that one calls these:
// mpi_open_farewells right after MPI_Init, collective over MPI_COMM_WORLD (nothing if
// open already); mpi_say_farewell at exit, before MPI_Finalize or instead of it
// (nothing if never opened or MPI is finalized); and it calls MPI_Finalize only if
// mpi_may_finalize() (no world of this process lost a member, no communicator
// creation was given up: either could make MPI_Finalize wait forever).
void mpi_open_farewells(double start_timeout_s);
void mpi_say_farewell();
bool mpi_may_finalize();
// True when the MPI library moves GPU memory itself (CUDA-aware); call after MPI_Init.
bool mpi_cuda_aware();

}  // namespace hvdl
