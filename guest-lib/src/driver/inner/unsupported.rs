//! The runtime functions vmcuda's retired runtime library did not implement: every
//! other export of the real `libcudart.so.13` (guest-lib/exports/libcudart.so.13.txt).
//!
//! That library exported each of them as a stub that passed its index in that list to
//! [`cudart_not_supported`], which says once per function, on stderr, which function it
//! is, records `cudaErrorNotSupported` as the thread's last error and returns it. No
//! library is built with those stubs any more (NVIDIA's runtime runs on the driver), so
//! nothing calls it now. Its lines say that graphics interop (GL, EGL, VDPAU),
//! external memory and semaphores and NvSci cannot cross the VM boundary; the rest
//! were not implemented.

use std::panic::{catch_unwind, AssertUnwindSafe};

use vmcuda_wire::CudaStatus;

use crate::cudaError_t;
use crate::state;

/// The real runtime's exports, `name@@libcudart.so.13` a line (`#` lines are comments).
const EXPORTS: &str = include_str!("../../../exports/libcudart.so.13.txt");

/// The export list's function names (its `name@@node` lines), in the order
/// build-libs.sh numbers its stubs.
pub fn export_names() -> impl Iterator<Item = &'static str> {
    crate::notice::listed_names(EXPORTS)
}

/// Why a function cannot work through vmcuda, for its stderr line.
fn reason(name: &str) -> &'static str {
    const GRAPHICS: &[&str] = &[
        "cudaGL",
        "cudaEGL",
        "cudaVDPAU",
        "cudaGraphics",
        "cudaEventCreateFromEGLSync",
        "cudaD3D",
    ];
    const EXTERNAL: &[&str] = &[
        "cudaImportExternal",
        "cudaExternalMemory",
        "cudaDestroyExternal",
        "cudaSignalExternalSemaphores",
        "cudaWaitExternalSemaphores",
        "cudaGraphAddExternalSemaphores",
        "cudaGraphExecExternalSemaphores",
        "cudaGraphExternalSemaphores",
    ];
    if GRAPHICS.iter().any(|p| name.starts_with(p)) {
        "is graphics interop, which cannot cross the VM boundary"
    } else if EXTERNAL.iter().any(|p| name.starts_with(p)) {
        "shares memory or semaphores with another API, which cannot cross the VM boundary"
    } else if name.contains("NvSci") {
        "is NvSci interop, which cannot cross the VM boundary"
    } else {
        "is not implemented by vmcuda yet"
    }
}

/// The line a call to function `name` prints (once).
pub fn message(name: &str) -> String {
    format!(
        "vmcuda: {name} (libcudart.so.13) {}; it returns cudaErrorNotSupported",
        reason(name)
    )
}

/// The stub of every runtime function not implemented: `index` is its place in the
/// export list.
pub extern "C" fn cudart_not_supported(index: u32) -> cudaError_t {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let name = export_names()
            .nth(index as usize)
            .unwrap_or("a runtime function");
        crate::notice::say_once(&message(name));
    }));
    state::set_last_error(CudaStatus::ErrorNotSupported.0);
    CudaStatus::ErrorNotSupported.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_list_and_say_why() {
        let names: Vec<&str> = export_names().collect();
        assert!(names.len() > 400, "{}", names.len());
        assert!(names.contains(&"cudaMalloc"));
        assert!(names.iter().all(|n| !n.contains('@')));
        assert!(message("cudaGLSetGLDevice").contains("graphics interop"));
        assert!(message("cudaImportExternalMemory").contains("cannot cross"));
        assert!(message("cudaAFunctionOfANewerRuntime").contains("not implemented by vmcuda yet"));
    }
}
