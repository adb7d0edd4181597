//! A graph's edges: added, removed and listed, with their data.

use super::*;

// ---- edges ----------------------------------------------------------------------------

/// The edges `from[i] -> to[i]` with their data.
type Edges = (Vec<GraphNodeHandle>, Vec<GraphNodeHandle>, Vec<RawEdge>);

/// # Safety
/// `from`, `to` (and `edge_data`, if given) hold `count` readable entries.
pub(super) unsafe fn edges(
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
            super::super::graph::give_nodes(&list.from, &list.data, from, edge_data, count)?;
            if !to.is_null() {
                let mut left = room;
                super::super::graph::give_nodes(
                    &list.to,
                    &[],
                    to,
                    std::ptr::null_mut(),
                    &mut left,
                )?;
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
        unsafe {
            super::super::graph::give_nodes(&roots.nodes, &[], nodes, std::ptr::null_mut(), count)
        }
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
        unsafe {
            super::super::graph::give_nodes(&found.nodes, &found.edges, nodes, edge_data, count)
        }
    })
}
