// Byte copies for the shared-memory collectives, which move every byte twice
// through small, page-aligned staging slots.
#pragma once
#include <cstddef>

namespace hvdl {

// memcpy with two differences: it never uses `rep movsb`, which on some CPUs runs
// 10-40x slower when (dst - src) % 4096 is small (a staging slot and a user buffer
// often sit like that), and with `stream` it writes with non-temporal stores, for a
// destination that will not be read again soon (the output of a large collective):
// they skip reading the destination lines into the cache first, saving a third of
// the memory traffic. Call copy_fence() before another thread reads what a streamed
// copy wrote.
void copy_bytes(void* dst, const void* src, size_t bytes, bool stream);
void copy_fence();

}  // namespace hvdl
