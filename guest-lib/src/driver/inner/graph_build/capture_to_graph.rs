//! Capture into a graph the program made, and changes to a capture's dependencies.

use super::*;

// ---- capture into a graph -----------------------------------------------------------

/// # Safety
/// `deps` (and `edge_data`, if given) hold `count` readable entries.
pub(super) unsafe fn begin_capture_to_graph(
    stream: StreamHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    mode: u32,
) -> Result<()> {
    capture::may_begin(stream, mode)?;
    if !super::super::known_stream(stream) || graph.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let (deps, edges) = unsafe { (dependencies(deps, count)?, edge_list(edge_data, count)?) };
    crate::gate::sync_stream(stream)?;
    call(&StreamBeginCaptureToGraph {
        stream,
        graph: GraphHandle::from(graph),
        dependencies: deps,
        edges,
    })?;
    capture::begin_into_graph(stream, mode);
    Ok(())
}

pub extern "C" fn cudaStreamBeginCaptureToGraph(
    stream: RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    mode: u32,
) -> cudaError_t {
    guard("cudaStreamBeginCaptureToGraph", || {
        // SAFETY: by its contract `deps` and `edge_data` are NULL or hold `count`.
        unsafe {
            begin_capture_to_graph(
                stream_handle(stream, false),
                graph,
                deps,
                edge_data,
                count,
                mode,
            )
        }
    })
}

/// `cudaStreamAddCaptureDependencies` 0, `cudaStreamSetCaptureDependencies` 1.
const SET_CAPTURE_DEPENDENCIES: u32 = 1;

/// # Safety
/// `deps` (and `edge_data`, if given) hold `count` readable entries.
pub(super) unsafe fn update_capture_dependencies(
    stream: StreamHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    flags: u32,
) -> Result<()> {
    if flags > SET_CAPTURE_DEPENDENCIES {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if !capture::is_capturing(stream) {
        return Err(CudaStatus::ErrorIllegalState);
    }
    // SAFETY: as the caller promised.
    let (dependencies, edges) =
        unsafe { (dependencies(deps, count)?, edge_list(edge_data, count)?) };
    call(&vmcuda_wire::op::StreamUpdateCaptureDependencies {
        stream,
        dependencies,
        edges,
        set: flags == SET_CAPTURE_DEPENDENCIES,
    })
}

pub extern "C" fn cudaStreamUpdateCaptureDependencies(
    stream: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    flags: u32,
) -> cudaError_t {
    guard("cudaStreamUpdateCaptureDependencies", || {
        // SAFETY: by its contract the lists are NULL or hold `count` entries.
        unsafe {
            update_capture_dependencies(stream_handle(stream, false), deps, edge_data, count, flags)
        }
    })
}
