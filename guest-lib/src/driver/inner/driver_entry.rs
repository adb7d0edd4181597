//! Driver API functions handed out by `cudaGetDriverEntryPoint(ByVersion)`: the same
//! implementations `libcuda.so.1` and `cuGetProcAddress` give (see [`crate::driver`]);
//! names it does not implement are answered "not found" with a NULL pointer, cleanly.

use std::ffi::c_void;

/// The implementation for a driver function name. A program holding entry points the
/// runtime handed out uses an initialized driver (natively cudart calls `cuInit`).
pub fn lookup(name: &str) -> Option<*mut c_void> {
    let f = crate::driver::lookup(name)?;
    crate::driver::mark_initialized();
    Some(f)
}
