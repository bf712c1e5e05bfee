// HeldRing (csrc/transport/held_ring.h): when a held wake-up goes out.
// 1. With no delay nothing is held.
// 2. A held ring is due after its delay, once, and a vote that completes first drops
//    it (counted as saved).
// 3. lengthen(bytes) pushes the deadline out by the bytes' time at kNsPerByte (a
//    large rider's vote takes that much longer to show that every peer came), and
//    does nothing when no ring is held.
#include <chrono>
#include <thread>

#include "harness.h"
#include "transport/held_ring.h"

using hvdl::HeldRing;
using namespace std::chrono;

int main() {
  {
    HeldRing h;
    CHECK(!h.hold(1), "no delay: sent at once");
  }
  {
    HeldRing h;
    h.set_delay(microseconds(200));
    CHECK(h.hold(7));
    CHECK(h.due() == 0, "due before its delay");
    std::this_thread::sleep_for(milliseconds(2));
    CHECK(h.due() == 7, "due after its delay");
    CHECK(h.due() == 0, "sent once");
    CHECK(h.hold(8));
    h.joined();
    std::this_thread::sleep_for(milliseconds(2));
    CHECK(h.due() == 0 && h.saved() == 1, "a completed vote drops it");
  }
  {
    HeldRing h;
    h.set_delay(microseconds(200));
    // 100 MB at kNsPerByte: far beyond the sleep below, whatever the machine's load.
    const size_t bytes = 100u << 20;
    CHECK(HeldRing::kNsPerByte * bytes >= 1e8, "the test's margin holds");
    CHECK(h.hold(9));
    h.lengthen(bytes);
    std::this_thread::sleep_for(milliseconds(2));
    CHECK(h.due() == 0, "lengthened: not due yet");
    h.joined();
    CHECK(h.saved() == 1);
    h.lengthen(bytes);  // nothing held: no effect on the next hold
    CHECK(h.hold(10));
    std::this_thread::sleep_for(milliseconds(2));
    CHECK(h.due() == 10, "a later hold keeps its own delay");
  }
  return hvdl::test::finish("held_ring");
}
