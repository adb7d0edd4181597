//! The CUDA driver API (`libcuda.so.1`), on the connection and guest state below it.
//!
//! **libcuda.so.1 holds this library.** The static library is linked into
//! `libcuda.so.1` (guest-lib/build-libs.sh), which needs no other vmcuda library. Every
//! driver function is defined here under a private name (`__vmcuda_cuMemAlloc_v2`,
//! version node `VMCUDA_LIBCUDA`), and `libcuda.so.1` exports it under the real
//! library's unversioned name as an alias. NVIDIA's own runtime and libraries run on
//! it: one connection, one registry of devices, streams, events and allocations, and
//! one current device per thread. Much of the work is done by the driver's inner
//! functions ([`inner`], once vmcuda's own runtime library, retired), one module per
//! family.
//! The older ABI names (a plain `cuMemAlloc`) are their successors with converted
//! arguments, or, for the CUDA 3 API, the driver's answer in a current-API context
//! (`legacy`). Every other export of the real driver (graphics interop, ...) is a stub
//! answering `CUDA_ERROR_NOT_SUPPORTED` with a line naming it ([`unsupported`]).
//!
//! **Contexts.** The guest models one context per device, the primary context; the
//! host's worker owns the real ones. A context handle is a token naming its device.
//! `cuCtxCreate` hands out the primary context too (documented vmcuda behaviour), and
//! a thread's context stack only selects the device later calls run on.
//!
//! **Handles.** Modules, functions and link states are ids made here, never host
//! pointers, checked against this registry on every use: a stale or foreign one is
//! `CUDA_ERROR_INVALID_HANDLE`, logged once per kind.
//!
//! **Errors.** The host speaks runtime codes; [`result::cu_result`] maps the few runtime-only
//! ones to the driver code with the same meaning. Where a driver function is an inner
//! function in other clothes (copies, streams, events), it calls it through
//! [`keeping_last_error`], which leaves the thread's last error (the runtime API's
//! `cudaGetLastError`, kept by the inner functions) as it was, as the real driver does.

mod array;
pub(crate) mod context;
mod coredump;
mod export_table;
pub(crate) mod graph;
// The inner functions keep the runtime API's names (`cudaMallocArray`), which say what
// each one does.
#[allow(non_snake_case)]
pub(crate) mod inner;
pub mod integrity;
pub(crate) mod ipc;
mod launch_legacy;
mod legacy;
pub(crate) mod library;
pub(crate) mod memory;
pub(crate) mod module;
mod names;
mod proc_address;
pub mod result;
pub(crate) mod stream;
mod table;
mod tensor_map;
mod texref;
mod twins;
pub mod unsupported;
mod vmm;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};

use vmcuda_wire::CudaStatus;

use crate::{cudaError_t, state};

pub use proc_address::{lookup, NAMES};

pub use result::{cu_result, CUresult, CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_SUPPORTED};

pub type Result<T> = std::result::Result<T, CudaStatus>;

/// Run a driver export's body: no unwinding across the C boundary.
pub fn guard(name: &'static str, body: impl FnOnce() -> Result<()>) -> CUresult {
    match crate::profile::get() {
        Some(p) => p.call(name, || guarded(name, body)),
        None => guarded(name, body),
    }
}

fn guarded(name: &'static str, body: impl FnOnce() -> Result<()>) -> CUresult {
    crate::state::note_thread();
    // Driver calls travel through the request functions (`crate::request`), which note
    // that the runtime brought a context up on this thread; only the runtime's own calls
    // do that.
    let runtime_context = state::runtime_context().is_some();
    let result = catch_unwind(AssertUnwindSafe(body));
    if !runtime_context {
        state::clear_runtime_context();
    }
    match result {
        Ok(Ok(())) => result::CUDA_SUCCESS,
        Ok(Err(status)) => {
            let code = cu_result(status);
            if trace_failures() {
                eprintln!(
                    "vmcuda: {name} returns {}",
                    names::name(code).unwrap_or("an unnamed code")
                );
            }
            code
        }
        Err(_) => {
            eprintln!("vmcuda: internal error in {name}; reporting CUDA_ERROR_UNKNOWN");
            result::CUDA_ERROR_UNKNOWN
        }
    }
}

/// `VMCUDA_TRACE_FAILURES`: every driver call that fails says so on stderr (and export
/// table walks say what they found), which
/// shows where a library's start-up goes wrong.
pub(super) fn trace_failures() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("VMCUDA_TRACE_FAILURES").is_some())
}

/// Call an inner function (one answering `cudaError_t`) for a driver function, leaving
/// the thread's last error as it was (driver calls do not touch it).
pub fn keeping_last_error(f: impl FnOnce() -> cudaError_t) -> Result<()> {
    let saved = state::peek_last_error();
    let status = f();
    state::set_last_error(saved);
    match status {
        0 => Ok(()),
        s => Err(CudaStatus(s)),
    }
}

/// Refuse a handle this process does not hold, saying so once per kind with
/// `VMCUDA_VERBOSE` set (the program's own output stays what it is natively; the host
/// logs what it refuses).
pub fn stale(kind: &'static str, logged: &'static AtomicBool) -> CudaStatus {
    if std::env::var_os("VMCUDA_VERBOSE").is_some() && !logged.swap(true, Ordering::Relaxed) {
        eprintln!("vmcuda: a {kind} handle this process does not hold was passed to the driver API; reporting CUDA_ERROR_INVALID_HANDLE");
    }
    result::status(CUDA_ERROR_INVALID_HANDLE)
}

/// `cuInit` must come first: later calls before it are `CUDA_ERROR_NOT_INITIALIZED`.
/// The runtime initializes the driver too (natively cudart calls `cuInit`), so a
/// process already using the runtime, or holding entry points it handed out, is
/// initialized.
static INITIALIZED: AtomicBool = AtomicBool::new(false);

pub fn mark_initialized() {
    INITIALIZED.store(true, Ordering::Release);
}

/// A driver function's name without the `_vN` suffix of its current ABI
/// (`cuMemAlloc_v2` -> `cuMemAlloc`), as `cuGetProcAddress` is asked for it.
pub fn base_name(name: &str) -> &str {
    match name.rsplit_once("_v") {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

pub fn check_initialized() -> Result<()> {
    if INITIALIZED.load(Ordering::Acquire) || crate::client::connected() {
        Ok(())
    } else {
        Err(CudaStatus::ErrorInitializationError)
    }
}

/// Define a driver export under its private name (see the module documentation);
/// libcuda.so.1 exports the public name as an alias of it.
macro_rules! export {
    ($(#[$m:meta])* fn $name:ident($($arg:ident: $ty:ty),* $(,)?) $body:block) => {
        $(#[$m])*
        #[export_name = concat!("__vmcuda_", stringify!($name))]
        #[allow(non_snake_case, clippy::too_many_arguments)]
        pub extern "C" fn $name($($arg: $ty),*) -> $crate::driver::CUresult {
            $crate::driver::guard(stringify!($name), || $body)
        }
    };
}
pub(crate) use export;

export! {
    fn cuInit(flags: u32) {
        if flags != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        crate::client::client()?;
        mark_initialized();
        Ok(())
    }
}

/// The CUDA version of the driver API this library implements (its export list is CUDA
/// 13.0's).
const OWN_CUDA_VERSION: i32 = 13000;

export! {
    fn cuDriverGetVersion(version: *mut i32) {
        // The host's driver version (cuDriverGetVersion works before cuInit). With no
        // host to ask, the CUDA version this driver implements, as a real driver answers
        // on a machine without a GPU: NVIDIA's runtime, which asks first, then reports
        // cuInit's CUDA_ERROR_NO_DEVICE (cudaErrorNoDevice), not an insufficient driver.
        let driver_version = crate::client::client()
            .map_or(OWN_CUDA_VERSION, |client| client.hello.driver_version);
        // SAFETY: by cuDriverGetVersion's contract `version` is NULL or writable.
        unsafe { crate::caller::write(version, driver_version) }
    }
}

/// NUL-terminated names and messages for `cuGetErrorName` / `cuGetErrorString`.
fn error_texts() -> &'static [(u32, std::ffi::CString, std::ffi::CString)] {
    static TEXTS: std::sync::OnceLock<Vec<(u32, std::ffi::CString, std::ffi::CString)>> =
        std::sync::OnceLock::new();
    TEXTS.get_or_init(|| {
        names::NAMES
            .iter()
            .map(|(code, name)| {
                // The driver's messages are the runtime's for the codes both have.
                let msg = vmcuda_wire::status::TABLE
                    .iter()
                    .find(|e| e.0 == *code)
                    .map_or(*name, |e| e.2);
                (
                    *code,
                    std::ffi::CString::new(*name).expect("no NUL"),
                    std::ffi::CString::new(msg).expect("no NUL"),
                )
            })
            .collect()
    })
}

/// # Safety
/// `out` is NULL or writable.
unsafe fn error_text(error: u32, out: *mut *const std::ffi::c_char, message: bool) -> Result<()> {
    match error_texts().iter().find(|e| e.0 == error) {
        Some((_, name, msg)) => {
            let s = if message { msg } else { name };
            // SAFETY: as `error_text`'s caller promised.
            unsafe { crate::caller::write(out, s.as_ptr()) }
        }
        None => {
            // Unknown codes: NULL stored, CUDA_ERROR_INVALID_VALUE, as the driver does.
            // SAFETY: as `error_text`'s caller promised.
            unsafe { crate::caller::write(out, std::ptr::null()) }?;
            Err(CudaStatus::ErrorInvalidValue)
        }
    }
}

export! {
    fn cuGetErrorName(error: u32, out: *mut *const std::ffi::c_char) {
        // SAFETY: by cuGetErrorName's contract its pointer arguments are as `error_text`
        // requires.
        unsafe { error_text(error, out, false) }
    }
}

export! {
    fn cuGetErrorString(error: u32, out: *mut *const std::ffi::c_char) {
        // SAFETY: by cuGetErrorString's contract its pointer arguments are as `error_text`
        // requires.
        unsafe { error_text(error, out, true) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_names_are_the_drivers() {
        let mut p = std::ptr::null();
        assert_eq!(cuGetErrorName(1, &mut p), 0);
        // SAFETY: a NUL-terminated static string was stored.
        let name = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(name.to_str().unwrap(), "CUDA_ERROR_INVALID_VALUE");
        assert_eq!(cuGetErrorString(2, &mut p), 0);
        // SAFETY: as above.
        let msg = unsafe { std::ffi::CStr::from_ptr(p) };
        assert_eq!(msg.to_str().unwrap(), "out of memory");
        assert_eq!(cuGetErrorName(123_456, &mut p), 1);
        assert!(p.is_null());
    }
}
