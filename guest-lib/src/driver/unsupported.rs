//! The driver functions vmcuda does not implement: every other export of the real
//! `libcuda.so.1` (guest-lib/exports/libcuda.so.1.txt).
//!
//! `libcuda.so.1` (guest-lib/build-libs.sh) exports each of them as a stub that passes
//! its index in that list to [`cu_not_supported`], which says once per function, on
//! stderr, which function it is, and answers `CUDA_ERROR_NOT_SUPPORTED`. The families
//! that do not cross the VM boundary (graphics interop, NvSci, external memory and
//! semaphores, the debugger, multicast, green contexts, checkpointing, dma-buf export:
//! guest-lib/exports/libcuda-families.txt) say why; the rest are not implemented yet,
//! and guest-lib/exports/libcuda-stubs.txt lists them (CI checks the list against the
//! built library, so it can only shrink).
//!
//! **`cuGetProcAddress` hands these stubs out** ([`lookup`]), as the real driver hands
//! out every function it exports. NVIDIA's runtime asks for every entry point it knows
//! eagerly at start-up (346 names); what it does with one answered "not found" is not
//! documented, and a runtime that fails to start fails every feature, where a stub fails
//! only the feature that calls it, with a line naming the function. Two families stay
//! "not found": green contexts and multicast, which callers (torch) treat as optional
//! features and detect by the lookup itself, falling back to what vmcuda serves.

use std::ffi::c_void;
use std::panic::{catch_unwind, AssertUnwindSafe};

use super::result::{CUresult, CUDA_ERROR_NOT_SUPPORTED};

/// The real driver's exports, one a line (`#` lines are comments).
const EXPORTS: &str = include_str!("../../exports/libcuda.so.1.txt");

/// The export list's names, in the order build-libs.sh numbers its stubs.
pub fn export_names() -> impl Iterator<Item = &'static str> {
    crate::notice::listed_names(EXPORTS)
}

/// Functions probed by lookup as optional features (see the module documentation).
const OPTIONAL_FEATURES: &[&str] = &[
    "cuGreenCtx",
    "cuCtxFromGreenCtx",
    "cuDevResource",
    "cuDevSm",
    "cuDeviceGetDevResource",
    "cuCtxGetDevResource",
    "cuMulticast",
];

fn is_optional_feature(name: &str) -> bool {
    OPTIONAL_FEATURES.iter().any(|p| name.starts_with(p))
}

/// The families of functions that do not cross the VM boundary, by name
/// (guest-lib/exports/libcuda-families.txt, which CI's stub count reads too).
const FAMILIES: &str = include_str!("../../exports/libcuda-families.txt");

/// The family `name` belongs to, if any.
pub fn family(name: &str) -> Option<&'static str> {
    crate::notice::listed_names(FAMILIES).find_map(|line| {
        let mut words = line.split_whitespace();
        let family = words.next()?;
        words
            .any(
                |p| match p.strip_prefix('*').and_then(|p| p.strip_suffix('*')) {
                    Some(inner) => name.contains(inner),
                    None => name.starts_with(p),
                },
            )
            .then_some(family)
    })
}

/// Why a function cannot work through vmcuda, for its stderr line.
fn reason(name: &str) -> &'static str {
    match family(name) {
        Some("graphics") => "is graphics interop, which cannot cross the VM boundary",
        Some("nvsci") => "is NvSci interop, which cannot cross the VM boundary",
        Some("external") => {
            "imports memory or semaphores of another API (Vulkan, Direct3D, NvSci, OS \
             handles), which cannot cross the VM boundary"
        }
        Some("debugger") => "is the CUDA debugger's own interface, which vmcuda does not forward",
        Some("multicast") => "makes NVLink multicast objects, which vmcuda does not forward",
        Some("green") => "is a green-context call, which vmcuda does not forward",
        Some("checkpoint") => {
            "checkpoints a process on its own driver; a guest's GPU state lives in its host \
             worker, which the host checkpoints"
        }
        Some("dmabuf") => {
            "exports device memory as a dma-buf file descriptor of the host's kernel, which \
             cannot cross the VM boundary"
        }
        _ => "is not implemented by vmcuda yet",
    }
}

/// The line a call to function `name` prints (once).
pub fn message(name: &str) -> String {
    format!(
        "vmcuda: {name} (libcuda.so.1) {}; it returns CUDA_ERROR_NOT_SUPPORTED",
        reason(name)
    )
}

/// The stub of every function not implemented: `index` is its place in the export list.
#[export_name = "__vmcuda_cu_not_supported"]
pub extern "C" fn cu_not_supported(index: u32) -> CUresult {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let name = export_names()
            .nth(index as usize)
            .unwrap_or("a driver function");
        crate::notice::say_once(&message(name));
    }));
    CUDA_ERROR_NOT_SUPPORTED
}

/// The stub `cuGetProcAddress` hands out for the function at `I` in the export list.
/// Every argument is ignored: whatever the function's signature, the C caller's
/// arguments are left as they are and the result register holds the answer.
extern "C" fn stub<const I: u32>() -> CUresult {
    cu_not_supported(I)
}

type Stub = extern "C" fn() -> CUresult;

macro_rules! row {
    ($r:literal) => {
        [
            stub::<{ $r * 16 }>,
            stub::<{ $r * 16 + 1 }>,
            stub::<{ $r * 16 + 2 }>,
            stub::<{ $r * 16 + 3 }>,
            stub::<{ $r * 16 + 4 }>,
            stub::<{ $r * 16 + 5 }>,
            stub::<{ $r * 16 + 6 }>,
            stub::<{ $r * 16 + 7 }>,
            stub::<{ $r * 16 + 8 }>,
            stub::<{ $r * 16 + 9 }>,
            stub::<{ $r * 16 + 10 }>,
            stub::<{ $r * 16 + 11 }>,
            stub::<{ $r * 16 + 12 }>,
            stub::<{ $r * 16 + 13 }>,
            stub::<{ $r * 16 + 14 }>,
            stub::<{ $r * 16 + 15 }>,
        ]
    };
}

macro_rules! rows {
    ($($r:literal)*) => { [$(row!($r),)*] };
}

/// One stub per place in the export list (room for 768 names).
static STUBS: [[Stub; 16]; 48] = rows!(
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23
    24 25 26 27 28 29 30 31 32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47
);

/// The stub for `name` when it is an export of the real driver that `cuGetProcAddress`
/// hands out (see the module documentation); the caller has found no implementation.
pub fn lookup(name: &str) -> Option<*mut c_void> {
    if is_optional_feature(name) {
        return None;
    }
    let index = export_names().position(|n| n == name)?;
    let stub = STUBS.get(index / 16)?[index % 16];
    Some(stub as *mut c_void)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_list_is_the_real_drivers_and_fits_the_stubs() {
        let names: Vec<&str> = export_names().collect();
        assert_eq!(names.len(), 682);
        assert!(names.len() <= STUBS.len() * 16);
        let unique: HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "no name twice");
        for want in ["cuInit", "cuMemAlloc_v2", "cuGLInit", "cuGetExportTable"] {
            assert!(names.contains(&want), "{want}");
        }
    }

    #[test]
    fn a_stub_answers_not_supported_for_its_own_function() {
        let index = export_names().position(|n| n == "cuGLInit").unwrap();
        let f = lookup("cuGLInit").expect("cuGLInit is handed out");
        // SAFETY: `lookup` hands out `Stub`s.
        let f: Stub = unsafe { std::mem::transmute::<*mut c_void, Stub>(f) };
        assert_eq!(f(), CUDA_ERROR_NOT_SUPPORTED);
        assert_eq!(cu_not_supported(index as u32), CUDA_ERROR_NOT_SUPPORTED);
        assert!(crate::notice::said(&message("cuGLInit")));
        // An index past the list still answers.
        assert_eq!(cu_not_supported(100_000), CUDA_ERROR_NOT_SUPPORTED);
    }

    #[test]
    fn messages_name_the_function_and_why() {
        assert_eq!(
            message("cuGLInit"),
            "vmcuda: cuGLInit (libcuda.so.1) is graphics interop, which cannot cross the VM \
             boundary; it returns CUDA_ERROR_NOT_SUPPORTED"
        );
        assert!(message("cuEGLStreamProducerConnect").contains("graphics interop"));
        assert!(message("cuGraphicsVDPAURegisterVideoSurface").contains("graphics interop"));
        assert!(message("cuDeviceGetNvSciSyncAttributes").contains("NvSci"));
        assert!(message("cuImportExternalMemory").contains("another API"));
        assert!(message("cuGraphAddExternalSemaphoresSignalNode").contains("another API"));
        assert!(message("cuDestroyExternalSemaphore").contains("another API"));
        assert!(message("cudbgApiInit").contains("debugger"));
        assert!(message("cuCheckpointProcessLock").contains("checkpoints"));
        assert!(message("cuMulticastCreate").contains("multicast"));
        assert!(message("cuGreenCtxCreate").contains("green-context"));
        assert!(message("cuGraphicsMapResources").contains("graphics interop"));
        assert!(message("cuGraphCreate").contains("not implemented by vmcuda yet"));
    }

    /// The stubs outside the families that cannot cross the VM boundary, as CI
    /// counts them (tests/tests/apps.rs compares the built libcuda.so.1 with this
    /// list): only real exports, none of a family, each once. The list may only shrink.
    #[test]
    fn the_remaining_stubs_are_real_exports_outside_the_families() {
        let list = include_str!("../../exports/libcuda-stubs.txt");
        let names: Vec<&str> = crate::notice::listed_names(list).collect();
        let exports: HashSet<&str> = export_names().collect();
        let unique: HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "no name twice");
        for name in &names {
            assert!(
                exports.contains(name),
                "{name} is not an export of the real driver"
            );
            assert_eq!(
                family(name),
                None,
                "{name} is in a family the count leaves out"
            );
        }
        for (name, want) in [
            ("cuGLInit", "graphics"),
            ("cuGraphicsUnregisterResource", "graphics"),
            ("cuDeviceGetNvSciSyncAttributes", "nvsci"),
            ("cudbgGetAPI", "debugger"),
            ("cuWaitExternalSemaphoresAsync_ptsz", "external"),
            ("cuMulticastBindMem", "multicast"),
            ("cuCtxFromGreenCtx", "green"),
            ("cuCheckpointProcessRestore", "checkpoint"),
        ] {
            assert_eq!(family(name), Some(want), "{name}");
        }
        assert_eq!(family("cuMemAlloc_v2"), None);
        // CUDA IPC works between a VM's processes (driver::ipc): no family of stubs.
        assert_eq!(family("cuIpcGetMemHandle"), None);
        assert!(super::super::proc_address::NAMES
            .iter()
            .any(|(base, _)| *base == "cuIpcOpenMemHandle"));
    }

    #[test]
    fn optional_features_and_unknown_names_are_not_handed_out() {
        assert!(lookup("cuGreenCtxCreate").is_none());
        assert!(lookup("cuMulticastCreate").is_none());
        assert!(lookup("cuNoSuchFunction").is_none());
        assert!(lookup("cuGraphCreate").is_some());
    }
}
