//! Driver API functions handed out by `cudaGetDriverEntryPoint(ByVersion)`.
//!
//! A small set the guest can answer on the same wire (error strings, versions, device
//! attributes, allocation); every other symbol is answered "not found" with a NULL
//! pointer, cleanly. The full driver API is the guest `libcuda.so.1`'s job.

use std::ffi::{c_char, c_void};

use vmcuda_wire::op::{MemAlloc, MemFree};
use vmcuda_wire::CudaStatus;

use super::device::{device_count, properties};
use super::{call, Result};
use crate::state::{self, registry};
use crate::{caller, client};

/// Driver functions return `CUresult`, whose numbers the runtime codes share.
fn code(r: Result<()>) -> u32 {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| r)) {
        Ok(Ok(())) => 0,
        Ok(Err(s)) => s.0,
        Err(_) => CudaStatus::ErrorUnknown.0,
    }
}

/// A status string for a driver error-string query; unknown codes are an error, with
/// NULL stored, as the driver does.
fn error_text(
    error: u32,
    out: *mut *const c_char,
    text: extern "C" fn(u32) -> *const c_char,
) -> u32 {
    let known = vmcuda_wire::status::TABLE.iter().any(|e| e.0 == error);
    let s = if known { text(error) } else { std::ptr::null() };
    code(
        caller::write(out, s)
            .and_then(|_| known.then_some(()).ok_or(CudaStatus::ErrorInvalidValue)),
    )
}

extern "C" fn cu_get_error_string(error: u32, out: *mut *const c_char) -> u32 {
    error_text(error, out, super::errors::cudaGetErrorString)
}

extern "C" fn cu_get_error_name(error: u32, out: *mut *const c_char) -> u32 {
    error_text(error, out, super::errors::cudaGetErrorName)
}

extern "C" fn cu_driver_get_version(version: *mut i32) -> u32 {
    code(client::client().and_then(|c| caller::write(version, c.hello.driver_version)))
}

extern "C" fn cu_device_get_count(count: *mut i32) -> u32 {
    code(device_count().and_then(|n| caller::write(count, n)))
}

extern "C" fn cu_device_get_attribute(value: *mut i32, attr: u32, device: i32) -> u32 {
    code((|| {
        let p = properties(device)?;
        caller::write(
            value,
            p.attribute(attr).ok_or(CudaStatus::ErrorInvalidValue)?,
        )
    })())
}

extern "C" fn cu_mem_alloc(ptr: *mut u64, size: usize) -> u32 {
    code((|| {
        if size == 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let p = call(&MemAlloc { size: size as u64 })?.ptr;
        registry().add_device_range(p, size as u64, state::current_device());
        caller::write(ptr, p)
    })())
}

extern "C" fn cu_mem_free(ptr: u64) -> u32 {
    code((|| {
        call(&MemFree { ptr })?;
        registry().remove_device_range(ptr);
        Ok(())
    })())
}

/// The forwarders, by base name (the driver's versioned variants share one).
pub fn lookup(name: &str) -> Option<*mut c_void> {
    let f: *mut c_void = match name {
        "cuGetErrorString" => cu_get_error_string as *mut c_void,
        "cuGetErrorName" => cu_get_error_name as *mut c_void,
        "cuDriverGetVersion" => cu_driver_get_version as *mut c_void,
        "cuDeviceGetCount" => cu_device_get_count as *mut c_void,
        "cuDeviceGetAttribute" => cu_device_get_attribute as *mut c_void,
        "cuMemAlloc" => cu_mem_alloc as *mut c_void,
        "cuMemFree" => cu_mem_free as *mut c_void,
        _ => return None,
    };
    Some(f)
}
