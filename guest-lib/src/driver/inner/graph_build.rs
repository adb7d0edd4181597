//! Graphs built by hand: `cudaGraphAdd*Node`, `cudaGraphAddNode`, edges, node
//! parameters and executable-graph updates.
//!
//! A kernel, copy, memset or memory node is made by doing its work on a stream of our
//! own that captures into the program's graph (`cudaStreamBeginCaptureToGraph` with the
//! node's dependencies): the launch or copy goes through the same guest code, checks
//! and host checks as on any stream, and the node the capture adds is the new node.
//! New parameters for an existing node are made the same way, as a node of a scratch
//! graph, whose parameters the host then copies onto the node (the driver's typed
//! setters), so they too are checked as a new node's are. Empty, child-graph and event
//! nodes, edges, clones and the rest are ops of their own.
//!
//! The parameters a program gave are kept per node, so that the `Get` calls answer
//! with them (kernel arguments copied, as CUDA keeps its own copy). Nodes the
//! program did not build here (captured ones) answer `cudaErrorNotSupported` to those.
//!
//! Host nodes are a slot the GPU signals and waits on while a thread of the guest's
//! runs the function (`host_functions`); a graph, its executable graphs and its clones
//! keep their own functions (see `set_host`).

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::graph::{
    capture_mode, conditional_type, node_type, ConditionalNodeMade, GraphAddConditionalNode,
    GraphAddNode, GraphNodeCopyParams, GraphNodeMade, PlainNode, StreamBeginCaptureToGraph,
    StreamEndCapture, StreamGetCaptureGraph,
};
use vmcuda_wire::op::{
    EventHandle, GraphAddDependencies, GraphClone, GraphCreate, GraphDestroy, GraphDestroyNode,
    GraphExecHandle, GraphExecUpdate, GraphGetEdges, GraphGetRootNodes, GraphHandle,
    GraphKernelNodeSetParams, GraphNodeFindInClone, GraphNodeGetDependentNodes, GraphNodeHandle,
    GraphRemoveDependencies, GraphUpload, RawEdge, StreamHandle,
};
use vmcuda_wire::CudaStatus;

use super::memory::copy as rt_copy;
use super::memory::memset as rt_memset;
use super::{call, guard, stream_handle, RawHandle, Result};
use crate::abi::driver::DriverMemcpy3D;
use crate::abi::runtime::{
    ChildGraphParams, ConditionalParams, Extent, KernelNodeParams, Memcpy3DParms, PitchedPtr, Pos,
};
use crate::abi::runtime::{
    ExecUpdateResultInfo, GraphNodeParams, HostNodeParams, InstantiateParams, MemAllocNodeParams,
    MemsetParams,
};
use crate::capture;
use crate::driver::keeping_last_error;
use crate::host_functions;
use crate::notice::refuse;
use crate::state;
use crate::{caller, cudaError_t};

/// `CUmemorytype`.
const MEMORY_HOST: u32 = 1;
const MEMORY_DEVICE: u32 = 2;
const MEMORY_ARRAY: u32 = 3;
const MEMORY_UNIFIED: u32 = 4;

impl DriverMemcpy3D {
    /// The same copy as the runtime describes it.
    pub fn to_runtime(&self) -> Result<Memcpy3DParms> {
        let side = |ty: u32, host: *mut c_void, device: u64, pitch: usize, height: usize| {
            let ptr = match ty {
                MEMORY_HOST => host,
                MEMORY_DEVICE | MEMORY_UNIFIED => device as usize as *mut c_void,
                MEMORY_ARRAY => {
                    return Err(refuse(
                        "a 3D copy to or from a CUDA array",
                        "is not implemented by vmcuda yet",
                    ))
                }
                _ => return Err(CudaStatus::ErrorInvalidValue),
            };
            Ok(PitchedPtr {
                ptr,
                pitch,
                xsize: pitch,
                ysize: height,
            })
        };
        let src = side(
            self.src_memory_type,
            self.src_host as *mut c_void,
            self.src_device,
            self.src_pitch,
            self.src_height,
        )?;
        let dst = side(
            self.dst_memory_type,
            self.dst_host,
            self.dst_device,
            self.dst_pitch,
            self.dst_height,
        )?;
        // `cudaMemcpyKind`: host-to-host 0 ... device-to-device 3, by pointer 4.
        let kind = match (self.src_memory_type, self.dst_memory_type) {
            (MEMORY_HOST, MEMORY_HOST) => 0,
            (MEMORY_HOST, MEMORY_DEVICE) => 1,
            (MEMORY_DEVICE, MEMORY_HOST) => 2,
            (MEMORY_DEVICE, MEMORY_DEVICE) => 3,
            _ => 4,
        };
        Ok(Memcpy3DParms {
            src_array: std::ptr::null_mut(),
            src_pos: Pos {
                x: self.src_x_in_bytes,
                y: self.src_y,
                z: self.src_z,
            },
            src_ptr: src,
            dst_array: std::ptr::null_mut(),
            dst_pos: Pos {
                x: self.dst_x_in_bytes,
                y: self.dst_y,
                z: self.dst_z,
            },
            dst_ptr: dst,
            extent: Extent {
                width: self.width_in_bytes,
                height: self.height.max(1),
                depth: self.depth.max(1),
            },
            kind,
        })
    }
}

/// What the program gave for a node it built, for the `Get` calls.
pub(crate) enum Kept {
    Kernel {
        params: KernelNodeParams,
        /// The packed arguments and pointers to each, which `params.kernel_params`
        /// points at.
        _arguments: Box<[u8]>,
        _pointers: Box<[*mut c_void]>,
    },
    /// A driver kernel node (`CUDA_KERNEL_NODE_PARAMS`), its arguments kept alike.
    DriverKernel {
        params: crate::abi::driver::KernelNodeParams,
        _arguments: Box<[u8]>,
        _pointers: Box<[*mut c_void]>,
    },
    Memset(MemsetParams),
    Memcpy(Memcpy3DParms),
    DriverMemcpy(DriverMemcpy3D),
    Event(RawHandle),
    /// A host node: its slot (see `host_functions`).
    Host(usize),
    MemAlloc(MemAllocNodeParams),
    MemFree(*mut c_void),
    /// A driver batch node: its parameters, `param_array` pointing at `_ops`.
    DriverBatchMemOp {
        params: crate::abi::driver::BatchMemOpNodeParams,
        _ops: Box<[crate::abi::driver::RawMemOp]>,
    },
}

/// Copies of a kernel's packed arguments, and a pointer to each parameter's bytes (a
/// `kernelParams` array over them).
pub(crate) fn argument_copies(
    params: &[vmcuda_wire::op::ParamInfo],
    packed: Vec<u8>,
) -> (Box<[u8]>, Box<[*mut c_void]>) {
    let mut arguments = packed.into_boxed_slice();
    let base = arguments.as_mut_ptr();
    let pointers = params
        .iter()
        .map(|q| base.wrapping_add(q.offset as usize).cast::<c_void>())
        .collect();
    (arguments, pointers)
}

// SAFETY: the pointers in a kept record are values the program gave (addresses it
// reads back), and the argument copies belong to the record; nothing here dereferences
// them from another thread but the program's own `Get` calls.
unsafe impl Send for Kept {}

static KEPT: Mutex<Option<HashMap<u64, Kept>>> = Mutex::new(None);

pub(crate) fn keep(node: GraphNodeHandle, kept: Kept) {
    let mut k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    k.get_or_insert_with(HashMap::new).insert(node.0, kept);
}

/// What `f` makes of `node`'s kept parameters, where any are kept.
pub(crate) fn kept_as<T>(node: RawHandle, f: impl FnOnce(&Kept) -> T) -> Option<T> {
    let k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    k.as_ref().and_then(|m| m.get(&(node as u64))).map(f)
}

pub(crate) fn with_kept<T>(node: RawHandle, f: impl FnOnce(&Kept) -> Result<T>) -> Result<T> {
    let k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
    match k.as_ref().and_then(|m| m.get(&(node as u64))) {
        Some(kept) => f(kept),
        None => Err(refuse(
            "reading a graph node's parameters",
            "works for nodes built by hand only (a captured node's are not kept)",
        )),
    }
}

/// Forget what was kept (the device was reset: the graphs are gone).
pub fn forget_device_state() {
    *KEPT.lock().unwrap_or_else(|p| p.into_inner()) = None;
    *BUILDERS.lock().unwrap_or_else(|p| p.into_inner()) = None;
}

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
        let child = add_plain(
            shown.graph.into(),
            shown.dependencies,
            PlainNode::ChildGraph(scratch),
        )?;
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

/// The program's dependency list.
///
/// # Safety
/// `deps` is NULL (with `count` 0) or holds `count` readable node handles.
pub(crate) unsafe fn dependencies(
    deps: *const RawHandle,
    count: usize,
) -> Result<Vec<GraphNodeHandle>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: as the caller promised.
    let raw = unsafe { caller::slice(deps, count) }?;
    Ok(raw.into_iter().map(GraphNodeHandle::from).collect())
}

/// Hand a new node to the program.
///
/// # Safety
/// `out` is NULL (refused) or writable.
pub(crate) unsafe fn give(out: *mut RawHandle, node: GraphNodeHandle) -> Result<()> {
    // SAFETY: as the caller promised.
    unsafe { caller::write(out, node.into()) }
}

// ---- kernel nodes -------------------------------------------------------------------

/// The kernel parameters given, checked and copied (`kernelParams`; `extra` is not
/// taken, as the runtime's graph calls refuse it with kernel arguments).
///
/// # Safety
/// `p` is readable, and its argument array holds one readable pointer per parameter.
unsafe fn kernel_kept(p: &KernelNodeParams) -> Result<Kept> {
    if !p.extra.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let (_, params) = super::registration::kernel(p.func as usize)?;
    let total = params
        .iter()
        .map(|q| (q.offset + q.size) as usize)
        .max()
        .unwrap_or(0);
    let mut packed = vec![0u8; total];
    for (i, q) in params.iter().enumerate() {
        // SAFETY: as the caller promised.
        let arg =
            unsafe { caller::kernel_arg(p.kernel_params as *const *const u8, i, q.size as usize) }?;
        packed[q.offset as usize..(q.offset + q.size) as usize].copy_from_slice(arg);
    }
    let (arguments, mut pointers) = argument_copies(&params, packed);
    let mut params = *p;
    params.kernel_params = pointers.as_mut_ptr();
    Ok(Kept::Kernel {
        params,
        _arguments: arguments,
        _pointers: pointers,
    })
}

fn launch_kernel(p: &KernelNodeParams, stream: RawHandle) -> cudaError_t {
    super::launch::cudaLaunchKernel(
        p.func,
        p.grid,
        p.block,
        p.kernel_params as *const *const u8,
        p.shared_mem as usize,
        stream,
    )
}

/// A kernel node from parameters the program gave.
///
/// # Safety
/// As `kernel_kept`.
unsafe fn add_kernel(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &KernelNodeParams,
) -> Result<GraphNodeHandle> {
    // SAFETY: as the caller promised.
    let kept = unsafe { kernel_kept(p) }?;
    let Kept::Kernel { params, .. } = &kept else {
        unreachable!("kernel_kept keeps a kernel")
    };
    let node = build_node(graph, deps, |s| launch_kernel(params, s))?;
    keep(node, kept);
    Ok(node)
}

pub extern "C" fn cudaGraphAddKernelNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    params: *const KernelNodeParams,
) -> cudaError_t {
    guard("cudaGraphAddKernelNode", || {
        // SAFETY: by cudaGraphAddKernelNode's contract `deps` holds `count` nodes,
        // `params` is readable with an argument array for its kernel, `out` writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = caller::read(params)?;
            give(out, add_kernel(graph, &deps, &p)?)
        }
    })
}

// ---- memset nodes -------------------------------------------------------------------

fn memset_on(p: &MemsetParams, stream: RawHandle) -> cudaError_t {
    let rows = if p.height <= 1 { 1 } else { p.height };
    match p.element_size {
        1 => rt_memset::cudaMemset2DAsync(
            p.dst,
            if rows == 1 { p.width } else { p.pitch },
            p.value as i32,
            p.width,
            rows,
            stream,
        ),
        2 | 4 => {
            let row_bytes = p.width * p.element_size as usize;
            if rows == 1 || p.pitch == row_bytes {
                return crate::driver::memory::memset_elements_on(
                    p.dst as u64,
                    p.value,
                    p.element_size as u8,
                    p.width * rows,
                    stream,
                );
            }
            // Pitched rows of wider elements: one memset per row.
            for row in 0..rows {
                let dst = (p.dst as u64).wrapping_add((row * p.pitch) as u64);
                let r = crate::driver::memory::memset_elements_on(
                    dst,
                    p.value,
                    p.element_size as u8,
                    p.width,
                    stream,
                );
                if r != 0 {
                    return r;
                }
            }
            0
        }
        _ => CudaStatus::ErrorInvalidValue.0,
    }
}

fn add_memset(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &MemsetParams,
) -> Result<GraphNodeHandle> {
    let node = build_node(graph, deps, |s| memset_on(p, s))?;
    keep(node, Kept::Memset(*p));
    Ok(node)
}

pub extern "C" fn cudaGraphAddMemsetNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    params: *const MemsetParams,
) -> cudaError_t {
    guard("cudaGraphAddMemsetNode", || {
        // SAFETY: by cudaGraphAddMemsetNode's contract `deps` holds `count` nodes,
        // `params` is readable and `out` writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = caller::read(params)?;
            give(out, add_memset(graph, &deps, &p)?)
        }
    })
}

// ---- memcpy nodes -------------------------------------------------------------------

/// A copy node's work on `stream` (a stream capturing into its graph): with an array
/// on either side, the array copy; else pitched 2D copies.
pub(crate) fn memcpy_3d_on(p: &Memcpy3DParms, stream: RawHandle) -> cudaError_t {
    let handle = stream_handle(stream, false);
    let r = match p.src_array.is_null() && p.dst_array.is_null() {
        // SAFETY: a copy node's host side is the program's memory for as long as
        // its graph may run (CUDA's contract for copy nodes).
        false => unsafe { super::array::memcpy_3d(p, handle, true) },
        true => memcpy_3d_linear(p, handle, true),
    };
    match r {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}

/// A 3D copy between linear memory as pitched 2D copies in `stream`'s order: one when
/// the slices follow each other evenly, else one per slice; a synchronous one waits
/// for the stream after.
pub(crate) fn memcpy_3d_linear(
    p: &Memcpy3DParms,
    stream: StreamHandle,
    is_async: bool,
) -> Result<()> {
    let raw = stream.0 as usize as RawHandle;
    let run = |f: &dyn Fn() -> cudaError_t| keeping_last_error(f);
    let e = p.extent;
    if e.width == 0 || e.height == 0 || e.depth == 0 {
        return Ok(());
    }
    let at = |q: &PitchedPtr, pos: &Pos| -> usize {
        let slice = q.pitch * q.ysize;
        (q.ptr as usize)
            .wrapping_add(pos.z * slice)
            .wrapping_add(pos.y * q.pitch)
            .wrapping_add(pos.x)
    };
    let (src, dst) = (at(&p.src_ptr, &p.src_pos), at(&p.dst_ptr, &p.dst_pos));
    let even = |q: &PitchedPtr| e.depth == 1 || q.ysize == e.height;
    if even(&p.src_ptr) && even(&p.dst_ptr) {
        let rows = e.height * e.depth;
        let packed = |q: &PitchedPtr| rows == 1 || q.pitch == e.width;
        if packed(&p.src_ptr) && packed(&p.dst_ptr) {
            // One linear copy: the only shape a copy with a host side can be captured
            // in (pinned memory the host reaches; pitched rows go through the socket).
            run(&|| {
                rt_copy::cudaMemcpyAsync(
                    dst as *mut c_void,
                    src as *const c_void,
                    e.width * rows,
                    p.kind,
                    raw,
                )
            })?;
        } else {
            run(&|| {
                rt_copy::cudaMemcpy2DAsync(
                    dst as *mut c_void,
                    p.dst_ptr.pitch,
                    src as *const c_void,
                    p.src_ptr.pitch,
                    e.width,
                    rows,
                    p.kind,
                    raw,
                )
            })?;
        }
    } else {
        for z in 0..e.depth {
            run(&|| {
                rt_copy::cudaMemcpy2DAsync(
                    (dst + z * p.dst_ptr.pitch * p.dst_ptr.ysize) as *mut c_void,
                    p.dst_ptr.pitch,
                    (src + z * p.src_ptr.pitch * p.src_ptr.ysize) as *const c_void,
                    p.src_ptr.pitch,
                    e.width,
                    e.height,
                    p.kind,
                    raw,
                )
            })?;
        }
    }
    if !is_async {
        run(&|| super::stream::cudaStreamSynchronize(raw))?;
    }
    Ok(())
}

/// Whether a copy node's host side is memory the host cannot reach when the graph
/// runs (the program's own pageable memory): its work is then a staged copy, a host
/// function and a device copy (see `host_functions::capture_pageable_copy`).
fn staged(p: &Memcpy3DParms) -> bool {
    let (dst, src) = (p.dst_ptr.ptr as usize, p.src_ptr.ptr as usize);
    let Ok(direction) = crate::copy_route::Direction::resolve(p.kind, dst, src) else {
        return false;
    };
    let count = p.extent.width * p.extent.height * p.extent.depth;
    matches!(
        direction,
        crate::copy_route::Direction::HostToDevice | crate::copy_route::Direction::DeviceToHost
    ) && !crate::copy_route::capturable(
        direction,
        crate::copy_route::Shape::Linear,
        dst,
        src,
        count,
    )
}

/// A copy node; a staged one is made in a graph of its own that a child-graph node
/// holds, so the program's graph gains one node, as natively.
pub(crate) fn add_copy_node(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &Memcpy3DParms,
) -> Result<GraphNodeHandle> {
    if !staged(p) {
        return build_node(graph, deps, |s| memcpy_3d_on(p, s));
    }
    let scratch = call(&GraphCreate { flags: 0 })?.graph;
    let node = build_node(scratch.into(), &[], |s| memcpy_3d_on(p, s))
        .and_then(|_| add_plain(graph, deps.to_vec(), PlainNode::ChildGraph(scratch)));
    let destroyed = call(&GraphDestroy { graph: scratch });
    let node = node?;
    destroyed?;
    Ok(node)
}

fn add_memcpy(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &Memcpy3DParms,
) -> Result<GraphNodeHandle> {
    let node = add_copy_node(graph, deps, p)?;
    keep(node, Kept::Memcpy(*p));
    Ok(node)
}

/// A 1D copy as the 3D parameters CUDA reports for it.
fn linear_copy(dst: *mut c_void, src: *const c_void, count: usize, kind: u32) -> Memcpy3DParms {
    let ptr = |p: *mut c_void| PitchedPtr {
        ptr: p,
        pitch: count,
        xsize: count,
        ysize: 1,
    };
    Memcpy3DParms {
        src_array: std::ptr::null_mut(),
        src_pos: Pos::default(),
        src_ptr: ptr(src as *mut c_void),
        dst_array: std::ptr::null_mut(),
        dst_pos: Pos::default(),
        dst_ptr: ptr(dst),
        extent: Extent {
            width: count,
            height: 1,
            depth: 1,
        },
        kind,
    }
}

pub extern "C" fn cudaGraphAddMemcpyNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    params: *const Memcpy3DParms,
) -> cudaError_t {
    guard("cudaGraphAddMemcpyNode", || {
        // SAFETY: by cudaGraphAddMemcpyNode's contract `deps` holds `count` nodes,
        // `params` is readable and `out` writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = caller::read(params)?;
            give(out, add_memcpy(graph, &deps, &p)?)
        }
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaGraphAddMemcpyNode1D(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphAddMemcpyNode1D", || {
        // SAFETY: by cudaGraphAddMemcpyNode1D's contract `deps` holds `count` nodes and
        // `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = linear_copy(dst, src, bytes, kind);
            give(out, add_memcpy(graph, &deps, &p)?)
        }
    })
}

/// A copy to or from a `__device__` variable: the node copies its address range.
fn symbol_copy(
    symbol: *const c_void,
    other: *mut c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
    to_symbol: bool,
) -> Result<Memcpy3DParms> {
    let at = rt_copy::symbol_range(symbol, offset, bytes)? as *mut c_void;
    Ok(match to_symbol {
        true => linear_copy(at, other, bytes, kind),
        false => linear_copy(other, at, bytes, kind),
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaGraphAddMemcpyNodeToSymbol(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    symbol: *const c_void,
    src: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphAddMemcpyNodeToSymbol", || {
        // SAFETY: by its contract `deps` holds `count` nodes and `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = symbol_copy(symbol, src as *mut c_void, bytes, offset, kind, true)?;
            give(out, add_memcpy(graph, &deps, &p)?)
        }
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaGraphAddMemcpyNodeFromSymbol(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    dst: *mut c_void,
    symbol: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphAddMemcpyNodeFromSymbol", || {
        // SAFETY: by its contract `deps` holds `count` nodes and `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = symbol_copy(symbol, dst, bytes, offset, kind, false)?;
            give(out, add_memcpy(graph, &deps, &p)?)
        }
    })
}

// ---- memory nodes -------------------------------------------------------------------

/// `cudaMemLocationTypeDevice`.
const LOCATION_DEVICE: i32 = 1;

fn add_mem_alloc(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &mut MemAllocNodeParams,
) -> Result<GraphNodeHandle> {
    if p.location_type != LOCATION_DEVICE || p.location_id != state::current_device() {
        return Err(refuse(
            "a graph allocation node for another location",
            "is not supported: vmcuda makes them on the current device",
        ));
    }
    let mut ptr: *mut c_void = std::ptr::null_mut();
    let node = build_node(graph, deps, |s| {
        super::mem_pool::cudaMallocAsync(&mut ptr, p.bytesize, s)
    })?;
    p.dptr = ptr;
    keep(node, Kept::MemAlloc(*p));
    Ok(node)
}

pub extern "C" fn cudaGraphAddMemAllocNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    params: *mut MemAllocNodeParams,
) -> cudaError_t {
    guard("cudaGraphAddMemAllocNode", || {
        // SAFETY: by cudaGraphAddMemAllocNode's contract `deps` holds `count` nodes,
        // `params` is readable and writable, `out` writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let mut p = caller::read(params)?;
            let node = add_mem_alloc(graph, &deps, &mut p)?;
            caller::write(params, p)?;
            give(out, node)
        }
    })
}

fn add_mem_free(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    ptr: *mut c_void,
) -> Result<GraphNodeHandle> {
    let node = build_node(graph, deps, |s| super::mem_pool::cudaFreeAsync(ptr, s))?;
    keep(node, Kept::MemFree(ptr));
    Ok(node)
}

pub extern "C" fn cudaGraphAddMemFreeNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    ptr: *mut c_void,
) -> cudaError_t {
    guard("cudaGraphAddMemFreeNode", || {
        // SAFETY: by cudaGraphAddMemFreeNode's contract `deps` holds `count` nodes and
        // `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            give(out, add_mem_free(graph, &deps, ptr)?)
        }
    })
}

// ---- nodes without stream work -------------------------------------------------------

fn add_plain(
    graph: RawHandle,
    deps: Vec<GraphNodeHandle>,
    node: PlainNode,
) -> Result<GraphNodeHandle> {
    if graph.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let made: GraphNodeMade = call(&GraphAddNode {
        graph: GraphHandle::from(graph),
        dependencies: deps,
        node,
    })?;
    Ok(made.node)
}

fn event_node(event: RawHandle, record: bool) -> Result<PlainNode> {
    if event.is_null() {
        return Err(CudaStatus::ErrorInvalidResourceHandle);
    }
    let e = EventHandle(event as u64);
    Ok(match record {
        true => PlainNode::EventRecord(e),
        false => PlainNode::EventWait(e),
    })
}

pub extern "C" fn cudaGraphAddEmptyNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
) -> cudaError_t {
    guard("cudaGraphAddEmptyNode", || {
        // SAFETY: by cudaGraphAddEmptyNode's contract `deps` holds `count` nodes and
        // `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            give(out, add_plain(graph, deps, PlainNode::Empty)?)
        }
    })
}

pub extern "C" fn cudaGraphAddChildGraphNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    child: RawHandle,
) -> cudaError_t {
    guard("cudaGraphAddChildGraphNode", || {
        // SAFETY: by cudaGraphAddChildGraphNode's contract `deps` holds `count` nodes
        // and `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let node = PlainNode::ChildGraph(GraphHandle::from(child));
            give(out, add_plain(graph, deps, node)?)
        }
    })
}

pub extern "C" fn cudaGraphAddEventRecordNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    event: RawHandle,
) -> cudaError_t {
    guard("cudaGraphAddEventRecordNode", || {
        // SAFETY: by its contract `deps` holds `count` nodes and `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let node = add_plain(graph, deps, event_node(event, true)?)?;
            keep(node, Kept::Event(event));
            give(out, node)
        }
    })
}

pub extern "C" fn cudaGraphAddEventWaitNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    event: RawHandle,
) -> cudaError_t {
    guard("cudaGraphAddEventWaitNode", || {
        // SAFETY: by its contract `deps` holds `count` nodes and `out` is writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let node = add_plain(graph, deps, event_node(event, false)?)?;
            keep(node, Kept::Event(event));
            give(out, node)
        }
    })
}

/// Where host nodes' slots are shared, so that a new function for one goes to a slot
/// of its own (`host_functions` calls whatever its slot holds):
#[derive(Default)]
struct HostSlots {
    /// Each host node of a graph, and its graph (for clones).
    graph_of: HashMap<u64, u64>,
    /// Slots an executable graph or a clone may hold too: what was made of a graph
    /// keeps the function it was made with, as in CUDA.
    shared: HashSet<usize>,
    /// Host nodes of executable graphs that were given a slot of their own:
    /// (executable graph, node) -> slot.
    exec_own: HashMap<(u64, u64), usize>,
}

static HOST_SLOTS: Mutex<Option<HostSlots>> = Mutex::new(None);

fn host_slots<T>(f: impl FnOnce(&mut HostSlots) -> T) -> T {
    let mut g = HOST_SLOTS.lock().unwrap_or_else(|p| p.into_inner());
    f(g.get_or_insert_with(HostSlots::default))
}

/// An executable graph was made of, or updated from, a graph: every host node's slot
/// may now be held by it too (an update may also give it the graph's slots back).
pub(crate) fn host_slots_shared(exec: Option<u64>) {
    let kept: Vec<usize> = {
        let k = KEPT.lock().unwrap_or_else(|p| p.into_inner());
        k.iter()
            .flat_map(|m| m.values())
            .filter_map(|kept| match kept {
                Kept::Host(at) => Some(*at),
                _ => None,
            })
            .collect()
    };
    host_slots(|h| {
        h.shared.extend(kept);
        if let Some(e) = exec {
            h.exec_own.retain(|&(x, _), _| x != e);
        }
    });
}

/// The slot of host node `node` (any other node is an invalid value).
fn host_slot(node: RawHandle) -> Result<usize> {
    with_kept(node, |k| match k {
        Kept::Host(at) => Ok(*at),
        _ => Err(CudaStatus::ErrorInvalidValue),
    })
}

/// A node signalling slot `at`, in `graph`.
fn host_signal_node(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    at: usize,
) -> Result<GraphNodeHandle> {
    build_node(graph, deps, |s| {
        match host_functions::signal(stream_handle(s, false), at) {
            Ok(()) => 0,
            Err(e) => e.0,
        }
    })
}

fn add_host(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &HostNodeParams,
) -> Result<GraphNodeHandle> {
    let f = p.f.ok_or(CudaStatus::ErrorInvalidValue)?;
    if graph.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let at = host_functions::new_slot(f, p.data as usize)?;
    let node = host_signal_node(graph, deps, at)?;
    keep(node, Kept::Host(at));
    host_slots(|h| h.graph_of.insert(node.0, graph as u64));
    Ok(node)
}

pub extern "C" fn cudaGraphClone(out: *mut RawHandle, original: RawHandle) -> cudaError_t {
    guard("cudaGraphClone", || {
        if out.is_null() || original.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let clone = call(&GraphClone {
            original: original.into(),
        })?
        .graph;
        // The clone's host nodes call what the original's do, from the same slots
        // until a new function is set for one of either.
        let host_nodes: Vec<u64> = host_slots(|h| {
            h.graph_of
                .iter()
                .filter(|(_, &g)| g == original as u64)
                .map(|(&n, _)| n)
                .collect()
        });
        for n in host_nodes {
            let Ok(at) = host_slot(n as RawHandle) else {
                continue;
            };
            let found = call(&GraphNodeFindInClone {
                original: GraphNodeHandle(n),
                clone,
            });
            if let Ok(made) = found {
                keep(made.node, Kept::Host(at));
                host_slots(|h| {
                    h.graph_of.insert(made.node.0, clone.0);
                    h.shared.insert(at);
                });
            }
        }
        // SAFETY: checked non-NULL; by cudaGraphClone's contract writable.
        unsafe { caller::write(out, clone.0 as RawHandle) }
    })
}

pub extern "C" fn cudaGraphAddHostNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    count: usize,
    params: *const HostNodeParams,
) -> cudaError_t {
    guard("cudaGraphAddHostNode", || {
        // SAFETY: by cudaGraphAddHostNode's contract `deps` holds `count` nodes, `params`
        // is readable and `out` writable.
        unsafe {
            let deps = dependencies(deps, count)?;
            let p = caller::read(params)?;
            give(out, add_host(graph, &deps, &p)?)
        }
    })
}

/// A host node's new function, in the graph (`exec` None) or in one executable graph
/// made of it: set in the node's slot where nothing else holds that slot, else in a
/// new slot the node is pointed at (its signal copied from a scratch node), so the
/// graph, its executable graphs and its clones each keep their own, as in CUDA.
fn set_host(node: RawHandle, exec: Option<RawHandle>, p: &HostNodeParams) -> Result<()> {
    let f = p.f.ok_or(CudaStatus::ErrorInvalidValue)?;
    let data = p.data as usize;
    let at = host_slot(node)?;
    let own = match exec {
        None => Some(at).filter(|at| !host_slots(|h| h.shared.contains(at))),
        Some(e) => host_slots(|h| h.exec_own.get(&(e as u64, node as u64)).copied()),
    };
    if let Some(own) = own {
        host_functions::set(own, f, data);
        return Ok(());
    }
    let fresh = host_functions::new_slot(f, data)?;
    set_params(node, exec, |g| host_signal_node(g, &[], fresh))?;
    match exec {
        None => keep(GraphNodeHandle::from(node), Kept::Host(fresh)),
        Some(e) => host_slots(|h| {
            h.exec_own.insert((e as u64, node as u64), fresh);
        }),
    }
    Ok(())
}

// ---- the generic call ---------------------------------------------------------------

/// `cudaGraphAddNode` (CUDA 13: with edge data): by type.
pub extern "C" fn cudaGraphAddNode(
    out: *mut RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    params: *mut GraphNodeParams,
) -> cudaError_t {
    guard("cudaGraphAddNode", || {
        // SAFETY: by cudaGraphAddNode's contract `deps` (and `edge_data`, if given) hold
        // `count` entries, `params` is readable and writable with the parameters of its
        // type, `out` is writable.
        unsafe {
            let node = add_with_edges(graph, deps, edge_data, count, params, |deps| {
                add_by_type(graph, deps, params)
            })?;
            give(out, node)
        }
    })
}

/// The edge data given for `count` dependencies, as the program wrote it: empty for
/// default edges (none given, or all zero). The host checks each.
///
/// # Safety
/// `edge_data` is NULL or holds `count` readable 8-byte records.
pub(crate) unsafe fn edge_list(edge_data: *const u64, count: usize) -> Result<Vec<RawEdge>> {
    if edge_data.is_null() || count == 0 {
        return Ok(Vec::new());
    }
    // SAFETY: as the caller promised.
    let mut edges = unsafe { caller::slice(edge_data, count) }?;
    if edges.iter().all(|&e| e == 0) {
        edges.clear();
    }
    Ok(edges)
}

/// Add the node `params` describe with `add`, after `count` dependencies with their
/// edge data. Nodes are made after default edges only (most are captured work), so
/// the edges with other data are added to the new node after it is made; if CUDA
/// refuses one, the node goes again and the program gets the refusal, as natively.
///
/// # Safety
/// `deps` (and `edge_data`, if given) hold `count` readable entries; `params` is NULL
/// (refused) or readable with the parameters of its type.
pub(crate) unsafe fn add_with_edges(
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    params: *const GraphNodeParams,
    add: impl FnOnce(Vec<GraphNodeHandle>) -> Result<GraphNodeHandle>,
) -> Result<GraphNodeHandle> {
    if params.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    // SAFETY: as the caller promised.
    let (deps, edges) = unsafe { (dependencies(deps, count)?, edge_list(edge_data, count)?) };
    if edges.is_empty() {
        return add(deps);
    }
    // Some nodes could not go again once made: a memory node (its memory is counted)
    // and a child graph moved into its node (the graph would go with it). These take
    // no edge data here (CUDA takes programmatic edges only into kernel nodes).
    // SAFETY: as the caller promised.
    let ty = unsafe { caller::read(params.cast::<u32>()) }?;
    let moved = ty == node_type::GRAPH
        // SAFETY: as the caller promised: a child graph node's parameters.
        && unsafe { union_of::<ChildGraphParams>(params) }?.ownership == OWNERSHIP_MOVE;
    if ty == node_type::MEM_ALLOC || ty == node_type::MEM_FREE || moved {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let (mut plain, mut from, mut data) = (Vec::new(), Vec::new(), Vec::new());
    for (node, edge) in deps.into_iter().zip(edges) {
        match edge {
            0 => plain.push(node),
            _ => {
                from.push(node);
                data.push(edge);
            }
        }
    }
    let node = add(plain)?;
    let linked = call(&GraphAddDependencies {
        graph: graph.into(),
        to: vec![node; from.len()],
        from,
        edges: data,
    });
    if let Err(e) = linked {
        let _ = call(&GraphDestroyNode { node });
        return Err(e);
    }
    Ok(node)
}

/// `cudaGraphChildGraphOwnershipClone`, `cudaGraphChildGraphOwnershipMove`.
const OWNERSHIP_CLONE: u32 = 0;
const OWNERSHIP_MOVE: u32 = 1;

/// The `size_of::<T>()` bytes at the start of the parameter union.
///
/// # Safety
/// `params` is readable, and its union holds a `T` (the type says so).
unsafe fn union_of<T: Copy>(params: *const GraphNodeParams) -> Result<T> {
    // SAFETY: as the caller promised; the union is 232 bytes at offset 16.
    unsafe { caller::read(params.cast::<u8>().wrapping_add(16).cast::<T>()) }
}

/// # Safety
/// As `cudaGraphAddNode`'s contract for `params`.
pub(crate) unsafe fn add_by_type(
    graph: RawHandle,
    deps: Vec<GraphNodeHandle>,
    params: *mut GraphNodeParams,
) -> Result<GraphNodeHandle> {
    // SAFETY: as the caller promised.
    let ty = unsafe { caller::read(params.cast::<u32>()) }?;
    // SAFETY: (each arm) the type says which parameters the union holds.
    unsafe {
        match ty {
            node_type::KERNEL => add_kernel(graph, &deps, &union_of(params)?),
            node_type::MEMSET => add_memset(graph, &deps, &union_of(params)?),
            node_type::MEMCPY => {
                // `cudaMemcpyNodeParams`: flags, reserved, context, then the copy.
                let p: Memcpy3DParms = caller::read(params.cast::<u8>().wrapping_add(32).cast())?;
                add_memcpy(graph, &deps, &p)
            }
            node_type::HOST => add_host(graph, &deps, &union_of(params)?),
            node_type::GRAPH => {
                let p: ChildGraphParams = union_of(params)?;
                let child = GraphHandle::from(p.graph);
                let node = match p.ownership {
                    OWNERSHIP_CLONE => PlainNode::ChildGraph(child),
                    OWNERSHIP_MOVE => PlainNode::MovedChildGraph(child),
                    _ => return Err(CudaStatus::ErrorInvalidValue),
                };
                add_plain(graph, deps, node)
            }
            node_type::EMPTY => add_plain(graph, deps, PlainNode::Empty),
            node_type::WAIT_EVENT | node_type::EVENT_RECORD => {
                let event: RawHandle = union_of(params)?;
                let node = add_plain(
                    graph,
                    deps,
                    event_node(event, ty == node_type::EVENT_RECORD)?,
                )?;
                keep(node, Kept::Event(event));
                Ok(node)
            }
            node_type::MEM_ALLOC => {
                let mut p: MemAllocNodeParams = union_of(params)?;
                let node = add_mem_alloc(graph, &deps, &mut p)?;
                caller::write(params.cast::<u8>().wrapping_add(16).cast(), p)?;
                Ok(node)
            }
            node_type::MEM_FREE => {
                let ptr: *mut c_void = union_of(params)?;
                add_mem_free(graph, &deps, ptr)
            }
            node_type::CONDITIONAL => {
                let p: ConditionalParams = union_of(params)?;
                add_conditional(graph, deps, &p, params)
            }
            _ => Err(refuse(
                "cudaGraphAddNode of this node type",
                "is not supported (external semaphores and batch memory ops)",
            )),
        }
    }
}

/// The body arrays CUDA hands out with conditional nodes ("CUDA-owned", valid for the
/// node's life): kept for the process's.
static BODY_ARRAYS: Mutex<Vec<Box<[usize]>>> = Mutex::new(Vec::new());

/// A conditional node; its bodies go into an array of ours whose address is written
/// to the parameters' `phGraph_out`, as CUDA does.
///
/// # Safety
/// `params` is writable (`cudaGraphAddNode`'s contract).
unsafe fn add_conditional(
    graph: RawHandle,
    deps: Vec<GraphNodeHandle>,
    p: &ConditionalParams,
    params: *mut GraphNodeParams,
) -> Result<GraphNodeHandle> {
    if graph.is_null() || p.kind > conditional_type::SWITCH {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let made: ConditionalNodeMade = call(&GraphAddConditionalNode {
        graph: GraphHandle::from(graph),
        dependencies: deps,
        handle: p.handle,
        kind: p.kind,
        size: p.size,
    })?;
    let bodies: Box<[usize]> = made.bodies.iter().map(|b| b.0 as usize).collect();
    let at = bodies.as_ptr() as usize;
    BODY_ARRAYS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(bodies);
    // `phGraph_out` is the fourth field of `cudaConditionalNodeParams`, at 16.
    let out = params.cast::<u8>().wrapping_add(16 + 16).cast::<usize>();
    // SAFETY: as the caller promised.
    unsafe { caller::write(out, at) }?;
    Ok(made.node)
}

// ---- capture into a graph -----------------------------------------------------------

/// # Safety
/// `deps` (and `edge_data`, if given) hold `count` readable entries.
unsafe fn begin_capture_to_graph(
    stream: StreamHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    mode: u32,
) -> Result<()> {
    capture::may_begin(stream, mode)?;
    if !super::known_stream(stream) || graph.is_null() {
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

pub extern "C" fn cudaStreamBeginCaptureToGraph_ptsz(
    stream: RawHandle,
    graph: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    mode: u32,
) -> cudaError_t {
    guard("cudaStreamBeginCaptureToGraph_ptsz", || {
        // SAFETY: by its contract `deps` and `edge_data` are NULL or hold `count`.
        unsafe {
            begin_capture_to_graph(
                stream_handle(stream, true),
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
unsafe fn update_capture_dependencies(
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

pub extern "C" fn cudaStreamUpdateCaptureDependencies_ptsz(
    stream: RawHandle,
    deps: *const RawHandle,
    edge_data: *const u64,
    count: usize,
    flags: u32,
) -> cudaError_t {
    guard("cudaStreamUpdateCaptureDependencies_ptsz", || {
        // SAFETY: by its contract the lists are NULL or hold `count` entries.
        unsafe {
            update_capture_dependencies(stream_handle(stream, true), deps, edge_data, count, flags)
        }
    })
}

// ---- edges ----------------------------------------------------------------------------

/// The edges `from[i] -> to[i]` with their data.
type Edges = (Vec<GraphNodeHandle>, Vec<GraphNodeHandle>, Vec<RawEdge>);

/// # Safety
/// `from`, `to` (and `edge_data`, if given) hold `count` readable entries.
unsafe fn edges(
    from: *const RawHandle,
    to: *const RawHandle,
    edge_data: *const u64,
    count: usize,
) -> Result<Edges> {
    // SAFETY: as the caller promised.
    unsafe {
        Ok((
            dependencies(from, count)?,
            dependencies(to, count)?,
            edge_list(edge_data, count)?,
        ))
    }
}

pub extern "C" fn cudaGraphAddDependencies(
    graph: RawHandle,
    from: *const RawHandle,
    to: *const RawHandle,
    edge_data: *const u64,
    count: usize,
) -> cudaError_t {
    guard("cudaGraphAddDependencies", || {
        // SAFETY: by its contract the lists hold `count` entries.
        let (from, to, edges) = unsafe { edges(from, to, edge_data, count) }?;
        call(&GraphAddDependencies {
            graph: graph.into(),
            from,
            to,
            edges,
        })
    })
}

pub extern "C" fn cudaGraphRemoveDependencies(
    graph: RawHandle,
    from: *const RawHandle,
    to: *const RawHandle,
    edge_data: *const u64,
    count: usize,
) -> cudaError_t {
    guard("cudaGraphRemoveDependencies", || {
        // SAFETY: by its contract the lists hold `count` entries.
        let (from, to, edges) = unsafe { edges(from, to, edge_data, count) }?;
        call(&GraphRemoveDependencies {
            graph: graph.into(),
            from,
            to,
            edges,
        })
    })
}

pub extern "C" fn cudaGraphGetEdges(
    graph: RawHandle,
    from: *mut RawHandle,
    to: *mut RawHandle,
    edge_data: *mut u8,
    count: *mut usize,
) -> cudaError_t {
    guard("cudaGraphGetEdges", || {
        if graph.is_null() || count.is_null() || from.is_null() != to.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let list = call(&GraphGetEdges {
            graph: graph.into(),
        })?;
        // SAFETY: by cudaGraphGetEdges's contract `count` is readable and writable, and
        // `from`, `to` and `edge_data` are NULL or have room for `*count` entries. Both
        // lists see the same room: the second call reads what the first left.
        unsafe {
            let room = caller::read(count)?;
            super::graph::give_nodes(&list.from, &list.data, from, edge_data, count)?;
            if !to.is_null() {
                let mut left = room;
                super::graph::give_nodes(&list.to, &[], to, std::ptr::null_mut(), &mut left)?;
            }
        }
        Ok(())
    })
}

pub extern "C" fn cudaGraphGetRootNodes(
    graph: RawHandle,
    nodes: *mut RawHandle,
    count: *mut usize,
) -> cudaError_t {
    guard("cudaGraphGetRootNodes", || {
        if graph.is_null() || count.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let roots = call(&GraphGetRootNodes {
            graph: graph.into(),
        })?;
        // SAFETY: by its contract `count` is readable and writable and `nodes` NULL or
        // has room for `*count`.
        unsafe { super::graph::give_nodes(&roots.nodes, &[], nodes, std::ptr::null_mut(), count) }
    })
}

pub extern "C" fn cudaGraphNodeGetDependentNodes(
    node: RawHandle,
    nodes: *mut RawHandle,
    edge_data: *mut u8,
    count: *mut usize,
) -> cudaError_t {
    guard("cudaGraphNodeGetDependentNodes", || {
        if node.is_null() || count.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let found = call(&GraphNodeGetDependentNodes { node: node.into() })?;
        // SAFETY: by its contract `count` is readable and writable, `nodes` and
        // `edge_data` NULL or with room for `*count`.
        unsafe { super::graph::give_nodes(&found.nodes, &found.edges, nodes, edge_data, count) }
    })
}

// ---- new parameters for existing nodes --------------------------------------------------

/// Give `node` (in its graph, or in `exec` only) the parameters of a node that `build`
/// makes in a scratch graph.
pub(crate) fn set_params(
    node: RawHandle,
    exec: Option<RawHandle>,
    build: impl FnOnce(RawHandle) -> Result<GraphNodeHandle>,
) -> Result<()> {
    if node.is_null() || exec.is_some_and(|e| e.is_null()) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    let scratch = call(&GraphCreate { flags: 0 })?.graph;
    let made = build(scratch.into());
    let copied = made.and_then(|src| {
        call(&GraphNodeCopyParams {
            dst: node.into(),
            src,
            exec: exec.map(GraphExecHandle::from),
        })
    });
    let destroyed = call(&GraphDestroy { graph: scratch });
    copied?;
    destroyed
}

/// New parameters for kernel node `node` (in its graph, or in `exec` only): `function`
/// of that shape with the packed parameter buffer `buffer`, in one request. It goes
/// without a reply when the guest has made the checks the driver makes before it
/// returns: the node is one the program made as a kernel node, and the shape fits the
/// device and the function. Anything else waits for the host's answer.
pub(crate) fn set_kernel_params(
    node: RawHandle,
    exec: Option<RawHandle>,
    function: vmcuda_wire::op::FunctionHandle,
    grid: [u32; 3],
    block: [u32; 3],
    shared_mem: u32,
    buffer: &[u8],
) -> Result<()> {
    if node.is_null() || exec.is_some_and(|e| e.is_null()) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    super::launch::check_config(grid, block)?;
    let made_as_kernel = kept_as(node, |k| {
        matches!(k, Kept::Kernel { .. } | Kept::DriverKernel { .. })
    })
    .unwrap_or(false);
    let fits = || {
        crate::function_facts::attributes(function).is_ok_and(|limits| {
            let threads: i64 = block.iter().map(|v| *v as i64).product();
            shared_mem as i64 <= limits.max_dynamic_shared_size_bytes as i64
                && threads <= limits.max_threads_per_block as i64
        })
    };
    let req = GraphKernelNodeSetParams {
        node: node.into(),
        exec: exec.map(GraphExecHandle::from),
        function,
        grid,
        block,
        shared_mem,
    };
    // VMCUDA_POST_NODE_UPDATES=0 waits for every update's answer.
    let post = std::env::var("VMCUDA_POST_NODE_UPDATES").map_or(true, |v| v != "0");
    if post && made_as_kernel && fits() {
        super::post(&req, buffer)
    } else {
        super::call_with(&req, buffer, crate::client::Sink::None)
    }
}

/// Keep what a set call gave, for the node's `Get` call (a graph's node only: an
/// executable graph's parameters are not read back by CUDA either).
fn kept_after_set(node: RawHandle, exec: Option<RawHandle>, kept: Kept) {
    if exec.is_none() {
        keep(GraphNodeHandle::from(node), kept);
    }
}

/// # Safety
/// `params` is readable with an argument array for its kernel.
unsafe fn set_kernel(
    exec: Option<RawHandle>,
    node: RawHandle,
    params: *const KernelNodeParams,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let kept = unsafe { kernel_kept(&caller::read(params)?) }?;
    let Kept::Kernel {
        params: p,
        _arguments: buffer,
        ..
    } = &kept
    else {
        unreachable!("kernel_kept keeps a kernel")
    };
    let (function, _) = super::registration::kernel(p.func as usize)?;
    let (grid, block) = (
        [p.grid.x, p.grid.y, p.grid.z],
        [p.block.x, p.block.y, p.block.z],
    );
    set_kernel_params(node, exec, function, grid, block, p.shared_mem, buffer)?;
    kept_after_set(node, exec, kept);
    Ok(())
}

pub extern "C" fn cudaGraphKernelNodeSetParams(
    node: RawHandle,
    params: *const KernelNodeParams,
) -> cudaError_t {
    guard("cudaGraphKernelNodeSetParams", || {
        // SAFETY: by its contract `params` is readable with its kernel's arguments.
        unsafe { set_kernel(None, node, params) }
    })
}

pub extern "C" fn cudaGraphExecKernelNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    params: *const KernelNodeParams,
) -> cudaError_t {
    guard("cudaGraphExecKernelNodeSetParams", || {
        // SAFETY: by its contract `params` is readable with its kernel's arguments.
        unsafe { set_kernel(Some(exec), node, params) }
    })
}

fn set_memset(exec: Option<RawHandle>, node: RawHandle, p: MemsetParams) -> Result<()> {
    set_params(node, exec, |g| build_node(g, &[], |s| memset_on(&p, s)))?;
    kept_after_set(node, exec, Kept::Memset(p));
    Ok(())
}

pub extern "C" fn cudaGraphMemsetNodeSetParams(
    node: RawHandle,
    params: *const MemsetParams,
) -> cudaError_t {
    guard("cudaGraphMemsetNodeSetParams", || {
        // SAFETY: by its contract `params` is readable.
        set_memset(None, node, unsafe { caller::read(params) }?)
    })
}

pub extern "C" fn cudaGraphExecMemsetNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    params: *const MemsetParams,
) -> cudaError_t {
    guard("cudaGraphExecMemsetNodeSetParams", || {
        // SAFETY: by its contract `params` is readable.
        set_memset(Some(exec), node, unsafe { caller::read(params) }?)
    })
}

fn set_memcpy(exec: Option<RawHandle>, node: RawHandle, p: Memcpy3DParms) -> Result<()> {
    set_params(node, exec, |g| build_node(g, &[], |s| memcpy_3d_on(&p, s)))?;
    kept_after_set(node, exec, Kept::Memcpy(p));
    Ok(())
}

pub extern "C" fn cudaGraphMemcpyNodeSetParams(
    node: RawHandle,
    params: *const Memcpy3DParms,
) -> cudaError_t {
    guard("cudaGraphMemcpyNodeSetParams", || {
        // SAFETY: by its contract `params` is readable.
        set_memcpy(None, node, unsafe { caller::read(params) }?)
    })
}

pub extern "C" fn cudaGraphExecMemcpyNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    params: *const Memcpy3DParms,
) -> cudaError_t {
    guard("cudaGraphExecMemcpyNodeSetParams", || {
        // SAFETY: by its contract `params` is readable.
        set_memcpy(Some(exec), node, unsafe { caller::read(params) }?)
    })
}

pub extern "C" fn cudaGraphMemcpyNodeSetParams1D(
    node: RawHandle,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphMemcpyNodeSetParams1D", || {
        set_memcpy(None, node, linear_copy(dst, src, bytes, kind))
    })
}

pub extern "C" fn cudaGraphExecMemcpyNodeSetParams1D(
    exec: RawHandle,
    node: RawHandle,
    dst: *mut c_void,
    src: *const c_void,
    bytes: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphExecMemcpyNodeSetParams1D", || {
        set_memcpy(Some(exec), node, linear_copy(dst, src, bytes, kind))
    })
}

pub extern "C" fn cudaGraphMemcpyNodeSetParamsToSymbol(
    node: RawHandle,
    symbol: *const c_void,
    src: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphMemcpyNodeSetParamsToSymbol", || {
        let p = symbol_copy(symbol, src as *mut c_void, bytes, offset, kind, true)?;
        set_memcpy(None, node, p)
    })
}

pub extern "C" fn cudaGraphMemcpyNodeSetParamsFromSymbol(
    node: RawHandle,
    dst: *mut c_void,
    symbol: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphMemcpyNodeSetParamsFromSymbol", || {
        let p = symbol_copy(symbol, dst, bytes, offset, kind, false)?;
        set_memcpy(None, node, p)
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaGraphExecMemcpyNodeSetParamsToSymbol(
    exec: RawHandle,
    node: RawHandle,
    symbol: *const c_void,
    src: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphExecMemcpyNodeSetParamsToSymbol", || {
        let p = symbol_copy(symbol, src as *mut c_void, bytes, offset, kind, true)?;
        set_memcpy(Some(exec), node, p)
    })
}

#[allow(clippy::too_many_arguments)]
pub extern "C" fn cudaGraphExecMemcpyNodeSetParamsFromSymbol(
    exec: RawHandle,
    node: RawHandle,
    dst: *mut c_void,
    symbol: *const c_void,
    bytes: usize,
    offset: usize,
    kind: u32,
) -> cudaError_t {
    guard("cudaGraphExecMemcpyNodeSetParamsFromSymbol", || {
        let p = symbol_copy(symbol, dst, bytes, offset, kind, false)?;
        set_memcpy(Some(exec), node, p)
    })
}

fn set_event(
    exec: Option<RawHandle>,
    node: RawHandle,
    event: RawHandle,
    record: bool,
) -> Result<()> {
    let plain = event_node(event, record)?;
    set_params(node, exec, |g| add_plain(g, Vec::new(), plain))?;
    kept_after_set(node, exec, Kept::Event(event));
    Ok(())
}

pub extern "C" fn cudaGraphEventRecordNodeSetEvent(
    node: RawHandle,
    event: RawHandle,
) -> cudaError_t {
    guard("cudaGraphEventRecordNodeSetEvent", || {
        set_event(None, node, event, true)
    })
}

pub extern "C" fn cudaGraphEventWaitNodeSetEvent(node: RawHandle, event: RawHandle) -> cudaError_t {
    guard("cudaGraphEventWaitNodeSetEvent", || {
        set_event(None, node, event, false)
    })
}

pub extern "C" fn cudaGraphExecEventRecordNodeSetEvent(
    exec: RawHandle,
    node: RawHandle,
    event: RawHandle,
) -> cudaError_t {
    guard("cudaGraphExecEventRecordNodeSetEvent", || {
        set_event(Some(exec), node, event, true)
    })
}

pub extern "C" fn cudaGraphExecEventWaitNodeSetEvent(
    exec: RawHandle,
    node: RawHandle,
    event: RawHandle,
) -> cudaError_t {
    guard("cudaGraphExecEventWaitNodeSetEvent", || {
        set_event(Some(exec), node, event, false)
    })
}

pub extern "C" fn cudaGraphExecChildGraphNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    child: RawHandle,
) -> cudaError_t {
    guard("cudaGraphExecChildGraphNodeSetParams", || {
        let plain = PlainNode::ChildGraph(GraphHandle::from(child));
        set_params(node, Some(exec), |g| add_plain(g, Vec::new(), plain))
    })
}

pub extern "C" fn cudaGraphHostNodeSetParams(
    node: RawHandle,
    params: *const HostNodeParams,
) -> cudaError_t {
    guard("cudaGraphHostNodeSetParams", || {
        // SAFETY: by its contract `params` is readable.
        set_host(node, None, &unsafe { caller::read(params) }?)
    })
}

pub extern "C" fn cudaGraphExecHostNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    params: *const HostNodeParams,
) -> cudaError_t {
    guard("cudaGraphExecHostNodeSetParams", || {
        if exec.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        // SAFETY: by its contract `params` is readable.
        set_host(node, Some(exec), &unsafe { caller::read(params) }?)
    })
}

pub extern "C" fn cudaGraphHostNodeGetParams(
    node: RawHandle,
    out: *mut HostNodeParams,
) -> cudaError_t {
    guard("cudaGraphHostNodeGetParams", || {
        let at = host_slot(node)?;
        let (f, data) = host_functions::get(at).ok_or(CudaStatus::ErrorInvalidValue)?;
        let p = HostNodeParams {
            f: Some(f),
            data: data as *mut c_void,
        };
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, p) }
    })
}

/// `cudaGraphNodeSetParams` / `cudaGraphExecNodeSetParams`: by the type given.
///
/// # Safety
/// `params` is readable with the parameters of its type.
pub(crate) unsafe fn set_by_type(
    exec: Option<RawHandle>,
    node: RawHandle,
    params: *const GraphNodeParams,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let ty = unsafe { caller::read(params.cast::<u32>()) }?;
    // SAFETY: (each arm) the type says which parameters the union holds.
    unsafe {
        match ty {
            node_type::KERNEL => {
                set_kernel(exec, node, params.cast::<u8>().wrapping_add(16).cast())
            }
            node_type::MEMSET => set_memset(exec, node, union_of(params)?),
            node_type::MEMCPY => {
                let p = caller::read(params.cast::<u8>().wrapping_add(32).cast())?;
                set_memcpy(exec, node, p)
            }
            node_type::EVENT_RECORD | node_type::WAIT_EVENT => {
                set_event(exec, node, union_of(params)?, ty == node_type::EVENT_RECORD)
            }
            node_type::GRAPH => {
                let child: RawHandle = union_of(params)?;
                let plain = PlainNode::ChildGraph(GraphHandle::from(child));
                set_params(node, exec, |g| add_plain(g, Vec::new(), plain))
            }
            node_type::EMPTY => Ok(()),
            node_type::HOST => set_host(node, exec, &union_of::<HostNodeParams>(params)?),
            _ => Err(CudaStatus::ErrorNotSupported),
        }
    }
}

pub extern "C" fn cudaGraphNodeSetParams(
    node: RawHandle,
    params: *const GraphNodeParams,
) -> cudaError_t {
    guard("cudaGraphNodeSetParams", || {
        // SAFETY: by its contract `params` is readable with its type's parameters.
        unsafe { set_by_type(None, node, params) }
    })
}

pub extern "C" fn cudaGraphExecNodeSetParams(
    exec: RawHandle,
    node: RawHandle,
    params: *const GraphNodeParams,
) -> cudaError_t {
    guard("cudaGraphExecNodeSetParams", || {
        // SAFETY: by its contract `params` is readable with its type's parameters.
        unsafe { set_by_type(Some(exec), node, params) }
    })
}

// ---- parameters read back -----------------------------------------------------------------

pub extern "C" fn cudaGraphKernelNodeGetParams(
    node: RawHandle,
    out: *mut KernelNodeParams,
) -> cudaError_t {
    guard("cudaGraphKernelNodeGetParams", || {
        with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::Kernel { params, .. } => unsafe { caller::write(out, *params) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

pub extern "C" fn cudaGraphMemsetNodeGetParams(
    node: RawHandle,
    out: *mut MemsetParams,
) -> cudaError_t {
    guard("cudaGraphMemsetNodeGetParams", || {
        with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::Memset(p) => unsafe { caller::write(out, *p) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

pub extern "C" fn cudaGraphMemcpyNodeGetParams(
    node: RawHandle,
    out: *mut Memcpy3DParms,
) -> cudaError_t {
    guard("cudaGraphMemcpyNodeGetParams", || {
        with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::Memcpy(p) => unsafe { caller::write(out, *p) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

fn event_of(node: RawHandle, out: *mut RawHandle) -> Result<()> {
    with_kept(node, |k| match k {
        // SAFETY: by the Get call's contract `out` is writable.
        Kept::Event(e) => unsafe { caller::write(out, *e) },
        _ => Err(CudaStatus::ErrorInvalidValue),
    })
}

pub extern "C" fn cudaGraphEventRecordNodeGetEvent(
    node: RawHandle,
    out: *mut RawHandle,
) -> cudaError_t {
    guard("cudaGraphEventRecordNodeGetEvent", || event_of(node, out))
}

pub extern "C" fn cudaGraphEventWaitNodeGetEvent(
    node: RawHandle,
    out: *mut RawHandle,
) -> cudaError_t {
    guard("cudaGraphEventWaitNodeGetEvent", || event_of(node, out))
}

pub extern "C" fn cudaGraphMemAllocNodeGetParams(
    node: RawHandle,
    out: *mut MemAllocNodeParams,
) -> cudaError_t {
    guard("cudaGraphMemAllocNodeGetParams", || {
        with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::MemAlloc(p) => unsafe { caller::write(out, *p) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

pub extern "C" fn cudaGraphMemFreeNodeGetParams(
    node: RawHandle,
    out: *mut *mut c_void,
) -> cudaError_t {
    guard("cudaGraphMemFreeNodeGetParams", || {
        with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::MemFree(p) => unsafe { caller::write(out, *p) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    })
}

// ---- executable graphs --------------------------------------------------------------------

pub extern "C" fn cudaGraphExecUpdate(
    exec: RawHandle,
    graph: RawHandle,
    info: *mut ExecUpdateResultInfo,
) -> cudaError_t {
    guard("cudaGraphExecUpdate", || {
        if exec.is_null() || graph.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let r = call(&GraphExecUpdate {
            exec: exec.into(),
            graph: graph.into(),
        })?;
        // Its host nodes now signal the graph's slots.
        if r.result == 0 {
            host_slots_shared(Some(exec as u64));
        }
        let out = ExecUpdateResultInfo {
            result: r.result,
            error_node: r.error_node.into(),
            error_from_node: r.error_from_node.into(),
        };
        // SAFETY: by its contract `info` is NULL or writable.
        unsafe { caller::write_opt(info, out) };
        match r.result {
            0 => Ok(()),
            _ => Err(CudaStatus::ErrorGraphExecUpdateFailure),
        }
    })
}

fn upload(exec: RawHandle, stream: StreamHandle) -> Result<()> {
    if exec.is_null() {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    capture::check_stream_use(stream)?;
    let req = GraphUpload {
        exec: exec.into(),
        stream,
    };
    crate::gate::submit(stream, move || call(&req).map(|_| ()))
}

pub extern "C" fn cudaGraphUpload(exec: RawHandle, stream: RawHandle) -> cudaError_t {
    guard("cudaGraphUpload", || {
        upload(exec, stream_handle(stream, false))
    })
}

pub extern "C" fn cudaGraphUpload_ptsz(exec: RawHandle, stream: RawHandle) -> cudaError_t {
    guard("cudaGraphUpload_ptsz", || {
        upload(exec, stream_handle(stream, true))
    })
}

/// `cudaGraphInstantiateFlagUpload`.
const INSTANTIATE_UPLOAD: u64 = 2;

/// # Safety
/// `params` is readable and writable; `exec` writable.
unsafe fn instantiate_with_params(
    exec: *mut RawHandle,
    graph: RawHandle,
    params: *mut InstantiateParams,
    per_thread: bool,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let p = unsafe { caller::read(params.cast_const()) }?;
    let flags = p.flags & !INSTANTIATE_UPLOAD;
    let made =
        keeping_last_error(|| super::graph::cudaGraphInstantiateWithFlags(exec, graph, flags));
    // `cudaGraphInstantiateSuccess` 0, `cudaGraphInstantiateError` 1.
    let result = u32::from(made.is_err());
    // SAFETY: as the caller promised.
    unsafe {
        let out = params.cast::<u8>();
        caller::write(
            out.wrapping_add(16).cast::<RawHandle>(),
            std::ptr::null_mut(),
        )?;
        caller::write(out.wrapping_add(24).cast::<u32>(), result)?;
    }
    made?;
    if p.flags & INSTANTIATE_UPLOAD != 0 {
        // SAFETY: as the caller promised.
        let made_exec = unsafe { caller::read(exec.cast_const()) }?;
        upload(made_exec, stream_handle(p.upload_stream, per_thread))?;
    }
    Ok(())
}

pub extern "C" fn cudaGraphInstantiateWithParams(
    exec: *mut RawHandle,
    graph: RawHandle,
    params: *mut InstantiateParams,
) -> cudaError_t {
    guard("cudaGraphInstantiateWithParams", || {
        // SAFETY: by its contract `params` is readable and writable, `exec` writable.
        unsafe { instantiate_with_params(exec, graph, params, false) }
    })
}

pub extern "C" fn cudaGraphInstantiateWithParams_ptsz(
    exec: *mut RawHandle,
    graph: RawHandle,
    params: *mut InstantiateParams,
) -> cudaError_t {
    guard("cudaGraphInstantiateWithParams_ptsz", || {
        // SAFETY: by its contract `params` is readable and writable, `exec` writable.
        unsafe { instantiate_with_params(exec, graph, params, true) }
    })
}

/// `cudaKernelNodeAttrValue`: a stream's attribute value, the same union.
type AttrValue = [u8; crate::abi::runtime::STREAM_ATTR_LEN];

pub extern "C" fn cudaGraphKernelNodeSetAttribute(
    node: RawHandle,
    attr: u32,
    value: *const AttrValue,
) -> cudaError_t {
    guard("cudaGraphKernelNodeSetAttribute", || {
        // SAFETY: by its contract `value` is NULL or a readable attribute value.
        let value = unsafe { caller::read(value) }?.to_vec();
        call(&vmcuda_wire::op::GraphKernelNodeSetAttribute {
            node: GraphNodeHandle::from(node),
            attr,
            value,
        })
    })
}

pub extern "C" fn cudaGraphKernelNodeGetAttribute(
    node: RawHandle,
    attr: u32,
    value: *mut AttrValue,
) -> cudaError_t {
    guard("cudaGraphKernelNodeGetAttribute", || {
        if value.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let r = call(&vmcuda_wire::op::GraphKernelNodeGetAttribute {
            node: GraphNodeHandle::from(node),
            attr,
        })?;
        let bytes: AttrValue = r
            .value
            .as_slice()
            .try_into()
            .map_err(|_| CudaStatus::ErrorUnknown)?;
        // SAFETY: by its contract `value` is writable.
        unsafe { caller::write(value, bytes) }
    })
}
