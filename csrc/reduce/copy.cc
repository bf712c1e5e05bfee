// SSE2 is part of x86-64 itself, so these need no run-time dispatch; 16-byte
// stores already saturate memory, and in cache they are not the bottleneck of the
// collectives that use them (the reduction is).
#include "copy.h"

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace hvdl {

#if defined(__x86_64__)

void copy_bytes(void* dst, const void* src, size_t bytes, bool stream) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  if (bytes < 256) {
    std::memcpy(d, s, bytes);  // small: glibc takes the vector path, never rep movsb
    return;
  }
  // Align the destination to 16 bytes; the loads stay unaligned.
  size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t n = bytes / 64;
  if (stream) {
    for (size_t i = 0; i < n; ++i, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_stream_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + 48), e);
    }
  } else {
    for (size_t i = 0; i < n; ++i, d += 64, s += 64) {
      __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s));
      __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 16));
      __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 32));
      __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + 48));
      _mm_store_si128(reinterpret_cast<__m128i*>(d), a);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + 16), b);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + 32), c);
      _mm_store_si128(reinterpret_cast<__m128i*>(d + 48), e);
    }
  }
  std::memcpy(d, s, bytes % 64);
}

void copy_fence() { _mm_sfence(); }

#else

void copy_bytes(void* dst, const void* src, size_t bytes, bool) { std::memcpy(dst, src, bytes); }
void copy_fence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

#endif

}  // namespace hvdl
