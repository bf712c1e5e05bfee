// Picks the kernel set once per process from what the running CPU supports. The
// AVX2 set covers only the hot (dtype, op) pairs and reports the rest back to
// generic.
//
// There is no AVX-512 set: on the AMD EPYC (Zen 4 class) this was tuned on, a
// 512-bit version of the same kernels measured no faster than AVX2 for 64 KiB..256
// MiB (float16 slower in cache, all memory-bound beyond it), so "avx512" is
// accepted as a name but resolves to avx2.
//
// Errors (BOOL, ADASUM, unknown enum values) are thrown as std::invalid_argument
// before any kernel runs, even for count == 0, so misuse is caught in small tests.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "reduce.h"

namespace hvdl {
namespace detail {

// Defined in reduce_generic.cc / reduce_avx2.cc. The vector entry points return
// false for pairs they do not cover.
void reduce_generic(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);
void scale_generic(void* buf, size_t count, DataType dtype, double factor);
bool reduce_pair_avx2(void* dst, const void* a, const void* src, size_t count, DataType dtype,
                      ReduceOp op);
bool scale_avx2(void* buf, size_t count, DataType dtype, double factor);

namespace {

struct KernelSet {
  const char* name;
  // dst = a (op) src; the in-place reduction is a == dst. Null: generic only.
  bool (*reduce)(void*, const void*, const void*, size_t, DataType, ReduceOp);
  bool (*scale)(void*, size_t, DataType, double);
  const KernelSet* fallback;
};

const KernelSet kGeneric{"generic", nullptr, nullptr, nullptr};
const KernelSet kAvx2{"avx2", reduce_pair_avx2, scale_avx2, &kGeneric};

bool cpu_has(const KernelSet* k) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
  if (k == &kAvx2) return avx2;
#endif
  return k == &kGeneric;
}

const KernelSet* by_name(const char* name) {
  if (std::strcmp(name, "generic") == 0) return &kGeneric;
  if (std::strcmp(name, "avx2") == 0) return &kAvx2;
  if (std::strcmp(name, "avx512") == 0) return &kAvx2;  // see top of file
  return nullptr;
}

// Best supported set, or the one `name` asks for (the REDUCE_ISA setting; tests use
// it to pin a path); a forced set the CPU lacks degrades along the fallback chain.
const KernelSet* choose(const std::string& name) {
  const KernelSet* k = &kAvx2;
  if (!name.empty() && name != "auto") {
    if (const KernelSet* forced = by_name(name.c_str())) {
      k = forced;
    } else {
      std::fprintf(stderr, "horovodlite: ignoring unknown HOROVODLITE_REDUCE_ISA=%s\n", name.c_str());
    }
  }
  while (!cpu_has(k)) k = k->fallback;
  return k;
}

// Process-wide: the kernels are plain functions every layer calls, also before init()
// (the binding's reduce_into); init() sets it from the settings, between collectives.
std::atomic<const KernelSet*>& active_set() {
  static std::atomic<const KernelSet*> k{choose("")};
  return k;
}

const KernelSet& active() { return *active_set().load(std::memory_order_relaxed); }

bool reducible(DataType t) { return dtype_is_reducible(t); }

void check_reduce(DataType dtype, ReduceOp op) {
  if (!reducible(dtype))
    throw std::invalid_argument(std::string("reduce_into: dtype ") + dtype_name(dtype) +
                                " is not reducible");
  if (op != ReduceOp::SUM && op != ReduceOp::AVERAGE && op != ReduceOp::MIN &&
      op != ReduceOp::MAX && op != ReduceOp::PRODUCT)
    throw std::invalid_argument(std::string("reduce_into: op ") + reduce_op_name(op) +
                                " is not an element-wise reduction");
}

void check_scale(DataType dtype) {
  if (!reducible(dtype))
    throw std::invalid_argument(std::string("scale_buffer: dtype ") + dtype_name(dtype) +
                                " cannot be scaled");
}

// Generic has no kernel of its own for two sources: copying `a` first gives the same
// bits (every set folds element by element, `a` as the destination operand).
void reduce_with(const KernelSet* k, void* dst, const void* a, const void* src, size_t count,
                 DataType dtype, ReduceOp op) {
  for (; k->reduce; k = k->fallback)
    if (k->reduce(dst, a, src, count, dtype, op)) return;
  if (dst != a) std::memmove(dst, a, count * dtype_size(dtype));
  reduce_generic(dst, src, count, dtype, op);
}

void scale_with(const KernelSet* k, void* buf, size_t count, DataType dtype, double factor) {
  for (; k->scale; k = k->fallback)
    if (k->scale(buf, count, dtype, factor)) return;
  scale_generic(buf, count, dtype, factor);
}

}  // namespace

// Test hooks: run one named set regardless of the process-wide choice. Return false
// if the name is unknown or the CPU cannot run that set.
bool reduce_pair_isa(const char* isa, void* dst, const void* a, const void* src, size_t count,
                     DataType dtype, ReduceOp op) {
  const KernelSet* k = by_name(isa);
  if (!k || !cpu_has(k)) return false;
  check_reduce(dtype, op);
  if (count) reduce_with(k, dst, a, src, count, dtype, op);
  return true;
}

bool reduce_into_isa(const char* isa, void* dst, const void* src, size_t count, DataType dtype,
                     ReduceOp op) {
  return reduce_pair_isa(isa, dst, dst, src, count, dtype, op);
}

bool scale_buffer_isa(const char* isa, void* buf, size_t count, DataType dtype, double factor) {
  const KernelSet* k = by_name(isa);
  if (!k || !cpu_has(k)) return false;
  check_scale(dtype);
  if (count) scale_with(k, buf, count, dtype, factor);
  return true;
}

}  // namespace detail

void reduce_into(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  reduce_pair(dst, dst, src, count, dtype, op);
}

void reduce_pair(void* dst, const void* a, const void* src, size_t count, DataType dtype,
                 ReduceOp op) {
  detail::check_reduce(dtype, op);
  if (count) detail::reduce_with(&detail::active(), dst, a, src, count, dtype, op);
}

void scale_buffer(void* buf, size_t count, DataType dtype, double factor) {
  detail::check_scale(dtype);
  if (count) detail::scale_with(&detail::active(), buf, count, dtype, factor);
}

const char* reduce_isa() { return detail::active().name; }

void select_reduce_isa(const std::string& name) { detail::active_set() = detail::choose(name); }

}  // namespace hvdl
