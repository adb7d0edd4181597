//! Stream capture and CUDA graphs.
//!
//! Capture state lives in the guest ([`crate::capture`]): whether a stream captures,
//! its capture id and the threads' capture modes are answered without a round trip.
//! Graphs, executable graphs and nodes are host objects named by the host; the program
//! holds those ids as `cudaGraph_t`, `cudaGraphExec_t` and `cudaGraphNode_t`. Graph
//! launches and the destruction of objects this process made are posted; what the
//! guest does not know goes to the host to refuse (and log).

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void};
use std::sync::Mutex;

use vmcuda_wire::graph::{
    GraphDebugDot, GraphDestroy, GraphExecHandle, GraphGetNodes, GraphHandle, GraphLaunch,
    GraphNodeGetDependencies, GraphNodeHandle, StreamBeginCapture, StreamEndCapture,
    StreamGetCaptureGraph,
};
use vmcuda_wire::op::{GraphConditionalHandleCreate, StreamHandle};
use vmcuda_wire::CudaStatus;

use super::{call, guard, stream_handle, RawHandle, Result};
use crate::capture;
use crate::gate;
use crate::{caller, cudaError_t};

/// Graphs and executable graphs this process holds (host ids).
pub(super) struct Live {
    pub(super) graphs: HashSet<u64>,
    pub(super) execs: HashSet<u64>,
}

static LIVE: Mutex<Option<Live>> = Mutex::new(None);

pub(super) fn live<T>(f: impl FnOnce(&mut Live) -> T) -> T {
    let mut g = LIVE.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(|| Live {
        graphs: HashSet::new(),
        execs: HashSet::new(),
    }))
}

/// Forget graphs, executable graphs and captures (the device was reset: the host's are
/// gone).
pub fn forget_device_state() {
    live(|l| {
        l.graphs.clear();
        l.execs.clear();
    });
    capture::forget_all();
    *DEPENDENCIES.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

/// A conditional node's handle in `graph`, starting at `default_value` at each launch
/// where `flags` has `cudaGraphCondAssignDefault`: the host's driver makes it.
pub extern "C" fn cudaGraphConditionalHandleCreate(
    handle: *mut u64,
    graph: RawHandle,
    default_value: u32,
    flags: u32,
) -> cudaError_t {
    guard("cudaGraphConditionalHandleCreate", || {
        if handle.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let made = call(&GraphConditionalHandleCreate {
            graph: GraphHandle::from(graph),
            default_value,
            flags,
        })?;
        // SAFETY: checked non-null; by the function's contract `handle` is writable.
        unsafe { caller::write(handle, made.handle) }
    })
}

pub extern "C" fn cudaStreamBeginCapture(stream: RawHandle, mode: u32) -> cudaError_t {
    guard("cudaStreamBeginCapture", || {
        let handle = stream_handle(stream, false);
        capture::may_begin(handle, mode)?;
        if !super::known_stream(handle) {
            return Err(CudaStatus::ErrorInvalidResourceHandle);
        }
        // Work queued behind a host function goes first: it precedes the capture.
        gate::sync_stream(handle)?;
        call(&StreamBeginCapture { stream: handle })?;
        capture::begin(handle, mode);
        Ok(())
    })
}

pub extern "C" fn cudaStreamEndCapture(stream: RawHandle, graph: *mut RawHandle) -> cudaError_t {
    guard("cudaStreamEndCapture", || {
        let handle = stream_handle(stream, false);
        // A capture into the program's own graph need not hand it back.
        if graph.is_null() && !capture::into_existing_graph(handle) {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let invalidated = capture::end(handle)?;
        let made = call(&StreamEndCapture {
            stream: handle,
            invalidated,
        });
        match made {
            Ok(made) => {
                live(|l| l.graphs.insert(made.graph.0));
                // SAFETY: by cudaStreamEndCapture's contract `graph` is NULL or writable.
                unsafe { caller::write_opt(graph, made.graph.0 as RawHandle) };
                Ok(())
            }
            Err(e) => {
                // SAFETY: by cudaStreamEndCapture's contract `graph` is NULL or writable.
                unsafe { caller::write_opt(graph, std::ptr::null_mut()) };
                Err(e)
            }
        }
    })
}

pub extern "C" fn cudaStreamIsCapturing(stream: RawHandle, status: *mut u32) -> cudaError_t {
    guard("cudaStreamIsCapturing", || {
        if status.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (s, _) = capture::status(stream_handle(stream, false))?;
        // SAFETY: by cudaStreamIsCapturing's contract `status` is NULL or writable.
        unsafe { caller::write(status, s) }
    })
}

/// The dependency lists handed out by `cudaStreamGetCaptureInfo`, per stream: CUDA
/// keeps each valid until the next call on its stream. (Node handles and all-zero
/// edge data, both 8 bytes an entry.)
static DEPENDENCIES: Mutex<Option<HashMap<StreamHandle, Dependencies>>> = Mutex::new(None);
/// One stream's last dependency list: node handles and their edge data.
type Dependencies = (Box<[u64]>, Box<[u64]>);

/// `cudaStreamGetCaptureInfo` (CUDA 13: with edge data). Status and id are the guest's;
/// the graph being built and the stream's current dependencies, when the program asks
/// for them, are the host's (PyTorch's allocator walks them during a capture).
pub extern "C" fn cudaStreamGetCaptureInfo(
    stream: RawHandle,
    status: *mut u32,
    id: *mut u64,
    graph: *mut RawHandle,
    dependencies: *mut *const RawHandle,
    edge_data: *mut *const c_void,
    num_dependencies: *mut usize,
) -> cudaError_t {
    guard("cudaStreamGetCaptureInfo", || {
        if status.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let (s, capture_id) = capture::status(stream_handle(stream, false))?;
        // SAFETY: by cudaStreamGetCaptureInfo's contract `status` is NULL or writable.
        unsafe { caller::write(status, s) }?;
        if s == capture::STATUS_NONE {
            return Ok(());
        }
        // SAFETY: by cudaStreamGetCaptureInfo's contract `id` is NULL or writable.
        unsafe { caller::write_opt(id, capture_id) };
        let wants_graph = !graph.is_null()
            || !dependencies.is_null()
            || !edge_data.is_null()
            || !num_dependencies.is_null();
        if !wants_graph {
            return Ok(());
        }
        let handle = stream_handle(stream, false);
        let shown = call(&StreamGetCaptureGraph { stream: handle })?;
        let nodes: Box<[u64]> = shown.dependencies.iter().map(|n| n.0).collect();
        let edges: Box<[u64]> = shown.edges.into_boxed_slice();
        if edges.len() != nodes.len() {
            return Err(CudaStatus::ErrorUnknown);
        }
        if edge_data.is_null() && !dependencies.is_null() && edges.iter().any(|&e| e != 0) {
            // As CUDA: the list without its edge data would mislead.
            return Err(CudaStatus::ErrorLossyQuery);
        }
        let (nodes_at, edges_at) = (nodes.as_ptr(), edges.as_ptr());
        let count = nodes.len();
        let mut lists = DEPENDENCIES.lock().unwrap_or_else(|p| p.into_inner());
        lists
            .get_or_insert_with(HashMap::new)
            .insert(handle, (nodes, edges));
        drop(lists);
        // SAFETY: by cudaStreamGetCaptureInfo's contract `graph` is NULL or writable.
        unsafe { caller::write_opt(graph, shown.graph.0 as RawHandle) };
        // SAFETY: by cudaStreamGetCaptureInfo's contract `dependencies` is NULL or
        // writable.
        unsafe { caller::write_opt(dependencies, nodes_at.cast::<RawHandle>()) };
        // SAFETY: by cudaStreamGetCaptureInfo's contract `edge_data` is NULL or writable.
        unsafe { caller::write_opt(edge_data, edges_at.cast::<c_void>()) };
        // SAFETY: by cudaStreamGetCaptureInfo's contract `num_dependencies` is NULL or
        // writable.
        unsafe { caller::write_opt(num_dependencies, count) };
        Ok(())
    })
}

pub extern "C" fn cudaThreadExchangeStreamCaptureMode(mode: *mut u32) -> cudaError_t {
    guard("cudaThreadExchangeStreamCaptureMode", || {
        // SAFETY: by cudaThreadExchangeStreamCaptureMode's contract `mode` is NULL or
        // readable.
        let old = capture::exchange_mode(unsafe { caller::read(mode) }?)?;
        // SAFETY: by cudaThreadExchangeStreamCaptureMode's contract `mode` is NULL or
        // writable.
        unsafe { caller::write(mode, old) }
    })
}

pub extern "C" fn cudaGraphLaunch(exec: RawHandle, stream: RawHandle) -> cudaError_t {
    guard("cudaGraphLaunch", || {
        let stream = stream_handle(stream, false);
        capture::check_stream_use(stream)?;
        let req = GraphLaunch {
            exec: GraphExecHandle(exec as u64),
            stream,
        };
        // A launch of a graph this process holds, on a stream it knows, has no error
        // to report at once: posted, as launches are asynchronous.
        let post = live(|l| l.execs.contains(&(exec as u64))) && super::known_stream(stream);
        crate::host_functions::launched();
        gate::submit(stream, move || {
            if post {
                super::post(&req, &[])
            } else {
                call(&req)
            }
        })
    })
}

/// Destroy a host object: posted when this process holds it, else asked (the host
/// refuses and logs it).
pub(super) fn destroy<R>(id: u64, held: fn(&mut Live) -> &mut HashSet<u64>, req: R) -> Result<()>
where
    R: vmcuda_wire::op::Request,
    R::Reply: Default,
{
    if id == 0 {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    if live(|l| held(l).remove(&id)) {
        super::post(&req, &[])
    } else {
        call(&req).map(|_| ())
    }
}

pub extern "C" fn cudaGraphDestroy(graph: RawHandle) -> cudaError_t {
    guard("cudaGraphDestroy", || {
        let req = GraphDestroy {
            graph: GraphHandle(graph as u64),
        };
        destroy(graph as u64, |l| &mut l.graphs, req)?;
        super::logs::holder_gone(graph as u64);
        Ok(())
    })
}

/// Hand a node list to the program the CUDA way: with `out` NULL, only the count; else
/// at most `*count` nodes, the rest of a longer array NULL, and `*count` lowered to
/// the number there are. `edges`, when given, gets each node's edge data from `data`
/// (default where `data` has none); without it, a list with other than default edge
/// data is refused as lossy, as CUDA does.
///
/// # Safety
/// `count` is NULL or readable and writable; unless NULL, `out` is writable for
/// `*count` handles and `edges` for `*count` 8-byte edge data records.
pub(super) unsafe fn give_nodes(
    nodes: &[GraphNodeHandle],
    data: &[u64],
    out: *mut RawHandle,
    edges: *mut u8,
    count: *mut usize,
) -> Result<()> {
    // SAFETY: as `give_nodes`'s caller promised.
    let room = unsafe { caller::read(count) }?;
    if out.is_null() {
        // SAFETY: as `give_nodes`'s caller promised.
        return unsafe { caller::write(count, nodes.len()) };
    }
    if edges.is_null() && data.iter().any(|&e| e != 0) {
        return Err(CudaStatus::ErrorLossyQuery);
    }
    for i in 0..room {
        let node = nodes
            .get(i)
            .map_or(std::ptr::null_mut(), |n| n.0 as RawHandle);
        // SAFETY: as `give_nodes`'s caller promised.
        unsafe { caller::write(out.wrapping_add(i), node) }?;
    }
    if !edges.is_null() {
        // `cudaGraphEdgeData` is 8 bytes, all zero for a default edge.
        // SAFETY: as `give_nodes`'s caller promised.
        let out = unsafe { caller::bytes_mut(edges, room * 8) }?;
        for (i, record) in out.chunks_exact_mut(8).enumerate() {
            let edge = data.get(i).copied().unwrap_or(0);
            record.copy_from_slice(&edge.to_le_bytes());
        }
    }
    if room > nodes.len() {
        // SAFETY: as `give_nodes`'s caller promised.
        unsafe { caller::write(count, nodes.len()) }?;
    }
    Ok(())
}

pub extern "C" fn cudaGraphGetNodes(
    graph: RawHandle,
    nodes: *mut RawHandle,
    count: *mut usize,
) -> cudaError_t {
    guard("cudaGraphGetNodes", || {
        if graph.is_null() || count.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let reply = call(&GraphGetNodes {
            graph: GraphHandle(graph as u64),
        })?;
        // SAFETY: by cudaGraphGetNodes's contract its pointer arguments are as `give_nodes`
        // requires.
        unsafe { give_nodes(&reply.nodes, &[], nodes, std::ptr::null_mut(), count) }
    })
}

pub extern "C" fn cudaGraphNodeGetDependencies(
    node: RawHandle,
    dependencies: *mut RawHandle,
    edge_data: *mut c_void,
    count: *mut usize,
) -> cudaError_t {
    guard("cudaGraphNodeGetDependencies", || {
        if node.is_null() || count.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let reply = call(&GraphNodeGetDependencies {
            node: GraphNodeHandle(node as u64),
        })?;
        // SAFETY: by cudaGraphNodeGetDependencies's contract its pointer arguments are as
        // `give_nodes` requires.
        unsafe {
            give_nodes(
                &reply.nodes,
                &reply.edges,
                dependencies,
                edge_data.cast(),
                count,
            )
        }
    })
}

/// The host makes the DOT text; the file is the program's, written here.
pub extern "C" fn cudaGraphDebugDotPrint(
    graph: RawHandle,
    path: *const c_char,
    flags: u32,
) -> cudaError_t {
    guard("cudaGraphDebugDotPrint", || {
        if graph.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by cudaGraphDebugDotPrint's contract `path` is NULL or a NUL-terminated
        // string.
        let path = unsafe { caller::string(path) }?;
        let reply = call(&GraphDebugDot {
            graph: GraphHandle(graph as u64),
            flags,
        })?;
        std::fs::write(&path, &reply.text).map_err(|e| {
            eprintln!("vmcuda: cudaGraphDebugDotPrint cannot write {path}: {e}");
            CudaStatus::ErrorOperatingSystem
        })
    })
}

/// `cudaDeviceGraphMemTrim`: the device's cached graph memory goes back to it.
pub extern "C" fn cudaDeviceGraphMemTrim(device: i32) -> cudaError_t {
    guard("cudaDeviceGraphMemTrim", || {
        super::library::on_device(device, || {
            call(&vmcuda_wire::op::DeviceGraphMemTrim {}).map(|_| ())
        })
    })
}

/// `cudaDeviceGetGraphMemAttribute`: used and reserved graph memory, and their high
/// marks (a `cuuint64_t` each).
pub extern "C" fn cudaDeviceGetGraphMemAttribute(
    device: i32,
    attr: u32,
    value: *mut u64,
) -> cudaError_t {
    guard("cudaDeviceGetGraphMemAttribute", || {
        if value.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let v = super::library::on_device(device, || {
            Ok(call(&vmcuda_wire::op::DeviceGetGraphMemAttribute { attr })?.value)
        })?;
        // SAFETY: by its contract `value` is writable.
        unsafe { caller::write(value, v) }
    })
}

/// `cudaDeviceSetGraphMemAttribute`: only a high mark, and only back to 0.
pub extern "C" fn cudaDeviceSetGraphMemAttribute(
    device: i32,
    attr: u32,
    value: *mut u64,
) -> cudaError_t {
    guard("cudaDeviceSetGraphMemAttribute", || {
        // SAFETY: by its contract `value` is readable.
        if unsafe { caller::read(value.cast_const()) }? != 0 {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        super::library::on_device(device, || {
            call(&vmcuda_wire::op::DeviceResetGraphMemHigh { attr }).map(|_| ())
        })
    })
}
