// The TCP data plane's connection setup (tcp_transport.cc) watches the group's health
// like every other wait: a peer that dies after publishing its address but before it
// connects ends the survivors' setup with a PeerFailure naming it, instead of a wait
// for the setup time (60 s) and a fall-back to MPI.
//
// Three thread-ranks on loopback; rank 2 takes part in the address exchange with an
// address nobody listens on, never connects, and is then declared failed (as the
// heartbeat would declare a dead process). Ranks 0 and 1 connect to each other and
// wait for rank 2 in their accept loop.
#include <chrono>
#include <string>
#include <thread>

#include "harness.h"
#include "transport/peer_health.h"
#include "transport/tcp_transport.h"

using namespace hvdl;
using namespace hvdl::test;

int main() {
  constexpr int n = 3;
  const std::string why = "test: it died during the TCP connection setup";
  PeerHealth::get().reset(0, {"h0", "h1", "h2"}, {0, 0, 0}, 0);
  auto state = ThreadWorldState::make(n);
  std::vector<int> all = {0, 1, 2};
  std::vector<std::unique_ptr<Transport>> ts;
  for (int r = 0; r < n; ++r) ts.push_back(state->world(r)->create_group(all));
  std::vector<std::string> errors(n);
  std::vector<bool> got_transport(n, false);
  spawn(n, [&](int r) {
    Transport& t = *ts[r];
    if (r == 2) {
      // make_tcp_transport's address exchange, as a process that dies right after it
      t.gather("127.0.0.1 1", 0);
      std::string table;
      t.broadcast(table, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      PeerHealth::get().declare(2, why);
      return;
    }
    TcpOptions o;
    o.one_machine = true;
    try {
      got_transport[r] = make_tcp_transport(ts[r], o) != nullptr;
    } catch (const PeerFailure& e) {
      errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    CHECK(!got_transport[r], "rank %d: a transport although rank 2 never connected", r);
    CHECK(errors[r].find("rank 2") != std::string::npos && errors[r].find(why) != std::string::npos,
          "rank %d: the setup did not end with rank 2's failure: '%s'", r, errors[r].c_str());
  }
  return finish("tcp_setup");
}
