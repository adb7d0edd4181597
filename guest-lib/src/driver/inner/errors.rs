//! Errors and versions: answered in the guest.

use std::ffi::c_char;

use vmcuda_wire::handshake::RUNTIME_VERSION;
use vmcuda_wire::status::{CudaStatus, TABLE, UNRECOGNIZED};

use super::guard;
use crate::{caller, client, cudaError_t, state};

/// NUL-terminated copies of the status table's strings, made once.
fn c_strings() -> &'static [(u32, std::ffi::CString, std::ffi::CString)] {
    static STRINGS: std::sync::OnceLock<Vec<(u32, std::ffi::CString, std::ffi::CString)>> =
        std::sync::OnceLock::new();
    STRINGS.get_or_init(|| {
        TABLE
            .iter()
            .map(|(code, name, msg)| {
                (
                    *code,
                    std::ffi::CString::new(*name).expect("no NUL"),
                    std::ffi::CString::new(*msg).expect("no NUL"),
                )
            })
            .collect()
    })
}

const UNRECOGNIZED_C: &std::ffi::CStr = c"unrecognized error code";

pub extern "C" fn cudaGetErrorName(error: cudaError_t) -> *const c_char {
    debug_assert_eq!(UNRECOGNIZED, "unrecognized error code");
    c_strings()
        .iter()
        .find(|e| e.0 == error)
        .map_or(UNRECOGNIZED_C.as_ptr(), |e| e.1.as_ptr())
}

pub extern "C" fn cudaGetLastError() -> cudaError_t {
    state::take_last_error()
}

pub extern "C" fn cudaPeekAtLastError() -> cudaError_t {
    state::peek_last_error()
}

pub extern "C" fn cudaRuntimeGetVersion(version: *mut i32) -> cudaError_t {
    guard("cudaRuntimeGetVersion", || {
        // SAFETY: by cudaRuntimeGetVersion's contract `version` is NULL or writable.
        unsafe { caller::write(version, RUNTIME_VERSION) }
    })
}

pub extern "C" fn cudaDriverGetVersion(version: *mut i32) -> cudaError_t {
    guard("cudaDriverGetVersion", || {
        // Without a reachable host there is no driver: CUDA answers 0 then.
        let v = client::client().map_or(0, |c| c.hello.driver_version);
        // SAFETY: by cudaDriverGetVersion's contract `version` is NULL or writable.
        unsafe { caller::write(version, v) }
    })
}

pub extern "C" fn cudaProfilerStart() -> cudaError_t {
    guard("cudaProfilerStart", || Ok(()))
}

pub extern "C" fn cudaProfilerStop() -> cudaError_t {
    guard("cudaProfilerStop", || Ok(()))
}

/// `cudaGetDriverEntryPoint(ByVersion)`: the driver functions the guest forwards, and
/// a clean "not found" (NULL, `cudaDriverEntryPointSymbolNotFound`) for the rest.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `func` and `status` are NULL or
/// writable.
unsafe fn entry_point(
    symbol: *const c_char,
    func: *mut *mut libc::c_void,
    status: *mut i32,
) -> Result<(), CudaStatus> {
    // SAFETY: as `entry_point`'s caller promised.
    let name = unsafe { caller::string(symbol) }?;
    match super::driver_entry::lookup(&name) {
        Some(f) => {
            // SAFETY: as `entry_point`'s caller promised.
            unsafe { caller::write(func, f) }?;
            // SAFETY: as `entry_point`'s caller promised.
            unsafe { caller::write_opt(status, 0) };
            Ok(())
        }
        None => {
            // SAFETY: as `entry_point`'s caller promised.
            unsafe { caller::write(func, std::ptr::null_mut()) }?;
            // SAFETY: as `entry_point`'s caller promised.
            unsafe { caller::write_opt(status, 1) };
            if std::env::var_os("VMCUDA_VERBOSE").is_some() {
                eprintln!("vmcuda: driver entry point {name} is not forwarded");
            }
            if status.is_null() {
                return Err(CudaStatus::ErrorSymbolNotFound);
            }
            Ok(())
        }
    }
}

pub extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    func: *mut *mut libc::c_void,
    _flags: u64,
    status: *mut i32,
) -> cudaError_t {
    guard("cudaGetDriverEntryPoint", || {
        // SAFETY: by cudaGetDriverEntryPoint's contract its pointer arguments are as
        // `entry_point` requires.
        unsafe { entry_point(symbol, func, status) }
    })
}

/// The driver's export tables, as NVIDIA's runtime hands them out: the tables the
/// guest driver serves to `cuGetExportTable`, with its answer for an id it does not
/// serve (`cudaErrorSymbolNotFound`, the runtime's name for `CUDA_ERROR_NOT_FOUND`).
pub extern "C" fn cudaGetExportTable(
    table: *mut *const libc::c_void,
    id: *const [u8; 16],
) -> cudaError_t {
    guard(
        "cudaGetExportTable",
        || match crate::driver::cuGetExportTable(table, id) {
            0 => Ok(()),
            code => Err(crate::driver::result::status(code)),
        },
    )
}

pub extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    func: *mut *mut libc::c_void,
    _version: u32,
    _flags: u64,
    status: *mut i32,
) -> cudaError_t {
    guard("cudaGetDriverEntryPointByVersion", || {
        // SAFETY: by cudaGetDriverEntryPointByVersion's contract its pointer arguments are
        // as `entry_point` requires.
        unsafe { entry_point(symbol, func, status) }
    })
}
