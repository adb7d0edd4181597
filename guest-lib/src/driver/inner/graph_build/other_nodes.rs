//! Nodes without stream work (empty, child-graph, event), host nodes and their slots,
//! clones, and the generic `cudaGraphAddNode` (conditional nodes among them).

use super::*;

// ---- nodes without stream work -------------------------------------------------------

pub(super) fn add_plain(
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

pub(super) fn event_node(event: RawHandle, record: bool) -> Result<PlainNode> {
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
pub(super) struct HostSlots {
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

pub(super) fn host_slots<T>(f: impl FnOnce(&mut HostSlots) -> T) -> T {
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
pub(super) fn host_slot(node: RawHandle) -> Result<usize> {
    with_kept(node, |k| match k {
        Kept::Host(at) => Ok(*at),
        _ => Err(CudaStatus::ErrorInvalidValue),
    })
}

/// A node signalling slot `at`, in `graph`.
pub(super) fn host_signal_node(
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

pub(super) fn add_host(
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
pub(super) fn set_host(node: RawHandle, exec: Option<RawHandle>, p: &HostNodeParams) -> Result<()> {
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
pub(super) unsafe fn union_of<T: Copy>(params: *const GraphNodeParams) -> Result<T> {
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
pub(super) unsafe fn add_conditional(
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
