//! The driver's inner functions, one module per family: the implementation the
//! driver's exports call (streams, copies, graphs, arrays, devices, memory pools,
//! module images, ...). They were written as the CUDA runtime API, when
//! vmcuda's own runtime library exported them, and keep its shapes: `cuda*` names,
//! `cudaError_t` answers, the thread's last error. No library exports them any more:
//! the driver's functions call them, through [`super::keeping_last_error`] (which
//! leaves that last error as it was) where one answers `cudaError_t`, and the families'
//! plain Rust helpers (`device::properties`, `launch::check_config`, ...) directly.
//!
//! Every inner function runs its body through [`guard`]: a panic becomes
//! `cudaErrorUnknown` instead of unwinding, and a failure is stored as the thread's
//! last error and in the call log ([`crate::call_log`]).
//!
//! The families stand in layers too (`tests/tests/layers.rs` holds that no two use
//! each other): `device` at the bottom; streams, launches, libraries, logs, memory and
//! memory pools on it; `node_builder` (a stream of our own that captures into the
//! program's graphs, so that work becomes a node) under the copies that need it;
//! `graph` (captures, graph objects, launches); `array`; `graph_build` (hand-made
//! nodes and executable graphs) over all of them; `reset` (`cudaDeviceReset`, which
//! forgets every family's state) on top.

pub mod array;
pub mod device;
pub mod errors;
pub mod graph;
pub mod graph_build;
pub mod images;
pub mod ipc;
pub mod launch;
pub mod library;
pub mod logs;
pub mod mem_pool;
pub mod memory;
pub mod node_builder;
pub mod per_thread;
pub mod reset;
pub mod stream;

use std::panic::{catch_unwind, AssertUnwindSafe};

use vmcuda_wire::op::StreamHandle;
use vmcuda_wire::CudaStatus;

use crate::cudaError_t;
use crate::state;

// The requests to the host, from the layer below, as the families use them.
pub(crate) use crate::request::wait_by_queries;
pub use crate::request::{
    call, call_with, device_of_event, device_of_ptr, device_of_stream, known_stream, local_device,
    on_different_hosts, on_host_of, post, post_now, Result,
};

/// Run an inner function's body: no unwinding across the C boundary, last error
/// recorded.
pub fn guard(name: &'static str, body: impl FnOnce() -> Result<()>) -> cudaError_t {
    state::note_thread();
    let status = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(status)) => status.0,
        Err(_) => {
            eprintln!("vmcuda: internal error in {name}; reporting cudaErrorUnknown");
            CudaStatus::ErrorUnknown.0
        }
    };
    // "Not ready" answers a query; it is not an error the runtime remembers.
    if status != 0 && status != CudaStatus::ErrorNotReady.0 {
        state::set_last_error(status);
        crate::call_log::record(
            format!("{name} failed: {}", CudaStatus(status).name()),
            false,
        );
    }
    status
}

/// The wire handle for a `cudaStream_t`. `per_thread` is true for the `_ptsz`
/// entry points, where the NULL stream means the per-thread default stream: the
/// calling thread's own stream ([`per_thread::default_stream`]).
pub fn stream_handle(stream: *mut libc::c_void, per_thread: bool) -> StreamHandle {
    match stream as usize {
        0 if per_thread => per_thread::default_stream::current(),
        0 | 1 => StreamHandle::LEGACY,
        2 => per_thread::default_stream::current(),
        id => StreamHandle(id as u64),
    }
}

/// Whether a `cudaStream_t` / `CUstream` names one of the default streams (the NULL
/// stream, `cudaStreamLegacy`, `cudaStreamPerThread`), which cannot be destroyed.
pub fn is_default_stream(stream: *mut libc::c_void) -> bool {
    (stream as usize) <= 2
}

/// `cudaStream_t` / `cudaEvent_t` as seen by the program: the guest-made id.
pub type RawHandle = *mut libc::c_void;
