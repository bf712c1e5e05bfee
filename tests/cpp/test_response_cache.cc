// The response cache (csrc/engine/response_cache.h) alone: it evicts the least
// recently used entry (a touch or a re-put counts as a use), takes freed slots again,
// keeps a name's bit stable while it stays, and reports conflicts; and check_same
// (csrc/engine/collective_op.h), which the coordinator validates with, compares
// values as themselves (scale factors to the bit) and puts them into words only for
// a mismatch's message.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "engine/collective_op.h"
#include "engine/response_cache.h"
#include "harness.h"

using namespace hvdl;
using namespace hvdl::test;

namespace {

Request req(const std::string& name) {
  Request q;
  q.name = name;
  q.shape = {4};
  return q;
}

Response resp(const std::string& name) {
  Response r;
  r.name = name;
  r.shape = {4};
  return r;
}

int64_t put(ResponseCache& c, const std::string& name) { return c.put(resp(name), req(name)); }

uint32_t bit_of(const ResponseCache& c, const std::string& name) {
  uint32_t b = UINT32_MAX;
  return c.lookup(req(name), &b) == ResponseCache::HIT ? b : UINT32_MAX;
}

void evicts_least_recently_used() {
  ResponseCache c(3);
  CHECK(put(c, "a") == -1 && put(c, "b") == -1 && put(c, "c") == -1, "a free slot evicted");
  const uint32_t a = bit_of(c, "a"), b = bit_of(c, "b"), cc = bit_of(c, "c");
  CHECK(a != b && b != cc && a != cc && a < 3 && b < 3 && cc < 3);
  c.touch(a);  // order now b, c, a
  CHECK(put(c, "d") == b, "d did not evict b (bit %u), the least recently used", b);
  CHECK(bit_of(c, "b") == UINT32_MAX && bit_of(c, "d") == b, "d did not take b's slot");
  // Order: c, a, d, then e evicts c.
  put(c, "a");  // a re-put of a cached name is a use, not a new slot
  CHECK(bit_of(c, "a") == a, "a re-put moved the name to another bit");
  CHECK(put(c, "e") == cc, "expected c (least recently used) to go");
  CHECK(bit_of(c, "a") == a && bit_of(c, "d") == b && bit_of(c, "e") == cc);
}

void erased_slots_are_taken_again() {
  ResponseCache c(4);
  for (const char* n : {"a", "b", "c", "d"}) put(c, n);
  const uint32_t b = bit_of(c, "b");
  c.erase(b);
  c.erase(b);  // twice: harmless
  CHECK(bit_of(c, "b") == UINT32_MAX);
  CHECK(put(c, "x") == -1, "a full cache with a freed slot evicted");
  CHECK(bit_of(c, "x") == b, "the freed slot was not taken");
  // Many new names through a small cache: each evicts exactly one, the oldest.
  std::vector<std::string> order = {"a", "c", "d", "x"};
  for (int i = 0; i < 1000; ++i) {
    const std::string n = "n" + std::to_string(i);
    const uint32_t oldest = bit_of(c, order.front());
    CHECK(put(c, n) == oldest, "step %d evicted the wrong bit", i);
    order.erase(order.begin());
    order.push_back(n);
  }
  for (auto& n : order) CHECK(bit_of(c, n) != UINT32_MAX, "%s lost", n.c_str());
}

void conflicts_and_capacity_zero() {
  ResponseCache c(2);
  put(c, "a");
  Request other = req("a");
  other.shape = {5};
  uint32_t b = 0;
  CHECK(c.lookup(other, &b) == ResponseCache::CONFLICT && b == bit_of(c, "a"));
  ResponseCache off(0);
  CHECK(put(off, "a") == -1 && bit_of(off, "a") == UINT32_MAX, "capacity 0 cached");
}

void check_same_compares_values() {
  auto scale = [](const Request& q) { return q.prescale; };
  Request a = req("t"), b = req("t");
  a.prescale = 1.0;
  b.prescale = 1.0000001;  // the same in six significant digits, not the same value
  Response r;
  CHECK(!check_same({&a, &b}, r, "prescale_factor", scale), "1 and 1.0000001 passed as equal");
  CHECK(r.error.find("rank 0 has 1,") != std::string::npos &&
            r.error.find("rank 1 has 1.0000001") != std::string::npos,
        "message: %s", r.error.c_str());
  b.prescale = 1.0;
  Response ok;
  CHECK(check_same({&a, nullptr, &b}, ok, "prescale_factor", scale) && ok.error.empty());
  Request n1 = req("t"), n2 = req("t");
  n1.prescale = n2.prescale = std::nan("");
  CHECK(check_same({&n1, &n2}, ok, "prescale_factor", scale), "a NaN did not agree with itself");
  Request s = req("t");
  s.shape = {2, 3};
  Response bad;
  CHECK(!check_same({&a, &s}, bad, "shape", shape_of));
  CHECK(bad.error.find("rank 0 has (4,)") != std::string::npos &&
            bad.error.find("rank 1 has (2, 3)") != std::string::npos,
        "message: %s", bad.error.c_str());
}

}  // namespace

int main() {
  evicts_least_recently_used();
  erased_slots_are_taken_again();
  conflicts_and_capacity_zero();
  check_same_compares_values();
  return finish("response_cache");
}
