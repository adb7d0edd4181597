//! What the replacement `libcudnn.so.9` answers until cuDNN is forwarded.
//!
//! A program that reaches cuDNN through the bridge must learn plainly that it is not
//! there, never crash on a missing library or symbol. `libcudnn.so.9`
//! (guest-lib/build-libs.sh) exports every function of the real one, with its version
//! node, generated from its export list (guest-lib/exports/libcudnn.so.9.txt). The
//! functions that only describe the library answer truthfully here: the versions of the
//! cuDNN PyTorch 2.11 was built with (nvidia-cudnn-cu13 9.19.0.56), the error strings,
//! the last error message. Every other function is a stub that passes its index in
//! that list to [`cudnn_not_forwarded`], which says once per function on stderr which
//! function of which library is missing and what to do, and returns
//! `CUDNN_STATUS_NOT_SUPPORTED` (all of them return a `cudnnStatus_t`).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ffi::{c_char, c_int};
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Mutex;

use crate::caller;

/// `CUDNN_VERSION` of cuDNN 9.19.0.
pub const CUDNN_VERSION: usize = 91900;
/// `CUDNN_MAX_DEVICE_VERSION` of that release (compute capability 12.1).
pub const CUDNN_MAX_DEVICE_VERSION: usize = 1210;
/// The CUDA runtime that release was built against.
pub const CUDNN_CUDART_VERSION: usize = 13000;
/// `CUDNN_STATUS_NOT_SUPPORTED`.
pub const STATUS_NOT_SUPPORTED: c_int = 3000;

/// The real library's exports, `name@@libcudnn.so.9` per line: the stubs are numbered
/// in this order by build-libs.sh.
const EXPORTS: &str = include_str!("../exports/libcudnn.so.9.txt");

/// The name of function `index` of the export list.
pub fn function_name(index: u32) -> Option<&'static str> {
    EXPORTS
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split_once("@@").map(|(name, _)| name))
        .nth(index as usize)
}

/// Functions already reported, so a program calling one in a loop says it once.
static REPORTED: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

thread_local! {
    /// The thread's last error message, for `cudnnGetLastErrorString`.
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

fn message(name: &str) -> String {
    format!(
        "vmcuda: cuDNN is not forwarded yet: {name} (libcudnn.so.9) is not available through \
         the bridge; it returns CUDNN_STATUS_NOT_SUPPORTED. Programs must run without cuDNN \
         (PyTorch: torch.backends.cudnn.enabled = False)."
    )
}

/// The stub of every function not answered here: `index` is its place in the export list.
#[export_name = "__vmcuda_cudnn_not_forwarded"]
pub extern "C" fn cudnn_not_forwarded(index: u32) -> c_int {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let name = function_name(index).unwrap_or("a cuDNN function");
        let text = message(name);
        let first = REPORTED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashSet::new)
            .insert(index);
        if first {
            // A closed stderr is no reason to fail differently.
            let _ = writeln!(std::io::stderr(), "{text}");
        }
        LAST_ERROR.with(|l| *l.borrow_mut() = text);
    }));
    STATUS_NOT_SUPPORTED
}

#[export_name = "__vmcuda_cudnnGetVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cudnnGetVersion() -> usize {
    CUDNN_VERSION
}

#[export_name = "__vmcuda_cudnnGetMaxDeviceVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cudnnGetMaxDeviceVersion() -> usize {
    CUDNN_MAX_DEVICE_VERSION
}

#[export_name = "__vmcuda_cudnnGetCudartVersion"]
#[allow(non_snake_case)]
pub extern "C" fn cudnnGetCudartVersion() -> usize {
    CUDNN_CUDART_VERSION
}

/// Every `cudnnStatus_t` of cuDNN 9.19 and its name, NUL-terminated.
const STATUS_NAMES: &[(c_int, &str)] = &[
    (0, "CUDNN_STATUS_SUCCESS\0"),
    (1001, "CUDNN_STATUS_NOT_INITIALIZED\0"),
    (1002, "CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH\0"),
    (1003, "CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH\0"),
    (1004, "CUDNN_STATUS_DEPRECATED\0"),
    (1005, "CUDNN_STATUS_LICENSE_ERROR\0"),
    (1006, "CUDNN_STATUS_RUNTIME_IN_PROGRESS\0"),
    (1007, "CUDNN_STATUS_RUNTIME_FP_OVERFLOW\0"),
    (1008, "CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED\0"),
    (2000, "CUDNN_STATUS_BAD_PARAM\0"),
    (2001, "CUDNN_STATUS_INVALID_VALUE\0"),
    (2002, "CUDNN_STATUS_BAD_PARAM_NULL_POINTER\0"),
    (2003, "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER\0"),
    (2004, "CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED\0"),
    (2005, "CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND\0"),
    (2006, "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT\0"),
    (2007, "CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH\0"),
    (2008, "CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH\0"),
    (2009, "CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES\0"),
    (2010, "CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE\0"),
    (2011, "CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH\0"),
    (2012, "CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE\0"),
    (3000, "CUDNN_STATUS_NOT_SUPPORTED\0"),
    (3001, "CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN\0"),
    (3002, "CUDNN_STATUS_NOT_SUPPORTED_SHAPE\0"),
    (3003, "CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE\0"),
    (3004, "CUDNN_STATUS_NOT_SUPPORTED_LAYOUT\0"),
    (
        3005,
        "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER\0",
    ),
    (3006, "CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART\0"),
    (3007, "CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH\0"),
    (
        3008,
        "CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING\0",
    ),
    (3009, "CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE\0"),
    (
        3010,
        "CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT\0",
    ),
    (3011, "CUDNN_STATUS_NOT_SUPPORTED_PADDING\0"),
    (3012, "CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM\0"),
    (3013, "CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API\0"),
    (3014, "CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE\0"),
    (4000, "CUDNN_STATUS_INTERNAL_ERROR\0"),
    (4001, "CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED\0"),
    (4002, "CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE\0"),
    (4003, "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED\0"),
    (
        4004,
        "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED\0",
    ),
    (4005, "CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM\0"),
    (
        4006,
        "CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED\0",
    ),
    (5000, "CUDNN_STATUS_EXECUTION_FAILED\0"),
    (5001, "CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER\0"),
    (5002, "CUDNN_STATUS_EXECUTION_FAILED_CUBLAS\0"),
    (5003, "CUDNN_STATUS_EXECUTION_FAILED_CUDART\0"),
    (5004, "CUDNN_STATUS_EXECUTION_FAILED_CURAND\0"),
];

#[export_name = "__vmcuda_cudnnGetErrorString"]
#[allow(non_snake_case)]
pub extern "C" fn cudnnGetErrorString(status: c_int) -> *const c_char {
    let name = STATUS_NAMES
        .iter()
        .find(|(code, _)| *code == status)
        .map_or("CUDNN_UNKNOWN_STATUS\0", |(_, n)| n);
    name.as_ptr().cast()
}

/// Copy the thread's last error message, truncated to `max` bytes with its NUL.
#[export_name = "__vmcuda_cudnnGetLastErrorString"]
#[allow(non_snake_case)]
pub extern "C" fn cudnnGetLastErrorString(out: *mut c_char, max: usize) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        // SAFETY: by cudnnGetLastErrorString's contract `out` is NULL or holds `max`
        // writable bytes.
        let Ok(buf) = (unsafe { caller::bytes_mut(out.cast(), max) }) else {
            return;
        };
        let Some(room) = max.checked_sub(1) else {
            return;
        };
        LAST_ERROR.with(|l| {
            let text = l.borrow();
            let n = text.len().min(room);
            buf[..n].copy_from_slice(&text.as_bytes()[..n]);
            buf[n] = 0;
        });
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_export_list_numbers_every_function_once() {
        let names: Vec<&str> = (0..).map_while(function_name).collect();
        assert_eq!(names.len(), 224);
        assert_eq!(names[0], "cudnnActivationBackward");
        let unique: HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len());
        assert!(names.contains(&"cudnnCreate"));
    }

    #[test]
    fn a_missing_function_says_what_it_is_and_returns_not_supported() {
        let create = (0..)
            .map_while(function_name)
            .position(|n| n == "cudnnCreate");
        let create = create.unwrap() as u32;
        assert_eq!(cudnn_not_forwarded(create), STATUS_NOT_SUPPORTED);
        let mut buf = [0 as c_char; 256];
        cudnnGetLastErrorString(buf.as_mut_ptr(), buf.len());
        // SAFETY: NUL-terminated by cudnnGetLastErrorString within the buffer.
        let text = unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) };
        let text = text.to_str().unwrap();
        assert!(text.starts_with("vmcuda: cuDNN is not forwarded yet: cudnnCreate (libcudnn.so.9)"));
        // Truncated, still terminated.
        let mut small = [1 as c_char; 8];
        cudnnGetLastErrorString(small.as_mut_ptr(), small.len());
        assert_eq!(small[7], 0);
        // SAFETY: a static NUL-terminated string.
        let name = unsafe { std::ffi::CStr::from_ptr(cudnnGetErrorString(3000)) };
        assert_eq!(name.to_str(), Ok("CUDNN_STATUS_NOT_SUPPORTED"));
        assert_eq!(cudnnGetVersion(), 91900);
    }
}
