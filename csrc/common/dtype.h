// Element types and reduction ops shared by every layer. The numeric values are
// part of the binding ABI (Python passes them as ints), so never renumber.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvdl {

enum class DataType : int32_t {
  UINT8 = 0, INT8 = 1, INT32 = 2, INT64 = 3,
  FLOAT16 = 4, BFLOAT16 = 5, FLOAT32 = 6, FLOAT64 = 7,
  BOOL = 8,
  // Appended later; the values above are unchanged.
  INT16 = 9, UINT16 = 10,
};
constexpr int kNumDataTypes = 11;
constexpr int kNumReduceOps = 6;

enum class ReduceOp : int32_t { AVERAGE = 0, SUM = 1, ADASUM = 2, MIN = 3, MAX = 4, PRODUCT = 5 };

inline size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::UINT8: case DataType::INT8: case DataType::BOOL: return 1;
    case DataType::FLOAT16: case DataType::BFLOAT16: case DataType::INT16:
    case DataType::UINT16: return 2;
    case DataType::INT32: case DataType::FLOAT32: return 4;
    case DataType::INT64: case DataType::FLOAT64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DataType t) {
  static const char* names[] = {"uint8", "int8", "int32", "int64", "float16",
                                "bfloat16", "float32", "float64", "bool",
                                "int16", "uint16"};
  int i = static_cast<int>(t);
  return (i >= 0 && i < kNumDataTypes) ? names[i] : "unknown";
}

inline const char* reduce_op_name(ReduceOp op) {
  static const char* names[] = {"Average", "Sum", "Adasum", "Min", "Max", "Product"};
  int i = static_cast<int>(op);
  return (i >= 0 && i < kNumReduceOps) ? names[i] : "unknown";
}

// Whether a value is one of the enumerators (Python passes plain ints).
inline bool dtype_is_valid(int v) { return v >= 0 && v < kNumDataTypes; }

inline bool dtype_is_float(DataType t) {
  return t == DataType::FLOAT16 || t == DataType::BFLOAT16 || t == DataType::FLOAT32 ||
         t == DataType::FLOAT64;
}

// Everything but BOOL can be reduced (sum, min, max, product) and scaled.
inline bool dtype_is_reducible(DataType t) {
  return dtype_is_valid(static_cast<int>(t)) && t != DataType::BOOL;
}
}  // namespace hvdl
