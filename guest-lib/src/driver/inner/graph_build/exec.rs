//! Executable graphs (update, upload, instantiation with parameters) and kernel
//! nodes' launch attributes.

use super::*;
use vmcuda_wire::graph::{GraphExecDestroy, GraphInstantiate};

// ---- executable graphs --------------------------------------------------------------------

pub extern "C" fn cudaGraphInstantiateWithFlags(
    exec: *mut RawHandle,
    graph: RawHandle,
    flags: u64,
) -> cudaError_t {
    instantiate("cudaGraphInstantiateWithFlags", exec, graph, flags)
}

fn instantiate(
    name: &'static str,
    exec: *mut RawHandle,
    graph: RawHandle,
    flags: u64,
) -> cudaError_t {
    guard(name, || {
        if exec.is_null() || graph.is_null() {
            return Err(CudaStatus::ErrorInvalidValue);
        }
        let req = GraphInstantiate {
            graph: GraphHandle(graph as u64),
            flags,
        };
        let made = call(&req)?;
        host_slots_shared(None);
        super::super::graph::live(|l| l.execs.insert(made.exec.0));
        EXEC_FLAGS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(made.exec.0, flags);
        super::super::logs::exec_made(made.exec.0, graph as u64);
        // SAFETY: by cudaGraphInstantiate(WithFlags)'s contract `exec` is NULL or
        // writable.
        unsafe { caller::write(exec, made.exec.0 as RawHandle) }
    })
}

/// The flags each executable graph was instantiated with (`cudaGraphExecGetFlags`).
static EXEC_FLAGS: Mutex<Option<HashMap<u64, u64>>> = Mutex::new(None);

pub extern "C" fn cudaGraphExecGetFlags(exec: RawHandle, flags: *mut u64) -> cudaError_t {
    guard("cudaGraphExecGetFlags", || {
        let f = EXEC_FLAGS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|m| m.get(&(exec as u64)).copied())
            .ok_or(CudaStatus::ErrorInvalidValue)?;
        // SAFETY: by its contract `flags` is writable.
        unsafe { caller::write(flags, f) }
    })
}

pub extern "C" fn cudaGraphExecDestroy(exec: RawHandle) -> cudaError_t {
    guard("cudaGraphExecDestroy", || {
        let req = GraphExecDestroy {
            exec: GraphExecHandle(exec as u64),
        };
        super::super::graph::destroy(exec as u64, |l| &mut l.execs, req)?;
        if let Some(m) = EXEC_FLAGS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            m.remove(&(exec as u64));
        }
        super::super::logs::holder_gone(exec as u64);
        Ok(())
    })
}

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

pub(super) fn upload(exec: RawHandle, stream: StreamHandle) -> Result<()> {
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

/// `cudaGraphInstantiateFlagUpload`.
const INSTANTIATE_UPLOAD: u64 = 2;

/// # Safety
/// `params` is readable and writable; `exec` writable.
pub(super) unsafe fn instantiate_with_params(
    exec: *mut RawHandle,
    graph: RawHandle,
    params: *mut InstantiateParams,
    per_thread: bool,
) -> Result<()> {
    // SAFETY: as the caller promised.
    let p = unsafe { caller::read(params.cast_const()) }?;
    let flags = p.flags & !INSTANTIATE_UPLOAD;
    let made = keeping_last_error(|| cudaGraphInstantiateWithFlags(exec, graph, flags));
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
