//! Graphs built by hand: `cudaGraphAdd*Node`, `cudaGraphAddNode`, edges, node
//! parameters and executable-graph updates.
//!
//! A kernel, copy, memset or memory node is made by doing its work on a stream of our
//! own that captures into the program's graph (`cudaStreamBeginCaptureToGraph` with the
//! node's dependencies): the launch or copy goes through the same guest code, checks
//! and host checks as on any stream, and the node the capture adds is the new node.
//! New parameters for an existing node are made the same way, as a node of a scratch
//! graph, whose parameters the host then copies onto the node (the driver's typed
//! setters), so they too are checked as a new node's are; a kernel node's go in one
//! request instead (`set_params::set_kernel_params`). Empty, child-graph and event
//! nodes, edges, clones and the rest are ops of their own.
//!
//! The parameters a program gave are kept per node, so that the `Get` calls answer
//! with them (kernel arguments copied, as CUDA keeps its own copy). Nodes the
//! program did not build here (captured ones) answer `cudaErrorNotSupported` to those,
//! but for a kernel node's through the driver's call, which asks the host
//! (`driver::graph`).
//!
//! The files: this one keeps what every node shares (the kept parameters, the
//! capture that makes a node); `work_nodes` (kernels, memsets, copies, memory nodes),
//! `other_nodes` (nodes without stream work, host nodes, clones, `cudaGraphAddNode`),
//! `capture_to_graph`, `edges`, `set_params`, `read_back` and `exec` (executable
//! graphs, launch attributes).
//!
//! Host nodes are a slot the GPU signals and waits on while a thread of the guest's
//! runs the function (`host_functions`); a graph, its executable graphs and its clones
//! keep their own functions (see `set_host`).

use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::sync::Mutex;

use vmcuda_wire::graph::{
    conditional_type, node_type, ConditionalNodeMade, GraphAddConditionalNode, GraphAddNode,
    GraphNodeCopyParams, GraphNodeMade, PlainNode, StreamBeginCaptureToGraph,
};
use vmcuda_wire::op::{
    EventHandle, GraphAddDependencies, GraphClone, GraphCreate, GraphDestroy, GraphDestroyNode,
    GraphExecChildGraphNodeSetParams, GraphExecHandle, GraphExecUpdate, GraphGetEdges,
    GraphGetRootNodes, GraphHandle, GraphKernelNodeSetParams, GraphNodeFindInClone,
    GraphNodeGetDependentNodes, GraphNodeHandle, GraphRemoveDependencies, GraphUpload, RawEdge,
    StreamHandle,
};
use vmcuda_wire::CudaStatus;

use super::memory::copy as rt_copy;
use super::memory::memset as rt_memset;
use super::{call, guard, stream_handle, RawHandle, Result};
use crate::abi::driver::DriverMemcpy3D;
use crate::abi::runtime::{
    ChildGraphParams, ConditionalParams, Extent, Memcpy3DParms, PitchedPtr, Pos,
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

mod capture_to_graph;
mod edges;
mod exec;
mod other_nodes;
mod read_back;
mod set_params;
mod work_nodes;

pub(crate) use super::node_builder::build_node;

pub use self::{
    capture_to_graph::*, edges::*, exec::*, other_nodes::*, read_back::*, set_params::*,
    work_nodes::*,
};

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
    /// A driver kernel node (`CUDA_KERNEL_NODE_PARAMS`): the packed arguments and
    /// pointers to each, which `params.kernel_params` points at.
    DriverKernel {
        params: crate::abi::driver::KernelNodeParams,
        _arguments: Box<[u8]>,
        _pointers: Box<[*mut c_void]>,
    },
    Memset(MemsetParams),
    /// A copy node made through the runtime's parameters (nothing reads them back
    /// since the runtime library was retired: the driver's nodes keep `DriverMemcpy`).
    Memcpy,
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
