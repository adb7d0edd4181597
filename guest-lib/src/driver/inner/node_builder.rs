//! The builder: a stream of our own per device that captures into the program's
//! graphs, so that a node is made by doing its work on it (hand-made nodes, a copy
//! made of several operations captured as one node). It stands on streams and
//! captures only; the node families above use it.

use std::collections::HashMap;
use std::sync::Mutex;

use vmcuda_wire::graph::{
    capture_mode, GraphAddNode, PlainNode, StreamBeginCaptureToGraph, StreamEndCapture,
    StreamGetCaptureGraph,
};
use vmcuda_wire::op::{GraphCreate, GraphDestroy, GraphHandle, GraphNodeHandle, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::{call, stream_handle, RawHandle, Result};
use crate::capture;
use crate::driver::keeping_last_error;
use crate::{cudaError_t, state};

/// Our own stream per device that captures into the program's graphs, one node at a
/// time (the lock is held while it does).
static BUILDERS: Mutex<Option<HashMap<i32, usize>>> = Mutex::new(None);

thread_local! {
    /// This thread is doing a node's work on the builder stream.
    static IN_BUILD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is doing a node's work for `build_node` (work that
/// needs a node of its own built must not start another build then).
pub(crate) fn in_build() -> bool {
    IN_BUILD.with(|b| b.get())
}

/// Capture `work`, which makes several nodes on `stream`, as one child-graph node of
/// the graph `stream` is capturing into, after the nodes the stream's next work would
/// depend on: the program's graph gains one node, as natively for one operation.
pub(crate) fn capture_as_one_node(
    stream: StreamHandle,
    work: impl FnOnce(StreamHandle) -> Result<()>,
) -> Result<()> {
    let scratch = call(&GraphCreate { flags: 0 })?.graph;
    let made = build_node(scratch.into(), &[], |s| {
        match work(stream_handle(s, false)) {
            Ok(()) => 0,
            Err(e) => e.0,
        }
    })
    .and_then(|_| {
        let shown = call(&StreamGetCaptureGraph { stream })?;
        let child = call(&GraphAddNode {
            graph: shown.graph,
            dependencies: shown.dependencies,
            node: PlainNode::ChildGraph(scratch),
        })?
        .node;
        call(&vmcuda_wire::op::StreamUpdateCaptureDependencies {
            stream,
            dependencies: vec![child],
            edges: Vec::new(),
            set: true,
        })
    });
    let destroyed = call(&GraphDestroy { graph: scratch });
    made?;
    destroyed
}

/// `cudaStreamNonBlocking`: the builder never synchronizes with the legacy stream.
const NON_BLOCKING: u32 = 1;

/// Make one node of `graph`, after `deps`, by doing `work` on a stream capturing into
/// it: the node the capture adds.
pub(crate) fn build_node(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    work: impl FnOnce(RawHandle) -> cudaError_t,
) -> Result<GraphNodeHandle> {
    if graph.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let mut builders = BUILDERS.lock().unwrap_or_else(|p| p.into_inner());
    let device = state::current_device();
    let known = builders
        .get_or_insert_with(HashMap::new)
        .get(&device)
        .copied();
    let raw = match known {
        Some(raw) => raw as RawHandle,
        None => {
            let mut raw: RawHandle = std::ptr::null_mut();
            keeping_last_error(|| {
                super::stream::cudaStreamCreateWithFlags(&mut raw, NON_BLOCKING)
            })?;
            builders
                .get_or_insert_with(HashMap::new)
                .insert(device, raw as usize);
            raw
        }
    };
    let stream = stream_handle(raw, false);
    call(&StreamBeginCaptureToGraph {
        stream,
        graph: GraphHandle::from(graph),
        dependencies: deps.to_vec(),
        edges: Vec::new(),
    })?;
    capture::begin(stream, capture_mode::RELAXED);
    IN_BUILD.with(|b| b.set(true));
    let worked = keeping_last_error(|| work(raw));
    IN_BUILD.with(|b| b.set(false));
    let shown = worked.and_then(|()| call(&StreamGetCaptureGraph { stream }));
    let invalidated = capture::end(stream)?;
    let ended = call(&StreamEndCapture {
        stream,
        invalidated,
    });
    let shown = shown?;
    ended?;
    // The work's one node (a copy done in several pieces ends in its last).
    shown
        .dependencies
        .last()
        .copied()
        .ok_or(CudaStatus::ErrorInvalidValue)
}

/// Forget the builder streams (the device was reset: they are gone).
pub fn forget_device_state() {
    *BUILDERS.lock().unwrap_or_else(|p| p.into_inner()) = None;
}
