//! Nodes with stream work: kernels, memsets, copies and memory nodes, each made by
//! doing its work on a stream that captures into the program's graph.

use super::*;

// ---- kernel nodes -------------------------------------------------------------------

// ---- memset nodes -------------------------------------------------------------------

/// A hand-made memset node's work on `stream` (a stream capturing into its graph).
/// The driver refuses such a node on memory it does not know at once, where it takes
/// a program's own capture of the same memset and refuses the graph later (the host
/// does the same, and cannot tell the two captures apart): so the node's memory is
/// checked here, as the program's device memory or pinned host memory.
pub(super) fn memset_on(p: &MemsetParams, stream: RawHandle) -> cudaError_t {
    let rows = if p.height <= 1 { 1 } else { p.height };
    let row = p.width.saturating_mul(p.element_size as usize);
    let extent = p.pitch.saturating_mul(rows - 1).saturating_add(row) as u64;
    if row != 0 && !program_memory(p.dst as u64, extent) {
        return CudaStatus::ErrorInvalidValue.0;
    }
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
                return crate::driver::inner::memory::memset_elements_on(
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
                let r = crate::driver::inner::memory::memset_elements_on(
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

/// Whether `[ptr, ptr + len)` is the program's memory: device memory it has (an
/// allocation, a mapping, a module variable, managed memory) or pinned host memory.
fn program_memory(ptr: u64, len: u64) -> bool {
    if crate::driver::inner::memory::known_range(ptr, len) {
        return true;
    }
    let registry = crate::state::registry();
    registry
        .host_range(ptr as usize)
        .is_some_and(|(start, r)| ptr.saturating_add(len) <= (start + r.size) as u64)
}

pub(super) fn add_memset(
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
        false => unsafe { super::super::array::memcpy_3d(p, handle, true) },
        true => rt_copy::memcpy_3d_linear(p, handle, true),
    };
    match r {
        Ok(()) => 0,
        Err(e) => e.0,
    }
}

/// Whether a copy node's host side is memory the host cannot reach when the graph
/// runs (the program's own pageable memory): its work is then a staged copy, a host
/// function and a device copy (see `host_functions::capture_pageable_copy`).
pub(super) fn staged(p: &Memcpy3DParms) -> bool {
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

pub(super) fn add_memcpy(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    p: &Memcpy3DParms,
) -> Result<GraphNodeHandle> {
    let node = add_copy_node(graph, deps, p)?;
    keep(node, Kept::Memcpy);
    Ok(node)
}

// ---- memory nodes -------------------------------------------------------------------

/// `cudaMemLocationTypeDevice`.
const LOCATION_DEVICE: i32 = 1;

pub(super) fn add_mem_alloc(
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
        super::super::mem_pool::cudaMallocAsync(&mut ptr, p.bytesize, s)
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

pub(super) fn add_mem_free(
    graph: RawHandle,
    deps: &[GraphNodeHandle],
    ptr: *mut c_void,
) -> Result<GraphNodeHandle> {
    let node = build_node(graph, deps, |s| {
        super::super::mem_pool::cudaFreeAsync(ptr, s)
    })?;
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
