// The few pieces of the XLA FFI C ABI (the versioned, stable C interface XLA uses to
// call custom-call handlers) that horovodlite's JAX handler touches, declared here so
// the extension builds without jax or jaxlib installed and works with every jaxlib
// whose FFI major version is 0. Only layouts that have not moved since FFI 0.1 are
// relied on unconditionally; anything newer is used only after checking the version
// and struct sizes the running jaxlib reports.
#pragma once
#include <cstddef>
#include <cstdint>

namespace hvdl {
namespace xffi {

constexpr int kApiMajor = 0;
// The oldest minor version whose layout we rely on for the blocking handler.
constexpr int kApiMinorBlocking = 1;

enum ExtensionType : int32_t { kExtensionMetadata = 1 };

struct ExtensionBase {
  size_t struct_size;
  ExtensionType type;
  ExtensionBase* next;
};

struct ApiVersion {
  size_t struct_size;
  ExtensionBase* extension_start;
  int major_version;
  int minor_version;
};

enum ErrorCode : int32_t {
  kOk = 0, kInvalidArgument = 3, kFailedPrecondition = 9, kAborted = 10,
  kUnimplemented = 12, kInternal = 13,
};

struct Error;  // opaque, owned by XLA
struct Future;  // opaque

struct ErrorCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  const char* message;
  ErrorCode errc;
};

// XLA's element types (the xla::PrimitiveType numbering).
enum DataType : int32_t {
  kPred = 1, kS8 = 2, kS16 = 3, kS32 = 4, kS64 = 5, kU8 = 6, kU16 = 7, kU32 = 8, kU64 = 9,
  kF16 = 10, kF32 = 11, kF64 = 12, kBF16 = 16, kToken = 17,
};

struct Buffer {
  size_t struct_size;
  ExtensionBase* extension_start;
  DataType dtype;
  void* data;
  int64_t rank;
  int64_t* dims;
};

enum ArgType : int32_t { kArgBuffer = 1 };
enum RetType : int32_t { kRetBuffer = 1 };
enum AttrType : int32_t { kAttrArray = 1, kAttrDictionary = 2, kAttrScalar = 3, kAttrString = 4 };

struct ByteSpan {
  const char* ptr;
  size_t len;
};

struct Scalar {
  DataType dtype;
  void* value;
};

struct Array {
  DataType dtype;
  size_t size;
  void* data;
};

enum ExecutionStage : int32_t { kInstantiate = 0, kPrepare = 1, kInitialize = 2, kExecute = 3 };

struct Args {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  ArgType* types;
  void** args;
};

struct Rets {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  RetType* types;
  void** rets;
};

struct Attrs {
  size_t struct_size;
  ExtensionBase* extension_start;
  int64_t size;
  AttrType* types;
  ByteSpan** names;
  void** attrs;
};

struct Api;

struct CallFrame {
  size_t struct_size;
  ExtensionBase* extension_start;
  const Api* api;
  void* ctx;
  ExecutionStage stage;
  Args args;
  Rets rets;
  Attrs attrs;
  Future* future;  // out: set by an asynchronous handler (FFI >= 0.1)
};

using ErrorCreateFn = Error* (*)(ErrorCreateArgs*);

// The head of XLA_FFI_Api. Function pointers after the first few have been
// reordered between minor versions, so later ones are located by version
// (see api_fn below), never through a fixed struct.
struct Api {
  size_t struct_size;
  ExtensionBase* extension_start;
  ApiVersion api_version;
  const void* internal_api;
  ErrorCreateFn error_create;  // first function: stable since 0.1
};

struct Metadata {
  size_t struct_size;
  ApiVersion api_version;
  uint32_t traits;
};

struct MetadataExtension {
  ExtensionBase extension_base;
  Metadata* metadata;
};

struct FutureCreateArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Future* future;  // out
};

struct FutureSetAvailableArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Future* future;
};

struct FutureSetErrorArgs {
  size_t struct_size;
  ExtensionBase* extension_start;
  Future* future;
  Error* error;  // ownership moves to XLA
};

using FutureCreateFn = Error* (*)(FutureCreateArgs*);
using FutureSetAvailableFn = Error* (*)(FutureSetAvailableArgs*);
using FutureSetErrorFn = Error* (*)(FutureSetErrorArgs*);

// The i-th function pointer of XLA_FFI_Api (0 = Error_Create).
inline void* api_fn(const Api* api, int index) {
  auto* base = reinterpret_cast<void* const*>(&api->error_create);
  return base[index];
}
// Whether the running XLA_FFI_Api is long enough to hold function `index`.
inline bool api_has_fn(const Api* api, int index) {
  size_t end = offsetof(Api, error_create) + sizeof(void*) * static_cast<size_t>(index + 1);
  return api->struct_size >= end;
}

}  // namespace xffi
}  // namespace hvdl
