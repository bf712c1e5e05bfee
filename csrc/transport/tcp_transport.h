// Bulk data between hosts over direct TCP connections, one per pair of ranks, with the
// control plane (negotiation, barriers, wake-ups, splits) left to the transport it wraps.
//
// Why not MPI's TCP path: OpenMPI moves a TCP message only while some rank thread is
// inside an MPI call, and our waits sleep between tests to leave the cores to the
// peers. On a loaded machine a rank sleeps through whole milliseconds, and a 1 Gbit/s
// link runs dry meanwhile (measured on the simulated cluster: one 32 MiB message each
// way took 558 ms with a 1 ms test interval against 280 ms when spinning). Here the
// kernel moves the bytes: a wait blocks in poll() until a socket is ready, writes what
// the socket takes and reads what arrived, for every peer at once, so both directions
// of every link stay busy while the rank sleeps, and no core spins.
//
// The connection setup waits the same way: in short polls between which the group's
// health is looked at (watched_wait.h), so a peer that dies meanwhile ends it with an
// error naming that peer; the setup's own bounds (5 s per connect, 60 s for the
// higher ranks to connect) only decide when to fall back to MPI for live peers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "transport.h"

namespace hvdl {

struct TcpOptions {
  // Pretend hosts (tests) all live on this machine: loopback then, unless `if_include`
  // names the addresses.
  bool one_machine = false;
  // CIDR networks or interface names, comma separated ("" = every non-loopback IPv4;
  // an explicit list may name loopback, "lo" or "127.0.0.0/8").
  std::string if_include;
  // A transfer that moves no byte for this long fails (the peer is gone).
  double timeout_s = 600;
  // A wait retries its sockets this long before it sleeps in poll(): on hosts with
  // idle cores a small message's reply may arrive sooner than a sleeping thread is
  // woken. Off by default: measured on the simulated cluster (ranks of both "hosts"
  // on 2 shared cores), 4 KiB on 2x1 took 0.08 ms spinning 50 us against 0.11 ms
  // when quiet, but 0.8-6.5 ms against 0.1-2.5 ms under load: the spin takes the
  // core the peer needs.
  int spin_us = 0;
};

// What a TCP transport runs with (the engine reports these).
struct TcpInfo {
  TcpOptions options;                  // as it was made with (if_include: "" = none)
  std::vector<std::string> addresses;  // where this rank listens, in the order offered
};
// `t`'s own, when make_tcp_transport made it; null for any other transport.
const TcpInfo* tcp_info(const Transport& t);

// Collective over `base`. Returns a transport of the same ranks whose isend/irecv use
// TCP and whose other calls go to `base`; or nullptr on every rank alike (with `base`
// untouched; the caller keeps it) when no connection could be made between some pair.
// Addresses: those `o.if_include` names, else every non-loopback IPv4 address of this
// host, or loopback when all ranks run on one machine (pretend hosts in tests).
std::unique_ptr<Transport> make_tcp_transport(std::unique_ptr<Transport>& base, const TcpOptions& o);

}  // namespace hvdl
