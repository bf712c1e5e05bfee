// PeerHealth (csrc/transport/peer_health.h): which failure a check names.
// 1. Where several members of a set failed, the one declared first is the cause, not
//    the lowest rank: a survivor that gave up on a frozen peer and exited is declared
//    later, as a consequence (the flaky "add_process_set with a frozen rank" row named
//    the exit of rank 0 instead of the freeze of rank 2).
// 2. The same through check_pids (shared-memory windows know peers by pid).
// 3. reason() keeps the declarer's own words (what the heartbeat tells the others);
//    the first declaration of a rank counts; reset() forgets everything.
// 4. A rank whose farewell arrived (note_departed) and is then declared is said to have
//    left (its script ended), not to have failed; it still fails the checks; reset()
//    forgets the departures with the rest.
#include <string>
#include <vector>

#include "harness.h"
#include "transport/peer_health.h"

using hvdl::PeerFailure;
using hvdl::PeerHealth;

static std::string caught(const std::vector<int>& ranks) {
  try {
    PeerHealth::get().check(&ranks);
  } catch (const PeerFailure& e) {
    return e.what();
  }
  return "";
}

static std::string caught_pids(const std::vector<int>& pids) {
  try {
    PeerHealth::get().check_pids(pids);
  } catch (const PeerFailure& e) {
    return e.what();
  }
  return "";
}

static bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

int main() {
  PeerHealth& h = PeerHealth::get();
  h.reset(1, {"a", "a", "b"}, {100, 101, 102}, 3.0);
  CHECK(caught({0, 1, 2}).empty());
  h.declare(2, "no heartbeat for 2.4 s");
  h.declare(0, "its process exited (pid 100)");
  h.declare(2, "a second opinion");  // only the first declaration counts
  const std::string all = caught({0, 1, 2});
  CHECK(has(all, "rank 2 (host b, pid 102)") && has(all, "no heartbeat"), "%s", all.c_str());
  CHECK(has(caught({0, 1}), "rank 0") && has(caught({0, 1}), "exited"));
  CHECK(h.reason(2) == "no heartbeat for 2.4 s", "%s", h.reason(2).c_str());
  CHECK(h.reason(1).empty());
  CHECK(has(h.first_failure(), "rank 2"));
  // By pid: 100 is rank 0 on host a, 102 rank 2 on host b; both failed, 2 first.
  CHECK(has(caught_pids({100, 102}), "rank 2"), "%s", caught_pids({100, 102}).c_str());
  CHECK(has(caught_pids({100, 101}), "rank 0"));
  CHECK(caught_pids({101}).empty());

  h.reset(1, {"a", "a", "b"}, {100, 101, 102}, 3.0);
  CHECK(caught({0, 1, 2}).empty() && h.reason(2).empty() && !h.any_failed());
  h.declare(0, "first now");
  h.declare(2, "second now");
  CHECK(has(caught({2, 0}), "first now"));  // order of declaration, not of the list

  h.reset(1, {"a", "a", "b"}, {100, 101, 102}, 3.0);
  h.note_departed(0);
  h.declare(0, "its process exited (pid 100)");
  h.declare(2, "its process exited (pid 102)");
  const std::string left = caught({0, 1});
  CHECK(has(left, "rank 0 (host a, pid 100) left (its script ended") && !has(left, "failed") &&
            has(left, "its process exited (pid 100)"),
        "%s", left.c_str());
  CHECK(has(caught({2}), "rank 2 (host b, pid 102) failed: its process exited"), "%s",
        caught({2}).c_str());
  CHECK(h.reason(0) == "its process exited (pid 100)", "%s", h.reason(0).c_str());  // as told
  h.reset(1, {"a", "a", "b"}, {100, 101, 102}, 3.0);
  h.declare(0, "its process exited (pid 100)");
  CHECK(has(caught({0}), "rank 0 (host a, pid 100) failed:"), "%s", caught({0}).c_str());
  return hvdl::test::finish("peer_health");
}
