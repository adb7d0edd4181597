//! The driver's graph-building calls whose parameters differ from the runtime's:
//! kernel nodes (a `CUfunction` or library kernel, not a host function), copies
//! (`CUDA_MEMCPY3D`) and the generic `cuGraphAddNode` (batch memory operation nodes are
//! in `stream.rs`). Each is made the runtime's way
//! (see `inner::graph_build`): the node's work on a stream capturing into the graph.

use vmcuda_wire::graph::node_type;
use vmcuda_wire::CudaStatus;

use super::module::{
    function, function_id_of, kept_kernel_node, kept_packed, launch_node, library_of, param_bytes,
};
use super::{check_initialized, export, Result};
use crate::abi::driver::{DriverMemcpy3D, KernelNodeParams};
use crate::abi::runtime::GraphNodeParams;
use crate::caller;
use crate::client::Sink;
use crate::driver::inner::call_with;
use crate::driver::inner::graph_build::{self, Kept};
use crate::driver::inner::node_builder;
use crate::driver::inner::RawHandle;
use crate::notice::refuse;
use vmcuda_wire::op::GraphKernelNodeGetParams;

/// A kernel node's parameters as kept (arguments copied), and the node's launch.
///
/// # Safety
/// `p` is readable with its kernel's arguments.
unsafe fn kernel(p: *const KernelNodeParams) -> Result<(KernelNodeParams, Kept)> {
    // SAFETY: as the caller promised.
    let kept = unsafe { kept_kernel_node(&caller::read(p)?) }?;
    let Kept::DriverKernel { params, .. } = &kept else {
        unreachable!("kept_kernel_node keeps a driver kernel")
    };
    Ok((*params, kept))
}

/// # Safety
/// As `kernel`.
unsafe fn add_kernel(
    graph: RawHandle,
    deps: &[vmcuda_wire::op::GraphNodeHandle],
    p: *const KernelNodeParams,
) -> Result<vmcuda_wire::op::GraphNodeHandle> {
    // SAFETY: as the caller promised; the kept arguments live in `kept`.
    let (params, kept) = unsafe { kernel(p) }?;
    let node = node_builder::build_node(graph, deps, |s| {
        // SAFETY: the arguments are the kept copies, alive in `kept`.
        unsafe { launch_node(&params, s) }
    })?;
    graph_build::keep(node, kept);
    Ok(node)
}

export! {
    fn cuGraphAddKernelNode_v2(
        out: *mut RawHandle,
        graph: RawHandle,
        deps: *const RawHandle,
        count: usize,
        params: *const KernelNodeParams,
    ) {
        check_initialized()?;
        // SAFETY: by cuGraphAddKernelNode's contract `deps` holds `count` nodes, `params`
        // is readable with its kernel's arguments and `out` is writable.
        unsafe {
            let deps = graph_build::dependencies(deps, count)?;
            graph_build::give(out, add_kernel(graph, &deps, params)?)
        }
    }
}

/// New kernel parameters for a node (in its graph, or in `exec` only).
///
/// # Safety
/// As `kernel`.
unsafe fn set_kernel(
    exec: Option<RawHandle>,
    node: RawHandle,
    p: *const KernelNodeParams,
) -> Result<()> {
    check_initialized()?;
    // SAFETY: as the caller promised.
    let kept = unsafe { kept_kernel_node(&caller::read(p)?) }?;
    let Kept::DriverKernel {
        params: p,
        _arguments: packed,
        ..
    } = &kept
    else {
        unreachable!("kept_kernel_node keeps a driver kernel")
    };
    let (function, layout) = function(if p.func.is_null() { p.kern } else { p.func })?;
    let mut buffer = packed.to_vec();
    buffer.resize(param_bytes(&layout), 0);
    graph_build::set_kernel_params(node, exec, function, p.grid, p.block, p.shared_mem, &buffer)?;
    if exec.is_none() {
        graph_build::keep(node.into(), kept);
    }
    Ok(())
}

export! {
    fn cuGraphKernelNodeSetParams_v2(node: RawHandle, params: *const KernelNodeParams) {
        // SAFETY: by its contract `params` is readable with its kernel's arguments.
        unsafe { set_kernel(None, node, params) }
    }
}

export! {
    fn cuGraphExecKernelNodeSetParams_v2(
        exec: RawHandle,
        node: RawHandle,
        params: *const KernelNodeParams,
    ) {
        // SAFETY: by its contract `params` is readable with its kernel's arguments.
        unsafe { set_kernel(Some(exec), node, params) }
    }
}

export! {
    /// A node built by hand answers from what the guest kept; any other (a captured
    /// one) from the host, and is kept from then on.
    fn cuGraphKernelNodeGetParams_v2(node: RawHandle, out: *mut KernelNodeParams) {
        check_initialized()?;
        if node.is_null() || out.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let kept = graph_build::kept_as(node, |k| match k {
            Kept::DriverKernel { params, .. } => Ok(*params),
            _ => Err(CudaStatus::ErrorInvalidValue),
        });
        let params = match kept {
            Some(params) => params?,
            None => kernel_params_from_host(node)?,
        };
        // SAFETY: by its contract `out` is writable.
        unsafe { caller::write(out, params) }
    }
}

/// A captured kernel node's parameters, from the host's driver: kept for the node (its
/// argument copies stay as long as the node, as the driver's do).
fn kernel_params_from_host(node: RawHandle) -> Result<KernelNodeParams> {
    let mut packed = Vec::new();
    let got = call_with(
        &GraphKernelNodeGetParams { node: node.into() },
        &[],
        Sink::Grow(&mut packed),
    )?;
    let func = function_id_of(got.function).ok_or_else(|| {
        refuse(
            "reading a captured kernel node's parameters",
            "works for kernels of the program's own modules",
        )
    })?;
    let (_, layout) = function(func as *mut std::ffi::c_void)?;
    packed.resize(param_bytes(&layout), 0);
    let func = func as *mut std::ffi::c_void;
    // A library's kernel is also the node's `kern`, as the driver answers for a launch
    // of one (NVIDIA's runtime finds its kernel by it); its function is the same handle.
    let kern = match library_of(func) {
        Ok(Some(_)) => func,
        _ => std::ptr::null_mut(),
    };
    let params = KernelNodeParams {
        func,
        grid: got.grid,
        block: got.block,
        shared_mem: got.shared_mem,
        kernel_params: std::ptr::null(),
        extra: std::ptr::null(),
        kern,
        ctx: std::ptr::null_mut(),
    };
    let kept = kept_packed(params, &layout, packed);
    let Kept::DriverKernel { params, .. } = &kept else {
        unreachable!("kept_packed keeps a driver kernel")
    };
    let params = *params;
    graph_build::keep(node.into(), kept);
    Ok(params)
}

/// A copy node from the driver's description.
fn add_memcpy(
    graph: RawHandle,
    deps: &[vmcuda_wire::op::GraphNodeHandle],
    p: &DriverMemcpy3D,
) -> Result<vmcuda_wire::op::GraphNodeHandle> {
    let copy = p.to_runtime()?;
    let node = graph_build::add_copy_node(graph, deps, &copy)?;
    graph_build::keep(node, Kept::DriverMemcpy(*p));
    Ok(node)
}

export! {
    fn cuGraphAddMemcpyNode(
        out: *mut RawHandle,
        graph: RawHandle,
        deps: *const RawHandle,
        count: usize,
        params: *const DriverMemcpy3D,
        _ctx: RawHandle,
    ) {
        check_initialized()?;
        // SAFETY: by cuGraphAddMemcpyNode's contract `deps` holds `count` nodes,
        // `params` is readable and `out` writable.
        unsafe {
            let deps = graph_build::dependencies(deps, count)?;
            let p = caller::read(params)?;
            graph_build::give(out, add_memcpy(graph, &deps, &p)?)
        }
    }
}

fn set_memcpy(exec: Option<RawHandle>, node: RawHandle, p: DriverMemcpy3D) -> Result<()> {
    check_initialized()?;
    let copy = p.to_runtime()?;
    graph_build::set_params(node, exec, |g| {
        node_builder::build_node(g, &[], |s| graph_build::memcpy_3d_on(&copy, s))
    })?;
    if exec.is_none() {
        graph_build::keep(node.into(), Kept::DriverMemcpy(p));
    }
    Ok(())
}

export! {
    fn cuGraphMemcpyNodeSetParams(node: RawHandle, params: *const DriverMemcpy3D) {
        // SAFETY: by its contract `params` is readable.
        set_memcpy(None, node, unsafe { caller::read(params) }?)
    }
}

export! {
    fn cuGraphExecMemcpyNodeSetParams(
        exec: RawHandle,
        node: RawHandle,
        params: *const DriverMemcpy3D,
        _ctx: RawHandle,
    ) {
        // SAFETY: by its contract `params` is readable.
        set_memcpy(Some(exec), node, unsafe { caller::read(params) }?)
    }
}

export! {
    fn cuGraphMemcpyNodeGetParams(node: RawHandle, out: *mut DriverMemcpy3D) {
        check_initialized()?;
        graph_build::with_kept(node, |k| match k {
            // SAFETY: by its contract `out` is writable.
            Kept::DriverMemcpy(p) => unsafe { caller::write(out, *p) },
            _ => Err(CudaStatus::ErrorInvalidValue),
        })
    }
}

/// The driver's `CUgraphNodeParams` differs from the runtime's in its kernel and copy
/// parameters only: those are made here, the rest the runtime's way.
///
/// # Safety
/// `params` is readable and writable with the parameters of its type.
unsafe fn add_by_type(
    graph: RawHandle,
    deps: Vec<vmcuda_wire::op::GraphNodeHandle>,
    params: *mut GraphNodeParams,
) -> Result<vmcuda_wire::op::GraphNodeHandle> {
    // SAFETY: as the caller promised.
    let ty = unsafe { caller::read(params.cast::<u32>()) }?;
    let at = |offset: usize| params.cast::<u8>().wrapping_add(offset);
    // SAFETY: (each arm) the type says which parameters the union (at 16) holds; a
    // copy node's `CUDA_MEMCPY_NODE_PARAMS` has its copy at 16 within it.
    unsafe {
        match ty {
            node_type::KERNEL => add_kernel(graph, &deps, at(16).cast()),
            node_type::MEMCPY => add_memcpy(graph, &deps, &caller::read(at(32).cast())?),
            node_type::BATCH_MEM_OP => {
                super::stream::add_batch_node(graph, &deps, &caller::read(at(16).cast())?)
            }
            _ => graph_build::add_by_type(graph, deps, params),
        }
    }
}

export! {
    fn cuGraphAddNode_v2(
        out: *mut RawHandle,
        graph: RawHandle,
        deps: *const RawHandle,
        edge_data: *const u64,
        count: usize,
        params: *mut GraphNodeParams,
    ) {
        check_initialized()?;
        // SAFETY: by cuGraphAddNode's contract `deps` (and `edge_data`, if given) hold
        // `count` entries, `params` is readable and writable, `out` writable.
        unsafe {
            let node = graph_build::add_with_edges(graph, deps, edge_data, count, params, |deps| {
                add_by_type(graph, deps, params)
            })?;
            graph_build::give(out, node)
        }
    }
}

/// # Safety
/// `params` is readable with the parameters of its type.
unsafe fn set_by_type(
    exec: Option<RawHandle>,
    node: RawHandle,
    params: *mut GraphNodeParams,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let ty = unsafe { caller::read(params.cast::<u32>()) }?;
    let at = |offset: usize| params.cast::<u8>().wrapping_add(offset);
    // SAFETY: (each arm) as in add_by_type.
    unsafe {
        match ty {
            node_type::KERNEL => set_kernel(exec, node, at(16).cast()),
            node_type::MEMCPY => set_memcpy(exec, node, caller::read(at(32).cast())?),
            node_type::BATCH_MEM_OP => {
                super::stream::set_batch_node(exec, node, &caller::read(at(16).cast())?)
            }
            _ => graph_build::set_by_type(exec, node, params),
        }
    }
}

export! {
    fn cuGraphNodeSetParams(node: RawHandle, params: *mut GraphNodeParams) {
        check_initialized()?;
        // SAFETY: by its contract `params` is readable with its type's parameters.
        unsafe { set_by_type(None, node, params) }
    }
}

export! {
    fn cuGraphExecNodeSetParams(exec: RawHandle, node: RawHandle, params: *mut GraphNodeParams) {
        check_initialized()?;
        // SAFETY: by its contract `params` is readable with its type's parameters.
        unsafe { set_by_type(Some(exec), node, params) }
    }
}
