//! Node parameters read back: what the guest kept for the node.

use super::*;

// ---- parameters read back -----------------------------------------------------------------

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

pub(super) fn event_of(node: RawHandle, out: *mut RawHandle) -> Result<()> {
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
