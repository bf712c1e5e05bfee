// Responses agreed once are remembered under a bit position. Every rank inserts and
// evicts in the same order (the order responses execute), so bit k means the same
// tensor everywhere, and "is tensor k ready on every rank?" becomes one bitwise-AND
// allreduce instead of a gather to the coordinator and a broadcast back.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace hvdl {

class ResponseCache {
 public:
  explicit ResponseCache(size_t capacity);

  enum Result { MISS, HIT, CONFLICT };
  // HIT: the request matches what was agreed under *bit. CONFLICT: the name is cached
  // with other properties, so *bit must be invalidated on every rank.
  Result lookup(const Request& q, uint32_t* bit) const;
  const Response& response(uint32_t bit) const { return slots_[bit].resp; }

  // Remember an executed response with this rank's request. Returns the bit of an
  // evicted entry (the least recently used), or -1.
  int64_t put(const Response& r, const Request& local);
  void touch(uint32_t bit);  // bit was used: it is the last to be evicted
  void erase(uint32_t bit);

  size_t capacity() const { return slots_.size(); }
  static bool cacheable(const Response& r);

 private:
  struct Slot {
    bool used = false;
    Response resp;
    Request local;
  };
  void unlink(uint32_t bit);
  void link_last(uint32_t bit);

  std::vector<Slot> slots_;
  std::unordered_map<std::string, uint32_t> by_name_;
  // The used slots from least to most recently used, as a doubly linked list through
  // prev_/next_ with a sentinel at index capacity(): an unnamed collective is a new name
  // every call, and scanning the slots for the oldest cost ~1 us per call once full.
  // Every rank makes the same calls in the same order, so the order, the free slot
  // taken and the victim are the same everywhere.
  std::vector<uint32_t> prev_, next_;
  std::vector<uint32_t> free_;  // unused slots, the next one to take at the back
};

}  // namespace hvdl
