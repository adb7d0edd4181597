//! The cuBLAS functions vmcuda does not forward: every other export of the real
//! `libcublas.so.13` (guest-lib/exports/libcublas.so.13.txt).
//!
//! `libcublas.so.13` (guest-lib/build-libs.sh) exports each of them, under its version
//! node, as a stub that passes its index in that list to [`cublas_not_supported`],
//! which says once per function, on stderr, which function it is and returns
//! `CUBLAS_STATUS_NOT_SUPPORTED`. So a library linked against NVIDIA's cuBLAS (cuSOLVER
//! binds 144 of its functions) loads, and a call vmcuda lacks fails with a line naming
//! it rather than a missing symbol at load.

use std::panic::catch_unwind;

use super::{cublasStatus_t, status};

/// The real library's exports, `name@@libcublas.so.13` a line.
const EXPORTS: &str = include_str!("../../exports/libcublas.so.13.txt");

/// The name of function `index` of the export list, in the order build-libs.sh
/// numbers its stubs.
pub fn function_name(index: u32) -> Option<&'static str> {
    crate::notice::listed_names(EXPORTS).nth(index as usize)
}

/// The line a call to function `name` prints (once).
pub fn message(name: &str) -> String {
    let why = if name.starts_with("cublasXt") {
        "is cuBLASXt, which vmcuda does not forward (cuBLAS's own API does the same work)"
    } else {
        "is not forwarded by vmcuda yet"
    };
    format!("vmcuda: {name} (libcublas.so.13) {why}; it returns CUBLAS_STATUS_NOT_SUPPORTED")
}

/// The stub of every cuBLAS function not forwarded: `index` is its place in the export
/// list.
#[export_name = "__vmcuda_cublas_not_supported"]
pub extern "C" fn cublas_not_supported(index: u32) -> cublasStatus_t {
    let _ = catch_unwind(|| {
        let name = function_name(index).unwrap_or("a cuBLAS function");
        crate::notice::say_once(&message(name));
    });
    status::NOT_SUPPORTED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_name_their_function_from_the_export_list() {
        let names: Vec<&str> = (0..).map_while(function_name).collect();
        assert!(names.len() > 700, "{}", names.len());
        assert!(names.iter().all(|n| n.starts_with("cublas")));
        let at = names.iter().position(|n| *n == "cublasXtCreate").unwrap();
        assert!(message(function_name(at as u32).unwrap()).contains("cuBLASXt"));
        assert_eq!(cublas_not_supported(u32::MAX), status::NOT_SUPPORTED);
    }
}
