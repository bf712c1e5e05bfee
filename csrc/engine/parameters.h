// The knobs of a process set's engine that every rank must agree on at every round:
// fusion planning and ring segmentation decide who sends which bytes, so a rank
// using other values would send mismatched messages. Rank 0 changes them (the
// autotuner) by attaching new values to a negotiation broadcast; every rank applies
// them before executing that same round.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

namespace hvdl {

struct Tunables {
  uint64_t fusion_threshold = 128u << 20;  // bytes; 0 = no fusion
  double cycle_time_ms = 1.0;
  uint64_t segment_bytes = 1u << 20;       // ring pipelining
  uint32_t final = 0;                      // 1: the autotuner has settled on these

  bool same_values(const Tunables& o) const {
    return fusion_threshold == o.fusion_threshold && cycle_time_ms == o.cycle_time_ms &&
           segment_bytes == o.segment_bytes;
  }
  // Fixed-size wire form (same binary, same architecture on every rank).
  void append_to(std::string& out) const {
    out.append(reinterpret_cast<const char*>(this), sizeof(Tunables));
  }
  static Tunables read_from(const char* p) {
    Tunables t;
    std::memcpy(&t, p, sizeof(Tunables));
    return t;
  }
};

}  // namespace hvdl
