#pragma once
#include <cstddef>
#include <vector>

#include "../transport/transport.h"

namespace hvdl {

// Rank r sends bytes [send_off[j], +send_bytes[j]) of `src` to rank j and receives
// rank j's part for it into [recv_off[j], +recv_bytes[j]) of `dst`.
void alltoallv(Transport& t, const void* src, const std::vector<size_t>& send_off,
               const std::vector<size_t>& send_bytes, void* dst,
               const std::vector<size_t>& recv_off, const std::vector<size_t>& recv_bytes);

}  // namespace hvdl
