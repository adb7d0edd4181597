//! The CUDA executor: a guest's calls run on real GPUs through the CUDA driver API
//! (cudarc's `result` layer where a call maps one to one, its raw `sys` bindings
//! elsewhere, with libcuda loaded at run time).
//!
//! Design:
//! - [`CudaExecutor::new`] checks that libcuda can be loaded and exports every entry
//!   point used here before the first cudarc call (cudarc panics on a missing library
//!   or symbol), so a host without a GPU gets an error and can fall back. The list is
//!   generated from these sources by `build.rs` (see `symbols`).
//! - One retained primary context per device, made lazily. Every call that needs a
//!   context first binds the current device's context to the calling thread (a cheap
//!   `cuCtxGetCurrent` compare), so the executor never relies on stale thread state.
//! - Stream and event ids are the driver handles' pointer values; ids from the guest
//!   are looked up in this executor's tables before anything reaches the driver.
//!   `LEGACY_STREAM` is the NULL stream and `PER_THREAD_STREAM` `CU_STREAM_PER_THREAD`.
//! - A module is one fatbinary, which may hold several containers back to back (nvcc 13
//!   puts a linker stub's container before the user's): each container is loaded with
//!   `cuLibraryLoadData` (context-independent) and images are cached by SHA-256.
//!   Functions are `CUkernel`s, launched directly with `cuLaunchKernelEx`.
//! - Synchronous copies above [`STAGING_THRESHOLD`] go through a per-device pinned
//!   buffer in two halves: filling (or draining) one half overlaps the DMA of the
//!   other, on the target stream, so stream ordering is that of the plain copy.
//! - Every failing `CUresult` becomes `CudaStatus::from_driver(code)`.
//!
//! Modules, one per API family; each adds its part of `impl CudaExecutor`, and the
//! [`Executor`] implementation below hands every call to it:
//! - `device`: start-up, devices, contexts, limits, peers, reset and teardown.
//! - `memory`: allocation, fills, host registration, pointer attributes.
//! - `copy`: plain, 2D, peer and registered-memory copies.
//! - `staging`: the pinned staging buffers and the queued copies from and into the
//!   worker's page-locked buffers.
//! - `module`: fatbinary images, kernels and globals.
//! - `launch`: function attributes, launches, occupancy; `launch_batch`: runs of
//!   posted launches sent as one graph launch.
//! - `stream`: streams and events.
//! - `symbols`: the generated list of driver entry points.
//! - `driver`, `graph`: the driver-API calls beyond the runtime's, graphs and memory
//!   pools.

use std::collections::HashMap;

use cudarc::driver::result::DriverError;
use cudarc::driver::sys;
use tracing::warn;
use vmcuda_wire::op::ExecutorKind;
use vmcuda_wire::CudaStatus;

use super::{ExecEvent, ExecFunction, ExecModule, ExecResult, ExecStream, Executor};

/// The enum variant of `$ty` whose number is `$v`, if it is one of those listed.
macro_rules! enum_from_u32 {
    ($v:expr, $ty:ident, [$($var:ident),* $(,)?]) => {{
        let v: u32 = $v;
        $(if v == sys::$ty::$var as u32 {
            Some(sys::$ty::$var)
        } else)* {
            None
        }
    }};
}

mod abi;
mod array;
mod copy;
mod device;
mod driver;
mod graph;
mod graph_build;
mod launch;
mod launch_batch;
mod memory;
mod module;
mod pass_through;
mod readings;
mod staging;
mod stream;
mod symbols;
mod texref;
mod uuid;
mod zero;

pub(crate) use readings::free_memory;
pub use staging::{STAGING_HALF, STAGING_THRESHOLD};
pub use uuid::format_uuid;

/// The runtime status with the same meaning as a driver error.
fn status(e: DriverError) -> CudaStatus {
    CudaStatus::from_driver(e.0 as u32)
}

/// `Ok` for `CUDA_SUCCESS`, else the runtime status with the same meaning: for the raw
/// `sys` calls that cudarc's `result` layer does not wrap.
fn check(r: sys::CUresult) -> ExecResult<()> {
    r.result().map_err(status)
}

fn to_usize(v: u64) -> ExecResult<usize> {
    usize::try_from(v).map_err(|_| CudaStatus::ErrorInvalidValue)
}

/// An entry point of a library cudarc loaded (the driver), with the C
/// signature `F`; a library without it answers `cudaErrorNotSupported`, logged.
///
/// # Safety
/// `F` must be the symbol's C signature (or a plain address, `*const c_void`).
unsafe fn entry_point<F: Copy>(
    lib: &libloading::Library,
    library: &'static str,
    name: &str,
) -> ExecResult<F> {
    // SAFETY: only looks the symbol up; the caller vouches for its signature.
    match unsafe { lib.get::<F>(name.as_bytes()) } {
        Ok(f) => Ok(*f),
        Err(_) => {
            warn!(
                library,
                name, "an entry point this executor needs is missing"
            );
            Err(CudaStatus::ErrorNotSupported)
        }
    }
}

/// The executor for real GPUs. See the module documentation.
pub struct CudaExecutor {
    driver_version: i32,
    devices: Vec<device::Device>,
    /// Index into `devices` of the current device.
    current: usize,
    get_attribute_raw: device::RawDeviceGetAttribute,
    /// Live streams and events (handle value -> device index).
    streams: HashMap<ExecStream, usize>,
    /// Streams the guest destroyed while work in them still ran (device index, stream):
    /// destroyed here once that work is done (see `stream_destroy`).
    dying_streams: Vec<(usize, sys::CUstream)>,
    events: HashMap<ExecEvent, usize>,
    modules: HashMap<ExecModule, module::Module>,
    module_by_digest: HashMap<[u8; 32], ExecModule>,
    next_module: ExecModule,
    /// Kernels handed out (id = the `CUkernel` pointer value).
    functions: HashMap<ExecFunction, sys::CUkernel>,
    /// `CUfunction`s of kernels in a device's context, for the occupancy calls.
    function_cache: HashMap<(ExecFunction, usize), sys::CUfunction>,
    /// Host ranges registered with the driver (start, length): copies to and from them
    /// are DMA'd directly, with no staging.
    registered: Vec<(usize, usize)>,
    queued: staging::QueuedCopies,
    /// Graphs and executable graphs (see `graph`).
    graph_tables: graph::CudaGraphs,
    array_tables: array::CudaArrays,
    /// Posted launches held to go to the GPU together (see `launch_batch`).
    batch: launch_batch::LaunchBatch,
    /// The retained contexts, for the turn keeper's drain (see `device`).
    held_contexts: device::HeldContexts,
}

impl Executor for CudaExecutor {
    fn kind(&self) -> ExecutorKind {
        ExecutorKind::Cuda
    }

    fn banner(&self) -> String {
        CudaExecutor::banner(self)
    }

    fn driver_version(&self) -> i32 {
        self.driver_version
    }

    fn device_count(&self) -> i32 {
        self.devices.len() as i32
    }
}

impl Drop for CudaExecutor {
    fn drop(&mut self) {
        self.release_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::GpuSelection;

    #[test]
    fn driver_errors_keep_their_code() {
        let e = DriverError(sys::CUresult::CUDA_ERROR_NOT_READY);
        assert_eq!(status(e), CudaStatus::ErrorNotReady);
        assert_eq!(check(sys::CUresult::CUDA_SUCCESS), Ok(()));
        assert_eq!(
            check(sys::CUresult::CUDA_ERROR_INVALID_VALUE),
            Err(CudaStatus::from_driver(
                sys::CUresult::CUDA_ERROR_INVALID_VALUE as u32
            ))
        );
    }

    /// Runs only where a GPU is present: a no-GPU machine must get an error, never a
    /// panic.
    #[test]
    fn new_never_panics() {
        match CudaExecutor::new(&GpuSelection::all()) {
            Ok(exec) => assert!(exec.device_count() > 0),
            Err(status) => assert!(!status.is_success()),
        }
    }
}
