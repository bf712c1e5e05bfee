// Memory the other ranks of this host can map. Arrays allocated here
// (horovodlite.shared_empty) let a single-host allreduce read every rank's input and
// write every rank's output where they lie: no staging copies, so each byte crosses
// the memory bus as often as a plain in-place add needs (shm_allreduce.cc).
//
// The arena is one memfd per process, sized far beyond what is used (pages exist
// only once touched, and a freed block's pages go back to the kernel). Peers map it
// through /proc/<pid>/fd/<fd>, like the shared-memory window.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "transport.h"

namespace hvdl {

// Offset of [p, p + bytes) in the mapping [base, base + capacity), or -1 when it is
// not wholly inside.
inline int64_t offset_in(const char* base, size_t capacity, const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  if (!base || c < base || c + bytes > base + capacity || c + bytes < c) return -1;
  return c - base;
}

class SharedArena {
 public:
  // This process's arena, made on first use (reserve_bytes() of address space), or null
  // where it cannot be made (no memfd, an address-space limit); the first attempt's
  // answer holds for the whole process.
  static SharedArena* get_if_any();
  // The address space the arena reserves when it is made (the SHARED_ARENA_BYTES
  // setting, default 64 GiB); no effect once made. Returns whether making it was tried.
  static bool reserve_bytes(size_t bytes);
  static bool exists();  // whether making it was tried (get_if_any() was called)
  // The same, but throws std::runtime_error saying why there is none.
  static SharedArena& get();

  // `bytes` (4096-aligned; 2 MiB-aligned from 2 MiB on), zero pages until written;
  // the block is freed when the last copy of the pointer goes. std::bad_alloc when full.
  std::shared_ptr<void> allocate(size_t bytes);
  int64_t offset_of(const void* p, size_t bytes) const {
    return offset_in(base_, capacity_, p, bytes);
  }
  char* base() const { return base_; }
  size_t capacity() const { return capacity_; }
  size_t bytes_in_use();
  // Where a peer opens it, "/proc/<pid>/fd/<fd>".
  std::string path() const;

 private:
  SharedArena();
  void release(size_t off, size_t len);

  int fd_ = -1;
  int pid_ = 0;  // a forked child must not allocate from its parent's arena
  char* base_ = nullptr;
  size_t capacity_ = 0;
  std::mutex mu_;
  std::map<size_t, size_t> free_;  // offset -> length, coalesced
  size_t in_use_ = 0;
};

// The arenas of the ranks of `group` (all on this host), mapped here.
class PeerArenas {
 public:
  // Collective over `group`: nullptr on every rank when any rank could not map one.
  static std::unique_ptr<PeerArenas> map(Transport& group);
  ~PeerArenas();
  // Rank r's arena as mapped in this process (this rank's own: the arena itself).
  char* base(int r) const { return bases_[r]; }
  // Offset of [p, p + bytes) in rank r's arena as mapped here, or -1.
  int64_t offset_of(int r, const void* p, size_t bytes) const {
    return offset_in(bases_[r], caps_[r], p, bytes);
  }

 private:
  PeerArenas() = default;
  std::vector<char*> bases_;
  std::vector<size_t> caps_;
  int rank_ = 0;
};

}  // namespace hvdl
