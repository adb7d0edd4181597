//! New parameters for existing nodes, in their graph or in an executable graph only.

use super::*;

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
    super::super::launch::check_config(grid, block)?;
    let made_as_kernel = kept_as(node, |k| matches!(k, Kept::DriverKernel { .. })).unwrap_or(false);
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
    // VMCUDA_POST_NODE_UPDATES=0 waits for every update's answer (read once: this is
    // a framework's per-step path).
    static POST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let post =
        *POST.get_or_init(|| std::env::var("VMCUDA_POST_NODE_UPDATES").map_or(true, |v| v != "0"));
    if post && made_as_kernel && fits() {
        super::super::post(&req, buffer)
    } else {
        super::super::call_with(&req, buffer, crate::client::Sink::None)
    }
}

/// Keep what a set call gave, for the node's `Get` call (a graph's node only: an
/// executable graph's parameters are not read back by CUDA either).
pub(super) fn kept_after_set(node: RawHandle, exec: Option<RawHandle>, kept: Kept) {
    if exec.is_none() {
        keep(GraphNodeHandle::from(node), kept);
    }
}

pub(super) fn set_memset(exec: Option<RawHandle>, node: RawHandle, p: MemsetParams) -> Result<()> {
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

pub(super) fn set_memcpy(exec: Option<RawHandle>, node: RawHandle, p: Memcpy3DParms) -> Result<()> {
    set_params(node, exec, |g| build_node(g, &[], |s| memcpy_3d_on(&p, s)))?;
    kept_after_set(node, exec, Kept::Memcpy);
    Ok(())
}

pub(super) fn set_event(
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
        set_child_graph(node, Some(exec), child)
    })
}

/// A child-graph node's new graph: in an executable graph, one request (frameworks
/// update their command buffers' child graphs every step); in its graph (which CUDA
/// cannot change) by way of a scratch node, so the answer is the host's.
fn set_child_graph(node: RawHandle, exec: Option<RawHandle>, child: RawHandle) -> Result<()> {
    if node.is_null() || exec.is_some_and(|e| e.is_null()) {
        return Err(CudaStatus::ErrorInvalidValue);
    }
    match exec {
        Some(exec) => call(&GraphExecChildGraphNodeSetParams {
            exec: GraphExecHandle::from(exec),
            node: node.into(),
            child: GraphHandle::from(child),
        }),
        None => {
            let plain = PlainNode::ChildGraph(GraphHandle::from(child));
            set_params(node, None, |g| add_plain(g, Vec::new(), plain))
        }
    }
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
            node_type::MEMSET => set_memset(exec, node, union_of(params)?),
            node_type::MEMCPY => {
                let p = caller::read(params.cast::<u8>().wrapping_add(32).cast())?;
                set_memcpy(exec, node, p)
            }
            node_type::EVENT_RECORD | node_type::WAIT_EVENT => {
                set_event(exec, node, union_of(params)?, ty == node_type::EVENT_RECORD)
            }
            node_type::GRAPH => set_child_graph(node, exec, union_of(params)?),
            node_type::EMPTY => Ok(()),
            node_type::HOST => set_host(node, exec, &union_of::<HostNodeParams>(params)?),
            _ => Err(CudaStatus::ErrorNotSupported),
        }
    }
}
