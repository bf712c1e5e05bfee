// The XLA FFI handler for jitted JAX collectives (see jax_ffi.cc). Returned as an
// untyped pointer so this header, like the rest of the core, knows nothing of XLA.
#pragma once

namespace hvdl {

// XLA_FFI_Handler* for the "horovodlite_collective" custom-call target.
void* jax_ffi_handler();
// The JAX_FFI_ASYNC setting, applied at init(): collectives complete in the background.
void set_jax_ffi_async(bool on);
bool jax_ffi_async();

}  // namespace hvdl
